"""Top-k and range selection over computed scores, column-wise (numpy), for the indexes that
score candidates themselves (binary, sparse) rather than through faiss.

A result is Milvus' shape: (distances [nq, k] float32, offsets [nq, k] int64), best first, offset
-1 (distance NaN) where fewer than k rows qualify; a range result is (lims [nq+1], distances,
offsets) with query i's hits at [lims[i], lims[i+1]), best first. Equal scores come in row
order; which of several rows tied at the k-th place is kept is not defined (as in faiss).
"""

from __future__ import annotations

import numpy as np


def empty(nq: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((nq, k), np.nan, np.float32), np.full((nq, k), -1, np.int64)


def select(
    qid: np.ndarray, rows: np.ndarray, scores: np.ndarray, nq: int, k: int, larger: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` (row, score) pairs per query from flat candidate arrays (one entry per
    (query, row) candidate): per query an argpartition of its candidates, then a sort of the k
    it keeps — no per-row loop (the loop is over queries)."""
    out_d, out_i = empty(nq, k)
    if not len(rows):
        return out_d, out_i
    if len(qid) > 1 and not bool(np.all(qid[1:] >= qid[:-1])):
        order = np.argsort(qid, kind="stable")
        qid, rows, scores = qid[order], rows[order], scores[order]
    key = -scores.astype(np.float64) if larger else scores.astype(np.float64)
    bounds = np.searchsorted(qid, np.arange(nq + 1))
    for i in range(nq):
        a, b = int(bounds[i]), int(bounds[i + 1])
        if a == b:
            continue
        kq, rq = key[a:b], rows[a:b]
        part = np.argpartition(kq, k - 1)[:k] if b - a > k else np.arange(b - a)
        best = part[np.lexsort((rq[part], kq[part]))]  # by score, then row
        out_d[i, : len(best)] = scores[a:b][best]
        out_i[i, : len(best)] = rq[best]
    return out_d, out_i


def select_dense(scores: np.ndarray, k: int, larger: bool, valid: np.ndarray | None = None):
    """Top-k per row of an (nq, n) score matrix; rows where `valid` is False or the score is NaN
    never qualify."""
    nq, n = scores.shape
    out_d, out_i = empty(nq, k)
    if n == 0:
        return out_d, out_i
    key = -scores if larger else scores.copy()
    key = key.astype(np.float64)
    key[np.isnan(key)] = np.inf
    if valid is not None:
        key[:, ~valid] = np.inf
    kk = min(k, n)
    part = np.argpartition(key, kk - 1, axis=1)[:, :kk] if kk < n else np.tile(np.arange(n), (nq, 1))
    pk = np.take_along_axis(key, part, axis=1)
    order = np.lexsort((part, pk), axis=1)  # by score, then row
    idx = np.take_along_axis(part, order, axis=1)
    ok = np.isfinite(np.take_along_axis(key, idx, axis=1))
    out_d[:, :kk] = np.where(ok, np.take_along_axis(scores, idx, axis=1), np.nan)
    out_i[:, :kk] = np.where(ok, idx, -1)
    return out_d, out_i


def within(scores: np.ndarray, radius: float, range_filter: float | None, larger: bool) -> np.ndarray:
    """Milvus' range: radius < score <= range_filter when larger is closer, else
    range_filter <= distance < radius."""
    if larger:
        keep = scores > radius
        if range_filter is not None:
            keep &= scores <= range_filter
    else:
        keep = scores < radius
        if range_filter is not None:
            keep &= scores >= range_filter
    return keep


def ranges(qid: np.ndarray, rows: np.ndarray, scores: np.ndarray, nq: int, larger: bool):
    """Flat (query, row, score) hits → (lims, distances, offsets), best first per query."""
    key = -scores.astype(np.float64) if larger else scores.astype(np.float64)
    order = np.lexsort((rows, key, qid))
    counts = np.bincount(qid, minlength=nq)
    lims = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return lims, scores[order].astype(np.float32), rows[order].astype(np.int64)
