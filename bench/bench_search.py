"""Read-path benchmark: the issue's reference workload, through pymilvus.

    .venv/bin/python bench/bench_search.py                  # 20k flushed + 1k growing × 128
    .venv/bin/python bench/bench_search.py --flushed 100000 --searches 500

Starts `kmilvus standalone` (temp data dir, free port), creates `id INT64 pk, vec
FLOAT_VECTOR(dim)`, inserts the flushed rows (10,000 per request), flushes, creates an HNSW
index (M=16, efConstruction=128) and loads; then inserts the growing rows. Measures
create_index + load (until `indexed_rows` covers the flushed rows and the load reports 100 %),
single-vector top-10 search latency (p50/p99, ef=256, Eventually — as the reference), QPS with
1 and 8 concurrent clients, recall@10 against exact numpy brute force over every row, query by
expression and count(*) latency. Prints a table beside the issue's targets.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from standalone_proc import Standalone

TARGETS = {"load_s": 2.5, "p50_ms": 3.8, "recall": 0.916}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flushed", type=int, default=20_000)
    ap.add_argument("--growing", type=int, default=1_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--searches", type=int, default=300)
    ap.add_argument("--qps-seconds", type=float, default=5.0)
    ap.add_argument("--uri", default=None, help="attach to a running server")
    args = ap.parse_args(argv)
    from pymilvus import DataType, MilvusClient

    server = None if args.uri else Standalone().start()
    uri = args.uri or server.uri
    try:
        c = MilvusClient(uri=uri)
        rng = np.random.default_rng(42)
        n, dim = args.flushed + args.growing, args.dim
        data = rng.random((n, dim), dtype=np.float32)
        schema = MilvusClient.create_schema()
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=dim)
        c.create_collection("bench_search", schema=schema)
        for s in range(0, args.flushed, 10_000):
            e = min(args.flushed, s + 10_000)
            c.insert("bench_search", [{"id": i, "vec": data[i]} for i in range(s, e)])
        c.flush("bench_search")
        t0 = time.perf_counter()
        idx = c.prepare_index_params()
        idx.add_index("vec", index_type="HNSW", metric_type="L2", params={"M": 16, "efConstruction": 128})
        c.create_index("bench_search", idx)
        while c.describe_index("bench_search", "vec").get("indexed_rows", 0) < args.flushed:
            time.sleep(0.01)
        built_s = time.perf_counter() - t0
        c.load_collection("bench_search")
        load_s = time.perf_counter() - t0
        for s in range(args.flushed, n, 10_000):
            e = min(n, s + 10_000)
            c.insert("bench_search", [{"id": i, "vec": data[i]} for i in range(s, e)])
        # Wait until the growing rows are visible, then measure at Eventually (as the reference).
        while (
            c.query("bench_search", filter="", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]
            < n
        ):
            time.sleep(0.05)
        sp = {"metric_type": "L2", "params": {"ef": 256}}
        queries = rng.random((args.searches, dim), dtype=np.float32)
        lat, found = [], []
        for q in queries:
            t = time.perf_counter()
            hits = c.search("bench_search", data=[q], limit=10, search_params=sp, consistency_level="Eventually")[0]
            lat.append((time.perf_counter() - t) * 1000)
            found.append([h["id"] for h in hits])
        sq = np.einsum("ij,ij->i", data, data)
        recalls = []
        for q, got in zip(queries, found, strict=True):
            exact = np.argsort(sq - 2 * data @ q)[:10]
            recalls.append(len(set(exact.tolist()) & set(got)) / 10)

        def qps(clients: int) -> float:
            done = [0] * clients
            stop = time.perf_counter() + args.qps_seconds

            def run(k: int) -> None:
                cl = MilvusClient(uri=uri)
                while time.perf_counter() < stop:
                    cl.search(
                        "bench_search",
                        data=[queries[done[k] % len(queries)]],
                        limit=10,
                        search_params=sp,
                        consistency_level="Eventually",
                    )
                    done[k] += 1

            ts = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            return sum(done) / args.qps_seconds

        q1, q8 = qps(1), qps(8)
        t = time.perf_counter()
        for _ in range(20):
            c.query("bench_search", filter="id in [1, 500, 20500]", consistency_level="Eventually")
        query_ms = (time.perf_counter() - t) * 1000 / 20
        t = time.perf_counter()
        for _ in range(20):
            c.query("bench_search", filter="", output_fields=["count(*)"], consistency_level="Eventually")
        count_ms = (time.perf_counter() - t) * 1000 / 20
        rss = server.rss_mib() if server else {}
        p50 = statistics.median(lat)
        p99 = float(np.percentile(lat, 99))
        recall = float(np.mean(recalls))
        rows = [
            ("create_index + load", f"{load_s:.2f} s", f"≤ {TARGETS['load_s']} s", load_s <= TARGETS["load_s"]),
            ("  of which index build (until indexed_rows)", f"{built_s:.2f} s", "", None),
            (
                "search p50 (nq=1, top-10, ef=256)",
                f"{p50:.1f} ms",
                f"≤ {TARGETS['p50_ms']} ms",
                p50 <= TARGETS["p50_ms"],
            ),
            ("search p99", f"{p99:.1f} ms", "", None),
            ("recall@10 vs numpy", f"{recall:.3f}", f"≥ {TARGETS['recall']}", recall >= TARGETS["recall"]),
            ("QPS, 1 client", f"{q1:.0f}", "", None),
            ("QPS, 8 clients", f"{q8:.0f}", "", None),
            ("query by 3 ids", f"{query_ms:.1f} ms", "", None),
            ("count(*)", f"{count_ms:.1f} ms", "", None),
            ("RSS of kmilvus (all processes)", f"{sum(rss.values()):.0f} MiB" if rss else "-", "", None),
        ]
        print(f"\n{args.flushed} flushed + {args.growing} growing × {dim}, HNSW M=16 efConstruction=128, ef=256\n")
        print("| measure | kmilvus | target | met |\n|---|---|---|---|")
        for name, val, target, ok in rows:
            print(f"| {name} | {val} | {target} | {'' if ok is None else ('yes' if ok else 'NO')} |")
        c.drop_collection("bench_search")
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    main()
