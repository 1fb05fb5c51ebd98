"""Start-up time and idle memory of `kmilvus standalone`.

.venv/bin/python bench/bench_startup.py --runs 5
"""

from __future__ import annotations

import argparse
import time

from standalone_proc import Standalone, median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before reading memory")
    args = ap.parse_args()
    ready, idle = [], []
    for _ in range(args.runs):
        s = Standalone().start()
        try:
            ready.append(s.ready_seconds)
            time.sleep(args.idle)
            idle.append(s.rss_mib())
        finally:
            s.stop()
    total = [sum(m.values()) for m in idle]
    print(
        f"start-up until 'ready' (etcd + nats-server + 5 components): median {median(ready):.2f} s "
        f"(min {min(ready):.2f}, max {max(ready):.2f}) over {args.runs} runs"
    )
    print(
        f"idle RSS after {args.idle:.0f} s: median {median(total):.0f} MiB total; by process: "
        + ", ".join(f"{k} {v:.0f}" for k, v in idle[0].items())
    )


if __name__ == "__main__":
    main()
