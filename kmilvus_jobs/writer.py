"""The binlog writer that runs inside Spark tasks (`DataFrame.mapInArrow`).

Spark hands each task its rows as Arrow record batches; this turns them into kmilvus insert
binlogs — exactly `kmilvus.util.typeutil.arrow_schema(schema)` ("0" row ID, "1" timestamp, then
one column per field named by field ID, FloatVector as `fixed_size_list<float32, dim>`), stored
and written as the DataNode's (`kmilvus.storage.binlog.to_storage`, `parquet_options`, ≈64 MiB
row groups) — and
answers one small record per file written (or per problem found).

Every step is columnar (pyarrow compute over whole batches); no Python code runs per row.

Input columns (besides the fields, named by field ID):
  __g    int64  the row's index in the job (dense, 0-based): import row IDs are
                `row_id_start + __g`; a file's log ID is `log_id_start + __g` of its first row
  __seg  int32  index into the job's target segment list (import: the row's bucket; the
                writer adds the shard its primary key hashes to, of ctx["shards"])
  __file int32  index of the input file (import: for error reports)
  __row  int64  the row's index in that file (import: for error reports)
  __err  string a problem Spark already found while parsing the row (import), else null

Files are deterministic: a retried task writes the same keys. Locally a file is written under a
dot-prefixed temporary name and renamed when complete, so readers never see half a binlog.
"""

from __future__ import annotations

import base64
import contextlib
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

RESULT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("seg", pa.int32()),
        ("log_id", pa.int64()),
        ("key", pa.string()),
        ("rows", pa.int64()),
        ("size", pa.int64()),
        ("memory_size", pa.int64()),
        ("ts_from", pa.int64()),
        ("ts_to", pa.int64()),
        ("file", pa.int32()),
        ("row", pa.int64()),
        ("field", pa.string()),
        ("reason", pa.string()),
    ]
)
RESULT_SPARK_SCHEMA = (
    "kind string, seg int, log_id long, key string, rows long, size long, "
    "memory_size long, ts_from long, ts_to long, file int, row long, field string, "
    "reason string"
)
SYSTEM_COLUMNS = ("__g", "__seg", "__file", "__row", "__err")


def decode_schema(b64: str):
    from pymilvus.grpc_gen import schema_pb2

    return schema_pb2.CollectionSchema.FromString(base64.b64decode(b64))


class RowProblem(Exception):
    def __init__(self, index: int, field: str | None, reason: str):
        super().__init__(reason)
        self.index, self.field, self.reason = index, field, reason


def _first(mask: pa.Array) -> int:
    return int(pc.indices_nonzero(mask)[0].as_py())


def _as_array(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


# ------------------------------------------------------------------------------ validation


def _check_not_null(name: str, arr: pa.Array) -> None:
    if arr.null_count:
        raise RowProblem(_first(pc.is_null(arr)), name, f"the value of field '{name}' is null")


def check_and_convert(field, arr: pa.Array, typeutil) -> pa.Array:
    """Validate one column of the import (as Spark typed it: `files.frame_type`) and convert it
    to the binlog type.

    Nulls and list shapes are Spark's alone (protobuf has neither); every value check is
    `kmilvus.util.typeutil`'s or `fieldtypes`', the same the Proxy runs on an Insert. A null of a
    nullable field stays null, of a field with a default becomes the default (`expand_valid`,
    as an Insert's `valid_data`); elsewhere it is a problem."""
    from kmilvus.util import fieldtypes

    name = field.name
    arr = _as_array(arr)
    valid = None
    if arr.null_count:
        if not (field.nullable or typeutil.has_default(field)):
            _check_not_null(name, arr)
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        arr = arr.filter(pa.array(valid))
    try:
        out = _convert(field, arr, typeutil, fieldtypes)
    except typeutil.RowError as e:
        row = e.row if valid is None else int(np.flatnonzero(valid)[e.row])
        raise RowProblem(row, name, e.reason) from None
    return out if valid is None else fieldtypes.expand_valid(out, valid, field)


def _convert(field, arr: pa.Array, typeutil, fieldtypes) -> pa.Array:
    dt = field.data_type
    if dt == typeutil.DT.FloatVector:
        return _float_vector(field, arr, typeutil)
    if dt in typeutil.BYTE_VECTORS:
        return fieldtypes.byte_vector_from_lists(field, arr)
    if dt == typeutil.DT.SparseFloatVector:
        return fieldtypes.sparse_from_lists(field, arr)
    if dt == typeutil.DT.Array:
        return fieldtypes.array_from_lists(field, arr)
    typeutil.check_values(field, arr)
    want = typeutil.arrow_type(field)
    return arr if arr.type == want else arr.cast(want)


def _float_vector(field, arr: pa.Array, typeutil) -> pa.Array:
    name, dim = field.name, typeutil.dim_of(field)
    lengths = pc.list_value_length(arr)
    bad = pc.not_equal(lengths, dim)
    if pc.any(bad).as_py():
        i = _first(bad)
        raise typeutil.dim_mismatch(name, lengths[i].as_py(), dim, row=i)
    values = arr.flatten()
    if values.type != pa.float32():
        values = values.cast(pa.float32())
    if values.null_count:
        i = _first(pc.is_null(values))
        raise RowProblem(
            i // dim, name, f"float vector field ({name}) has a null or non-numeric element at position {i % dim}"
        )
    typeutil.check_finite(name, "float vector", values, dim)
    return pa.FixedSizeListArray.from_arrays(values, dim)


# ------------------------------------------------------------------------------ the writer


class _Piece:
    """One binlog file: the rows of one target segment that one task writes."""

    log_id: int  # set by the task that opens it

    def __init__(self, store, key: str, schema: pa.Schema, options: dict):
        self.store, self.key = store, key
        self.path = store.path(key)
        self.schema, self.options = schema, options
        self.buffer: list[pa.RecordBatch] = []
        self.buffered = 0
        self.rows = 0
        self.memory = 0
        self.ts_from: int | None = None
        self.ts_to: int | None = None
        self.rg_rows = 0
        self._stream: Any = None  # pyarrow's output stream and ParquetWriter (pyarrow has no types)
        self._writer: Any = None
        self._tmp: str | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        from kmilvus.storage import binlog

        if not self.rg_rows:
            self.rg_rows = binlog.row_group_rows(pa.Table.from_batches([batch]))
        mm = pc.min_max(batch.column(1))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        self.ts_from = lo if self.ts_from is None else min(self.ts_from, lo)
        self.ts_to = hi if self.ts_to is None else max(self.ts_to, hi)
        self.buffer.append(binlog.to_storage(batch))
        self.buffered += batch.num_rows
        self.rows += batch.num_rows
        self.memory += batch.nbytes
        if self.buffered >= self.rg_rows:
            self._flush()

    def _open(self) -> None:
        from kmilvus.storage.objectstore import temp_name

        fs = self.store.filesystem
        if self.store.local:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self._tmp = temp_name(self.path)
            self._stream = fs.open_output_stream(self._tmp)
        else:
            self._stream = fs.open_output_stream(self.path)
        self._writer = pq.ParquetWriter(self._stream, self.schema, **self.options)

    def _flush(self) -> None:
        if not self.buffer:
            return
        if self._writer is None:
            self._open()
        table = pa.Table.from_batches(self.buffer, schema=self.schema)
        self._writer.write_table(table, row_group_size=max(self.rg_rows, table.num_rows))
        self.buffer, self.buffered = [], 0

    def close(self) -> int:
        self._flush()
        self._writer.close()
        size: int = self._stream.tell()
        self._stream.close()
        if self._tmp is not None:
            os.replace(self._tmp, self.path)
            self._tmp = None
        return size

    def abort(self) -> None:
        for closer in (self._writer, self._stream):
            if closer is not None:
                with contextlib.suppress(Exception):  # best effort on the way out: the job failed already
                    closer.close()
        target = self._tmp or (None if self.store.local else self.path)
        if target:
            with contextlib.suppress(OSError):
                self.store.filesystem.delete_file(target)


class BinlogWriter:
    """State of one task: open pieces by segment index, or the problem that stopped it."""

    def __init__(self, ctx: dict):
        from kmilvus.storage import ObjectStore, binlog
        from kmilvus.util import typeutil

        self.ctx = ctx
        self.typeutil = typeutil
        self.mode = ctx["mode"]
        self.schema = decode_schema(ctx["schema"])
        self.arrow_schema = typeutil.arrow_schema(self.schema)
        self.stored_schema = binlog.storage_schema(self.arrow_schema)
        self.options = binlog.parquet_options(self.stored_schema)
        self.store = ObjectStore.from_uri(ctx["storage_uri"])
        self.segments = ctx["segments"]  # [[collection, partition, segment], ...]
        self.log_id_start = int(ctx["log_id_start"])
        self.fields = typeutil.user_fields(self.schema)
        self.pk = typeutil.primary_field(self.schema)
        self.pieces: dict[int, _Piece] = {}
        self.problem: dict | None = None

    @property
    def failed(self) -> bool:
        return self.problem is not None

    def _fail(self, batch: pa.RecordBatch, index: int, field: str | None, reason: str) -> None:
        file = int(batch.column("__file")[index].as_py()) if "__file" in batch.schema.names else -1
        row = batch.column("__row")[index].as_py() if "__row" in batch.schema.names else None
        self.problem = {
            "kind": "error",
            "file": file,
            "row": -1 if row is None else int(row),
            "field": field,
            "reason": reason,
        }
        self.abort()

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0 or self.failed:
            return
        try:
            out = self._convert(batch)
        except RowProblem as p:
            self._fail(batch, p.index, p.field, p.reason)
            return
        seg = batch.column("__seg")
        g = batch.column("__g")
        if self.mode == "import":
            seg = self._with_shard(seg, out)
        mm = pc.min_max(seg)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo == hi:
            self._route(lo, out, g)
            return
        for s in range(lo, hi + 1):
            mask = pc.equal(seg, s)
            if pc.any(mask).as_py():
                self._route(s, out.filter(mask), g.filter(mask))

    def _with_shard(self, bucket: pa.Array, out: pa.RecordBatch) -> pa.Array:
        """Segment indexes of an import batch: its rows' bucket × shards + the shard their
        primary key hashes to (as the Proxy routes an Insert)."""
        from kmilvus.util.hashing import shard_of

        shards = int(self.ctx.get("shards") or 1)
        shard = shard_of(_as_array(out.column(str(self.pk.fieldID))), shards)
        return pa.array(_as_array(bucket).to_numpy().astype(np.int64) * shards + shard, pa.int32())

    def _route(self, seg_index: int, out: pa.RecordBatch, g: pa.Array) -> None:
        piece = self.pieces.get(seg_index)
        if piece is None:
            from kmilvus.storage import paths

            coll, part, seg_id = self.segments[seg_index]
            log_id = self.log_id_start + int(g[0].as_py())
            piece = _Piece(
                self.store, paths.insert_log_key(coll, part, seg_id, log_id), self.stored_schema, self.options
            )
            piece.log_id = log_id
            self.pieces[seg_index] = piece
        piece.add(out)

    def _convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        tu = self.typeutil
        names = batch.schema.names
        if self.mode == "compact":
            cols = {}
            for f in self.fields:
                col = _as_array(batch.column(str(f.fieldID)))
                if f.data_type == tu.DT.FloatVector:
                    dim = tu.dim_of(f)
                    col = pa.FixedSizeListArray.from_arrays(col.flatten().cast(pa.float32()), dim)
                cols[f.fieldID] = col
            return tu.columns_to_record_batch(
                self.schema, cols, _as_array(batch.column("0")).to_numpy(), _as_array(batch.column("1")).to_numpy()
            )
        if "__err" in names:
            err = batch.column("__err")
            if err.null_count != batch.num_rows:
                i = _first(pc.is_valid(err))
                raise RowProblem(i, None, err[i].as_py())
        cols = {}
        for f in self.fields:
            if (f.is_primary_key and f.autoID) or f.is_function_output:
                continue
            cols[f.fieldID] = check_and_convert(f, batch.column(str(f.fieldID)), tu)
        if self.schema.functions:
            from kmilvus.function import bm25  # the BM25 function fills its output, as an insert's

            bm25.fill_outputs(self.schema, cols)
        g = _as_array(batch.column("__g")).to_numpy()
        row_ids = g + int(self.ctx["row_id_start"])
        if self.pk.autoID:
            ids = pa.array(row_ids, pa.int64())
            cols[self.pk.fieldID] = ids if self.pk.data_type == tu.DT.Int64 else ids.cast(pa.string())
        return tu.columns_to_record_batch(self.schema, cols, row_ids, int(self.ctx["timestamp"]))

    def finish(self) -> pa.RecordBatch:
        if self.problem is not None:  # failed
            return pa.RecordBatch.from_pylist([_record(**self.problem)], schema=RESULT_SCHEMA)
        records = []
        for seg_index, piece in sorted(self.pieces.items()):
            size = piece.close()
            records.append(
                _record(
                    kind="binlog",
                    seg=seg_index,
                    log_id=piece.log_id,
                    key=piece.key,
                    rows=piece.rows,
                    size=size,
                    memory_size=piece.memory,
                    ts_from=piece.ts_from,
                    ts_to=piece.ts_to,
                )
            )
        return pa.RecordBatch.from_pylist(records, schema=RESULT_SCHEMA)

    def abort(self) -> None:
        for piece in self.pieces.values():
            piece.abort()
        self.pieces.clear()


def _record(**kw) -> dict:
    base = dict.fromkeys(RESULT_SCHEMA.names)
    base.update(kw)
    return base


def binlog_writer(ctx: dict):
    """The function for `df.mapInArrow(binlog_writer(ctx), RESULT_SPARK_SCHEMA)`.

    ctx: mode ("import" | "compact"), schema (base64 CollectionSchema), storage_uri, segments
    ([collection, partition, segment] per target index), log_id_start; import also row_id_start
    and timestamp.
    """

    def feed(writer: BinlogWriter, batches) -> None:
        for batch in batches:
            writer.add(batch)  # after a problem: drain the input, write nothing

    return writing_task(ctx, feed)


def writing_task(ctx: dict, feed):
    """A `mapInArrow` function: the task's `BinlogWriter(ctx)` fed by `feed(writer, batches)`,
    which may return more result records (dicts); yields the files written (or the problem),
    then those records. A failure removes what the task wrote."""

    def run(batches):
        writer = BinlogWriter(ctx)
        try:
            extra = feed(writer, batches) or []
            result = writer.finish()
        except BaseException:
            writer.abort()
            raise
        yield result
        if extra:
            yield pa.RecordBatch.from_pylist([_record(**r) for r in extra], schema=RESULT_SCHEMA)

    return run


def segment_entry(logs: list[dict]) -> dict:
    """A manifest segment's totals and binlogs, from the writer's result rows of that segment
    (sorted by log ID); the import and compaction manifests share this shape."""
    return {
        "rows": sum(r["rows"] for r in logs),
        "size": sum(r["size"] for r in logs),
        "memory_size": sum(r["memory_size"] for r in logs),
        "timestamp_from": min((r["ts_from"] for r in logs), default=0),
        "timestamp_to": max((r["ts_to"] for r in logs), default=0),
        "binlogs": [
            {
                "log_id": r["log_id"],
                "key": r["key"],
                "rows": r["rows"],
                "size": r["size"],
                "memory_size": r["memory_size"],
                "timestamp_from": r["ts_from"],
                "timestamp_to": r["ts_to"],
            }
            for r in logs
        ],
    }
