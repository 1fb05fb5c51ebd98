"""Chaos: random faults against a multi-process deployment while clients insert, then an
invariant check over etcd meta and the binlogs.

    .venv/bin/python bench/chaos.py --minutes 10 [--seed 1] [--faults datanode_kill,nats_restart,...]

Deployment (all on loopback, in a temp dir): etcd and nats-server (JetStream file store) started
here, the coordinators twice (`kmilvus run rootcoord datacoord querycoord`: one active, one
standby), two DataNodes, two Proxies. Two client threads insert 1,000-row batches (one through
each Proxy) into one 2-shard collection, remembering exactly which keys were acknowledged and
which inserts failed (outcome unknown). Every round injects one fault, waits for the system to
recover, and sometimes flushes. At the end: stop the clients, flush, and check

- every acknowledged key is in a committed binlog (one that DataCoord's meta refers to): losses;
- no key is in committed binlogs twice: duplicates;
- keys of failed inserts appear at most once; `num_entities` equals the committed rows;

and print the rounds, the faults, rows acked / stored, duplicates, losses and the longest time a
client saw no successful insert (unavailability). Exit status 1 when an invariant fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kmilvus.datacoord.verify import committed_keys_at
from kmilvus.util.embedded import ChildServer, free_port, start_etcd, start_nats

CLUSTER = "chaos"
TTL = 10  # KMILVUS_SESSION_TTL's default: what a deployment runs (a shorter one only speeds up faults)
ADMIN_TIMEOUT = 240.0  # an admin call (flush, count) that has not answered by then is reported as hung
FAULTS = (
    "datanode_kill",
    "datanode_stop",
    "coordinators_kill",
    "coordinators_stop",
    "proxy_kill",
    "nats_restart",
    "etcd_restart",
    "storage_outage",
)


@dataclass
class Proc:
    """One `kmilvus run ROLES...` process; restartable with the same arguments."""

    name: str
    roles: tuple[str, ...]
    argv: list[str]
    env: dict[str, str]
    log: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    log_offset: int = 0  # where this run's output starts in the (appended) log

    def start(self) -> Proc:
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def wait_log(self, needle: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while needle.encode() not in self.log.read_bytes()[self.log_offset :]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no {needle!r} in {self.log}")
            time.sleep(0.05)


class Client(threading.Thread):
    """Inserts 1,000-row batches through one Proxy; remembers acked and failed keys."""

    def __init__(self, uri: str, alias: str, start_key: int):
        super().__init__(daemon=True)
        self.uri, self.alias, self.start_key = uri, alias, start_key
        self.acked: list[int] = []
        self.failed: list[int] = []
        self.longest_gap = 0.0
        self.gap_window = ("", "")  # wall-clock start and end of the longest gap
        self.longest_call = 0.0  # the slowest single insert call, answered or not
        self.stop_flag = threading.Event()

    def run(self) -> None:
        from pymilvus import Collection, connections

        connections.connect(self.alias, uri=self.uri, timeout=30)
        coll = Collection("chaos", using=self.alias)
        rng = np.random.default_rng(self.start_key)
        key, last_ok = self.start_key, time.monotonic()
        while not self.stop_flag.is_set():
            ids = list(range(key, key + 1000))
            key += 1000
            sent = time.monotonic()
            try:
                # No retries inside pymilvus: it retries a failed Insert by itself, and an insert
                # whose Proxy died after publishing it would be stored twice yet reported as one
                # acknowledged insert (as with Milvus: an insert carries no idempotency key).
                coll.insert([ids, rng.random((1000, 32), dtype=np.float32)], retry_times=0)
                self.acked.extend(ids)
                self._note_gap(last_ok)
                last_ok = time.monotonic()
            except Exception:  # noqa: BLE001 - outcome unknown: may be stored at most once
                self.failed.extend(ids)
                time.sleep(0.2)
            finally:
                self.longest_call = max(self.longest_call, time.monotonic() - sent)
        self._note_gap(last_ok)

    def _note_gap(self, last_ok: float) -> None:
        gap = time.monotonic() - last_ok
        if gap > self.longest_gap:
            end = time.time()
            self.longest_gap = gap
            self.gap_window = (time.strftime("%H:%M:%S", time.localtime(end - gap)), time.strftime("%H:%M:%S"))


class Deployment:
    def __init__(self, work: Path):
        self.work = work
        self.etcd_port, self.etcd_peer_port, self.nats_port = free_port(), free_port(), free_port()
        self.etcd: ChildServer | None = None
        self.nats: ChildServer | None = None
        self.storage = work / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}

    @property
    def etcd_endpoint(self) -> str:
        return f"127.0.0.1:{self.etcd_port}"

    def start_servers(self) -> None:
        self.etcd = start_etcd(self.work / "etcd", port=self.etcd_port, peer_port=self.etcd_peer_port)
        self.nats = start_nats(self.work / "nats", port=self.nats_port)

    def make(self, name: str, roles: tuple[str, ...]) -> Proc:
        exe = str(Path(sys.executable).with_name("kmilvus"))
        port = free_port()
        argv = [
            exe,
            "run",
            *roles,
            "--etcd-endpoint",
            self.etcd_endpoint,
            "--nats-url",
            self.nats.endpoint,
            "--storage-uri",
            self.storage.as_uri(),
            "--cluster",
            CLUSTER,
            "--port",
            str(port),
        ]
        env = dict(
            os.environ,
            KMILVUS_LOG_LEVEL="info",
            KMILVUS_SESSION_TTL=str(TTL),
            KMILVUS_INSERT_BUFFER_SIZE_MB="16",
            KMILVUS_AUTO_COMPACTION="false",
            KMILVUS_DML_CHANNEL_NUM="4",
            KMILVUS_GC_TOLERANCE="3600",
        )
        p = Proc(name, roles, argv, env, self.work / f"{name}.log", port)
        self.procs[name] = p
        return p

    def start(self) -> None:
        self.start_servers()
        coords = ("rootcoord", "datacoord", "querycoord")
        self.make("coord-a", coords).start().wait_log("component started")
        self.make("coord-b", coords).start().wait_log("standby: waiting for the leader lock")
        for n in ("datanode-1", "datanode-2"):
            self.make(n, ("datanode",)).start().wait_log("component started")
        for n in ("proxy-1", "proxy-2"):
            self.make(n, ("proxy",)).start().wait_log("kmilvus proxy ready")

    def active_coordinator(self) -> str:
        raw = asyncio.run(self._leader_identity())
        pid = int(raw.split(b":")[1]) if raw else -1
        for name in ("coord-a", "coord-b"):
            p = self.procs[name]
            if p.alive() and p.proc.pid == pid:
                return name
        return ""

    async def _leader_identity(self) -> bytes | None:
        from kmilvus.meta import EtcdKV

        kv = await EtcdKV.connect([self.etcd_endpoint], f"{CLUSTER}/meta")
        try:
            return await kv.get("leader/rootcoord")
        finally:
            await kv.close()

    def stop(self) -> None:
        for p in self.procs.values():
            p.kill()
        for s in (self.nats, self.etcd):
            if s is not None:
                s.kill()


def inject(dep: Deployment, fault: str, rng: random.Random) -> str:
    """Apply one fault and return once the system should be able to recover from it."""
    if fault in ("datanode_kill", "datanode_stop"):
        name = rng.choice(["datanode-1", "datanode-2"])
        p = dep.procs[name]
        if fault == "datanode_kill":
            p.kill()
            time.sleep(1)
            p.start().wait_log("component started", timeout=60)
        else:
            p.signal(signal.SIGSTOP)
            time.sleep(TTL + 2)
            p.signal(signal.SIGCONT)
        return name
    if fault in ("coordinators_kill", "coordinators_stop"):
        name = dep.active_coordinator() or "coord-a"
        p = dep.procs[name]
        if fault == "coordinators_kill":
            p.kill()
        else:
            p.signal(signal.SIGSTOP)
            time.sleep(TTL + 2)
            p.signal(signal.SIGCONT)
        # The standby takes over; the old one (killed, or exited after stepping down) comes back
        # as the new standby.
        deadline = time.monotonic() + 60
        while p.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        p.kill()
        p.start()
        return name
    if fault == "proxy_kill":
        name = rng.choice(["proxy-1", "proxy-2"])
        p = dep.procs[name]
        p.kill()
        time.sleep(1)
        p.start().wait_log("kmilvus proxy ready", timeout=60)
        return name
    if fault == "nats_restart":
        dep.nats.kill()
        time.sleep(1)
        dep.nats = start_nats(dep.work / "nats", port=dep.nats_port)
        return "nats-server"
    if fault == "etcd_restart":
        dep.etcd.kill()
        time.sleep(1)
        dep.etcd = start_etcd(dep.work / "etcd", port=dep.etcd_port, peer_port=dep.etcd_peer_port)
        return "etcd"
    if fault == "storage_outage":
        # Root ignores permissions, so "unavailable" is the storage root replaced by a file.
        aside = dep.storage.with_name("storage-aside")
        dep.storage.rename(aside)
        dep.storage.write_text("storage is away")
        time.sleep(4)
        dep.storage.unlink()
        aside.rename(dep.storage)
        return "storage"
    raise ValueError(fault)


def bounded(fn, what: str):
    """`fn()` on a thread, waited for at most ADMIN_TIMEOUT: a call that never answers (pymilvus
    sets no deadline on most calls) is a finding, not a run that hangs."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn).result(timeout=ADMIN_TIMEOUT)
    except FutureTimeout:
        raise TimeoutError(f"{what}: no answer in {ADMIN_TIMEOUT:.0f} s (hung)") from None
    finally:
        pool.shutdown(wait=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        ap.error(f"unknown faults: {', '.join(sorted(unknown))}")
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="kmilvus-chaos-"))
    dep = Deployment(work)
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections

    counts: dict[str, int] = {}
    rounds = unexpected = 0
    t0 = time.monotonic()
    try:
        dep.start()
        uri = f"http://127.0.0.1:{dep.procs['proxy-1'].port}"
        connections.connect("chaos-admin", uri=uri, timeout=30)
        schema = CollectionSchema(
            [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=32)]
        )
        coll = Collection("chaos", schema, shards_num=2, using="chaos-admin")
        coll_id = coll.describe()["collection_id"]
        clients = [
            Client(f"http://127.0.0.1:{dep.procs[p].port}", f"chaos-{i}", (i + 1) * 10**9)
            for i, p in enumerate(("proxy-1", "proxy-2"))
        ]
        for c in clients:
            c.start()
        deadline = t0 + args.minutes * 60
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(2, 5))
            fault = rng.choice(faults)
            target = inject(dep, fault, rng)
            rounds += 1
            counts[fault] = counts.get(fault, 0) + 1
            acked = sum(len(c.acked) for c in clients)
            print(
                f"[{time.monotonic() - t0:6.0f}s] round {rounds}: {fault} ({target}); rows acked so far {acked:,}",
                flush=True,
            )
            for name, p in dep.procs.items():
                if not p.alive():  # no fault stops a process for good: a death of its own is a finding
                    print(f"    UNEXPECTED EXIT: {name} (status {p.proc.returncode}); restarting it", flush=True)
                    unexpected += 1
                    p.start()
            if rng.random() < 0.3:
                try:
                    bounded(lambda: coll.flush(timeout=60), "flush")
                except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                    print(f"    flush failed: {exc!r}", flush=True)
        for c in clients:
            c.stop_flag.set()
        for c in clients:
            c.join(60)
        time.sleep(TTL + 2)  # let the last fault's restarts settle
        flush_t0 = time.monotonic()
        bounded(lambda: coll.flush(timeout=180), "final flush")
        flush_s = time.monotonic() - flush_t0
        pk = asyncio.run(committed_keys_at(dep.etcd_endpoint, CLUSTER, dep.storage.as_uri(), coll_id))
        acked = np.concatenate([np.asarray(c.acked, dtype=np.int64) for c in clients])
        failed = np.concatenate([np.asarray(c.failed, dtype=np.int64) for c in clients])
        uniq, cnt = np.unique(pk, return_counts=True)
        dups = int((cnt > 1).sum())
        losses = len(np.setdiff1d(acked, uniq))
        failed_stored = len(np.intersect1d(failed, uniq))
        strays = len(np.setdiff1d(uniq, np.concatenate([acked, failed])))
        num_entities = bounded(lambda: coll.num_entities, "num_entities")
        ok = dups == 0 and losses == 0 and strays == 0 and num_entities == len(pk) and not unexpected
        print()
        print("| measure | value |")
        print("|---|---|")
        print(f"| duration | {(time.monotonic() - t0) / 60:.1f} min |")
        print(f"| rounds | {rounds} |")
        print(f"| faults | {', '.join(f'{k} ×{v}' for k, v in sorted(counts.items()))} |")
        print(f"| rows acked | {len(acked):,} |")
        print(f"| rows of failed inserts (outcome unknown) | {len(failed):,}, of which stored {failed_stored:,} |")
        print(f"| rows stored (committed binlogs) | {len(pk):,} |")
        print(f"| duplicates | {dups:,} |")
        print(f"| losses (acked, not stored) | {losses:,} |")
        print(f"| stored rows never inserted | {strays:,} |")
        print(f"| num_entities | {num_entities:,} |")
        print(f"| final flush | {flush_s:.1f} s |")
        worst = max(clients, key=lambda c: c.longest_gap)
        print(
            f"| longest unavailability (a client without a successful insert) | {worst.longest_gap:.1f} s "
            f"({worst.alias}, {worst.gap_window[0]}–{worst.gap_window[1]}; slowest single insert call "
            f"{max(c.longest_call for c in clients):.1f} s) |"
        )
        print(f"| processes that exited by themselves | {unexpected} |")
        print(f"| invariants | {'hold' if ok else 'VIOLATED'} |")
        return 0 if ok else 1
    finally:
        dep.stop()
        if args.keep:
            print(f"logs: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
