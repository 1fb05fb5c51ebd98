"""Load: many clients, many collections, flushes and drops interleaved, memory watched.

    .venv/bin/python bench/load.py [--minutes 5] [--clients 8] [--collections 50] [--dim 64]

Starts a fresh `kmilvus standalone`, creates the collections, and runs `--clients` client
processes. Client c owns the collections i with i % clients == c: it inserts 1,000-row batches
into a random one of them, flushes one every ~20 inserts, and every ~60 s drops one and creates
it again. Every acknowledged key is remembered per collection incarnation. A sampler records the
RSS of every server process (kmilvus, etcd, nats-server) and the rows acknowledged, every second.

At the end: flush everything and check each collection — every acknowledged key of its current
incarnation in a committed binlog exactly once, nothing else, `num_entities` equal. Prints the
totals, errors by kind (rate-limit answers are back-pressure, counted apart), peak and final RSS
per process, and writes a PNG of RSS and rows/s over time (`--png`, default
bench/results/load.png) and the raw series as JSON beside it. Exit 1 when an invariant fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib
import itertools

from standalone_proc import Standalone

from kmilvus.datacoord.verify import committed_keys_at

RESULTS = Path(__file__).resolve().parent / "results"


def _schema(dim: int):
    from pymilvus import CollectionSchema, DataType, FieldSchema

    return CollectionSchema(
        [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=dim)]
    )


def client_main(c: int, uri: str, names: list[str], dim: int, until: float, out: str, acked_total) -> None:
    """One client process; writes {name: [acked keys of the current incarnation]} and error
    counts to `out`."""
    from pymilvus import Collection, connections
    from pymilvus.exceptions import MilvusException

    connections.connect("load", uri=uri, timeout=30)
    rng = np.random.default_rng(c)
    pick = random.Random(c)
    colls = {n: Collection(n, using="load") for n in names}
    acked: dict[str, list[int]] = {n: [] for n in names}
    errors: dict[str, int] = {}
    key = (c + 1) * 10**12
    inserts, last_drop = 0, time.monotonic()
    while time.monotonic() < until:
        name = pick.choice(names)
        ids = list(range(key, key + 1000))
        key += 1000
        try:
            colls[name].insert([ids, rng.random((1000, dim), dtype=np.float32)], timeout=60)
            acked[name].extend(ids)
            with acked_total.get_lock():
                acked_total.value += 1000
            inserts += 1
            if inserts % 20 == 0:
                colls[pick.choice(names)].flush(timeout=120)
            if time.monotonic() - last_drop > 60 and names:
                victim = pick.choice(names)
                colls[victim].drop(timeout=60)
                colls[victim] = Collection(victim, _schema(dim), shards_num=2, using="load")
                acked[victim] = []
                last_drop = time.monotonic()
                errors["drops (not an error)"] = errors.get("drops (not an error)", 0) + 1
        except MilvusException as exc:
            kind = "rate limit (back-pressure)" if exc.code == 8 else f"code {exc.code}: {exc.message[:60]}"
            errors[kind] = errors.get(kind, 0) + 1
        except Exception as exc:  # noqa: BLE001 - counted and reported
            kind = type(exc).__name__
            errors[kind] = errors.get(kind, 0) + 1
    Path(out).write_text(json.dumps({"acked": acked, "errors": errors}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--collections", type=int, default=50)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--png", default=str(RESULTS / "load.png"))
    args = ap.parse_args()
    srv = Standalone().start()
    samples: list[dict] = []
    stop = threading.Event()
    ctx = mp.get_context("spawn")
    acked_total = ctx.Value("q", 0)
    try:
        from pymilvus import Collection, connections

        connections.connect("admin", uri=srv.uri, timeout=30)
        names = [f"load{i}" for i in range(args.collections)]
        for n in names:
            Collection(n, _schema(args.dim), shards_num=2, using="admin")
        root = psutil.Process(srv.proc.pid)

        def sample() -> None:
            t0 = time.monotonic()
            while not stop.is_set():
                rss = {}
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        rss[p.name()] = rss.get(p.name(), 0) + p.memory_info().rss / 2**20
                samples.append({"t": time.monotonic() - t0, "rss": rss, "acked": acked_total.value})
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        until = time.monotonic() + args.minutes * 60
        outs = [srv.data_dir / f"client{c}.json" for c in range(args.clients)]
        procs = [
            ctx.Process(
                target=client_main,
                args=(
                    c,
                    srv.uri,
                    [n for i, n in enumerate(names) if i % args.clients == c],
                    args.dim,
                    until,
                    str(outs[c]),
                    acked_total,
                ),
            )
            for c in range(args.clients)
        ]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        elapsed = time.monotonic() - t0
        stop.set()
        sampler.join(5)
        results = [json.loads(o.read_text()) for o in outs]
        acked = {n: k for r in results for n, k in r["acked"].items()}
        errors: dict[str, int] = {}
        for r in results:
            for k, v in r["errors"].items():
                errors[k] = errors.get(k, 0) + v
        # Check every collection's current incarnation.
        etcd, _ = srv.endpoints()
        storage = (srv.data_dir / "storage").as_uri()
        lost = dups = strays = mismatched = 0
        for n in names:
            coll = Collection(n, using="admin")
            coll.flush(timeout=300)
            cid = coll.describe()["collection_id"]
            pk = asyncio.run(committed_keys_at(etcd, "kmilvus", storage, cid))
            uniq, cnt = np.unique(pk, return_counts=True)
            want = np.asarray(acked.get(n, []), dtype=np.int64)
            dups += int((cnt > 1).sum())
            lost += len(np.setdiff1d(want, uniq))
            strays += len(np.setdiff1d(uniq, want))
            mismatched += int(coll.num_entities != len(pk))
        total = sum(len(v) for v in acked.values())
        ok = lost == 0 and dups == 0 and mismatched == 0
        peak: dict[str, float] = {}
        for s in samples:
            for k, v in s["rss"].items():
                peak[k] = max(peak.get(k, 0), v)
        final = samples[-1]["rss"] if samples else {}
        rate = [(b["acked"] - a["acked"]) / max(1e-9, b["t"] - a["t"]) for a, b in itertools.pairwise(samples)]
        print("| measure | value |")
        print("|---|---|")
        print(
            f"| duration | {elapsed / 60:.1f} min, {args.clients} client processes, "
            f"{args.collections} collections (2 shards, dim {args.dim}) |"
        )
        print(
            f"| rows acknowledged (all incarnations) | {acked_total.value:,} "
            f"({acked_total.value / elapsed:,.0f} rows/s) |"
        )
        print(
            f"| rows/s over time (1 s samples) | median {np.median(rate) if rate else 0:,.0f}, "
            f"min {min(rate, default=0):,.0f}, max {max(rate, default=0):,.0f} |"
        )
        print(f"| rows of current incarnations checked | {total:,} |")
        print(
            f"| lost / duplicated / unexpected / num_entities mismatches | {lost} / {dups} / {strays} / {mismatched} |"
        )
        for k, v in sorted(errors.items()):
            print(f"| {k} | {v:,} |")
        for k in sorted(peak):
            print(f"| RSS {k}: peak / final | {peak[k]:,.0f} / {final.get(k, 0):,.0f} MiB |")
        print(f"| invariants | {'hold' if ok else 'VIOLATED'} |")
        png = Path(args.png)
        png.parent.mkdir(parents=True, exist_ok=True)
        png.with_suffix(".json").write_text(json.dumps({"samples": samples, "errors": errors}))
        _plot(samples, png)
        return 0 if ok else 1
    finally:
        stop.set()
        srv.stop()


def _plot(samples: list[dict], png: Path) -> None:
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
    rate = [0] + [(b["acked"] - a["acked"]) / max(1e-9, b["t"] - a["t"]) for a, b in itertools.pairwise(samples)]
    ax2.plot(t, rate)
    ax2.set_ylabel("rows acknowledged / s")
    ax2.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"wrote {png}")


if __name__ == "__main__":
    sys.exit(main())
