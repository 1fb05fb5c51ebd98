"""Read-path benchmark of kmilvus alone: the issue's reference workload, through pymilvus.

    .venv/bin/python bench/bench_search.py                  # 20k flushed + 1k growing × 128
    .venv/bin/python bench/bench_search.py --flushed 100000 --searches 500

Starts `kmilvus standalone` (temp data dir, free port) unless `--uri` is given and runs
bench/readpath.py's workload (the one `./dev bench-vs-milvus --read` runs against both systems):
HNSW M=16 efConstruction=128 (L2), create_index + load, then growing rows; single-vector top-10
search latency (ef=256, Eventually — as the reference), QPS with 1 and 8 client threads,
recall@10 against exact numpy brute force over every row, query by expression and count(*)
latency, RSS once loaded. Prints a table beside the issue's targets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import readpath
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
    ap.add_argument("--json", default=None, help="also write the raw result here")
    args = ap.parse_args(argv)

    server = None if args.uri else Standalone().start()
    uri = args.uri or server.uri
    host, port = re.match(r"^(?:\w+://)?([^:/]+):(\d+)", uri).groups()
    try:
        r = readpath.run(
            host,
            int(port),
            flushed=args.flushed,
            growing=args.growing,
            dim=args.dim,
            searches=args.searches,
            qps_seconds=args.qps_seconds,
            server_pid=server.proc.pid if server else None,
            log=lambda m: print(m, file=sys.stderr, flush=True),
        )
    finally:
        if server:
            server.stop()
    load_s, p50, recall = r["index_load_s"], r["search_p50_s"] * 1e3, r["recall"]
    rows = [
        ("create_index + load", f"{load_s:.2f} s", f"≤ {TARGETS['load_s']} s", load_s <= TARGETS["load_s"]),
        ("  of which index build (until indexed_rows)", f"{r['index_built_s']:.2f} s", "", None),
        ("search p50 (nq=1, top-10, ef=256)", f"{p50:.1f} ms", f"≤ {TARGETS['p50_ms']} ms", p50 <= TARGETS["p50_ms"]),
        ("search p99", f"{r['search_p99_s'] * 1e3:.1f} ms", "", None),
        ("server CPU per search", f"{r['server_cpu_per_search_s'] * 1e3:.2f} ms" if server else "-", "", None),
        ("recall@10 vs numpy", f"{recall:.3f}", f"≥ {TARGETS['recall']}", recall >= TARGETS["recall"]),
        ("QPS, 1 client", f"{r['qps_1']:.0f}", "", None),
        ("QPS, 8 clients", f"{r['qps_8']:.0f}", "", None),
        ("query by 3 ids", f"{r['query_s'] * 1e3:.1f} ms", "", None),
        ("count(*)", f"{r['count_s'] * 1e3:.1f} ms", "", None),
        (
            "RSS once loaded (all processes)",
            f"{r['rss_loaded'] / 2**20:.0f} MiB" if "rss_loaded" in r else "-",
            "",
            None,
        ),
    ]
    print(
        f"\n{args.flushed} flushed + {args.growing} growing × {args.dim}, HNSW M=16 efConstruction=128, ef=256; "
        f"load average {r['loadavg_start'][0]:.2f} at the start, {r['loadavg_end'][0]:.2f} at the end\n"
    )
    print("| measure | kmilvus | target | met |\n|---|---|---|---|")
    for name, val, target, ok in rows:
        print(f"| {name} | {val} | {target} | {'' if ok is None else ('yes' if ok else 'NO')} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
