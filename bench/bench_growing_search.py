"""Searching rows that are still growing: each search's latency while a collection is being filled
(kmilvus vs Milvus 2.3.5, one after the other, same client).

    .venv/bin/python bench/bench_growing_search.py                  # both systems, 200k rows
    .venv/bin/python bench/bench_growing_search.py --rows 100000 --systems kmilvus

A loaded collection (`id INT64` pk, `vec FLOAT_VECTOR(128)`, HNSW index, one shard) receives
10,000-row inserts up to `--rows` — fewer than a segment seals at (0.23 × 512 MB in both), so
every row stays in the growing segment, searched exactly. After each insert the client waits
`--settle` seconds (the QueryNode consumes the batch meanwhile), then times `--searches`
searches (nq=1, top-10, consistency Eventually): the first one after the batch, which in kmilvus
rebuilds the growing segment's searchable data, and the later ones, which do not. Both metrics
that differ in their exact path: L2 and COSINE, a collection each. A last Strong count(*) checks
every row was visible.

Each system runs in its own process with its own venv (`bench/.venv-milvus` for Milvus, as
vs_milvus.py) and the SAME workload code: only pymilvus' ORM API that 2.3.7 and 3.0 share.
Output: bench/results/<name>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import workload as w

DIM = 128
BATCH = 10_000
VENVS = {"kmilvus": ROOT / ".venv" / "bin" / "python", "milvus": BENCH / ".venv-milvus" / "bin" / "python"}
SYSTEMS = {"kmilvus": "kmilvus", "milvus": "Milvus 2.3.5"}


def run_system(args) -> dict:
    """The workload against one freshly started server (runs in that system's venv)."""
    import numpy as np
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections

    tmp = Path(tempfile.mkdtemp(prefix=f"growing-{args.system}-"))
    server = w.start_server(args.system, tmp)
    out: dict = {"system": args.system, "version": server.version, "metrics": {}}
    try:
        connections.connect("g", host=server.host, port=str(server.port))
        rng = np.random.default_rng(0)
        for metric in ("L2", "COSINE"):
            schema = CollectionSchema(
                [
                    FieldSchema("id", DataType.INT64, is_primary=True),
                    FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM),
                ]
            )
            coll = Collection(f"growing_{metric.lower()}", schema, using="g", shards_num=1)
            coll.create_index(
                "vec", {"index_type": "HNSW", "metric_type": metric, "params": {"M": 16, "efConstruction": 128}}
            )
            coll.load()
            queries = rng.random((50, DIM), dtype=np.float32).tolist()
            params = {"metric_type": metric, "params": {"ef": 64}}
            points = []
            for start in range(0, args.rows, BATCH):
                coll.insert([list(range(start, start + BATCH)), rng.random((BATCH, DIM), dtype=np.float32)])
                time.sleep(args.settle)
                lat = []
                for i in range(args.searches):
                    q = queries[(start // BATCH + i) % len(queries)]
                    t0 = time.perf_counter()
                    coll.search([q], "vec", params, limit=10, consistency_level="Eventually")
                    lat.append((time.perf_counter() - t0) * 1e3)
                points.append({"rows": start + BATCH, "first_ms": lat[0], "later_ms": statistics.median(lat[1:])})
                later = points[-1]["later_ms"]
                w.log(f"{args.system} {metric}: {start + BATCH:,} rows, first {lat[0]:.1f} ms, later {later:.1f} ms")
            seen = coll.query("", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]
            if seen != args.rows:
                raise SystemExit(f"{args.system} {metric}: a Strong count saw {seen} of {args.rows} rows")
            out["metrics"][metric] = points
            coll.release()
            coll.drop()
    finally:
        server.stop()
    return out


def _table(results: list[dict], rows: int) -> list[str]:
    marks = sorted(
        {
            p["rows"]
            for r in results
            for pts in r["metrics"].values()
            for p in pts
            if p["rows"] % 50_000 == 0 or p["rows"] == rows
        }
    )
    lines = []
    for metric in ("L2", "COSINE"):
        lines += [
            f"### {metric}",
            "",
            "| growing rows | "
            + " | ".join(f"{SYSTEMS[r['system']]}: first / later searches, ms" for r in results)
            + " |",
            "|---|" + "---|" * len(results),
        ]
        for m in marks:
            cells = []
            for r in results:
                p = next(p for p in r["metrics"][metric] if p["rows"] == m)
                cells.append(f"{p['first_ms']:.1f} / {p['later_ms']:.1f}")
            lines.append(f"| {m:,} | " + " | ".join(cells) + " |")
        medians = []
        for r in results:
            pts = r["metrics"][metric]
            first, later = (statistics.median(p[k] for p in pts) for k in ("first_ms", "later_ms"))
            medians.append(f"{first:.1f} / {later:.1f}")
        lines += ["| median over every batch | " + " | ".join(medians) + " |", ""]
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--searches", type=int, default=5, help="timed searches after each insert")
    ap.add_argument("--settle", type=float, default=0.3, help="seconds between an insert and the first search")
    ap.add_argument("--systems", default="kmilvus,milvus")
    ap.add_argument("--system", help="internal: run one system here and print its JSON")
    ap.add_argument("--name", default="growing_search")
    ap.add_argument("--out-dir", default=str(BENCH / "results"))
    args = ap.parse_args(argv)
    if args.system:
        print("RESULT " + json.dumps(run_system(args)), flush=True)
        return
    load0 = os.getloadavg()
    results = []
    for system in args.systems.split(","):
        cmd = [str(VENVS[system]), __file__, "--system", system, "--rows", str(args.rows)]
        cmd += ["--searches", str(args.searches), "--settle", str(args.settle)]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT ") :]))
    when = time.strftime("%Y-%m-%dT%H:%M:%S")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.name}.json").write_text(
        json.dumps({"when": when, "args": vars(args), "results": results}, indent=1)
    )
    md = [
        f"# Searching growing rows ({when})",
        "",
        f"Command: `.venv/bin/python bench/bench_growing_search.py --rows {args.rows} --systems {args.systems}`",
        "",
        f"Load average before → after: {load0[0]:.2f} → {os.getloadavg()[0]:.2f}. After each 10,000-row insert, "
        f"{args.settle:g} s, then {args.searches} searches (nq=1, top-10, Eventually): the first, and the median "
        "of the others.",
        "",
        *_table(results, args.rows),
    ]
    (out_dir / f"{args.name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
