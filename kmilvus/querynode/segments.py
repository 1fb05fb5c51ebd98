"""A QueryNode's data: sealed segments read from their binlogs and growing segments fed by the
stream, both held as Arrow tables (columns by field ID, as in the binlogs) plus each vector
field without an index ready to search exactly — converted once, never per row: a dense field
(float32, float16 and bfloat16 widened) as one contiguous float32 numpy array, a binary or sparse
field as an exact kmilvus.index searcher over its raw vectors (BIN_FLAT, SPARSE_INVERTED_INDEX).
A sealed segment whose index stores the raw vectors keeps no column of them (Milvus 2.3 does not
load a field whose index "has raw data"): outputs are read back from the index."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus import index as kindex
from kmilvus.index import params as P
from kmilvus.index import vectors as kvectors
from kmilvus.querynode import vector_search
from kmilvus.querynode.deletes import DeleteSet, pk_and_ts
from kmilvus.storage.deltalog import sorted_unique
from kmilvus.util import typeutil

DT = schema_pb2.DataType
TIMESTAMP = str(typeutil.TIMESTAMP_FIELD)


def field_type(schema: schema_pb2.CollectionSchema, field_id: int) -> int:
    result: int = next((f.data_type for f in schema.fields if f.fieldID == field_id), DT.FloatVector)
    return result


def twin_keys(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The keys (sorted) that more than one of the given rows — (keys, timestamps) of each
    part — holds with one timestamp: the same row held twice. One sort of the keys; the
    timestamps are compared only for the keys that repeat at all."""
    keys = np.concatenate([k for k, _ in parts])
    ordered = np.sort(keys)
    again = sorted_unique(ordered[1:][ordered[1:] == ordered[:-1]])
    if not len(again):
        return again
    at = np.minimum(np.searchsorted(again, keys), len(again) - 1)
    rows = again[at] == keys
    k, t = keys[rows], np.concatenate([t for _, t in parts])[rows]
    order = np.lexsort((t, k))
    k, t = k[order], t[order]
    same = (k[1:] == k[:-1]) & (t[1:] == t[:-1])
    return sorted_unique(k[1:][same])


@dataclass(frozen=True)
class Span:
    """What `SegmentData.span` reports: timestamp and primary-key ranges, and a repeated row."""

    first_ts: int
    last_ts: int
    min_key: Any
    max_key: Any
    repeats: bool


@dataclass
class SegmentData:
    """One segment's rows, ready to search: the table and its vector fields as matrices."""

    segment_id: int
    partition_id: int
    table: pa.Table
    vectors: dict[int, np.ndarray] = field(default_factory=dict)
    sq_norms: dict[int, np.ndarray] = field(default_factory=dict)
    indexes: dict[int, Any] = field(default_factory=dict)  # field ID → its loaded kmilvus.index index
    # field ID → kmilvus.index.scalar_index.ScalarIndex (also in `indexes`): the filter's index path
    scalar_indexes: dict[int, Any] = field(default_factory=dict)
    raw: dict[int, Any] = field(default_factory=dict)  # binary / sparse field ID → its kmilvus.index vectors
    _exact: dict[tuple[int, str], Any] = field(default_factory=dict)  # (field, metric) → brute force
    deltas: DeleteSet = field(default_factory=DeleteSet)  # its delta logs
    # field ID → kmilvus.index.text_index.TextIndex: loaded with a sealed segment, else built here
    text_indexes: dict[int, Any] = field(default_factory=dict)
    index_bytes: int = 0  # serialized size of the loaded indexes (≈ their memory)
    pk_field: int = 0
    _keys: tuple[np.ndarray, np.ndarray] | None = None
    _pks: np.ndarray | Literal[False] | None = None  # int64_pks; False: not Int64
    _pk_order: tuple[np.ndarray, np.ndarray | None] | None = None  # `_key_order`
    _alive: tuple[tuple, np.ndarray | None] | None = None
    _span: Span | None = None
    # count.live_keys' cache: the segments it last looked at with this one, and their twins.
    twins: tuple[tuple[Any, ...], np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        segment_id: int,
        partition_id: int,
        table: pa.Table,
        schema: schema_pb2.CollectionSchema,
        indexed: Collection[int] = (),
        dense: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> SegmentData:
        """`indexed`: vector fields searched through an index (no float32 matrix is made).
        `dense`: float32 matrices (and their rows' squared norms) made already, by field ID — a
        growing segment's, kept up to date batch by batch (`GrowingSegment`).
        Rows written before a field was added get it as the schema reads it (`typeutil.conform`)."""
        pk = next(f.fieldID for f in schema.fields if f.is_primary_key)
        seg = cls(segment_id, partition_id, typeutil.conform(table, schema), pk_field=pk)
        for f in schema.fields:
            kind = P.vector_kind(f.data_type)
            if kind is None or f.fieldID in indexed or str(f.fieldID) not in table.column_names:
                continue
            if dense is not None and f.fieldID in dense:
                seg.vectors[f.fieldID], seg.sq_norms[f.fieldID] = dense[f.fieldID]
                continue
            dim = typeutil.dim_of(f) if kind != P.SPARSE else 0
            vecs = kvectors.from_arrow(table.column(str(f.fieldID)), f.data_type, dim)
            if kind == P.DENSE:
                assert isinstance(vecs, np.ndarray)
                seg.vectors[f.fieldID] = vecs
                seg.sq_norms[f.fieldID] = vector_search.sq_norms(vecs)
            else:
                seg.raw[f.fieldID] = vecs
        return seg

    def conform(self, schema: schema_pb2.CollectionSchema) -> None:
        """A field was added to the collection: the rows read it as the schema says (their
        default, else null), one column appended — keys, vectors and indexes stay."""
        self.table = typeutil.conform(self.table, schema)

    def index_for(self, field_id: int, metric: str) -> Any:
        """What searches `field_id` through kmilvus.index: its loaded index, or (binary, sparse)
        an exact one over its raw vectors for `metric`, made once; None: a dense field searched
        as a float32 matrix (or no such vectors)."""
        index = self.indexes.get(field_id)
        if index is not None or field_id not in self.raw:
            return index
        key = (field_id, metric)
        if key not in self._exact:
            self._exact[key] = kindex.brute_force(self.raw[field_id], metric)
        return self._exact[key]

    @property
    def num_rows(self) -> int:
        result: int = self.table.num_rows
        return result

    @property
    def nbytes(self) -> int:
        own = sum(v.nbytes for v in self.vectors.values() if v.base is None)
        result: int = self.table.nbytes + own + self.index_bytes
        return result

    def add_index(self, field_id: int, index: Any, nbytes: int) -> None:
        """Search `field_id` through `index` from now on; drop its raw column when the index
        stores the vectors (the index is in place first: a reader sees one or the other)."""
        self.indexes[field_id] = index
        self.index_bytes += nbytes
        if getattr(index, "scalar", False):
            self.scalar_indexes[field_id] = index
        self.vectors.pop(field_id, None)
        self.sq_norms.pop(field_id, None)
        self.raw.pop(field_id, None)
        self._exact = {k: v for k, v in self._exact.items() if k[0] != field_id}
        name = str(field_id)
        if index.holds_raw and name in self.table.column_names:
            self.table = self.table.drop_columns([name])

    def column(self, name: str, offsets: pa.Array) -> pa.Array | pa.ChunkedArray | None:
        """Rows `offsets` of a column, a vector field the index holds read back from it (None:
        the segment has no such column)."""
        if name in self.table.column_names:
            return self.table.column(name).take(offsets)
        index = self.indexes.get(int(name)) if name.isdigit() else None
        if index is None or not index.holds_raw:
            return None
        return index.raw_column(offsets.to_numpy(zero_copy_only=False))

    def text_index(self, field_id: int, analyzer_params: str) -> Any:
        """The field's text-match index: the one loaded with the segment, or (growing data, a
        segment loaded before its index was built) one built from the column once."""
        index = self.text_indexes.get(field_id)
        if index is None or index.num_rows != self.num_rows:
            from kmilvus.analyzer import build
            from kmilvus.index.text_index import TextIndex

            index = TextIndex.build(self.table.column(str(field_id)), build(analyzer_params))
            self.text_indexes[field_id] = index
        return index

    def int64_pks(self) -> np.ndarray | None:
        """The Int64 primary keys as numpy, converted once (None: VarChar keys); result rows take
        their keys from it with one fancy index instead of an Arrow `take` call."""
        if self._pks is None:
            col = self.table.column(str(self.pk_field))
            self._pks = col.to_numpy() if pa.types.is_int64(col.type) and col.null_count == 0 else False
        return None if self._pks is False else self._pks

    def _key_order(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(the primary keys sorted — as `keys_and_ts` has them —, their rows), sorted once per
        segment; rows are usually in key order already, then no permutation is kept (None)."""
        if self._pk_order is None:
            keys = self.keys_and_ts()[0]
            if len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1])):
                self._pk_order = (keys, None)
            else:
                order = np.argsort(keys, kind="stable")
                self._pk_order = (keys[order], order)
        return self._pk_order

    def pk_rows(self, values: np.ndarray) -> np.ndarray:
        """Row offsets whose primary key is one of `values` (every copy of a repeated key), by
        binary search over the keys sorted once per segment — no scan."""
        keys, order = self._key_order()
        vals = sorted_unique(np.asarray(values))
        lo = np.searchsorted(keys, vals, side="left")
        hi = np.searchsorted(keys, vals, side="right")
        counts = hi - lo
        starts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        pos = np.arange(int(counts.sum()), dtype=np.int64) + starts
        answer: np.ndarray = pos if order is None else order[pos]
        return answer

    def keys_and_ts(self) -> tuple[np.ndarray, np.ndarray]:
        """Primary keys (as deletes compare them) and row timestamps, converted once (a segment
        without rows may have no columns at all: an emptied compaction target)."""
        if self._keys is None:
            empty = self.num_rows == 0
            self._keys = (np.array([], np.int64),) * 2 if empty else pk_and_ts(self.table, self.pk_field)
        return self._keys

    def span(self) -> Span | None:
        """Its rows' key and timestamp ranges and whether a row (key and timestamp) repeats in
        it, computed once (None: no rows): two segments can hold the same row only where both
        ranges overlap (`count.live_keys`). A key repeated with another timestamp is no repeat
        here: the shadow of its newest version hides the others (`versions`)."""
        if self._span is None and self.num_rows:
            keys, ts = self.keys_and_ts()
            ordered = self._pk_order[0] if self._pk_order is not None else np.sort(keys)
            repeats = bool(np.any(ordered[1:] == ordered[:-1]))
            if repeats:  # a key repeats: a row too only if it repeats with its timestamp
                repeats = len(twin_keys([(keys, ts)])) > 0
            self._span = Span(int(ts.min()), int(ts.max()), ordered[0].item(), ordered[-1].item(), repeats)
        return self._span

    def alive(self, channel_deletes: Sequence[DeleteSet] = ()) -> np.ndarray | None:
        """A bool per row: not deleted by its delta logs nor by the channel's deletes that apply
        to it (None: every row is alive). Cached until one of the sets changes."""
        version = (self.deltas.version, tuple((id(d), d.version) for d in channel_deletes))
        if self._alive is not None and self._alive[0] == version:
            return self._alive[1]
        dead = None
        for dels in (self.deltas, *channel_deletes):
            if not len(dels):
                continue
            d = dels.deleted(*self.keys_and_ts())
            if d is not None:
                dead = d if dead is None else dead | d
        mask = None if dead is None else ~dead
        self._alive = (version, mask)
        return mask

    def alive_at(self, channel_deletes: Sequence[DeleteSet], mvcc_ts: int) -> np.ndarray:
        """A bool per row as of `mvcc_ts` (Milvus' MVCC read): inserted at or before it and not
        deleted by a delete at or before it."""
        pks, row_ts = self.keys_and_ts()
        visible = row_ts <= mvcc_ts
        for dels in (self.deltas, *channel_deletes):
            if len(dels):
                d = dels.deleted(pks, row_ts, mvcc_ts)
                if d is not None:
                    visible &= ~d
        return visible


class _Rows:
    """A float vector field's rows as one float32 matrix that grows in place, with the rows'
    squared norms: a new batch is converted and appended once; what came before is copied again
    only when the capacity doubles (each row a few times at most in all). Rows [0, n) are never
    written again, so the views handed out (`column`, SegmentData's matrix) stay valid while
    later batches are appended."""

    def __init__(self, dim: int) -> None:
        self.n = 0
        self.vectors = np.empty((0, dim), dtype=np.float32)
        self.sq_norms = np.empty(0, dtype=np.float32)

    def append(self, rows: np.ndarray) -> None:
        end = self.n + len(rows)
        if end > len(self.vectors):
            cap = max(end, 2 * len(self.vectors), 1024)
            dim = self.vectors.shape[1]
            # From Arrow's pool, which keeps freed pages for reuse: a fresh mapping would fault
            # in every page of the copy.
            grown = np.frombuffer(pa.allocate_buffer(cap * dim * 4), dtype=np.float32).reshape(cap, dim)
            grown[: self.n] = self.vectors[: self.n]
            norms = np.frombuffer(pa.allocate_buffer(cap * 4), dtype=np.float32)
            norms[: self.n] = self.sq_norms[: self.n]
            self.vectors, self.sq_norms = grown, norms
        self.vectors[self.n : end] = rows
        self.sq_norms[self.n : end] = vector_search.sq_norms(rows)
        self.n = end

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows so far and their squared norms, as read-only views: later versions of the
        segment share this memory, so nothing may write through what a search was handed."""
        vectors, norms = self.vectors[: self.n], self.sq_norms[: self.n]
        vectors.flags.writeable = norms.flags.writeable = False
        return vectors, norms

    def column(self) -> pa.FixedSizeListArray:
        """The rows as an Arrow column over the same memory (no copy)."""
        flat = pa.array(self.vectors[: self.n].reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, self.vectors.shape[1])


def _plain_float_rows(col: pa.ChunkedArray, dim: int) -> bool:
    """Whether a float vector column is plain float32 rows of `dim`, with no null: what `_Rows`
    holds (any other column is converted as a sealed segment's is)."""
    return bool(col.type == pa.list_(pa.float32(), dim) and col.null_count == 0)


class GrowingSegment:
    """Batches of one segment consumed from the stream; its SegmentData is rebuilt lazily after
    new batches arrive (search cost is paid once per change, not per request). A float vector
    field is kept as one matrix that grows batch by batch (`_Rows`), so a rebuild converts only
    the new rows of it; the other columns are combined again."""

    def __init__(self, segment_id: int, partition_id: int, schema: schema_pb2.CollectionSchema):
        self.segment_id, self.partition_id, self.schema = segment_id, partition_id, schema
        self.batches: list[pa.RecordBatch | pa.Table] = []
        self.rows = 0
        self.nbytes = 0
        self.deltas = DeleteSet()  # delta logs written for it before it was flushed
        self._data: SegmentData | None = None
        self._dense: dict[int, _Rows] = {}  # float vector field → its rows so far
        self._dense_batches = 0  # how many of `batches` the `_dense` rows hold

    def adopt(self, schema: schema_pb2.CollectionSchema) -> None:
        """A newer schema: the rows are read with its fields from now on."""
        self.schema = schema
        self._data = None
        self._dense, self._dense_batches = {}, 0

    def max_ts(self) -> int:
        """The timestamp of its newest row (0: none)."""
        return max((pc.max(b.column(TIMESTAMP)).as_py() or 0 for b in self.batches if b.num_rows), default=0)

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        self.batches.append(batch)
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        self._data = None

    def _float_fields(self, table: pa.Table) -> dict[int, int]:
        """Float vector fields of the rows held as `_Rows` (field ID → dim)."""
        out = {}
        for f in self.schema.fields:
            name = str(f.fieldID)
            if f.data_type == DT.FloatVector and name in table.column_names:
                dim = typeutil.dim_of(f)
                if _plain_float_rows(table.column(name), dim):
                    out[f.fieldID] = dim
        return out

    def data(self) -> SegmentData:
        if self._data is None:
            tables = [b if isinstance(b, pa.Table) else pa.Table.from_batches([b]) for b in self.batches]
            table = pa.concat_tables(tables, promote_options="default")
            fields = self._float_fields(table)
            if set(fields) != set(self._dense):  # a field not plain (any more): start over
                self._dense = {fid: _Rows(dim) for fid, dim in fields.items()}
                self._dense_batches = 0
            for t in tables[self._dense_batches :]:
                if not t.num_rows:  # may lack the column (written before the field): nothing to add
                    continue
                for fid, rows in self._dense.items():
                    matrix = kvectors.from_arrow(t.column(str(fid)), DT.FloatVector, fields[fid])
                    assert isinstance(matrix, np.ndarray)  # a float vector column: dense rows
                    rows.append(matrix)
            self._dense_batches = len(tables)
            # Every other column is combined (one chunk, as a sealed segment's); a float vector
            # column is the matrix's memory, so its rows are not copied again.
            names = [str(fid) for fid in self._dense]
            at = {n: table.column_names.index(n) for n in names}
            kept = {n: table.schema.field(n) for n in names}
            table = table.drop_columns(names).combine_chunks()
            for n in sorted(names, key=at.__getitem__):
                table = table.add_column(at[n], kept[n], self._dense[int(n)].column())
            dense = {fid: r.rows() for fid, r in self._dense.items()}
            self._data = SegmentData.build(self.segment_id, self.partition_id, table, self.schema, dense=dense)
            self._data.deltas = self.deltas
        return self._data
