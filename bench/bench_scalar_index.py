"""Selective filters with and without a scalar index, through pymilvus.

    .venv/bin/python bench/bench_scalar_index.py                 # 1M rows, 30 runs per filter
    .venv/bin/python bench/bench_scalar_index.py --rows 200000 --runs 10

Starts `kmilvus standalone` (temp data dir, free port) unless `--uri` is given; inserts `--rows`
rows (id, `tag` VarChar with 1000 values of 0.1 % each plus "x" on 0.1 % of the rows, `year`
Int64 uniform over 0..999999, a 4-dim vector), flushes, builds a FLAT vector index and loads.
Then, for each filter — `tag == "x"` (0.1 %), `500000 <= year < 501000` (0.1 %), and a top-10
search filtered by `tag == "x"` — the latency (p50 / p90 over `--runs`, consistency Eventually so
the filter's cost is what is measured) is taken with the column scan, then again after INVERTED on
`tag` and STL_SORT on `year` (then BITMAP on `tag`) are built and loaded; the answers are
checked to be the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, MilvusClient, connections
from standalone_proc import Standalone

NAME = "bench_scalar_index"
FILTERS = {
    "query tag == x (0.1 %)": ("query", 'tag == "x"'),
    "query 500000 <= year < 501000 (0.1 %)": ("query", "500000 <= year < 501000"),
    "search top-10, filter tag == x": ("search", 'tag == "x"'),
}


def fill(alias: str, rows: int, batch: int = 50_000) -> None:
    fields = [
        FieldSchema("id", DataType.INT64, is_primary=True),
        FieldSchema("tag", DataType.VARCHAR, max_length=8),
        FieldSchema("year", DataType.INT64),
        FieldSchema("vec", DataType.FLOAT_VECTOR, dim=4),
    ]
    coll = Collection(NAME, CollectionSchema(fields), using=alias)
    rng = np.random.default_rng(19530)
    names = np.array([f"t{i:03d}" for i in range(1000)])
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        ids = np.arange(start, start + n)
        tags = names[rng.integers(0, 1000, n)]
        tags[ids % 1000 == 7] = "x"
        coll.insert([ids.tolist(), tags.tolist(), rng.integers(0, 1_000_000, n).tolist(), rng.random((n, 4))])
    coll.flush()


def timed(client: MilvusClient, kind: str, expr: str, runs: int) -> tuple[list[float], list[int]]:
    seconds, answer = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        if kind == "query":
            got = client.query(NAME, filter=expr, output_fields=["id"], consistency_level="Eventually")
            answer = sorted(r["id"] for r in got)
        else:
            got = client.search(NAME, [[0.5] * 4], limit=10, filter=expr, consistency_level="Eventually")
            answer = sorted(h["id"] for h in got[0])
        seconds.append(time.perf_counter() - t0)
    return seconds, answer


def wait_built(client: MilvusClient, names: list[str]) -> None:
    while not all(client.describe_index(NAME, n)["state"] == "Finished" for n in names):
        time.sleep(0.2)


def measure(client: MilvusClient, runs: int) -> dict:
    out = {}
    for label, (kind, expr) in FILTERS.items():
        timed(client, kind, expr, 2)  # warm: first-use caches, JIT of nothing, page cache
        seconds, answer = timed(client, kind, expr, runs)
        out[label] = {
            "p50_ms": statistics.median(seconds) * 1e3,
            "p90_ms": float(np.percentile(seconds, 90)) * 1e3,
            "answer": answer,
        }
    return out


def filter_only(rows: int, runs: int) -> dict:
    """The filter alone, in this process: kmilvus.parser.evaluate over one 1M-row segment's Arrow
    table, scanning the column vs asking each index (what the QueryNode does per segment)."""
    import pyarrow as pa
    from pymilvus.grpc_gen import schema_pb2

    from kmilvus.index import scalar_index
    from kmilvus.parser import evaluate, parse

    dt = schema_pb2.DataType
    schema = schema_pb2.CollectionSchema(name=NAME)
    schema.fields.add(fieldID=100, name="id", data_type=dt.Int64, is_primary_key=True)
    schema.fields.add(fieldID=101, name="tag", data_type=dt.VarChar)
    schema.fields.add(fieldID=102, name="year", data_type=dt.Int64)
    rng = np.random.default_rng(19530)
    ids = np.arange(rows)
    tags = np.array([f"t{i:03d}" for i in range(1000)])[rng.integers(0, 1000, rows)]
    tags[ids % 1000 == 7] = "x"
    table = pa.table({"100": ids, "101": pa.array(tags.tolist()), "102": rng.integers(0, 1_000_000, rows)})
    exprs = {
        "tag == x (0.1 %)": ('tag == "x"', 101),
        "500000 <= year < 501000 (0.1 %)": ("500000 <= year < 501000", 102),
    }
    kinds = {101: ["INVERTED", "BITMAP", "Trie"], 102: ["STL_SORT", "INVERTED"]}
    out: dict = {}
    for label, (expr, fid) in exprs.items():
        plan = parse(expr, schema)
        want = evaluate(plan, table)
        cases = {"column scan": None}
        for kind in kinds[fid]:
            cases[kind] = {fid: scalar_index.create(table.column(str(fid)), {"index_type": kind})}
        out[label] = {}
        for name, indexes in cases.items():
            seconds = []
            for _ in range(runs):
                t0 = time.perf_counter()
                got = evaluate(plan, table, indexes=indexes)
                seconds.append(time.perf_counter() - t0)
            assert got.equals(want), (label, name)
            out[label][name] = statistics.median(seconds) * 1e3
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--uri", default=None, help="attach to a running server")
    ap.add_argument("--json", default=None, help="also write the raw result here")
    args = ap.parse_args(argv)
    server = None if args.uri else Standalone().start()
    uri = args.uri or server.uri
    try:
        connections.connect("bench", uri=uri)
        client = MilvusClient(uri=uri)
        if client.has_collection(NAME):
            client.drop_collection(NAME)
        t0 = time.perf_counter()
        fill("bench", args.rows)
        print(f"inserted and flushed {args.rows} rows in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        ip = client.prepare_index_params()
        ip.add_index("vec", index_type="FLAT", metric_type="L2")
        client.create_index(NAME, ip)
        wait_built(client, ["vec"])
        client.load_collection(NAME)
        phases = {"column scan": measure(client, args.runs)}
        client.release_collection(NAME)
        ip = client.prepare_index_params()
        ip.add_index("tag", index_type="INVERTED")
        ip.add_index("year", index_type="STL_SORT")
        t0 = time.perf_counter()
        client.create_index(NAME, ip)
        wait_built(client, ["tag", "year"])
        build_s = time.perf_counter() - t0
        client.load_collection(NAME)
        phases["INVERTED (tag) + STL_SORT (year)"] = measure(client, args.runs)
        client.release_collection(NAME)
        client.drop_index(NAME, "tag")
        ip = client.prepare_index_params()
        ip.add_index("tag", index_type="BITMAP")
        client.create_index(NAME, ip)
        wait_built(client, ["tag"])
        client.load_collection(NAME)
        phases["BITMAP (tag) + STL_SORT (year)"] = measure(client, args.runs)
        client.drop_collection(NAME)
    finally:
        if server:
            server.stop()
    alone = filter_only(args.rows, args.runs)
    scan = phases["column scan"]
    for label in FILTERS:
        for name, phase in phases.items():
            if phase[label]["answer"] != scan[label]["answer"]:
                raise SystemExit(f"{name}: {label} answered other rows than the scan")
    print(f"\n{args.rows} rows, {args.runs} runs per filter; INVERTED + STL_SORT built in {build_s:.1f} s\n")
    print("| filter | " + " | ".join(f"{n} p50 / p90 ms" for n in phases) + " | rows |")
    print("|---|" + "---|" * (len(phases) + 1))
    for label in FILTERS:
        cells = [f"{p[label]['p50_ms']:.1f} / {p[label]['p90_ms']:.1f}" for p in phases.values()]
        print(f"| {label} | " + " | ".join(cells) + f" | {len(scan[label]['answer'])} |")
    print(f"\nThe filter alone over one {args.rows}-row segment (kmilvus.parser.evaluate, p50 ms):\n")
    print("| filter | lookup | p50 ms |\n|---|---|---|")
    for label, cases in alone.items():
        for name, ms in cases.items():
            print(f"| {label} | {name} | {ms:.2f} |")
    if args.json:
        for p in phases.values():
            for v in p.values():
                v["rows"] = len(v.pop("answer"))
        with open(args.json, "w") as f:
            json.dump(
                {
                    "rows": args.rows,
                    "runs": args.runs,
                    "index_build_s": build_s,
                    "phases": phases,
                    "filter_only_ms": alone,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
