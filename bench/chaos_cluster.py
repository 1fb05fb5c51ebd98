"""The multi-process deployment chaos runs against, and the faults it injects.

All on loopback, in one work directory: etcd and nats-server (JetStream file store) started
here, the coordinators twice (`kmilvus run rootcoord datacoord querycoord`: one active, one
standby), two DataNodes, two QueryNodes, two Proxies — each its own process, restartable with
the same arguments, its output appended to `{name}.log`.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kmilvus.util.embedded import ChildServer, free_port, start_etcd, start_nats

CLUSTER = "chaos"
TTL = 10  # KMILVUS_SESSION_TTL's default: what a deployment runs (a shorter one only speeds up faults)
FAULTS = (
    "datanode_kill",
    "datanode_stop",
    "querynode_kill",
    "querynode_stop",
    "indexnode_kill",
    "indexnode_stop",
    "coordinators_kill",
    "coordinators_stop",
    "proxy_kill",
    "nats_restart",
    "etcd_restart",
    "storage_outage",
)
# Settings every process runs with, unless the environment sets them (e.g. KMILVUS_AUTO_COMPACTION=false
# to tell a compaction problem from others). Small messages (256 KiB) make a 10,000-row insert a
# split insert; automatic compaction checks often, from 4 small segments on; the collector leaves
# unreferenced files for an hour (a kept run still has them to trace).
SETTINGS = {
    "KMILVUS_LOG_LEVEL": "info",
    "KMILVUS_SESSION_TTL": str(TTL),
    "KMILVUS_INSERT_BUFFER_SIZE_MB": "16",
    "KMILVUS_DML_CHANNEL_NUM": "4",
    "KMILVUS_GC_TOLERANCE": "3600",
    "KMILVUS_MAX_MESSAGE_BYTES": str(256 * 1024),
    "KMILVUS_AUTO_COMPACTION": "true",
    "KMILVUS_COMPACTION_CHECK_INTERVAL": "20",
    "KMILVUS_COMPACTION_MIN_SEGMENTS": "4",
}
READY = {"datanode": "node ready", "indexnode": "node ready", "querynode": "node ready", "proxy": "kmilvus proxy ready"}
WORKERS = ("datanode", "indexnode", "querynode", "proxy")  # two processes of each


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

    def wait_log(self, needle: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while needle.encode() not in self.log.read_bytes()[self.log_offset :]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no {needle!r} in {self.log}")
            time.sleep(0.05)


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

    @property
    def storage_uri(self) -> str:
        return self.storage.as_uri()

    def proxy_uri(self, name: str) -> str:
        return f"http://127.0.0.1:{self.procs[name].port}"

    def start_servers(self) -> None:
        self.etcd = start_etcd(self.work / "etcd", port=self.etcd_port, peer_port=self.etcd_peer_port)
        self.nats = start_nats(self.work / "nats", port=self.nats_port)

    def make(self, name: str, roles: tuple[str, ...]) -> Proc:
        exe = str(Path(sys.executable).with_name("kmilvus"))
        port = free_port()
        argv = [exe, "run", *roles, "--etcd-endpoint", self.etcd_endpoint, "--nats-url", self.nats.endpoint]
        argv += ["--storage-uri", self.storage_uri, "--cluster", CLUSTER, "--port", str(port)]
        argv += ["--http-port", "0"]  # two Proxies on one host: the RESTful API on any free port
        p = Proc(name, roles, argv, {**SETTINGS, **os.environ}, self.work / f"{name}.log", port)
        self.procs[name] = p
        return p

    def start(self) -> None:
        self.start_servers()
        coords = ("rootcoord", "datacoord", "querycoord")
        self.make("coord-a", coords).start().wait_log("component started")
        self.make("coord-b", coords).start().wait_log("standby: waiting for the leader lock")
        for role in WORKERS:
            for i in (1, 2):
                self.make(f"{role}-{i}", (role,)).start().wait_log(READY[role])

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

    def restart_exited(self) -> list[str]:
        """Processes that exited by themselves (no fault stops one for good), restarted."""
        gone = [name for name, p in self.procs.items() if not p.alive()]
        for name in gone:
            self.procs[name].start()
        return gone

    def stop(self) -> None:
        for p in self.procs.values():
            p.kill()
        for s in (self.nats, self.etcd):
            if s is not None:
                s.kill()


def _pause(p: Proc) -> None:
    """SIGSTOP past the session TTL, then SIGCONT."""
    p.signal(signal.SIGSTOP)
    time.sleep(TTL + 2)
    p.signal(signal.SIGCONT)


def _restart(p: Proc, ready: str) -> None:
    p.kill()
    time.sleep(1)
    p.start().wait_log(ready)


def inject(dep: Deployment, fault: str, rng: random.Random) -> str:
    """Apply one fault and return once the system should be able to recover from it."""
    role, _, how = fault.rpartition("_")
    if role in WORKERS:
        name = rng.choice([f"{role}-1", f"{role}-2"])
        if how == "kill":
            _restart(dep.procs[name], READY[role])
        else:
            _pause(dep.procs[name])
        return name
    if role == "coordinators":
        name = dep.active_coordinator() or "coord-a"
        p = dep.procs[name]
        if how == "kill":
            p.kill()
        else:
            _pause(p)
        # The standby takes over; the old one (killed, or exited after stepping down) comes back
        # as the new standby.
        deadline = time.monotonic() + 60
        while p.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        p.kill()
        p.start()
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
