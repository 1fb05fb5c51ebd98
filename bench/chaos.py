"""Chaos: random faults against a multi-process deployment while clients use every write and read
path, then an invariant check of what the acknowledged operations imply against what is stored.

    .venv/bin/python bench/chaos.py --minutes 10 [--seed 1] [--load 2] [--keep]
                                    [--faults datanode_kill,querynode_stop,...]

The deployment (`chaos_cluster`): etcd, nats-server, the coordinators twice (active and
standby), two DataNodes, two IndexNodes, two QueryNodes, two Proxies, each its own process. `--clients`
processes (`ops_client`; one per Proxy, in turn) each own `--lineages` collections and insert,
upsert, delete by ID and by expression, bulk-import Parquet files they write, flush, compact,
build indexes, drop and re-create partitions and collections, and read with Strong consistency
(query by ID and count, checked at once against what they know), journaling every operation
and its outcome. Every round injects one fault (`--faults`, default all of `FAULTS`) and waits
for the system to recover; a process that exited by itself is a finding (and is restarted).
`--load N` keeps N more processes spinning beside it all the time.

At the end: stop the clients, flush, and for every collection compare the live primary keys and
their values the journals imply (`ops_model`: acknowledged operations exactly, operations of
unknown outcome as the outcomes they permit) with (a) the committed binlogs minus the delta logs,
read from etcd and the Parquet files alone, and (b) a Strong query; the two must also agree with
each other. Lost, duplicated, resurrected (deleted or dropped, yet there), wrong-valued and
stray rows, torn imports, reads that contradicted an acknowledged operation during the run, and
anything dropped collections or partitions left behind (etcd keys, files, JetStream consumers)
fail the run (exit status 1), and so does an index build that ends Failed or does not end. The
work directory (logs, journals, `verdict.json`) is kept with `--keep`; the same seed replays the
same choices (timing still differs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_cluster import CLUSTER, FAULTS, TTL, Deployment, inject
from cpuload import busy_loops
from ops_check import key_history
from ops_client import ClientSpec, client_main, parse_client_arguments
from ops_report import (
    Outcome,
    Where,
    add_samples,
    check_binlogs,
    check_lineages,
    models_of,
    new_result,
    op_counts,
    print_report,
    trace,
    wait_for_leftovers,
)


def start_clients(dep: Deployment, work: Path, args, stop) -> tuple[list, list[ClientSpec]]:
    ctx = mp.get_context("spawn")
    (work / "imports").mkdir(exist_ok=True)
    specs = [
        ClientSpec(
            index=i,
            uri=dep.proxy_uri(f"proxy-{i % 2 + 1}"),
            lineages=[f"chaos_{i}_{j}" for j in range(args.lineages)],
            seed=args.seed,
            journal=str(work / f"client-{i}.jsonl"),
            files_dir=str(work / "imports"),
            only=tuple(args.ops),
        )
        for i in range(args.clients)
    ]
    procs = [ctx.Process(target=client_main, args=(s, stop), name=f"client-{s.index}") for s in specs]
    for p in procs:
        p.start()
    return procs, specs


def stop_clients(procs, stop, patience: float) -> list[str]:
    """Ask the clients to stop after their current operation; the ones that do not within
    `patience` (a call that never answers) are killed: their last operation stays unknown."""
    stop.set()
    deadline = time.monotonic() + patience
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    hung = [p.name for p in procs if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(10)
    return hung


def acked(specs: list[ClientSpec]) -> int:
    """Operations acknowledged so far, all clients (a progress figure)."""
    n = 0
    for s in specs:
        with contextlib.suppress(FileNotFoundError), open(s.journal) as f:  # a client still starting
            n += sum(1 for line in f if '"end":"ack"' in line)
    return n


def run(args, work: Path) -> int:
    rng = random.Random(args.seed)
    dep = Deployment(work)
    faults: dict[str, int] = {}
    exited: list[str] = []
    t0 = time.monotonic()
    stop = mp.get_context("spawn").Event()
    try:
        dep.start()
        procs, specs = start_clients(dep, work, args, stop)
        deadline = t0 + args.minutes * 60
        rounds = 0
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(2, 5))
            fault = rng.choice(args.fault_list)
            target = inject(dep, fault, rng)
            rounds += 1
            faults[fault] = faults.get(fault, 0) + 1
            print(
                f"[{time.monotonic() - t0:6.0f}s] round {rounds}: {fault} ({target}); "
                f"operations acknowledged so far {acked(specs):,}",
                flush=True,
            )
            for name in dep.restart_exited():
                print(f"    UNEXPECTED EXIT: {name}; restarted", flush=True)
                exited.append(name)
        hung = stop_clients(procs, stop, patience=240)
        time.sleep(TTL + 2)  # let the last fault's restarts settle
        exited += dep.restart_exited()
        outcome = Outcome(
            minutes=(time.monotonic() - t0) / 60,
            rounds=rounds,
            faults=faults,
            exited=exited,
            hung=hung,
            busy_loops=args.load,
        )
        paths = [Path(s.journal) for s in specs]
        op_counts(paths, outcome)
        where = Where(dep.proxy_uri("proxy-1"), dep.etcd_endpoint, CLUSTER, dep.storage_uri, dep.nats.endpoint)
        check_lineages(where, paths, outcome)
        outcome.leftovers = wait_for_leftovers(where, outcome, within=90)
        (work / "verdict.json").write_text(json.dumps(outcome.to_json(), indent=1, default=str))
        print_report(outcome)
        return 0 if outcome.ok else 1
    finally:
        stop.set()
        dep.stop()


def recheck(work: Path, trace_keys: list[int]) -> int:
    """Check a kept work directory again, offline: etcd and nats-server restarted on its data,
    the journals replayed, the committed binlogs and what drops left compared (no query: the
    kmilvus processes stay down). For tracing a failure, and for changes to the checker."""
    from kmilvus.util.embedded import start_etcd, start_nats

    etcd = start_etcd(work / "etcd")
    nats = start_nats(work / "nats")
    try:
        outcome = Outcome()
        paths = sorted(work.glob("client-*.jsonl"))
        op_counts(paths, outcome)
        where = Where("", etcd.endpoint.removeprefix("http://"), CLUSTER, (work / "storage").as_uri(), nats.endpoint)
        models, records = models_of(paths)
        for key in trace_keys:
            m = next(m for m in models.values() if m.base <= key < m.base + m.size)
            print(f"key {key} ({m.name}): " + trace(m, [key], records.get(m.name, {}))[0])
            for line in key_history(where.etcd, CLUSTER, where.storage_uri, m.current_id, key):
                print(f"    {line}")
        for name, m in models.items():
            r = new_result(m)
            if m.current_id is not None:
                check_binlogs(where, m, r)
            add_samples(r, m, records.get(name, {}))
            outcome.lineages.append(r)
        outcome.leftovers = wait_for_leftovers(where, outcome, within=0)
        print_report(outcome)
        return 0 if outcome.ok else 1
    finally:
        nats.kill()
        etcd.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--clients", type=int, default=2, help="client processes (one per Proxy, in turn)")
    ap.add_argument("--lineages", type=int, default=1, help="collections each client owns")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, journals, verdict)")
    ap.add_argument("--recheck", metavar="DIR", help="check a kept work directory again, offline")
    ap.add_argument("--trace", type=int, nargs="*", default=[], help="with --recheck: every row and delete of a key")
    args = parse_client_arguments(ap)
    if args.recheck:
        return recheck(Path(args.recheck), args.trace)
    args.fault_list = [f for f in args.faults.split(",") if f]
    unknown = set(args.fault_list) - set(FAULTS)
    if unknown:
        ap.error(f"unknown faults: {', '.join(sorted(unknown))}")
    work = Path(tempfile.mkdtemp(prefix="kmilvus-chaos-"))
    print(f"work directory: {work} (cluster {CLUSTER!r}); seed {args.seed}, busy loops {args.load}", flush=True)
    try:
        with busy_loops(args.load):
            return run(args, work)
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
