"""Load: many clients, many collections, every write and read path, memory watched.

    .venv/bin/python bench/load.py [--minutes 5] [--clients 8] [--collections 50] [--dim 64] [--load N]

Starts a fresh `kmilvus standalone` and runs `--clients` client processes (`ops_client`, the
"load" mix: mostly inserts, and upserts, deletes by ID and by expression, bulk imports, flushes,
compactions, Strong reads, partitions and collections dropped and re-created). Client c owns the
collections i with i % clients == c and journals every operation. A sampler records the RSS of
every server process (kmilvus, etcd, nats-server) every second; `--load N` keeps N more processes
spinning beside it.

At the end: every collection flushed and checked as chaos checks it (`ops_report`): the live keys
and values the journals imply against the committed binlogs minus delta logs and against a Strong
query, nothing left by drops. Prints the operations, the invariants, peak and final RSS per
process, and writes a PNG of RSS and rows/s over time (`--png`, default bench/results/load.png)
and the raw series as JSON beside it. Exit 1 when an invariant fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpuload import busy_loops
from ops_client import ClientSpec, client_main, parse_client_arguments
from ops_model import ACK, read_journal
from ops_report import Outcome, Where, check_lineages, op_counts, print_report, wait_for_leftovers
from standalone_proc import Standalone

RESULTS = Path(__file__).resolve().parent / "results"


def rows_per_second(paths: list[Path], t0: float, seconds: int) -> list[float]:
    """Rows acknowledged (inserts and imports) in each second of the run, from the journals."""
    out = np.zeros(max(1, seconds), dtype=np.float64)
    for path in paths:
        for b, e in read_journal(path):
            if b["op"] in ("insert", "import") and e["end"] == ACK:
                i = int(e["t"] - t0)
                if 0 <= i < len(out):
                    out[i] += b["count"]
    return out.tolist()


def run(args, srv: Standalone) -> int:
    samples: list[dict] = []
    stop_sampler = threading.Event()
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    root = psutil.Process(srv.proc.pid)

    def sample() -> None:
        t0 = time.monotonic()
        while not stop_sampler.is_set():
            rss: dict[str, float] = {}
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    rss[p.name()] = rss.get(p.name(), 0) + p.memory_info().rss / 2**20
            samples.append({"t": time.monotonic() - t0, "rss": rss})
            stop_sampler.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    (srv.data_dir / "imports").mkdir(exist_ok=True)
    names = [f"load{i}" for i in range(args.collections)]
    specs = [
        ClientSpec(
            index=c,
            uri=srv.uri,
            lineages=[n for i, n in enumerate(names) if i % args.clients == c],
            seed=args.seed,
            journal=str(srv.data_dir / f"client-{c}.jsonl"),
            files_dir=str(srv.data_dir / "imports"),
            mix="load",
            dim=args.dim,
            only=tuple(args.ops),
        )
        for c in range(args.clients)
    ]
    procs = [ctx.Process(target=client_main, args=(s, stop)) for s in specs if s.lineages]
    t0_wall, t0 = time.time(), time.monotonic()
    for p in procs:
        p.start()
    time.sleep(args.minutes * 60)
    stop.set()
    for p in procs:
        p.join(300)
    hung = [p.name for p in procs if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    elapsed = time.monotonic() - t0
    stop_sampler.set()
    sampler.join(5)
    paths = [Path(s.journal) for s in specs if s.lineages]
    outcome = Outcome(minutes=elapsed / 60, hung=hung, busy_loops=args.load)
    op_counts(paths, outcome)
    etcd, nats = srv.endpoints()
    where = Where(srv.uri, etcd, "kmilvus", (srv.data_dir / "storage").as_uri(), nats)
    check_lineages(where, paths, outcome)
    outcome.leftovers = wait_for_leftovers(where, outcome, within=90)
    print(
        f"{args.clients} client processes, {args.collections} collections (2 shards, dim {args.dim}), "
        f"data directory {srv.data_dir}"
    )
    print_report(outcome)
    rate = rows_per_second(paths, t0_wall, int(elapsed) + 1)
    print(f"| rows acknowledged (inserts and imports) | {sum(rate):,.0f} ({sum(rate) / elapsed:,.0f} rows/s) |")
    print(f"| rows/s over time (1 s) | median {np.median(rate):,.0f}, min {min(rate):,.0f}, max {max(rate):,.0f} |")
    peak: dict[str, float] = {}
    for s in samples:
        for k, v in s["rss"].items():
            peak[k] = max(peak.get(k, 0), v)
    final = samples[-1]["rss"] if samples else {}
    for k in sorted(peak):
        print(f"| RSS {k}: peak / final | {peak[k]:,.0f} / {final.get(k, 0):,.0f} MiB |")
    png = Path(args.png)
    png.parent.mkdir(parents=True, exist_ok=True)
    png.with_suffix(".json").write_text(json.dumps({"samples": samples, "rows_per_second": rate, "ops": outcome.ops}))
    _plot(samples, rate, png)
    return 0 if outcome.ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--collections", type=int, default=50)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--png", default=str(RESULTS / "load.png"))
    args = parse_client_arguments(ap)
    with busy_loops(args.load):
        srv = Standalone().start()
        try:
            return run(args, srv)
        finally:
            srv.stop()


def _plot(samples: list[dict], rate: list[float], png: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"(matplotlib not installed: no {png}; the series are in {png.with_suffix('.json')})")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for name in sorted({k for s in samples for k in s["rss"]}):
        ax1.plot(t, [s["rss"].get(name, 0) for s in samples], label=name)
    ax1.set_ylabel("RSS (MiB)")
    ax1.legend()
    ax1.set_title("kmilvus standalone under load: memory of every process")
    ax2.plot(range(len(rate)), rate)
    ax2.set_ylabel("rows acknowledged / s")
    ax2.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"wrote {png}")


if __name__ == "__main__":
    sys.exit(main())
