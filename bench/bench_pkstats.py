"""DataNode primary-key statistics: cost of `PkStats.add` as one segment grows.

    .venv/bin/python bench/bench_pkstats.py [--messages 64] [--rows 10000]

Adds `--messages` insert messages of `--rows` sequential int64 keys to one segment's PkStats (what
the DataNode does per insert message, on the event loop it shares with the Proxy in a
standalone) and prints the total time and the longest single `add` (how long the loop is held).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from kmilvus.datanode.pkstats import PkStats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=64)
    ap.add_argument("--rows", type=int, default=10_000)
    args = ap.parse_args()
    st, longest, t0 = PkStats(), 0.0, time.perf_counter()
    for b in range(args.messages):
        keys = np.arange(b * args.rows, (b + 1) * args.rows, dtype=np.int64) + 10**12
        t = time.perf_counter()
        st.add(keys)
        longest = max(longest, time.perf_counter() - t)
    total = time.perf_counter() - t0
    print(
        f"{args.messages} messages × {args.rows:,} keys: total {total:.2f} s, longest add {longest * 1e3:.0f} ms "
        f"(numpy {np.__version__}, load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
