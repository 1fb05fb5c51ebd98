"""Read latency by consistency level, on a busy and on an idle collection (kmilvus alone).

    .venv/bin/python bench/bench_consistency.py                # 50 busy, 3 idle reads per level
    .venv/bin/python bench/bench_consistency.py --reads 200 --idle-wait 12

Starts `kmilvus standalone` (temp data dir, free port), creates a loaded collection of 2 shards
with 1,000 rows, then times `query(count(*))` through pymilvus for each consistency level:
  busy  each read right after a 10-row insert into the same collection (its channels active)
  idle  after `--idle-wait` s without writes (its channels ticked only every
        KMILVUS_TIME_TICK_IDLE_INTERVAL; a read that has to wait asks for the tick)
Prints median / p99 per cell and writes bench/results/<name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from pymilvus import DataType, MilvusClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from standalone_proc import Standalone

LEVELS = ("Strong", "Bounded", "Session", "Eventually")
DIM = 8


def rows(start: int, n: int) -> list[dict]:
    vecs = np.random.default_rng(start).random((n, DIM), dtype=np.float32)
    return [{"id": start + i, "vec": vecs[i]} for i in range(n)]


def timed_read(client: MilvusClient, level: str) -> float:
    t0 = time.perf_counter()
    client.query("c", filter="id >= 0", output_fields=["count(*)"], consistency_level=level)
    return (time.perf_counter() - t0) * 1000


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", type=int, default=50)
    ap.add_argument("--idle-wait", type=float, default=12.0)
    ap.add_argument("--idle-reads", type=int, default=3, help="reads per level on the idle collection")
    ap.add_argument("--name", default="consistency")
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    server = Standalone().start()
    results: dict[str, dict[str, dict[str, float]]] = {"busy": {}, "idle": {}}
    try:
        client = MilvusClient(uri=server.uri)
        schema = MilvusClient.create_schema()
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
        index = client.prepare_index_params()
        index.add_index("vec", index_type="FLAT", metric_type="L2")
        client.create_collection("c", schema=schema, num_shards=2)
        client.create_index("c", index)
        client.insert("c", rows(0, 1000))
        client.load_collection("c")
        next_id = 1000
        for level in LEVELS:
            lat = []
            for _ in range(args.reads):
                client.insert("c", rows(next_id, 10))
                next_id += 10
                lat.append(timed_read(client, level))
            results["busy"][level] = {"p50_ms": float(np.median(lat)), "p99_ms": float(np.percentile(lat, 99))}
        for level in LEVELS:
            lat = []
            for _ in range(args.idle_reads):  # each costs --idle-wait seconds
                time.sleep(args.idle_wait)
                lat.append(timed_read(client, level))
            results["idle"][level] = {"p50_ms": float(np.median(lat)), "p99_ms": float(np.percentile(lat, 99))}
        client.close()
    finally:
        server.stop()
    print(f"{'level':<12}{'busy p50':>10}{'busy p99':>10}{'idle p50':>10}{'idle p99':>10}   (ms)")
    for level in LEVELS:
        b, i = results["busy"][level], results["idle"][level]
        print(f"{level:<12}{b['p50_ms']:>10.1f}{b['p99_ms']:>10.1f}{i['p50_ms']:>10.1f}{i['p99_ms']:>10.1f}")
    out = Path(args.out_dir) / f"{args.name}.json"
    doc = {"command": " ".join(["bench/bench_consistency.py", *(argv or sys.argv[1:])]), "load": os.getloadavg()}
    out.write_text(json.dumps({**doc, "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
