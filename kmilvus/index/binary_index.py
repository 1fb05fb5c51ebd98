"""Binary vector indexes (knowhere's BIN_FLAT and BIN_IVF_FLAT), scored with numpy popcounts.

Metrics as knowhere's faiss computes them:
- HAMMING: the number of differing bits (smaller is closer);
- JACCARD: 1 - |a & b| / |a | b| (1 when both are empty);
- SUBSTRUCTURE: the rows that contain the query (query & row == query), SUPERSTRUCTURE: the rows
  the query contains (query & row == row) — a match has distance 0 and up to k matches come back
  in row order; these two have no range search (Milvus refuses it).

BIN_FLAT scores every row. BIN_IVF_FLAT clusters the rows into `nlist` lists with faiss' binary
k-means (IndexBinaryIVF's training: k-means on the bits, centroids binarized), keeps the rows
grouped by list, and scores only the rows of the `nprobe` lists whose centroids are nearest the
query (Hamming to the centroids, as faiss' binary quantizer). Scoring is exact within the probed
lists, for every metric, with deletes and filters applied as a row mask (faiss' IndexBinaryIVF
takes no ID selector); a filter that keeps few rows has every kept row scored instead of the
probed lists (`base.exact_wins`), a looser one widens nprobe. The index stores the packed rows
as they were inserted, so a loaded segment reads its output vectors back from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import faiss
import numpy as np
import pyarrow as pa

from kmilvus.index import base, topk
from kmilvus.index import params as P
from kmilvus.index.base import AsyncSearch, IndexFile, serialize_arrays

_CHUNK = 1 << 22  # (query, row, word) elements scored at once (≤ 32 MiB of words)


def _words(codes: np.ndarray) -> np.ndarray:
    """Packed rows as uint64 words when the width allows (8× fewer popcounts), else bytes."""
    codes = np.ascontiguousarray(codes)
    return codes.view(np.uint64) if codes.shape[1] % 8 == 0 else codes


def distances(base: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """(nq, n) float32 distances between packed queries and rows (`_words` views of both).
    SUBSTRUCTURE / SUPERSTRUCTURE answer 0 for a match and NaN otherwise."""
    nq, n = len(queries), len(base)
    out = np.empty((nq, n), np.float32)
    step = max(1, _CHUNK // max(1, n * base.shape[1]))
    for q0 in range(0, nq, step):
        q = queries[q0 : q0 + step, None, :]
        b = base[None, :, :]
        if metric == P.HAMMING:
            out[q0 : q0 + step] = np.bitwise_count(q ^ b).sum(axis=2, dtype=np.int64)
        elif metric == P.JACCARD:
            inter = np.bitwise_count(q & b).sum(axis=2, dtype=np.int64)
            union = np.bitwise_count(q | b).sum(axis=2, dtype=np.int64)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[q0 : q0 + step] = np.where(union == 0, 1.0, (union - inter) / np.maximum(union, 1))
        else:
            both = q & b
            match = np.all(both == q, axis=2) if metric == P.SUBSTRUCTURE else np.all(both == b, axis=2)
            out[q0 : q0 + step] = np.where(match, 0.0, np.nan)
    return out


class BinaryIndex(AsyncSearch):
    """Packed binary rows (offsets 0..n-1), optionally grouped into IVF lists."""

    kind = P.BINARY

    def __init__(
        self,
        codes: np.ndarray,
        index_type: str,
        metric_type: str,
        params: Mapping[str, str] | None = None,
        centroids: np.ndarray | None = None,
        order: np.ndarray | None = None,
        list_offsets: np.ndarray | None = None,
    ):
        self.codes = np.ascontiguousarray(codes, dtype=np.uint8)
        self.index_type, self.metric_type = index_type, metric_type
        self.params = dict(params or {})
        self.centroids = centroids  # (nlist, nbytes) uint8, IVF only
        self.order = order  # row offsets grouped by list
        self.list_offsets = list_offsets  # list l's rows: order[list_offsets[l]:list_offsets[l+1]]
        self._words = _words(self.codes)
        self._quantizer: Any = None

    @property
    def dim(self) -> int:
        result: int = self.codes.shape[1] * 8
        return result

    @property
    def num_rows(self) -> int:
        return len(self.codes)

    holds_raw = True

    @classmethod
    def build(cls, codes: np.ndarray, index_type: str, metric_type: str, params: Mapping[str, str]) -> BinaryIndex:
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        if index_type != P.BIN_IVF_FLAT or not len(codes):
            return cls(codes, index_type, metric_type, params)
        nlist = max(1, min(int(params["nlist"]), len(codes)))  # a segment smaller than nlist: one row a list
        ivf = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(codes.shape[1] * 8), codes.shape[1] * 8, nlist)
        ivf.cp.min_points_per_centroid = 1  # no warning spam for small segments
        ivf.train(codes)
        centroids = ivf.quantizer.reconstruct_n(0, nlist)
        _, assign = ivf.quantizer.search(codes, 1)
        lists = assign[:, 0]
        order = np.argsort(lists, kind="stable").astype(np.int64)
        offsets = np.zeros(nlist + 1, dtype=np.int64)
        np.cumsum(np.bincount(lists, minlength=nlist), out=offsets[1:])
        return cls(codes, index_type, metric_type, params, centroids, order, offsets)

    # Search ------------------------------------------------------------------------------
    def _probed(self, queries: np.ndarray, nprobe: int) -> np.ndarray:
        """The nearest `nprobe` lists of each query, (nq, nprobe): Hamming to the centroids, as
        faiss' binary quantizer (scored here: faiss' multithreaded flat search of a thousand
        centroids for one query costs more in thread hand-offs than the popcounts)."""
        assert self.centroids is not None
        if self._quantizer is None:
            self._quantizer = _words(self.centroids)
        dist = distances(self._quantizer, _words(np.ascontiguousarray(queries)), P.HAMMING)
        _, lists = topk.select_dense(dist, min(nprobe, len(self.centroids)), larger=False)
        result: np.ndarray = lists
        return result

    def _candidates(self, queries: np.ndarray, knobs: Mapping[str, float]) -> list[np.ndarray] | None:
        """Per query, the rows its probed lists hold (None: every row, BIN_FLAT)."""
        if self.order is None or self.list_offsets is None:
            return None
        out = []
        for lists in self._probed(queries, int(knobs["nprobe"])):
            lists = lists[lists >= 0]
            parts = [self.order[self.list_offsets[lst] : self.list_offsets[lst + 1]] for lst in lists]
            out.append(np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64))
        return out

    def _flat(self, qw: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Distances of the queries to every valid row: (nq, n) with `rows` None, or — when the
        mask keeps at most half the rows — (nq, kept) to `rows`, the kept offsets ascending."""
        if valid is None or base.kept_rows(valid, self.num_rows) * 2 > self.num_rows:
            return distances(self._words, qw, self.metric_type), None
        rows = np.flatnonzero(valid)
        return distances(self._words[rows], qw, self.metric_type), rows

    def _scored(self, queries: np.ndarray, knobs: Mapping[str, float], valid: np.ndarray | None, every: bool = False):
        """Flat (query, row, distance) candidates, invalid rows and non-matches left out; every
        row (`every`, or BIN_FLAT), else the rows of each query's probed lists."""
        q = np.ascontiguousarray(queries, dtype=np.uint8)
        qw = _words(q)
        cands = None if every else self._candidates(q, knobs)
        if cands is None:
            dist, kept = self._flat(qw, valid)
            ok = np.isfinite(dist)
            if valid is not None and kept is None:
                ok &= valid[None, :]
            qid, cols = np.nonzero(ok)
            rows = cols.astype(np.int64) if kept is None else kept[cols]
            return qid, rows, dist[qid, cols]
        qids, rows_, dists = [], [], []
        for i, rows in enumerate(cands):
            if valid is not None:
                rows = rows[valid[rows]]
            d = distances(self._words[rows], qw[i : i + 1], self.metric_type)[0]
            ok = np.isfinite(d)
            qids.append(np.full(int(ok.sum()), i, np.int64))
            rows_.append(rows[ok])
            dists.append(d[ok])
        cat = np.concatenate
        return (
            cat(qids) if qids else np.empty(0, np.int64),
            cat(rows_) if rows_ else np.empty(0, np.int64),
            (cat(dists) if dists else np.empty(0, np.float32)),
        )

    def _knobs(
        self, k: int, topk: int, search_params: Mapping[str, object] | None, valid, range_search: bool = False
    ) -> tuple[dict[str, float], bool]:
        """The checked knobs for `k` rows where the user asked for `topk`, and whether to score
        every valid row (a filter leaving few rows: `base.exact_wins`); BIN_IVF_FLAT's nprobe
        widened for `k` and for the share of rows the filter keeps."""
        knobs = P.check_search_params(self.index_type, topk, search_params or {})
        if self.centroids is None:
            return knobs, True
        nlist = len(self.centroids)
        knobs = base.widen(knobs, k, topk, nlist)
        kept = base.kept_rows(valid, self.num_rows)
        work = knobs["nprobe"] * self.num_rows / nlist
        if base.exact_wins(kept, self.num_rows, k, work, range_search):
            return knobs, True
        return base.widen_for_filter(knobs, kept, self.num_rows, nlist), False

    def search(
        self, queries: np.ndarray, k: int, search_params: Mapping[str, object] | None = None, valid=None
    ) -> tuple[np.ndarray, np.ndarray]:
        knobs, every = self._knobs(k, k, search_params, valid)
        return self._top(queries, k, knobs, valid, every)

    def candidates(
        self, queries: np.ndarray, k: int, topk: int, search_params: Mapping[str, object] | None = None, valid=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """`search` for `k` candidates where the user asked for `topk` (group-by, iterator
        pages): the knobs checked against `topk`, nprobe widened (`base.widen`)."""
        knobs, every = self._knobs(k, topk, search_params, valid)
        return self._top(queries, k, knobs, valid, every)

    def exhaustive(self, queries: np.ndarray, k: int, valid=None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k over every row, as BIN_FLAT (a search iterator's pages: each row once)."""
        return self._top(queries, k, {}, valid, every=True)

    def _top(
        self, queries: np.ndarray, k: int, knobs: Mapping[str, float], valid, every: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.num_rows == 0:
            return topk.empty(len(queries), k)
        if self.order is None or every:  # every valid row, one distance matrix
            dist, kept = self._flat(_words(np.ascontiguousarray(queries, dtype=np.uint8)), valid)
            mask = valid if kept is None else None
            if self.metric_type in (P.SUBSTRUCTURE, P.SUPERSTRUCTURE):
                # Up to k matches in row order, each at distance 0 (knowhere's binary_knn_mc).
                rank = np.where(np.isfinite(dist), np.arange(dist.shape[1], dtype=np.float64), np.nan)
                _, o = topk.select_dense(rank, k, larger=False, valid=mask)
                d = np.where(o >= 0, 0.0, np.nan).astype(np.float32)
            else:
                d, o = topk.select_dense(dist, k, larger=False, valid=mask)
            return d, (o if kept is None else np.where(o >= 0, kept[np.maximum(o, 0)], -1))
        qid, rows, d = self._scored(queries, knobs, valid)
        return topk.select(qid, rows, d, len(queries), k, larger=False)

    def range_search(self, queries, radius: float, range_filter=None, search_params=None, valid=None):
        if self.metric_type in (P.SUBSTRUCTURE, P.SUPERSTRUCTURE):
            P.check_range_params(self.metric_type, {"radius": radius})  # refused, as Milvus
        knobs, every = self._knobs(1, 1, search_params, valid, range_search=True)
        qid, rows, d = self._scored(queries, knobs, valid, every)
        keep = topk.within(d, radius, range_filter, larger=False)
        return topk.ranges(qid[keep], rows[keep], d[keep], len(queries), larger=False)

    def raw_column(self, offsets: np.ndarray) -> pa.Array:
        """Rows `offsets` as the binlog's fixed_size_binary column."""
        rows = self.codes[np.asarray(offsets, dtype=np.int64)]
        width = self.codes.shape[1]
        return pa.Array.from_buffers(pa.binary(width), len(rows), [None, pa.py_buffer(rows.tobytes())])

    def serialize(self) -> IndexFile:
        return serialize_arrays(self)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"codes": self.codes}
        if self.centroids is not None and self.order is not None and self.list_offsets is not None:
            out.update(centroids=self.centroids, order=self.order, list_offsets=self.list_offsets)
        return out

    @classmethod
    def from_arrays(cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> BinaryIndex:
        return cls(
            arrays["codes"],
            meta["index_type"],
            meta["metric_type"],
            meta["params"],
            arrays.get("centroids"),
            arrays.get("order"),
            arrays.get("list_offsets"),
        )
