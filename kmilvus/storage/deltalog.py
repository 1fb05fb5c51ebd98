"""Delta logs (deletes) and primary-key stats logs as Parquet files.

A delta log holds the deletes that apply to one segment: columns `pk` (Int64 or VarChar, as the
schema's primary key) and `ts` (the delete's hybrid timestamp, int64 like the insert binlogs'
timestamp column). A row of the segment is deleted when a delete of its pk has `ts` > the row's
timestamp (Milvus' rule: an upsert's delete and insert share one timestamp, so the new row stays).

A stats log holds the primary keys of one insert binlog, sorted and unique (column `pk`): Milvus
keeps a bloom filter plus min/max per segment; kmilvus keeps the exact key set, which a DataNode
loads when it starts watching a channel to know which segments a delete may hit.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kmilvus.storage.binlog import SCALAR_COMPRESSION, BinlogInfo, _log_id_of, read_binlog, write_parquet
from kmilvus.storage.objectstore import ObjectStore

PK = "pk"
TS = "ts"
_OPTIONS = {"compression": SCALAR_COMPRESSION}


def delta_schema(pk_type: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(PK, pk_type, nullable=False), pa.field(TS, pa.int64(), nullable=False)])


def write_delta_log(store: ObjectStore, key: str, pks: pa.Array, ts: pa.Array) -> BinlogInfo:
    table = pa.Table.from_arrays([pks, ts.cast(pa.int64())], schema=delta_schema(pks.type))
    mm = pc.min_max(table.column(TS))
    size = write_parquet(store, key, table, **_OPTIONS)
    return BinlogInfo(
        log_id=_log_id_of(key),
        key=key,
        entries_num=table.num_rows,
        timestamp_from=mm["min"].as_py() or 0,
        timestamp_to=mm["max"].as_py() or 0,
        size=size,
        memory_size=table.nbytes,
    )


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct keys, without np.unique: numpy 2.4's hash-based unique is orders of
    magnitude slower than a sort for int64 keys (docs/benchmarks/index.md). A stable sort
    (timsort) of a concatenation of sorted runs merges them in linear time; then drop each key
    equal to its predecessor."""
    keys = np.sort(keys, kind="stable")
    if len(keys) < 2:
        return keys
    keep = np.empty(len(keys), dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def write_stats_log(store: ObjectStore, key: str, pks: np.ndarray) -> BinlogInfo:
    keys = sorted_unique(pks)
    table = pa.table({PK: pa.array(keys)})
    size = write_parquet(store, key, table, **_OPTIONS)
    return BinlogInfo(
        log_id=_log_id_of(key), key=key, entries_num=len(keys), timestamp_from=0, timestamp_to=0, size=size
    )


def read_delta_log(store: ObjectStore, key: str) -> pa.Table:
    return read_binlog(store, key)


def read_pk_column(store: ObjectStore, key: str, column: str) -> np.ndarray:
    """One column of a Parquet file (a stats log's `pk`, an insert binlog's pk field) as numpy."""
    import pyarrow.parquet as pq

    col = pq.read_table(store.path(key), filesystem=store.filesystem, columns=[column]).column(0)
    return pk_numpy(col)


def pk_numpy(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Primary keys as numpy: int64, or fixed-width unicode for VarChar (sortable, np.isin-able)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    values: np.ndarray = np.asarray(col.to_numpy(zero_copy_only=False))
    if pa.types.is_integer(col.type):
        return values.astype(np.int64, copy=False)
    return values.astype(str)


async def awrite_delta_log(store: ObjectStore, key: str, pks: pa.Array, ts: pa.Array) -> BinlogInfo:
    return await asyncio.to_thread(write_delta_log, store, key, pks, ts)


async def awrite_stats_log(store: ObjectStore, key: str, pks: np.ndarray) -> BinlogInfo:
    return await asyncio.to_thread(write_stats_log, store, key, pks)
