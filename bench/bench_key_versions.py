"""QueryNode key versions: cost of keeping the shadows of older versions up to date as one
growing segment of a channel receives insert messages.

    .venv/bin/python bench/bench_key_versions.py [--messages 64] [--rows 10000] [--sealed 1000000]

A channel with `--sealed` rows in sealed segments gets `--messages` insert messages of `--rows`
sequential int64 keys (every 10th key an update of a sealed row); each message is followed by a
`KeyVersions.refresh` (what a read after an insert does, in its worker thread). Prints the first
refresh (indexing the sealed rows, as after a load), the total and the longest incremental refresh.
"""

from __future__ import annotations

import argparse
import os
import time
import types

import numpy as np
import pyarrow as pa

from kmilvus.querynode.versions import KeyVersions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=64)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--sealed", type=int, default=1_000_000)
    args = ap.parse_args()
    keys = np.arange(args.sealed, dtype=np.int64)
    ones = np.ones(len(keys), dtype=np.int64)
    sealed = {1: types.SimpleNamespace(num_rows=len(keys), keys_and_ts=lambda: (keys, ones))}
    versions, batches = KeyVersions(), []
    t = time.perf_counter()
    versions.refresh(sealed, {2: batches}, 100)
    first = time.perf_counter() - t
    longest, t0 = 0.0, time.perf_counter()
    for b in range(args.messages):
        new = np.arange(b * args.rows, (b + 1) * args.rows, dtype=np.int64) + args.sealed - args.rows // 10
        batches.append(pa.record_batch({"100": new, "1": np.full(len(new), 2 + b, dtype=np.int64)}))
        t = time.perf_counter()
        versions.refresh(sealed, {2: batches}, 100)
        longest = max(longest, time.perf_counter() - t)
    total = time.perf_counter() - t0
    print(
        f"{args.sealed:,} sealed rows: first refresh {first * 1e3:.0f} ms; "
        f"{args.messages} messages × {args.rows:,} keys: total {total:.2f} s, "
        f"longest refresh {longest * 1e3:.0f} ms, {len(versions.shadows):,} shadows "
        f"(numpy {np.__version__}, load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
