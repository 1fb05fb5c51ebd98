"""Delete throughput through pymilvus: keys/s as the client sees it.

    .venv/bin/python bench/bench_delete.py                         # 200k rows, 100k keys deleted
    .venv/bin/python bench/bench_delete.py --rows 50000 --keys 20000 --repeat 3
    .venv/bin/python bench/bench_delete.py --uri http://127.0.0.1:19530

Starts `kmilvus standalone` (temp data dir, free port; fresh for every repeat) unless --uri is
given. Per run: the workload's collection (`id INT64 pk, vec FLOAT_VECTOR(128), tag VARCHAR(64)`,
one shard), `--rows` rows inserted and flushed (not timed); then `--keys` existing keys deleted
with `Collection.delete("id in [...]")`, `--batch` keys per request, one request at a time
(**delete keys/s**); single-key delete latency (median of 100); Flush until flushed (**deletes
durable**: the delta logs committed). Prints a table and writes bench/results/bench_delete.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workload as w


def run(server, rows: int, keys: int, batch: int) -> dict:
    client = w.Client(server.host, server.port)
    try:
        coll = client.create("bench_delete")
        data = w.Batches(rows)
        client.insert_all(coll, data)
        data.free()
        client.flush("bench_delete")
        keys = min(keys, rows)
        exprs = [f"id in {list(range(s, min(s + batch, keys)))}" for s in range(0, keys, batch)]
        t0 = time.perf_counter()
        for e in exprs:
            coll.delete(e)
        dt = time.perf_counter() - t0
        single = []
        for k in range(keys, min(rows, keys + 100)):
            t1 = time.perf_counter()
            coll.delete(f"id == {k}")
            single.append(time.perf_counter() - t1)
        _, durable = client.flush("bench_delete")
        res = {
            "rows": rows,
            "keys": keys,
            "batch": batch,
            "delete_s": dt,
            "delete_keys_per_s": keys / dt,
            "single_delete_ms_median": statistics.median(single) * 1e3 if single else None,
            "flush_after_deletes_s": durable,
        }
        w.log(
            f"{server.system}: {keys:,} keys in {dt:.2f} s = {keys / dt:,.0f} keys/s; single delete "
            f"{res['single_delete_ms_median']:.1f} ms; flushed after {durable:.2f} s"
        )
        return res
    finally:
        client.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000, help="keys per delete request")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--uri", default=None)
    ap.add_argument("--system", default="kmilvus", choices=["kmilvus", "milvus"])
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    runs = []
    for r in range(args.repeat):
        tmp = Path(tempfile.mkdtemp(prefix="bench-delete-"))
        server = None
        try:
            server = w.start_server(args.system, tmp, uri=args.uri)
            runs.append(run(server, args.rows, args.keys, args.batch))
        finally:
            if server:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        w.log(f"run {r + 1}/{args.repeat} done")
    med = {k: statistics.median(r[k] for r in runs) for k in ("delete_keys_per_s", "flush_after_deletes_s")}
    single = [r["single_delete_ms_median"] for r in runs if r["single_delete_ms_median"] is not None]
    print(f"\n{args.system}: delete {args.keys:,} keys in requests of {args.batch:,} (median of {len(runs)})")
    print(f"  delete keys/s                 {med['delete_keys_per_s']:,.0f}")
    print(f"  single-key delete (median)    {statistics.median(single):.1f} ms" if single else "")
    print(f"  flush after deletes, flushed  {med['flush_after_deletes_s']:.2f} s")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench_delete_{args.system}.json").write_text(
        json.dumps(
            {"date": datetime.datetime.now(datetime.UTC).isoformat(), "args": vars(args), "runs": runs}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
