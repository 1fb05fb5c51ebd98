"""DropPartition: RPC latency, and the time until nothing of the partition is left — its binlog
files and its segment keys in etcd — while the collection's other partition keeps its data.

    .venv/bin/python bench/bench_drop_partition.py --partitions 10 --rows 50000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np
from bench_drop import schema
from pymilvus import MilvusClient
from standalone_proc import Standalone, median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kmilvus.meta import EtcdKV


async def segment_keys(etcd: str, cluster: str, coll_id: int, part_id: int) -> int:
    kv = await EtcdKV.connect([etcd], f"{cluster}/meta")
    try:
        return len(await kv.get_prefix(f"datacoord-meta/s/{coll_id}/{part_id}/", keys_only=True))
    finally:
        await kv.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--rows", type=int, default=50_000)
    args = ap.parse_args()
    s = Standalone("--cluster", "benchdroppart").start()
    try:
        etcd, _ = s.endpoints()
        c = MilvusClient(uri=s.uri)
        vecs = np.random.rand(10_000, 128).astype(np.float32)
        c.create_collection("docs", schema=schema())
        c.insert("docs", [{"id": 10**9 + j, "vec": vecs[j], "tag": "kept"} for j in range(1000)])
        c.flush("docs")  # the _default partition's binlogs exist before any other partition's
        cid = c.describe_collection("docs")["collection_id"]
        coll_dir = s.data_dir / "storage" / "insert_log" / str(cid)
        rpc, gone = [], []
        for i in range(args.partitions):
            name = f"p{i}"
            before = {d.name for d in coll_dir.iterdir()}
            c.create_partition("docs", name)
            for off in range(0, args.rows, 10_000):
                rows = [{"id": off + j, "vec": vecs[j], "tag": "t"} for j in range(10_000)]
                c.insert("docs", rows, partition_name=name)
            c.flush("docs")
            (part_dir,) = [d for d in coll_dir.iterdir() if d.name not in before]
            t0 = time.perf_counter()
            c.drop_partition("docs", name)
            rpc.append(time.perf_counter() - t0)
            while (part_dir.exists() and any(part_dir.iterdir())) or asyncio.run(
                segment_keys(etcd, "benchdroppart", cid, int(part_dir.name))
            ):
                time.sleep(0.01)
            gone.append(time.perf_counter() - t0)
        assert c.get_collection_stats("docs")["row_count"] == 1000
        print(
            f"DropPartition RPC: median {median(rpc) * 1000:.1f} ms (min {min(rpc) * 1000:.1f}, "
            f"max {max(rpc) * 1000:.1f}) over {args.partitions} partitions of {args.rows:,} flushed rows"
        )
        print(f"until its files and segment keys are gone: median {median(gone):.2f} s (max {max(gone):.2f})")
    finally:
        s.stop()


if __name__ == "__main__":
    main()
