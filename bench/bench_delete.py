"""Delete throughput through pymilvus: keys/s as the client sees it.

    .venv/bin/python bench/bench_delete.py                         # 300k rows; 1k- and 10k-key requests, expressions
    .venv/bin/python bench/bench_delete.py --rows 50000 --keys 20000 --batches 1000 --expr-keys 0 --repeat 3
    bench/.venv-milvus/bin/python bench/bench_delete.py --system milvus        # Milvus 2.3.5, same workload
    .venv/bin/python bench/bench_delete.py --uri http://127.0.0.1:19530

Starts `kmilvus standalone` (or Milvus 2.3.5 with `--system milvus`, from bench/.venv-milvus;
temp data dir, free port; fresh for every repeat) unless --uri is given. Per run: the workload's
collection (`id INT64 pk, vec FLOAT_VECTOR(128), tag VARCHAR(64)`, one shard), `--rows` rows
inserted and flushed (not timed); then, for each size in `--batches`, `--keys` existing keys
(disjoint ranges) deleted with `Collection.delete("id in [...]")`, that many keys per request,
one request at a time (**delete keys/s** per request size; the expression strings are built
before the timed loop); then the collection is indexed (FLAT) and loaded, and `--expr-keys`
keys deleted by expression, `id >= a and id < a + --expr-batch` per request (**expression
delete keys/s**: each request is a Strong query for the keys, then their delete, in both
systems); single-key delete latency (`id == k`, median of 100); Flush until flushed (**deletes
durable**: the delta logs committed). Prints a table and writes
bench/results/bench_delete_<system>.json.
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


def timed_deletes(coll, exprs: list[str]) -> float:
    t0 = time.perf_counter()
    for e in exprs:
        coll.delete(e)
    return time.perf_counter() - t0


def run(server, rows: int, keys: int, batches: list[int], expr_keys: int, expr_batch: int) -> dict:
    client = w.Client(server.host, server.port)
    try:
        coll = client.create("bench_delete")
        data = w.Batches(rows)
        client.insert_all(coll, data)
        data.free()
        client.flush("bench_delete")
        res: dict = {"rows": rows, "by_batch": {}}
        start = 0
        for batch in batches:
            n = min(keys, rows - start)
            exprs = [f"id in {list(range(s, min(s + batch, start + n)))}" for s in range(start, start + n, batch)]
            dt = timed_deletes(coll, exprs)
            res["by_batch"][str(batch)] = {"keys": n, "requests": len(exprs), "delete_s": dt, "keys_per_s": n / dt}
            w.log(f"{server.system}: {n:,} keys, {batch:,} per request, in {dt:.2f} s = {n / dt:,.0f} keys/s")
            start += n
        if expr_keys:
            coll.create_index("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
            coll.load()
            n = min(expr_keys, rows - start)
            bounds = [(s, min(s + expr_batch, start + n)) for s in range(start, start + n, expr_batch)]
            exprs = [f"id >= {lo} and id < {hi}" for lo, hi in bounds]
            dt = timed_deletes(coll, exprs)
            res["expr"] = {"keys": n, "batch": expr_batch, "requests": len(exprs), "delete_s": dt, "keys_per_s": n / dt}
            w.log(f"{server.system}: {n:,} keys by expression, {expr_batch:,} per request = {n / dt:,.0f} keys/s")
            start += n
        single = []
        for k in range(start, min(rows, start + 100)):
            t1 = time.perf_counter()
            coll.delete(f"id == {k}")
            single.append(time.perf_counter() - t1)
        _, durable = client.flush("bench_delete")
        res["single_delete_ms_median"] = statistics.median(single) * 1e3 if single else None
        res["flush_after_deletes_s"] = durable
        w.log(f"{server.system}: single delete {res['single_delete_ms_median']:.1f} ms; flushed after {durable:.2f} s")
        return res
    finally:
        client.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=100_000, help="keys deleted per request size")
    ap.add_argument("--batches", default="1000,10000", help="keys per `id in [...]` request, comma-separated")
    ap.add_argument("--expr-keys", type=int, default=50_000, help="keys deleted by expression (0: skip)")
    ap.add_argument("--expr-batch", type=int, default=1000, help="keys per expression delete")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--uri", default=None)
    ap.add_argument("--system", default="kmilvus", choices=["kmilvus", "milvus"])
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b]
    runs = []
    for r in range(args.repeat):
        tmp = Path(tempfile.mkdtemp(prefix="bench-delete-"))
        server = None
        try:
            server = w.start_server(args.system, tmp, uri=args.uri)
            runs.append(run(server, args.rows, args.keys, batches, args.expr_keys, args.expr_batch))
        finally:
            if server:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        w.log(f"run {r + 1}/{args.repeat} done")
    print(f"\n{args.system}: {args.rows:,} rows, median of {len(runs)} run(s)")
    for b in batches:
        kps = statistics.median(r["by_batch"][str(b)]["keys_per_s"] for r in runs)
        print(f"  delete keys/s, {b:>6,} keys per `id in [...]`   {kps:>10,.0f}")
    if args.expr_keys:
        kps = statistics.median(r["expr"]["keys_per_s"] for r in runs)
        print(f"  delete keys/s, {args.expr_batch:>6,} keys per `id >= a and id < b` {kps:>8,.0f}")
    single = [r["single_delete_ms_median"] for r in runs if r["single_delete_ms_median"] is not None]
    if single:
        print(f"  single-key delete (median)               {statistics.median(single):>10.1f} ms")
    flushed = statistics.median(r["flush_after_deletes_s"] for r in runs)
    print(f"  flush after deletes, flushed             {flushed:>10.2f} s")
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
