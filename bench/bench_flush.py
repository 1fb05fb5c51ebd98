"""Flush-path benchmark of kmilvus, driven through pymilvus like any user would.

    .venv/bin/python bench/bench_flush.py                        # 200k and 1M rows, once
    .venv/bin/python bench/bench_flush.py --rows 20000 --repeat 3 # quick
    .venv/bin/python bench/bench_flush.py --uri http://127.0.0.1:19530 --storage-dir DATA/storage

Starts `kmilvus standalone` (temp data dir, free port; fresh for every repeat) unless --uri is
given, then runs the workload of bench/workload.py: collection `id INT64 pk, vec
FLOAT_VECTOR(128), tag VARCHAR(64)`, sequential inserts of 10,000 rows, Flush RPC, time until
GetFlushState is true (10 ms polling), small flushes (1,000 rows, median of 10), num_entities
latency, drop + time until the collection's binlogs are gone, and the peak of the summed RSS of
kmilvus, etcd and nats-server (sampled every 50 ms). Prints a table beside the targets and
Milvus 2.3.5's reference numbers (docs/benchmarks/method.md), and writes bench/results/bench_flush.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workload as w

GIB = 2**30
# key → (target text, predicate or None, Milvus 2.3.5 reference figure: docs/benchmarks/method.md)
TARGETS = {
    "insert_rps_200000": ("≥ 120,000", lambda v: v >= 120_000, "98,600"),
    "insert_rps_1000000": ("≥ 120,000", lambda v: v >= 120_000, "114,700"),
    "flush_rpc_200000": ("", None, "9 ms"),
    "flushed_200000": ("", None, "2.72 s"),
    "small_flush": ("≤ 0.3 s", lambda v: v <= 0.3, "2.58 s"),
    "drop_rpc": ("", None, "1.7 ms"),
    "files_gone": ("", None, "hours (GC)"),
    "peak_rss_1000000": ("≤ 1,024 MiB", lambda v: v <= GIB, "1,075 MiB"),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="200000,1000000", help="comma-separated insert run sizes")
    ap.add_argument("--repeat", type=int, default=1, help="runs (a fresh server each); medians are printed")
    ap.add_argument("--uri", default=None, help="attach to a running server instead of starting one")
    ap.add_argument("--storage-dir", default=None, help="with --uri: its storage root (to watch drops)")
    ap.add_argument("--small-count", type=int, default=10, help="small flushes per run")
    ap.add_argument("--files-cap", type=float, default=30.0, help="max seconds to wait for dropped files")
    ap.add_argument("--no-drop", action="store_true", help="skip the drop measurement")
    ap.add_argument("--kmilvus-bin", default=None, help="kmilvus executable (default: next to this python)")
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--name", default="bench_flush", help="output file stem")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = [int(x) for x in args.rows.split(",") if x.strip()]
    runs: list[dict] = []
    cache: dict = {}
    for r in range(args.repeat):
        tmp = Path(tempfile.mkdtemp(prefix="bench-flush-"))
        server = None
        try:
            server = w.start_server(
                "kmilvus", tmp, uri=args.uri, storage_dir=args.storage_dir, kmilvus_bin=args.kmilvus_bin
            )
            res = w.run_suite(
                server,
                rows=rows,
                small_count=args.small_count,
                drop=not args.no_drop,
                files_cap=args.files_cap,
                data_cache=cache,
            )
            res["startup_s"] = getattr(server, "startup_s", None)
            runs.append(res)
        finally:
            if server:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        w.log(f"run {r + 1}/{args.repeat} done")
    cache.clear()

    ms = [w.metrics(res) for res in runs]
    header = [
        "measure",
        f"kmilvus (median of {len(runs)}" + (" [min–max])" if len(runs) > 1 else ")"),
        "target",
        "pass",
        "Milvus 2.3.5 (reference)",
    ]
    body = []
    for row in w.table_rows(rows):
        vals = [m.get(row["key"]) for m in ms]
        if all(v is None for v in vals) and row["key"].startswith("bulk"):
            continue
        target, ok, milvus = TARGETS.get(row["key"], ("", None, ""))
        good = [v for v in vals if v is not None]
        verdict = ""
        if ok and good:
            verdict = "yes" if ok(sorted(good)[len(good) // 2]) else "NO"
        elif ok:
            verdict = "n/a"
        label = row["label"]
        if row["key"] == "files_gone" and any(v is None for v in vals):
            label += f" (cap {args.files_cap:.0f} s)"
        cell = w.fmt_stat(vals, row["unit"])
        if row["key"] == "files_gone" and good == [] and vals:
            cell = f"> {args.files_cap:.0f} s"
        body.append([label, cell, target, verdict, milvus])

    load = (
        ["/".join(f"{x:.1f}" for x in runs[0]["loadavg_start"]), "/".join(f"{x:.1f}" for x in runs[-1]["loadavg_end"])]
        if runs
        else []
    )
    mem_by_proc = runs[-1].get("memory", {}).get("per_process_peak_rss", {}) if runs else {}
    when = datetime.datetime.now().isoformat(timespec="seconds")
    notes = [
        (
            f"{runs[0]['server_version'] if runs else 'kmilvus ?'}, pymilvus {runs[0]['pymilvus'] if runs else '?'}, "
            f"{platform.node()}, {os.cpu_count()} CPUs, {when}; "
            f"load average (1/5/15 min) at start {load[0] if load else '?'}, at end {load[-1] if load else '?'}; "
            f"small flush = median of {args.small_count}"
        ),
        (
            "insert: ORM Collection.insert of column lists, 10,000 rows per call, one call at a time; "
            "rows/s = rows / wall time of the loop"
        ),
        "peak RSS per process (last run): " + ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in mem_by_proc.items()),
    ]
    text = w.text_table(header, body)
    print()
    print(text)
    for n in notes:
        print("  " + n)

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(
        json.dumps(
            {
                "when": when,
                "args": vars(args),
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "metrics": ms,
                "runs": runs,
            },
            indent=1,
            default=str,
        )
    )
    md = (
        [
            f"# kmilvus flush path — bench/bench_flush.py ({when})",
            "",
            f"Command: `.venv/bin/python bench/bench_flush.py {' '.join(sys.argv[1:])}`".rstrip(),
            "",
            w.markdown_table(header, body),
            "",
        ]
        + [f"- {n}" for n in notes]
        + [""]
    )
    (out / f"{args.name}.md").write_text("\n".join(md))
    print(f"\nwrote {out / (args.name + '.json')} and {out / (args.name + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
