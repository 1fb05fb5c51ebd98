"""nats-server and then etcd SIGKILLed and restarted (same port, same store)
while a client inserts continuously. Every acknowledged row must end up in the binlogs exactly
once, and a flush must still finish.

The servers are this test's own (not the session-shared ones): the test kills them."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pymilvus import Collection, connections

from kmilvus.meta import EtcdKV
from kmilvus.sessionutil import Session, watch_sessions
from kmilvus.util.embedded import start_etcd, start_nats
from tests.flushutil import batch, bench_schema
from tests.harness import NodeThread, make_config
from tests.system.test_recovery import all_segments
from tests.util import wait_until

BATCH = 2000


class Inserter(threading.Thread):
    """Inserts BATCH-row batches until stopped; an insert that returned is acknowledged, one that
    raised has an unknown outcome."""

    def __init__(self, coll: Collection):
        super().__init__(daemon=True)
        self.coll = coll
        self.acked: list[int] = []
        self.unknown: list[int] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        start = 0
        while not self.stop_flag.is_set():
            ids, vecs, tags = batch(start, BATCH, dim=128)
            try:
                res = self.coll.insert([ids, vecs, tags], timeout=30)
                assert list(res.primary_keys) == ids
                self.acked.extend(ids)
            except Exception:  # noqa: BLE001 - outcome unknown: stored at most once
                self.unknown.extend(ids)
                time.sleep(0.1)  # a pause between attempts while a server is away
            start += BATCH

    def wait_more(self, n: int, what: str) -> None:
        target = len(self.acked) + n
        wait_until(lambda: len(self.acked) >= target, timeout=60, interval=0.05, what=what)


@pytest.fixture
def own_servers(tmp_path):
    servers = {"etcd": start_etcd(tmp_path / "etcd"), "nats": start_nats(tmp_path / "nats")}
    yield servers
    for s in servers.values():
        s.kill()


def committed_rows(node: NodeThread, segments) -> pa.Table:
    """The rows of the binlogs DataCoord's meta lists for `segments` (a file written by an
    attempt that never committed is not data: the garbage collector deletes it)."""
    meta = node.component("datacoord").meta
    keys = [b.log_path for s in segments for b in meta.segments[s.ID].binlogs.values()]
    store = node.node.store
    return ds.dataset([store.path(k) for k in keys], filesystem=store.filesystem, format="parquet").to_table()


def kill(servers: dict, name: str) -> tuple[int, int]:
    """SIGKILL a server; returns what restarting it on the same ports needs."""
    srv = servers[name]
    srv.kill()
    return int(srv.endpoint.rsplit(":", 1)[1]), srv.extra.get("peer_port", 0)


def start_again(servers: dict, name: str, ports: tuple[int, int], tmp_path) -> None:
    """Start a killed server again on the same ports with the same data directory."""
    if name == "etcd":
        servers[name] = start_etcd(tmp_path / name, port=ports[0], peer_port=ports[1])
    else:
        servers[name] = start_nats(tmp_path / name, port=ports[0])


def test_nats_then_etcd_restart_mid_insert_keeps_every_acked_row_once(own_servers, root, tmp_path):
    """The DataNode's consumer stalls across the NATS restart while inserts pile up in the
    stream; it catches up while etcd is down, so its first memory-pressure write (which needs an
    ID from RootCoord, which needs etcd) meets the outage. Every acknowledged row is kept."""
    etcd, nats = own_servers["etcd"], own_servers["nats"]
    # etcd is down until the DataNode has caught up (up to 30 s on a loaded machine) plus 4 s:
    # sessions and the leader lock must outlive that, or the coordinators step down by design
    # (a process that lost its leader lock waits to be restarted) and no insert succeeds again.
    cfg = make_config(
        root,
        etcd.endpoint,
        nats.endpoint,
        tmp_path / "storage",
        insert_buffer_size_mb=4,
        dml_channel_num=2,
        session_ttl=60,
    )
    node = NodeThread(cfg).start()
    alias = "s" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    ins = None
    try:
        coll = Collection("restarts", bench_schema(), using=alias, shards_num=1)
        coll_id = coll.describe()["collection_id"]
        datanode = node.component("datanode")
        ins = Inserter(coll)
        ins.start()
        ins.wait_more(2 * BATCH, "inserts before the NATS restart")  # ~2 MB: under the 4 MB buffer
        ports = kill(own_servers, "nats")
        time.sleep(1.0)  # the outage
        start_again(own_servers, "nats", ports, tmp_path)
        ins.wait_more(6 * BATCH, "inserts after the NATS restart")  # a backlog past the buffer size
        (fg,) = datanode.flowgraphs.values()
        seen = fg._consumer.processed_seq
        ports = kill(own_servers, "etcd")
        # etcd stays down until the DataNode has caught up on the backlog and RootCoord's ID
        # window (3 s) has run out, so the pressure write cannot get its log ID.
        wait_until(
            lambda: fg._consumer is not None and fg._consumer.processed_seq > seen,
            timeout=30,
            what="the DataNode consuming again",
        )
        time.sleep(4.0)  # the outage outlasts RootCoord's ID window
        start_again(own_servers, "etcd", ports, tmp_path)
        ins.wait_more(10 * BATCH, "inserts after the etcd restart")
        ins.stop_flag.set()
        ins.join(60)
        assert not ins.is_alive()
        coll.flush(timeout=120)

        segs = all_segments(node, coll_id)
        pk = committed_rows(node, segs).column("100").to_numpy()
        acked = np.asarray(ins.acked)
        uniq, counts = np.unique(pk, return_counts=True)
        assert (counts == 1).all(), f"{int((counts > 1).sum())} primary keys written twice"
        lost = np.setdiff1d(acked, uniq)
        assert lost.size == 0, f"{lost.size} of {acked.size} acknowledged rows lost (first {lost[:3]})"
        assert np.isin(uniq, np.concatenate([acked, np.asarray(ins.unknown, dtype=acked.dtype)])).all()
        assert coll.num_entities == len(pk)
        # The system still serves: a new collection takes inserts and flushes.
        other = Collection("after", bench_schema(), using=alias)
        ids, vecs, tags = batch(0, 100)
        other.insert([ids, vecs, tags])
        other.flush(timeout=60)
        assert other.num_entities == 100
    finally:
        if ins is not None:
            ins.stop_flag.set()
        connections.disconnect(alias)
        node.stop()


async def register_when_etcd_is_back(session: Session) -> None:
    """The client reconnects on its own, after gRPC's reconnect backoff."""
    for attempt in range(100):
        try:
            return await session.register()
        except Exception:  # etcd's port refuses connections for a moment
            if attempt == 99:
                raise
            await asyncio.sleep(0.2)  # a pause between attempts


async def test_session_watch_survives_an_etcd_restart(own_servers, root, tmp_path):
    """RootCoord's proxy watch and DataCoord's DataNode watch are `watch_sessions`: an etcd
    restart must not end it, and changes made around the restart must all be seen."""
    kv = await EtcdKV.connect([own_servers["etcd"].endpoint], f"{root}/meta")
    events: asyncio.Queue = asyncio.Queue()

    async def watch() -> None:
        async for kind, sid, _ in watch_sessions(kv, "datanode"):
            await events.put((kind, sid))

    task = asyncio.create_task(watch())
    first = Session(kv, "datanode", "127.0.0.1:1", ttl=30, server_id=1)
    second = Session(kv, "datanode", "127.0.0.1:2", ttl=30, server_id=2)
    try:
        await first.register()
        assert await asyncio.wait_for(events.get(), 10) == ("add", 1)
        ports = kill(own_servers, "etcd")
        await asyncio.sleep(1.0)  # the outage
        await asyncio.to_thread(start_again, own_servers, "etcd", ports, tmp_path)
        await register_when_etcd_is_back(second)
        await first.stop()  # revokes its lease: the key is deleted
        got = {await asyncio.wait_for(events.get(), 20) for _ in range(2)}
        assert got == {("add", 2), ("del", 1)}
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await second.stop()
        await kv.close()


async def test_a_standby_outlives_an_etcd_restart_and_takes_over_later(own_servers, root, tmp_path):
    """A coordinator standby waits for the leader lock through an etcd restart (it used to die
    on the first connection error, leaving no standby), and takes over once the leader leaves."""
    from kmilvus.sessionutil.leader import LeaderLock

    kv = await EtcdKV.connect([own_servers["etcd"].endpoint], f"{root}/meta")
    leader, standby = LeaderLock(kv, "rootcoord", ttl=30), LeaderLock(kv, "rootcoord", ttl=30)
    try:
        await leader.acquire()
        waiting = asyncio.create_task(standby.acquire(poll=0.05))
        await asyncio.sleep(0.5)  # the standby polls a while before the outage ...
        ports = kill(own_servers, "etcd")
        await asyncio.sleep(1.0)  # ... through it ...
        assert not waiting.done()
        await asyncio.to_thread(start_again, own_servers, "etcd", ports, tmp_path)
        await asyncio.sleep(1.0)  # ... and after it
        assert not waiting.done(), "the standby must keep waiting while the leader holds the lock"
        await leader.release()
        await asyncio.wait_for(waiting, 30)
        assert standby.valid()
    finally:
        await standby.release()
        await kv.close()
