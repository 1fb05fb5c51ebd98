"""Sparse vector index (knowhere's SPARSE_INVERTED_INDEX and SPARSE_WAND): one inverted index
per segment, posting lists as a scipy CSR matrix, scored column-wise.

Layout: the segment's rows (`SparseRows`: what the binlogs hold, and what the index serializes)
and, built from them at load, the posting lists — dimension d's (row, value) pairs, rows
ascending — as a (dimensions × rows) CSR matrix over the dimensions the segment uses (mapped to
0..m-1: sparse dimensions go up to 2^32-1).

Scoring is term-at-a-time over the query's posting lists: a sparse matrix product of the queries
(nq × m) and the postings (m × rows), so the work is the postings the queries touch, in C. Only
rows sharing a dimension with the query score (knowhere returns no row with score 0), and
`valid` (deletes, filters) masks rows. SPARSE_WAND answers what SPARSE_INVERTED_INDEX answers:
WAND is an exact pruning of the same scores in knowhere, so the results are the same rows.

Knobs, as knowhere 2.5: `drop_ratio_search` drops the smallest fraction of each query's values
(by magnitude; values below the value at that rank are dropped), the pruned query picks
`k × refine_factor` candidates, which are then rescored with the whole query. `drop_ratio_build`
is checked and kept, and drops nothing: knowhere 2.5 deprecated it (the index keeps every value),
so the index also stores the rows exactly and a loaded segment reads its outputs back from it.

The scoring hook: a `DocScorer` maps the stored values of a posting (with their rows) to the
values scored against the query's, as knowhere's DocValueComputer (BM25 scores term frequencies
with each row's length: `row_sums`). The default is the value itself: inner product (IP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from scipy import sparse as sp

from kmilvus.index import params as P
from kmilvus.index import topk
from kmilvus.index.base import AsyncSearch, IndexFile, serialize_arrays
from kmilvus.index.vectors import SparseRows


class DocScorer(Protocol):
    """How a stored value scores: `values[i]` is a value of row `rows[i]` of `index`."""

    def __call__(self, values: np.ndarray, rows: np.ndarray, index: SparseInvertedIndex) -> np.ndarray: ...


class SparseInvertedIndex(AsyncSearch):
    kind = P.SPARSE
    holds_raw = True

    def __init__(self, rows: SparseRows, index_type: str, metric_type: str, params: Mapping[str, str] | None = None):
        self.rows = rows
        self.index_type, self.metric_type = index_type, metric_type
        self.params = dict(params or {})
        self.dims = np.unique(rows.indices)  # the segment's dimensions, sorted: column j is dims[j]
        cols = np.searchsorted(self.dims, rows.indices)
        shape = (len(rows), len(self.dims))
        self._by_row = sp.csr_array((rows.values, cols, rows.indptr), shape=shape)  # rows × dims
        self.postings = self._by_row.T.tocsr()  # dims × rows: dimension j's posting list is row j
        self.postings.sort_indices()
        self._row_sums: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    @property
    def dim(self) -> int:
        """The largest dimension + 1 (what Milvus reports as a sparse field's dim)."""
        return int(self.dims[-1]) + 1 if len(self.dims) else 0

    @property
    def row_sums(self) -> np.ndarray:
        """Each row's sum of values (a document's length when values are term frequencies)."""
        if self._row_sums is None:
            self._row_sums = np.asarray(self._by_row.sum(axis=1), dtype=np.float32).ravel()
        return self._row_sums

    @classmethod
    def build(
        cls, rows: SparseRows, index_type: str, metric_type: str, params: Mapping[str, str]
    ) -> SparseInvertedIndex:
        return cls(rows, index_type, metric_type, params)

    # Queries ------------------------------------------------------------------------------
    def _query_matrix(self, queries: SparseRows, drop_ratio: float = 0.0) -> sp.csr_array:
        """Queries over the segment's dimensions (nq × m): dimensions the segment lacks score
        nothing, and with `drop_ratio` each query's smallest values are dropped first."""
        qid = queries.row_ids()
        values = queries.values
        keep = np.ones(len(values), dtype=bool)
        if drop_ratio > 0 and len(values):
            mag = np.abs(values)
            counts = np.diff(queries.indptr)
            drop = (drop_ratio * counts).astype(np.int64)  # knowhere: int(ratio · nnz) values
            order = np.lexsort((mag, qid))
            threshold = np.zeros(len(queries), dtype=np.float32)
            has = drop > 0
            threshold[has] = mag[order][queries.indptr[:-1][has] + drop[has]]
            keep = mag >= threshold[qid]
        pos = np.searchsorted(self.dims, queries.indices)
        found = pos < len(self.dims)
        found[found] = self.dims[pos[found]] == queries.indices[found]
        keep &= found
        data = values[keep].astype(np.float32, copy=False)
        return sp.csr_array((data, (qid[keep], pos[keep])), shape=(len(queries), len(self.dims)))

    def _scored(self, matrix: sp.csr_array, rows_of: np.ndarray, scorer: DocScorer | None) -> sp.csr_array:
        if scorer is None:
            return matrix
        out = matrix.copy()
        out.data = np.asarray(scorer(matrix.data, rows_of, self), dtype=np.float32)
        return out

    def _scored_postings(self, scorer: DocScorer | None) -> sp.csr_array:
        return self._scored(self.postings, self.postings.indices, scorer)

    def _scores(self, queries: SparseRows, drop_ratio: float, scorer: DocScorer | None) -> sp.csr_array:
        """(nq × rows) scores of the rows sharing a dimension with each (pruned) query."""
        q = self._query_matrix(queries, drop_ratio)
        scores: sp.csr_array = (
            q @ self._scored_postings(scorer)
        ).tocsr()  # a row's rows unsorted: top-k needs no order
        return scores

    def _exact(self, queries: SparseRows, qid: np.ndarray, rows: np.ndarray, scorer: DocScorer | None) -> np.ndarray:
        """Whole-query scores of (query, row) pairs (the refine step)."""
        q = self._query_matrix(queries)
        by_row = self._by_row
        if scorer is not None:
            by_row = self._scored(by_row, np.repeat(np.arange(self.num_rows), np.diff(by_row.indptr)), scorer)
        return np.asarray(by_row[rows].multiply(q[qid]).sum(axis=1), dtype=np.float32).ravel()

    def search(
        self,
        queries: SparseRows,
        k: int,
        search_params: Mapping[str, object] | None = None,
        valid: np.ndarray | None = None,
        scorer: DocScorer | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        knobs = P.check_search_params(self.index_type, k, search_params or {})
        return self._top(queries, k, knobs, valid, scorer)

    def candidates(
        self,
        queries: SparseRows,
        k: int,
        topk: int,
        search_params: Mapping[str, object] | None = None,
        valid: np.ndarray | None = None,
        scorer: DocScorer | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`search` for `k` candidates where the user asked for `topk` (group-by, iterator
        pages): the knobs checked against `topk`; the scoring reaches every row already."""
        knobs = P.check_search_params(self.index_type, topk, search_params or {})
        return self._top(queries, k, knobs, valid, scorer)

    def exhaustive(
        self, queries: SparseRows, k: int, valid: np.ndarray | None = None, scorer: DocScorer | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by the whole query (no drop_ratio_search): a search iterator's pages."""
        return self._top(queries, k, {"drop_ratio_search": 0.0, "refine_factor": 1}, valid, scorer)

    def _top(
        self,
        queries: SparseRows,
        k: int,
        knobs: Mapping[str, float],
        valid: np.ndarray | None,
        scorer: DocScorer | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        nq = len(queries)
        if self.num_rows == 0 or not len(self.dims):
            return topk.empty(nq, k)
        drop = float(knobs["drop_ratio_search"])
        s = self._scores(queries, drop, scorer)
        qid = np.repeat(np.arange(nq), np.diff(s.indptr))
        rows, scores = s.indices.astype(np.int64), s.data
        keep = scores != 0
        if valid is not None:
            keep &= valid[rows]
        qid, rows, scores = qid[keep], rows[keep], scores[keep]
        refine = int(knobs["refine_factor"])
        if drop > 0 and refine > 1:  # candidates from the pruned query, ranked by the whole one
            _, o = topk.select(qid, rows, scores, nq, k * refine, larger=True)
            hit = o >= 0
            qid, rows = np.nonzero(hit)[0], o[hit]
            scores = self._exact(queries, qid, rows, scorer)
        return topk.select(qid, rows, scores, nq, k, larger=True)

    def range_search(
        self,
        queries: SparseRows,
        radius: float,
        range_filter: float | None = None,
        search_params: Mapping[str, object] | None = None,
        valid: np.ndarray | None = None,
        scorer: DocScorer | None = None,
    ):
        """Every row scoring radius < score <= range_filter (knowhere scores every row here,
        so with a negative radius a row sharing nothing with the query, score 0, qualifies)."""
        knobs = P.check_search_params(self.index_type, 1, search_params or {})
        nq = len(queries)
        if self.num_rows == 0:
            return np.zeros(nq + 1, np.int64), np.empty(0, np.float32), np.empty(0, np.int64)
        dense = self._scores(queries, float(knobs["drop_ratio_search"]), scorer).toarray()
        keep = topk.within(dense, radius, range_filter, larger=True)
        if valid is not None:
            keep &= valid[None, :]
        qid, rows = np.nonzero(keep)
        return topk.ranges(qid, rows.astype(np.int64), dense[qid, rows], nq, larger=True)

    # Raw data ------------------------------------------------------------------------------
    def raw_column(self, offsets: np.ndarray) -> pa.Array:
        """Rows `offsets` as the binlog's map<uint32, float32> column."""
        return self.rows.take(np.asarray(offsets, dtype=np.int64)).to_arrow()

    def serialize(self) -> IndexFile:
        return serialize_arrays(self)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"indptr": self.rows.indptr, "indices": self.rows.indices, "values": self.rows.values}

    @classmethod
    def from_arrays(cls, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> SparseInvertedIndex:
        rows = SparseRows(arrays["indptr"], arrays["indices"], arrays["values"])
        return cls(rows, meta["index_type"], meta["metric_type"], meta["params"])
