"""Expression micro-benchmark: `parse` once, `evaluate` over an Arrow table of N rows.

    .venv/bin/python bench/bench_parser.py                  # 1M rows, 5 runs each, median
    .venv/bin/python bench/bench_parser.py --rows 200000 --runs 3

Columns: int64 pk, int64 `age`, varchar `tag`, JSON `meta` ({"k": int, "s": str}); the JSON
column is timed both ways it can be read (Arrow's JSON reader, and orjson when Arrow cannot take
a column). Prints one line per expression: median seconds and million rows per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import orjson
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import evaluate, jsonpath, parse

DT = schema_pb2.DataType


def make_schema() -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="bench")
    s.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    s.fields.add(fieldID=101, name="age", data_type=DT.Int64)
    s.fields.add(fieldID=102, name="tag", data_type=DT.VarChar)
    s.fields.add(fieldID=103, name="meta", data_type=DT.JSON)
    return s


def make_table(n: int, rng: np.random.Generator) -> pa.Table:
    age = rng.integers(0, 100, n)
    meta = [orjson.dumps({"k": int(a), "s": f"v{a % 10}"}) for a in age]
    return pa.table(
        {
            "100": pa.array(np.arange(n), pa.int64()),
            "101": pa.array(age, pa.int64()),
            "102": pa.array([f"tag-{i % 1000:04d}" for i in range(n)], pa.string()),
            "103": pa.array(meta, pa.binary()),
        }
    )


def timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    schema = make_schema()
    table = make_table(args.rows, np.random.default_rng(0))
    keys = ", ".join(str(k) for k in range(0, args.rows, max(1, args.rows // 1000))[:1000])
    exprs = {
        "int compare": "age > 50",
        "pk in 1,000 keys": f"id in [{keys}]",
        "like prefix": "tag like 'tag-00%'",
        "JSON path compare": 'meta["k"] > 50',
        "and / or mix": "age > 10 and (tag like 'tag-01%' or id < 1000)",
    }
    print(f"rows={args.rows} runs={args.runs} (median)")
    started = time.perf_counter()
    plans = {name: parse(expr, schema) for name, expr in exprs.items()}
    print(f"{'parse (all 5, incl. 1,000-key list)':40s} {time.perf_counter() - started:8.4f} s")
    for name, plan in plans.items():
        mask = evaluate(plan, table)
        t = timed(lambda plan=plan: evaluate(plan, table), args.runs)
        print(f"{name:40s} {t:8.4f} s  {args.rows / t / 1e6:7.1f} M rows/s  (matches {mask.true_count})")
    cache: dict = {}
    evaluate(plans["JSON path compare"], table, cache)
    t = timed(lambda: evaluate(plans["JSON path compare"], table, cache), args.runs)
    print(f"{'JSON path compare (column parsed, cached)':40s} {t:8.4f} s  {args.rows / t / 1e6:7.1f} M rows/s")
    real = jsonpath._read_arrow
    jsonpath._read_arrow = lambda col: None  # force the orjson reader
    try:
        t = timed(lambda: evaluate(plans["JSON path compare"], table), args.runs)
    finally:
        jsonpath._read_arrow = real
    print(f"{'JSON path compare (orjson reader)':40s} {t:8.4f} s  {args.rows / t / 1e6:7.1f} M rows/s")


if __name__ == "__main__":
    main()
