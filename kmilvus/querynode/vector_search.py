"""Exact search over a segment's dense vectors without an index (growing data, segments not
indexed yet): distances are one matrix product in numpy (BLAS releases the GIL, so segments run
in threads), top-k by argpartition. Distances are Milvus': L2 = squared Euclidean (smaller is
closer), IP = inner product and COSINE = cosine similarity (larger is closer). Binary and sparse
vectors without an index are searched exactly through kmilvus.index (SegmentData.index_for).
"""

from __future__ import annotations

import numpy as np

from kmilvus.index import params as P

_QUERY_CHUNK = 1 << 24  # distance-matrix elements computed at once (64 MiB of float32)


def sq_norms(x: np.ndarray) -> np.ndarray:
    """Each row's squared Euclidean norm, in one pass without a squared copy of the rows."""
    out: np.ndarray = np.einsum("ij,ij->i", x, x)
    return out


def normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: np.ndarray = x / norms
    return result


def _distances(base: np.ndarray, queries: np.ndarray, metric: str, base_sq: np.ndarray | None) -> np.ndarray:
    d: np.ndarray
    if metric == "L2":
        sq = base_sq if base_sq is not None else sq_norms(base)
        d = queries @ base.T
        d *= -2.0
        d += sq[None, :]
        d += sq_norms(queries)[:, None]
        np.maximum(d, 0.0, out=d)
        return d
    if metric == "COSINE":
        # cos(q, b) = (q / |q|) · b / |b|: the rows are read in place and the product divided by
        # their norms (from the squared norms the segment keeps), never a normalized copy of them.
        norms = np.sqrt(base_sq if base_sq is not None else sq_norms(base))
        norms[norms == 0] = 1.0
        d = normalize(queries) @ base.T
        d /= norms[None, :]
        return d
    d = queries @ base.T
    return d


def search(
    base: np.ndarray,
    queries: np.ndarray,
    k: int,
    metric: str,
    *,
    valid: np.ndarray | None = None,
    radius: float | None = None,
    range_filter: float | None = None,
    base_sq: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(distances, offsets), each nq × k; offset -1 where fewer than k rows qualify.

    `valid`: a boolean mask over `base` rows (filter expression, deletes); `radius` /
    `range_filter`: Milvus' range search bounds."""
    nq, n = len(queries), len(base)
    out_d = np.full((nq, k), np.nan, dtype=np.float32)
    out_i = np.full((nq, k), -1, dtype=np.int64)
    if n == 0 or k <= 0:
        return out_d, out_i
    larger = P.larger_is_closer(metric)
    worst = -np.inf if larger else np.inf
    step = max(1, _QUERY_CHUNK // max(1, n))
    for q0 in range(0, nq, step):
        d = _distances(base, queries[q0 : q0 + step], metric, base_sq).astype(np.float32, copy=False)
        if valid is not None:
            d[:, ~valid] = worst
        if radius is not None:
            d[~((d > radius) if larger else (d < radius))] = worst
        if range_filter is not None:
            d[~((d <= range_filter) if larger else (d >= range_filter))] = worst
        key = -d if larger else d
        kk = min(k, n)
        part = np.argpartition(key, kk - 1, axis=1)[:, :kk] if kk < n else np.tile(np.arange(n), (len(d), 1))
        rows = np.arange(len(d))[:, None]  # fancy indexing: take_along_axis' checks cost more here
        order = np.argsort(key[rows, part], axis=1, kind="stable")
        idx = part[rows, order]
        dist = d[rows, idx]
        ok = np.isfinite(dist)
        out_d[q0 : q0 + len(d), :kk] = np.where(ok, dist, np.nan)
        out_i[q0 : q0 + len(d), :kk] = np.where(ok, idx, -1)
    return out_d, out_i
