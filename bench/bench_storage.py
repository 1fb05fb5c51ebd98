"""Storage micro-benchmark: insert binlog write / read rates and FieldData → Arrow conversion.

    .venv/bin/python bench/bench_storage.py                     # 1M rows, local temp dir
    .venv/bin/python bench/bench_storage.py --rows 200000 --compare
    .venv/bin/python bench/bench_storage.py --uri s3://bkt/x?endpoint=http://127.0.0.1:9000

Rows: int64 pk, 128-dim float32 vector, varchar(64) tag, plus row ID and timestamp — the
collection of docs/benchmarks/method.md. MB/s are Arrow (in-memory) bytes per second.
`--compare` also times alternative Parquet encodings on one chunk (the choice in
kmilvus/storage/binlog.py comes from this).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus.storage import ObjectStore, paths, read_segment, write_insert_binlog
from kmilvus.storage.binlog import parquet_options, row_group_rows, to_storage, write_parquet
from kmilvus.util import fielddata, typeutil

DT = schema_pb2.DataType


def make_schema(dim: int) -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="bench")
    s.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    s.fields.add(
        fieldID=101,
        name="vec",
        data_type=DT.FloatVector,
        type_params=[common_pb2.KeyValuePair(key="dim", value=str(dim))],
    )
    s.fields.add(
        fieldID=102,
        name="tag",
        data_type=DT.VarChar,
        type_params=[common_pb2.KeyValuePair(key="max_length", value="64")],
    )
    return s


def make_tags(n: int, start: int) -> pa.Array:
    return pa.array([f"tag-{(start + i) % 1000:04d}-payload" for i in range(n)], pa.string())


def make_batch(schema, start: int, n: int, dim: int, rng) -> pa.RecordBatch:
    cols = {
        100: pa.array(np.arange(start, start + n, dtype=np.int64)),
        101: pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * dim, dtype=np.float32)), dim),
        102: make_tags(n, start),
    }
    row_ids = np.arange(start, start + n, dtype=np.int64) + (1 << 40)
    ts = (1_700_000_000_000 << 18) + start // 10_000
    return typeutil.columns_to_record_batch(schema, cols, row_ids, ts)


def bench_binlogs(args) -> None:
    schema = make_schema(args.dim)
    rng = np.random.default_rng(0)
    tmp = None
    uri = args.uri
    if uri is None:
        tmp = tempfile.mkdtemp(prefix="kmilvus-bench-", dir=args.tmp)
        uri = "file://" + tmp
    store = ObjectStore.from_uri(uri)
    try:
        chunks = [
            make_batch(schema, s, min(args.chunk_rows, args.rows - s), args.dim, rng)
            for s in range(0, args.rows, args.chunk_rows)
        ]
        total = sum(c.nbytes for c in chunks)
        print(
            f"data: {args.rows:,} rows × (int64 pk, float_vector({args.dim}), varchar(64), row id, ts) "
            f"= {total / 1e6:.0f} MB Arrow, {len(chunks)} chunks of {args.chunk_rows:,} rows; store {store.root_uri}"
        )
        w_rates, r_rates = [], []
        for rep in range(args.repeat):
            store.delete_prefix_sync(paths.insert_log_prefix(1))
            t0 = time.perf_counter()
            infos = [
                write_insert_binlog(store, paths.insert_log_key(1, 2, 3, 1000 + i), c) for i, c in enumerate(chunks)
            ]
            w = time.perf_counter() - t0
            t0 = time.perf_counter()
            table = read_segment(store, 1, 2, 3)
            r = time.perf_counter() - t0
            assert table.num_rows == args.rows
            assert sum(i.entries_num for i in infos) == args.rows
            w_rates.append(total / w / 1e6)
            r_rates.append(total / r / 1e6)
            size = sum(i.size for i in infos)
            print(
                f"  run {rep + 1}: write {w:.2f} s = {total / w / 1e6:.0f} MB/s "
                f"({args.rows / w:,.0f} rows/s), read_segment {r:.2f} s = {total / r / 1e6:.0f} MB/s; "
                f"files {size / 1e6:.0f} MB"
            )
            del table
        print(
            f"insert binlog write: median {statistics.median(w_rates):.0f} MB/s, "
            f"read: median {statistics.median(r_rates):.0f} MB/s"
        )
        if args.compare:
            compare_encodings(store, chunks[0])
    finally:
        try:
            store.delete_prefix_sync(paths.insert_log_prefix(1))
            store.delete_prefix_sync("bench_compare")
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)


def compare_encodings(store: ObjectStore, batch: pa.RecordBatch) -> None:
    listed = pa.Table.from_batches([batch])  # the vector as fixed_size_list<float32> (kmilvus' earlier layout)
    table = to_storage(listed)  # as kmilvus stores it: the vector as fixed_size_binary(4·dim)
    names = table.schema.names
    chosen = parquet_options(table.schema)
    variants = {
        "chosen (vec bytes none, scalars zstd+dict)": (table, chosen),
        "vec as list<float32>, else chosen": (listed, parquet_options(listed.schema)),
        "all none, no dict": (table, {"compression": "none", "use_dictionary": False}),
        "all snappy (pyarrow default)": (table, {"compression": "snappy"}),
        "all lz4": (table, {"compression": "lz4"}),
        "all zstd": (table, {"compression": "zstd"}),
        "vec none, scalars lz4": (
            table,
            {**chosen, "compression": {n: ("none" if n == "101" else "lz4") for n in names}},
        ),
        "chosen, one row group": (table, {**chosen, "row_group_size": table.num_rows}),
        "chosen, 16k-row groups": (table, {**chosen, "row_group_size": 16384}),
    }
    print(
        f"encodings on one chunk ({table.num_rows:,} rows, {table.nbytes / 1e6:.0f} MB, "
        f"default row group {row_group_rows(table):,} rows), best of 3:"
    )
    for label, (data, opts) in variants.items():
        ws, rs = [], []
        for _ in range(3):
            key = "bench_compare/x"
            t0 = time.perf_counter()
            size = write_parquet(store, key, data, **dict(opts))
            ws.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            pq.read_table(store.path(key), filesystem=store.filesystem)
            rs.append(time.perf_counter() - t0)
        print(
            f"  {label:40s} write {table.nbytes / min(ws) / 1e6:5.0f} MB/s  "
            f"read {table.nbytes / min(rs) / 1e6:5.0f} MB/s  size {size / 1e6:6.1f} MB"
        )


def bench_conversion(args) -> None:
    n, dim = args.batch_rows, args.dim
    schema = make_schema(dim)
    rng = np.random.default_rng(1)
    # Build the request as pymilvus would send it, then parse it from bytes as the Proxy does.
    req = milvus_pb2.InsertRequest(collection_name="bench", num_rows=n)
    pk = req.fields_data.add(type=DT.Int64, field_name="id")
    pk.scalars.long_data.data.extend(np.arange(n, dtype=np.int64))
    vec = req.fields_data.add(type=DT.FloatVector, field_name="vec")
    vec.vectors.dim = dim
    vec.vectors.float_vector.data.extend(rng.random(n * dim, dtype=np.float32).tolist())
    tag = req.fields_data.add(type=DT.VarChar, field_name="tag")
    tag.scalars.string_data.data.extend(make_tags(n, 0).to_pylist())
    wire = req.SerializeToString()

    def timed(fn, reps=args.conv_repeat):
        out, times = None, []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return out, statistics.median(times) * 1e3, min(times) * 1e3

    parsed, parse_ms, _ = timed(lambda: milvus_pb2.InsertRequest.FromString(wire))
    cols, conv_ms, conv_min = timed(lambda: fielddata.fields_data_to_columns(schema, parsed.fields_data, n))
    row_ids = np.arange(n, dtype=np.int64)
    batch, rb_ms, _ = timed(lambda: typeutil.columns_to_record_batch(schema, cols, row_ids, 12345))
    _, back_ms, _ = timed(lambda: fielddata.record_batch_to_field_data(schema, batch))
    _, ids_ms, _ = timed(lambda: typeutil.primary_keys_to_ids(schema.fields[0], cols[100]))
    print(f"FieldData → Arrow, {n:,} rows × {dim}-dim (+ int64 pk, varchar tag), median of {args.conv_repeat}:")
    rows = [
        (f"parse InsertRequest ({len(wire) / 1e6:.1f} MB)", parse_ms, ""),
        ("fields_data_to_columns (validated)", conv_ms, f" (best {conv_min:.2f})"),
        ("columns_to_record_batch", rb_ms, ""),
        ("record_batch_to_field_data", back_ms, ""),
        ("primary_keys_to_ids", ids_ms, ""),
    ]
    for label, ms, extra in rows:
        print(f"  {label:38s} {ms:7.2f} ms{extra}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--chunk-rows", type=int, default=200_000, help="rows per insert binlog (flush chunk)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--uri", help="storage URI (default: a temp dir)")
    p.add_argument("--tmp", help="parent of the temp dir (default: system temp)")
    p.add_argument("--compare", action="store_true", help="also time alternative encodings")
    p.add_argument("--batch-rows", type=int, default=10_000, help="rows of the FieldData conversion batch")
    p.add_argument("--conv-repeat", type=int, default=20)
    p.add_argument("--skip-binlogs", action="store_true")
    args = p.parse_args(argv)
    bench_conversion(args)
    if not args.skip_binlogs:
        bench_binlogs(args)


if __name__ == "__main__":
    main()
