"""The sparse index of a BM25 function's output field (knowhere's SPARSE_INVERTED_INDEX /
SPARSE_WAND with metric BM25), one per segment: term-major postings of the segment's rows.

Layout: `dims` (the dimensions the segment holds, ascending), `indptr` over them, and per
posting the row and its term frequency; `row_sums` (each row's length: the sum of its
frequencies). A search walks the postings of the query's dimensions only (term at a time, numpy):
score(row) = Σ query value × tf·(k1+1)/(tf + k1·(1 - b + b·dl/avgdl)), the query values being
tf × idf from the statistics of the channel's segments (kmilvus/querynode/bm25.py). It is exact:
SPARSE_WAND's pruning gives the same rows in knowhere, and so it does here.

Growing data (and a segment whose index is not built yet) is searched through the same structure
built from its column. The scoring is the `doc_scorer` hook a general sparse inverted index can
take over; this module covers BM25 fields only (IP sparse fields are not indexed here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import schema_pb2

from kmilvus.index import fileformat
from kmilvus.util import merr

MAGIC = b"KMBM25\0\0"
BM25 = "BM25"
SPARSE_INVERTED_INDEX, SPARSE_WAND, AUTOINDEX = "SPARSE_INVERTED_INDEX", "SPARSE_WAND", "AUTOINDEX"
INDEX_TYPES = (SPARSE_INVERTED_INDEX, SPARSE_WAND)
_ALGOS = ("TAAT_NAIVE", "DAAT_WAND", "DAAT_MAXSCORE")
_ARRAYS = ("dims", "indptr", "rows", "tf", "row_sums")
DT = schema_pb2.DataType


# -- index params (CreateIndex on a BM25 output field) ---------------------------------------
def is_bm25_field(schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema) -> bool:
    return field.data_type == DT.SparseFloatVector and any(
        fn.type == schema_pb2.FunctionType.BM25 and field.name in fn.output_field_names for fn in schema.functions
    )


def _number(params: Mapping[str, str], key: str, lo: float, hi: float, hi_open: bool = False) -> None:
    if key not in params:
        return
    try:
        v = float(params[key])
    except ValueError:
        v = math.nan
    if math.isnan(v) or v < lo or v > hi or (hi_open and v >= hi):
        interval = f"[{lo}, {hi})" if hi_open else f"[{lo}, {hi}]"
        raise merr.invalid(f"invalid {key}: {params[key]}, must be in range {interval}")


def check_index_params(params: Mapping[str, str]) -> dict[str, str]:
    """A BM25 field's index: SPARSE_INVERTED_INDEX or SPARSE_WAND (AUTOINDEX builds the first),
    metric BM25; bm25_k1 in [0, 3], bm25_b in [0, 1], drop_ratio_build in [0, 1)."""
    out = {k: str(v) for k, v in params.items()}
    out["index_type"] = out.get("index_type") or AUTOINDEX
    if out["index_type"] not in (*INDEX_TYPES, AUTOINDEX):
        raise merr.invalid(
            f"index {out['index_type']} does not support the BM25 function output field: use {' or '.join(INDEX_TYPES)}"
        )
    metric = out.get("metric_type", BM25).upper()
    if metric != BM25:
        raise merr.invalid(f"only BM25 metric type is supported for the BM25 function output field, got {metric}")
    out["metric_type"] = BM25
    _number(out, "bm25_k1", 0.0, 3.0)
    _number(out, "bm25_b", 0.0, 1.0)
    _number(out, "drop_ratio_build", 0.0, 1.0, hi_open=True)
    algo = out.get("inverted_index_algo")
    if algo is not None and algo not in _ALGOS:
        raise merr.invalid(f"invalid inverted_index_algo: {algo}, must be one of {', '.join(_ALGOS)}")
    return out


def is_build(params: Mapping[str, str]) -> bool:
    return params.get("metric_type") == BM25


def check_search_params(params: Mapping[str, Any]) -> float:
    """drop_ratio_search in [0, 1) (the share of each query's smallest values left out)."""
    raw = params.get("drop_ratio_search", 0.0)
    try:
        ratio = float(raw)
    except (TypeError, ValueError):
        ratio = math.nan
    if math.isnan(ratio) or not 0.0 <= ratio < 1.0:
        raise merr.invalid(f"invalid drop_ratio_search: {raw}, must be in range [0, 1)")
    return ratio


# -- queries on the wire ------------------------------------------------------------------------
@dataclass
class BM25Queries:
    """A BM25 search's queries: sparse rows (term frequencies from the Proxy; tf × idf once a
    QueryNode weighed them with its channel's statistics) and the document-side params."""

    indptr: np.ndarray  # int64, nq + 1
    indices: np.ndarray  # uint32
    values: np.ndarray  # float32
    k1: float = 1.2
    b: float = 0.75
    avgdl: float = 1.0

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def tobytes(self) -> bytes:
        return (
            np.ascontiguousarray(self.indptr, "<i8").tobytes()
            + np.ascontiguousarray(self.indices, "<u4").tobytes()
            + np.ascontiguousarray(self.values, "<f4").tobytes()
        )

    @classmethod
    def frombytes(cls, data: bytes, nq: int) -> BM25Queries:
        indptr = np.frombuffer(data, "<i8", count=nq + 1)
        nnz = int(indptr[-1])
        at = (nq + 1) * 8
        indices = np.frombuffer(data, "<u4", count=nnz, offset=at)
        values = np.frombuffer(data, "<f4", count=nnz, offset=at + 4 * nnz)
        return cls(indptr.astype(np.int64), indices, values)

    @classmethod
    def from_arrow(cls, col: pa.Array) -> BM25Queries:
        indptr, indices, values = rows_of(col)
        return cls(indptr, indices, values)

    def dropped(self, ratio: float) -> BM25Queries:
        """Without each query's `ratio` smallest values (knowhere's drop_ratio_search)."""
        if ratio <= 0 or not len(self.values):
            return self
        keep = np.ones(len(self.values), bool)
        for q in range(len(self)):
            lo, hi = int(self.indptr[q]), int(self.indptr[q + 1])
            drop = int(ratio * (hi - lo))
            if drop:
                keep[lo + np.argsort(np.abs(self.values[lo:hi]), kind="stable")[:drop]] = False
        qid = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        counts = np.bincount(qid[keep], minlength=len(self))
        indptr = np.zeros(len(self) + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        return BM25Queries(indptr, self.indices[keep], self.values[keep], self.k1, self.b, self.avgdl)


def rows_of(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A `map<uint32, float32>` column as (indptr, indices, values); a null row is empty."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    offsets = col.offsets.to_numpy().astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    keys = col.keys.slice(first, last - first).to_numpy(zero_copy_only=False).astype(np.uint32)
    items = col.items.slice(first, last - first).to_numpy(zero_copy_only=False).astype(np.float32)
    return offsets - first, keys, items


# -- the index ----------------------------------------------------------------------------------
class SparseBM25Index:
    kind = "sparse_bm25"
    holds_raw = False  # the column stays loaded: outputs and statistics read it
    scalar = False

    def __init__(self, num_rows: int, arrays: Mapping[str, np.ndarray], params: Mapping[str, str] | None = None):
        self.num_rows = num_rows
        self.dims, self.indptr = arrays["dims"], arrays["indptr"]
        self.rows, self.tf, self.row_sums = arrays["rows"], arrays["tf"], arrays["row_sums"]
        self.params = dict(params or {})
        self.index_type = self.params.get("index_type", SPARSE_INVERTED_INDEX)
        self.metric_type = BM25

    @classmethod
    def from_rows(cls, indptr, indices, values, params: Mapping[str, str] | None = None) -> SparseBM25Index:
        n = len(indptr) - 1
        row_of = np.repeat(np.arange(n, dtype=np.int32), np.diff(indptr))
        row_sums = np.zeros(n, np.float32)
        if len(values):
            np.add.at(row_sums, row_of, np.asarray(values, np.float32))
        order = np.argsort(indices, kind="stable")
        dims, counts = np.unique(np.asarray(indices, np.uint32)[order], return_counts=True)
        ptr = np.zeros(len(dims) + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        arrays = {
            "dims": dims.astype(np.uint32),
            "indptr": ptr,
            "rows": row_of[order],
            "tf": np.asarray(values, np.float32)[order],
            "row_sums": row_sums,
        }
        return cls(n, arrays, params)

    @classmethod
    def build(cls, column: pa.Array | pa.ChunkedArray, params: Mapping[str, str] | None = None) -> SparseBM25Index:
        return cls.from_rows(*rows_of(column), params)

    # statistics (Milvus' BM25Stats of the segment)
    def stats(self):
        from kmilvus.querynode.bm25 import BM25Stats

        return BM25Stats(self.num_rows, float(self.row_sums.astype(np.float64).sum()), self.dims, np.diff(self.indptr))

    def scores(self, q: BM25Queries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query, row, score) of every pair sharing a dimension."""
        from kmilvus.querynode.bm25 import doc_values

        if self.num_rows == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        qid = np.repeat(np.arange(len(q), dtype=np.int64), np.diff(q.indptr))
        pos = np.searchsorted(self.dims, q.indices)
        found = pos < len(self.dims)
        found[found] = self.dims[pos[found]] == q.indices[found]
        qid, pos, qv = qid[found], pos[found], q.values[found]
        lo, hi = self.indptr[pos], self.indptr[pos + 1]
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        at = np.arange(total, dtype=np.int64) + starts
        rows = self.rows[at].astype(np.int64)
        contrib = np.repeat(qv, counts) * doc_values(self.tf[at], self.row_sums[rows], q.k1, q.b, q.avgdl)
        key = np.repeat(qid, counts) * self.num_rows + rows
        uniq, inv = np.unique(key, return_inverse=True)
        summed = np.bincount(inv, weights=contrib, minlength=len(uniq)).astype(np.float32)
        return uniq // self.num_rows, uniq % self.num_rows, summed

    def _hits(self, q: BM25Queries, params: Mapping[str, Any] | None, valid: np.ndarray | None):
        q = q.dropped(check_search_params(params or {}))
        qid, rows, s = self.scores(q)
        keep = s != 0  # knowhere returns no row that shares nothing with the query
        if valid is not None:
            keep &= valid[rows]
        return qid[keep], rows[keep], s[keep]

    def search(self, q: BM25Queries, k: int, params=None, valid: np.ndarray | None = None):
        """(scores, rows) nq × k, best first; NaN / -1 where there is no row."""
        nq = len(q)
        out_d = np.full((nq, k), np.nan, np.float32)
        out_i = np.full((nq, k), -1, np.int64)
        qid, rows, s = self._hits(q, params, valid)
        if not len(s):
            return out_d, out_i
        order = np.lexsort((rows, -s, qid))
        qid, rows, s = qid[order], rows[order], s[order]
        first = np.searchsorted(qid, qid, side="left")
        rank = np.arange(len(qid)) - first
        take = rank < k
        out_d[qid[take], rank[take]] = s[take]
        out_i[qid[take], rank[take]] = rows[take]
        return out_d, out_i

    def exhaustive(self, q: BM25Queries, k: int, valid: np.ndarray | None = None):
        return self.search(q, k, None, valid)

    def candidates(self, q: BM25Queries, k: int, topk: int, params=None, valid: np.ndarray | None = None):
        return self.search(q, k, params, valid)

    def range_search(self, q: BM25Queries, radius: float, range_filter: float | None, params=None, valid=None):
        """Rows scoring radius < score <= range_filter, best first per query: (lims, scores, rows)."""
        qid, rows, s = self._hits(q, params, valid)
        keep = s > radius
        if range_filter is not None:
            keep &= s <= range_filter
        qid, rows, s = qid[keep], rows[keep], s[keep]
        order = np.lexsort((rows, -s, qid))
        lims = np.zeros(len(q) + 1, np.int64)
        np.cumsum(np.bincount(qid, minlength=len(q)), out=lims[1:])
        return lims, s[order], rows[order]

    # files
    def serialize(self) -> bytes:
        arrays = {n: getattr(self, n) for n in _ARRAYS}
        meta = {
            "kind": self.kind,
            "num_rows": self.num_rows,
            "params": self.params,
            "arrays": fileformat.array_spec(arrays),
        }
        return fileformat.pack(MAGIC, meta) + fileformat.array_bytes(arrays)

    @classmethod
    def load(cls, data: bytes | memoryview) -> SparseBM25Index:
        meta, body = fileformat.unpack(data, MAGIC, "BM25 index")
        return cls(int(meta["num_rows"]), fileformat.read_arrays(body, meta["arrays"]), meta["params"])

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, n).nbytes for n in _ARRAYS)


def is_index_file(data: bytes | memoryview) -> bool:
    return fileformat.has_magic(data, MAGIC)


@dataclass
class Built:
    """What the IndexNode writes (the IndexFile shape: bytes, size, rows)."""

    data: bytes
    num_rows: int

    @property
    def serialized_size(self) -> int:
        return len(self.data)


def build_file(column: pa.Array | pa.ChunkedArray, params: Mapping[str, str]) -> Built:
    index = SparseBM25Index.build(column, params)
    return Built(index.serialize(), index.num_rows)
