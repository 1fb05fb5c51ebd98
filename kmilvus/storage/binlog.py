"""Insert and DDL binlogs as Parquet files on an ObjectStore.

An insert binlog is ONE Parquet file holding every column of a segment's flush chunk: "0" (row
ID), "1" (timestamp) and one column per field, named by field ID (kmilvus.util.typeutil). Files
are named by their bare log ID (no extension); a segment directory reads back with plain
`pyarrow.parquet.read_table(dir)` / `pyarrow.dataset.dataset(dir, format="parquet")` and with
`spark.read.parquet(dir)`.

Float vectors are `fixed_size_list<float32, dim>` in memory and `fixed_size_binary(4·dim)` on
disk, Milvus' own Parquet type for them: a Parquet list pays a repetition and a definition level
per float, which costs far more time to write and to read than the same bytes as one
fixed-size value. `to_storage` / `from_storage` convert without copying, and the field's
metadata (`LIST_SIZE_META`) says what a column was, so any reader turns it back without the
collection's schema; binlogs written as lists before still read as they are.

Encoding, chosen with `bench/bench_storage.py --compare` (the figures are in
docs/benchmarks/index.md):

- vector columns (float vectors as bytes, and binary / 16-bit vectors): uncompressed, no
  dictionary, no statistics. Float embeddings barely compress, and compressing them halves the
  write rate.
- every other column: zstd (level 1) with dictionary encoding and min/max statistics: the
  smallest scalar columns at no measurable cost (they are a few % of the bytes).
- row groups of about 64 MiB: reads of several row groups run on several threads, and writing
  them is no slower than one row group per file.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from kmilvus.storage import paths
from kmilvus.storage.objectstore import ObjectStore

ROW_GROUP_BYTES = 64 * 1024 * 1024
MIN_ROW_GROUP_ROWS = 1024
MAX_ROW_GROUP_ROWS = 1024 * 1024
SCALAR_COMPRESSION = "zstd"
TIMESTAMP_COLUMN = "1"


@dataclass(frozen=True)
class BinlogInfo:
    """What DataCoord records about one binlog file (Milvus' datapb.Binlog)."""

    log_id: int | None
    key: str
    entries_num: int
    timestamp_from: int
    timestamp_to: int
    size: int  # bytes in storage
    memory_size: int = 0  # bytes of the Arrow data written


LIST_SIZE_META = b"kmilvus.list_size"  # on a fixed_size_binary column: it holds fixed_size_list<float32, N>
_FLOAT_BYTES = 4


def _is_vector(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_fixed_size_list(t)
        or pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _stored_as_bytes(f: pa.Field) -> bool:
    t = f.type
    return bool(pa.types.is_fixed_size_list(t) and pa.types.is_float32(t.value_type))


def _encode_chunk(arr: pa.Array, width: int) -> pa.Array:
    """fixed_size_list<float32, N> → fixed_size_binary(4·N) over the same buffer."""
    dim = width // _FLOAT_BYTES
    values = arr.values  # the whole child: a slice of `arr` starts at arr.offset · dim
    data = values.buffers()[1]
    start = (values.offset + arr.offset * dim) * _FLOAT_BYTES
    validity = arr.is_valid().buffers()[1] if arr.null_count else None
    return pa.Array.from_buffers(pa.binary(width), len(arr), [validity, data.slice(start, len(arr) * width)])


def _decode_chunk(arr: pa.Array, field_type: pa.DataType) -> pa.Array:
    width = arr.type.byte_width
    data = arr.buffers()[1].slice(arr.offset * width, len(arr) * width)
    values = pa.Array.from_buffers(pa.float32(), len(arr) * field_type.list_size, [None, data])
    return pa.FixedSizeListArray.from_arrays(values, type=field_type, mask=arr.is_null() if arr.null_count else None)


_Convert = Callable[[pa.Field, Any], tuple[pa.Field, Any] | None]


def _mapped(table: pa.Table | pa.RecordBatch, convert: _Convert) -> pa.Table | pa.RecordBatch:
    fields, columns, changed = [], [], False
    for f, col in zip(table.schema, table.columns, strict=True):
        new = convert(f, col)
        if new is None:
            fields.append(f)
            columns.append(col)
        else:
            changed = True
            fields.append(new[0])
            columns.append(new[1])
    if not changed:
        return table
    schema = pa.schema(fields, metadata=table.schema.metadata)
    if isinstance(table, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=schema)
    return pa.Table.from_arrays(columns, schema=schema)


def _storage_field(f: pa.Field) -> pa.Field:
    size = f.type.list_size
    meta = {**(f.metadata or {}), LIST_SIZE_META: str(size).encode()}
    return pa.field(f.name, pa.binary(size * _FLOAT_BYTES), nullable=f.nullable, metadata=meta)


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """How `schema`'s columns are stored (float vectors as bytes)."""
    return pa.schema([_storage_field(f) if _stored_as_bytes(f) else f for f in schema], metadata=schema.metadata)


def to_storage(table: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """The columns as they are written (see the module docstring); zero-copy."""

    def convert(f: pa.Field, col: Any) -> tuple[pa.Field, Any] | None:
        if not _stored_as_bytes(f):
            return None
        sf = _storage_field(f)
        width = sf.type.byte_width
        if isinstance(col, pa.ChunkedArray):
            return sf, pa.chunked_array([_encode_chunk(c, width) for c in col.chunks], type=sf.type)
        return sf, _encode_chunk(col, width)

    return _mapped(table, convert)


def from_storage(table: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """`to_storage` undone: stored vector columns back to fixed_size_list<float32>; zero-copy."""

    def convert(f: pa.Field, col: Any) -> tuple[pa.Field, Any] | None:
        meta = f.metadata or {}
        if LIST_SIZE_META not in meta or not pa.types.is_fixed_size_binary(f.type):
            return None
        field_type = pa.list_(pa.float32(), int(meta[LIST_SIZE_META]))
        rest = {k: v for k, v in meta.items() if k != LIST_SIZE_META}
        mf = pa.field(f.name, field_type, nullable=f.nullable, metadata=rest or None)
        if isinstance(col, pa.ChunkedArray):
            return mf, pa.chunked_array([_decode_chunk(c, field_type) for c in col.chunks], type=field_type)
        return mf, _decode_chunk(col, field_type)

    return _mapped(table, convert)


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """ParquetWriter keyword arguments for a binlog of `schema` (see the module docstring)."""
    vectors = [f.name for f in schema if _is_vector(f.type)]
    scalars = [f.name for f in schema if not _is_vector(f.type)]
    compression = dict.fromkeys(vectors, "none")
    compression.update(dict.fromkeys(scalars, SCALAR_COMPRESSION))
    return {
        "compression": compression,
        "use_dictionary": scalars,
        "write_statistics": scalars,
    }


def row_group_rows(table: pa.Table) -> int:
    if table.num_rows == 0:
        return MIN_ROW_GROUP_ROWS
    per_row = max(1, table.nbytes // table.num_rows)
    return int(min(MAX_ROW_GROUP_ROWS, max(MIN_ROW_GROUP_ROWS, ROW_GROUP_BYTES // per_row)))


def as_table(batches: list[pa.RecordBatch] | pa.Table | pa.RecordBatch) -> pa.Table:
    if isinstance(batches, pa.Table):
        return batches
    if isinstance(batches, pa.RecordBatch):
        return pa.Table.from_batches([batches])
    batches = list(batches)
    if not batches:
        raise ValueError("no record batches to write")
    if all(b.schema.equals(batches[0].schema) for b in batches[1:]):
        return pa.Table.from_batches(batches)
    # Rows buffered before and after a field was added: the earlier ones read it as null.
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="default")


def write_parquet(store: ObjectStore, key: str, table: pa.Table, **options: Any) -> int:
    """Write `table` as one Parquet file at `key` (atomically for readers); returns its size."""
    fs = store.filesystem
    rows = options.pop("row_group_size", None) or row_group_rows(table)

    def produce(path: str) -> int:
        with fs.open_output_stream(path) as out:
            with pq.ParquetWriter(out, table.schema, **options) as writer:
                writer.write_table(table, row_group_size=rows)
            return int(out.tell())

    path = store.path(key)
    if not store.local:
        return produce(path)
    written: list[int] = []
    store.atomic_local(path, lambda tmp: written.append(produce(tmp)))
    return written[-1]


def _log_id_of(key: str) -> int | None:
    last = key.rstrip("/").rsplit("/", 1)[-1]
    return int(last) if last.isdigit() else None


def write_insert_binlog(store: ObjectStore, key: str, batches: list[pa.RecordBatch] | pa.Table) -> BinlogInfo:
    """All columns of a flush chunk → one Parquet file at `key` (blocking; see awrite_...)."""
    table = as_table(batches)
    if TIMESTAMP_COLUMN not in table.schema.names:
        raise ValueError(f"insert binlog needs the timestamp column {TIMESTAMP_COLUMN!r}")
    if table.num_rows:
        mm = pc.min_max(table.column(TIMESTAMP_COLUMN))
        ts_from, ts_to = mm["min"].as_py(), mm["max"].as_py()
    else:
        ts_from = ts_to = 0
    stored = to_storage(table)
    size = write_parquet(store, key, stored, **parquet_options(stored.schema))
    return BinlogInfo(
        log_id=_log_id_of(key),
        key=key,
        entries_num=table.num_rows,
        timestamp_from=ts_from,
        timestamp_to=ts_to,
        size=size,
        memory_size=table.nbytes,
    )


def read_binlog(store: ObjectStore, key: str) -> pa.Table:
    return from_storage(pq.read_table(store.path(key), filesystem=store.filesystem))


def _log_sort_key(key: str) -> tuple[int, int, str]:
    lid = _log_id_of(key)
    return (0, lid, key) if lid is not None else (1, 0, key)


def segment_binlog_keys(store: ObjectStore, coll: int, part: int, seg: int) -> list[str]:
    """The segment's insert binlog keys, in log-ID order."""
    keys = [k for k, _ in store.list_sync(paths.segment_prefix(coll, part, seg))]
    return sorted(keys, key=_log_sort_key)


def read_column(
    store: ObjectStore, keys: list[str], column: str, missing: Callable[[int], pa.Array] | None = None
) -> pa.ChunkedArray:
    """One column of the given insert binlogs, concatenated in log-ID order (the segment's row
    offsets: what an index built from it and a QueryNode loading the segment both count by).
    A binlog written before its field was added has no such column: `missing(rows)` stands in
    for it (without `missing`, that is an error)."""
    if not keys:
        raise ValueError("read_column needs at least one binlog")
    chunks = []
    for k in sorted(keys, key=_log_sort_key):
        with store.filesystem.open_input_file(store.path(k)) as f:
            pf = pq.ParquetFile(f)
            if column in pf.schema_arrow.names or missing is None:
                chunks.append(from_storage(pf.read(columns=[column]))[column])
            else:
                chunks.append(pa.chunked_array([missing(pf.metadata.num_rows)]))
    kind = chunks[0].type
    return pa.chunked_array([c.cast(kind) for ch in chunks for c in ch.chunks], type=kind)


def read_binlogs(
    store: ObjectStore, keys: list[str], schema: pa.Schema | None = None, skip: Collection[str] = ()
) -> pa.Table:
    """The given insert binlogs, concatenated in the given order (one multithreaded Arrow read),
    decoded, without the columns named in `skip` (never read, so never in memory). A column some
    binlogs lack (a field added to the collection since) is null in their rows. Binlogs whose
    stored layouts differ (written before and after float vectors were stored as bytes) are read
    one by one."""
    if not keys:
        return (schema or pa.schema([])).empty_table()
    paths_ = [store.path(k) for k in keys]
    try:
        stored = storage_schema(schema) if schema is not None else _union_schema(store, paths_)
        dataset = ds.dataset(paths_, filesystem=store.filesystem, format="parquet", schema=stored)
        columns = [n for n in dataset.schema.names if n not in skip] if skip else None
        return from_storage(dataset.to_table(columns=columns))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        if len(paths_) == 1:
            raise
    tables = []
    for p in paths_:
        names = [n for n in pq.read_schema(p, filesystem=store.filesystem).names if n not in skip]
        tables.append(from_storage(pq.read_table(p, filesystem=store.filesystem, columns=names, schema=None)))
    table = pa.concat_tables(tables, promote_options="default")
    return table if schema is None else table.select(schema.names)


def _union_schema(store: ObjectStore, paths_: list[str]) -> pa.Schema | None:
    """Every column of the files (a field added to the collection is in the later binlogs of a
    segment only; the earlier ones read it as null). None for one file: its own schema."""
    if len(paths_) == 1:
        return None
    return pa.unify_schemas([pq.read_schema(p, filesystem=store.filesystem) for p in paths_])


def read_segment(store: ObjectStore, coll: int, part: int, seg: int, schema: pa.Schema | None = None) -> pa.Table:
    """Every insert binlog of a segment, concatenated in log-ID order.

    A segment without files reads as an empty table of `schema` (or with no columns).
    """
    return read_binlogs(store, segment_binlog_keys(store, coll, part, seg), schema)


# ------------------------------------------------------------------------------ DDL binlogs

DDL_TS_SCHEMA = pa.schema([pa.field("ts", pa.int64(), nullable=False)])
DDL_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("type", pa.int32(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),
    ]
)
_DDL_OPTIONS = {"compression": SCALAR_COMPRESSION}


def write_ddl_binlogs(
    store: ObjectStore,
    coll: int,
    ts_idx: int,
    ddl_idx: int,
    timestamps: list[int],
    msg_types: list[int],
    payloads: list[bytes],
) -> tuple[str, str]:
    """The DDL binlog pair (docs/architecture/ddl-flush.md): `.../ts/{ts_idx}` (ts) and
    `.../ddl/{ddl_idx}` (ts, type, payload). Returns (ts_key, ddl_key)."""
    if not len(timestamps) == len(msg_types) == len(payloads):
        raise ValueError(
            f"DDL binlog columns differ in length: {len(timestamps)} timestamps, "
            f"{len(msg_types)} types, {len(payloads)} payloads"
        )
    ts = pa.array(timestamps, pa.int64())
    ts_table = pa.Table.from_arrays([ts], schema=DDL_TS_SCHEMA)
    ddl_table = pa.Table.from_arrays(
        [ts, pa.array(msg_types, pa.int32()), pa.array(payloads, pa.binary())], schema=DDL_SCHEMA
    )
    ts_key, d_key = paths.ddl_ts_key(coll, ts_idx), paths.ddl_key(coll, ddl_idx)
    write_parquet(store, ts_key, ts_table, **_DDL_OPTIONS)
    write_parquet(store, d_key, ddl_table, **_DDL_OPTIONS)
    return ts_key, d_key


def read_ddl_binlog(store: ObjectStore, key: str) -> pa.Table:
    """A DDL binlog (either of the pair) as a table."""
    return read_binlog(store, key)


def read_ddl_records(store: ObjectStore, ddl_key: str) -> list[tuple[int, int, bytes]]:
    """The `ddl` file's rows as (ts, msg type, payload)."""
    t = read_binlog(store, ddl_key)
    return list(
        zip(t.column("ts").to_pylist(), t.column("type").to_pylist(), t.column("payload").to_pylist(), strict=True)
    )


# ------------------------------------------------------------------------------ async wrappers


async def awrite_insert_binlog(store: ObjectStore, key: str, batches: list[pa.RecordBatch] | pa.Table) -> BinlogInfo:
    return await asyncio.to_thread(write_insert_binlog, store, key, batches)


async def aread_binlog(store: ObjectStore, key: str) -> pa.Table:
    return await asyncio.to_thread(read_binlog, store, key)


async def aread_segment(
    store: ObjectStore, coll: int, part: int, seg: int, schema: pa.Schema | None = None
) -> pa.Table:
    return await asyncio.to_thread(read_segment, store, coll, part, seg, schema)


async def awrite_ddl_binlogs(
    store: ObjectStore,
    coll: int,
    ts_idx: int,
    ddl_idx: int,
    timestamps: list[int],
    msg_types: list[int],
    payloads: list[bytes],
) -> tuple[str, str]:
    return await asyncio.to_thread(write_ddl_binlogs, store, coll, ts_idx, ddl_idx, timestamps, msg_types, payloads)


async def aread_ddl_binlog(store: ObjectStore, key: str) -> pa.Table:
    return await asyncio.to_thread(read_ddl_binlog, store, key)


async def aread_ddl_records(store: ObjectStore, ddl_key: str) -> list[tuple[int, int, bytes]]:
    return await asyncio.to_thread(read_ddl_records, store, ddl_key)


def local_segment_dir(store: ObjectStore, coll: int, part: int, seg: int) -> str:
    """Filesystem directory of a segment on a local store (for pq.read_table(dir) / Spark)."""
    if not store.local:
        raise ValueError("not a local store")
    return os.path.join(store.root, paths.segment_prefix(coll, part, seg).rstrip("/"))
