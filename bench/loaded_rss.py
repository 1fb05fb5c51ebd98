"""Memory of a loaded collection alone: readpath.py's data (20k flushed + 1k growing × 128, HNSW
M=16 efConstruction=128) built once, then `kmilvus standalone` restarted on that data directory
and the collection loaded, `--repeat` times; prints the RSS of every process of the server tree.

    .venv/bin/python bench/loaded_rss.py --repeat 3
    KMILVUS_PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/loaded_rss.py   # other code

Why: readpath.py's "RSS once loaded" is taken in the process that has just built the index
(DataCoord builds in the standalone), so it also counts what the allocator kept from the build;
here the loading process has built nothing. KMILVUS_PYTHONPATH runs the server from another
checkout (PYTHONPATH comes before the editable install), for before/after comparisons.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import readpath
from standalone_proc import Standalone


def server(data_dir: Path) -> Standalone:
    other = os.environ.get("KMILVUS_PYTHONPATH")
    return Standalone(data_dir=data_dir, env={"PYTHONPATH": other} if other else None).start()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flushed", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data-dir", default=None, help="reuse this directory (built on first use)")
    args = ap.parse_args(argv)
    from pymilvus import Collection, connections

    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="kmilvus-rss-"))
    if not (data_dir / ".built").exists():
        srv = server(data_dir)
        try:
            readpath.run("127.0.0.1", srv.port, flushed=args.flushed, searches=10, qps_seconds=0.1, drop=False)
        finally:
            srv.stop()
        (data_dir / ".built").touch()
    for i in range(args.repeat):
        srv = server(data_dir)
        try:
            alias = f"rss{i}"
            connections.connect(alias=alias, host="127.0.0.1", port=str(srv.port), timeout=60)
            t0 = time.perf_counter()
            Collection(readpath.NAME, using=alias).load()
            load_s = time.perf_counter() - t0
            time.sleep(2.0)  # let the load's transient buffers go
            per = readpath.tree_rss(srv.proc.pid)
            connections.disconnect(alias)
        finally:
            srv.stop()
        print(
            json.dumps(
                {
                    "load_s": round(load_s, 2),
                    "rss_mib": {k: round(v / 2**20, 1) for k, v in per.items()},
                    "total_mib": round(sum(per.values()) / 2**20, 1),
                    "loadavg": [round(x, 1) for x in os.getloadavg()],
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
