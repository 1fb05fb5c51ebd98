"""Faults and fencing (docs/architecture/fencing.md): each test reproduces a path where an acknowledged row could be
lost or written twice, or a stale process could act, on real servers, and checks the guarantee."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import numpy as np
from pymilvus import Collection, connections
from pymilvus.grpc_gen import milvus_pb2

from kmilvus.datacoord.verify import committed_keys_at
from kmilvus.msgstream import pchannel_of
from kmilvus.util.embedded import free_port
from tests.flushutil import batch, bench_schema
from tests.harness import ProcessNode, make_config
from tests.system.test_recovery import COORDS_AND_PROXY, Inserter
from tests.util import wait_until


def _log_has(path, needle: str) -> bool:
    return path.exists() and needle in path.read_text(errors="replace")


def committed_keys(cfg, coll_id: int) -> np.ndarray:
    """Primary keys of every binlog DataCoord's meta refers to — what a reader sees."""
    return asyncio.run(committed_keys_at(cfg.etcd_endpoints[0], cfg.cluster, cfg.storage_uri, coll_id))


def _trimmed_to_stored_checkpoints(dc) -> bool:
    stored = dict(dc.meta.stored_checkpoints)
    return bool(stored) and all(dc.trimmer.purged.get(pchannel_of(ch), 1) > seq for ch, seq in stored.items())


def _check_exactly_once(node, coll: Collection, coll_id: int, acked: list[int]) -> None:
    pk = committed_keys(node.cfg, coll_id)
    assert len(pk) == len(np.unique(pk)), "a primary key was written twice"
    lost = set(acked) - set(pk.tolist())
    assert not lost, f"{len(lost)} acknowledged rows lost, e.g. {sorted(lost)[:5]}"
    assert coll.num_entities == len(pk)


def test_pressure_write_racing_flush_of_same_segment_loses_nothing(node_factory, tmp_path):
    """A memory-pressure write W1 of segment S is in flight when FlushSegments(S) takes
    S's newer buffer. W1's checkpoint must still hold the newer rows back, so a DataNode killed
    before the final write commits loses nothing."""
    # No stream retention: DataCoord trims the stream right below the checkpoints it stores.
    node = node_factory(roles=COORDS_AND_PROXY, insert_buffer_size_mb=2, stream_retention_seconds=0)
    log1 = tmp_path / "dn1.log"
    dn1 = ProcessNode(node.cfg, ("datanode",), log1).start(
        wait_for="component started", failpoints="datanode.save.pressure=sleep(3),datanode.save.flush"
    )
    alias = "f" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    dn2 = None
    try:
        coll = Collection("race", bench_schema(), shards_num=1, using=alias)
        coll_id = coll.describe()["collection_id"]
        acked: list[int] = []
        start = 0
        # Fill the 2 MB buffer until a pressure write of the (only) segment starts and stalls.
        while not _log_has(log1, "datanode.save.pressure"):
            ids, vecs, tags = batch(start, 1000)
            coll.insert([ids, vecs, tags])
            acked += ids
            start += 1000
            assert start < 100_000, "no pressure write happened"
            time.sleep(0.05)  # paced: the write starts in the background
        # While W1 stalls: newer rows into the same segment, then a flush takes them.
        ids, vecs, tags = batch(start, 500)
        coll.insert([ids, vecs, tags])
        acked += ids
        flusher = threading.Thread(target=lambda: coll.flush(timeout=120), daemon=True)
        flusher.start()
        # W1 commits (with its checkpoint), then the final write reaches the kill failpoint.
        wait_until(lambda: dn1.proc.poll() is not None, timeout=60, what="DataNode killed at datanode.save.flush")
        assert "datanode.save.flush" in log1.read_text()
        # DataCoord stores W1's checkpoint (with its binlogs) and trims the stream below it: were
        # it past the newer rows, they would be gone from the stream before a DataNode replays it.
        dc = node.component("datacoord")
        wait_until(lambda: _trimmed_to_stored_checkpoints(dc), 30, what="the stream trimmed to the stored checkpoints")
        dn2 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn2.log").start(wait_for="component started")
        flusher.join(120)
        assert not flusher.is_alive()
        coll.flush(timeout=120)
        _check_exactly_once(node, coll, coll_id, acked)
    finally:
        connections.disconnect(alias)
        dn1.kill()
        if dn2 is not None:
            dn2.stop()


def test_flush_finishes_when_an_insert_races_it(node_factory, tmp_path):
    """An insert whose timestamp was taken before the flush timestamp, but whose
    segment quota comes after the seal, must not hold the flush until the idle seal (600 s)."""
    coords = node_factory(roles=("rootcoord", "datacoord", "querycoord", "datanode", "indexnode"))
    log = tmp_path / "proxy.log"
    proxy = ProcessNode(coords.cfg, ("proxy",), log).start(
        wait_for="component started", failpoints="proxy.insert.before_assign=sleep(2)"
    )
    alias = "r" + uuid.uuid4().hex[:6]
    uri = f"http://127.0.0.1:{coords.cfg.proxy_port}"
    wait_until(lambda: _log_has(log, "node ready"), timeout=30, what="proxy ready")
    connections.connect(alias, uri=uri)
    try:
        coll = Collection("racing", bench_schema(), shards_num=1, using=alias)
        coll_id = coll.describe()["collection_id"]
        ids, vecs, tags = batch(0, 1000)
        inserter = threading.Thread(target=lambda: coll.insert([ids, vecs, tags]), daemon=True)
        inserter.start()
        wait_until(lambda: _log_has(log, "proxy.insert.before_assign"), timeout=30, what="insert stalled")
        # The flush seals nothing (no segment yet); the stalled insert, whose timestamp is older
        # than the flush's, then opens a new segment. The flush must still finish within a few
        # ticks, not at the idle seal (600 s): pymilvus raises on the timeout.
        coll.flush(timeout=30)
        inserter.join(30)
        coll.flush(timeout=30)
        _check_exactly_once(coords, coll, coll_id, ids)
        assert coll.num_entities == 1000
    finally:
        connections.disconnect(alias)
        proxy.stop()


COORDS = ("rootcoord", "datacoord", "querycoord")


def _check_after_fault(node, coll: Collection, coll_id: int, ins: Inserter) -> None:
    """Every acknowledged row stored once; rows whose insert failed stored at most once."""
    coll.flush(timeout=120)
    _check_exactly_once(node, coll, coll_id, ins.acked)


def _pause(proc: ProcessNode, seconds: float) -> None:
    import os
    import signal

    os.killpg(proc.proc.pid, signal.SIGSTOP)
    time.sleep(seconds)  # the pause is the fault
    os.killpg(proc.proc.pid, signal.SIGCONT)


def test_coordinators_paused_past_their_lease_hand_over_and_the_stale_leader_steps_down(
    node_factory, tmp_path, root, etcd_endpoint, nats_url
):
    """SIGSTOP of the active coordinators past the lease: the standby takes over, inserts and
    flushes go on, and the resumed stale leader changes nothing and exits."""
    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")
    a = ProcessNode(cfg, COORDS, tmp_path / "a.log").start(wait_for="component started")
    base = node_factory(roles=("datanode", "proxy"))
    b = ProcessNode(cfg, COORDS, tmp_path / "b.log").start(wait_for="standby: waiting for the leader lock")
    alias = "l" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=base.uri)
    try:
        coll = Collection("handover", bench_schema(), using=alias)
        coll_id = coll.describe()["collection_id"]
        ins = Inserter(coll)
        ins.start()
        wait_until(lambda: len(ins.acked) >= 5_000, timeout=60, what="first inserts")
        _pause(a, base.cfg.session_ttl + 3)
        wait_until(lambda: _log_has(tmp_path / "b.log", "leader lock acquired"), timeout=30, what="takeover")
        wait_until(lambda: a.proc.poll() is not None, timeout=30, what="the stale leader exits")
        assert a.proc.returncode == 1
        assert "leadership lost" in (tmp_path / "a.log").read_text()
        acked_at = len(ins.acked)
        wait_until(lambda: len(ins.acked) >= acked_at + 5_000, timeout=90, what="inserts after the handover")
        ins.stop_flag.set()
        ins.join(60)
        _check_after_fault(base, coll, coll_id, ins)
        Collection("after_handover", bench_schema(), using=alias)  # DDL served by the new leader
    finally:
        connections.disconnect(alias)
        a.kill()
        b.stop()


def test_datanode_paused_past_its_session_is_fenced_while_another_takes_over(node_factory, tmp_path):
    """SIGSTOP of a DataNode past its session TTL: its channels move to a second DataNode; when
    the first resumes, its time ticks and binlogs are refused, it drops the channels and comes
    back under a new ID; every acknowledged row is stored exactly once."""
    node = node_factory(roles=COORDS_AND_PROXY, insert_buffer_size_mb=4)
    dn1 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn1.log").start(wait_for="component started")
    alias = "d" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    dn2 = None
    try:
        coll = Collection("fenced", bench_schema(), using=alias)
        coll_id = coll.describe()["collection_id"]
        ins = Inserter(coll)
        ins.start()
        wait_until(lambda: len(ins.acked) >= 5_000, timeout=60, what="first inserts")
        dn2 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn2.log").start(wait_for="component started")
        _pause(dn1, node.cfg.session_ttl + 3)
        wait_until(lambda: _log_has(tmp_path / "dn2.log", "watching channel"), timeout=30, what="takeover")
        wait_until(
            lambda: _log_has(tmp_path / "dn1.log", "dropped every channel"),
            timeout=30,
            what="the stale DataNode drops its channels",
        )
        acked_at = len(ins.acked)
        wait_until(lambda: len(ins.acked) >= acked_at + 5_000, timeout=60, what="inserts after the takeover")
        ins.stop_flag.set()
        ins.join(60)
        _check_after_fault(node, coll, coll_id, ins)
        assert ins.failed == 0
    finally:
        connections.disconnect(alias)
        dn1.kill()
        if dn2 is not None:
            dn2.stop()


def test_proxy_killed_a_second_proxy_keeps_serving(node_factory, tmp_path):
    node = node_factory()
    cfg2 = node.cfg.replace(proxy_port=free_port())
    p2 = ProcessNode(cfg2, ("proxy",), tmp_path / "p2.log").start(wait_for="kmilvus proxy ready")
    a1, a2 = "p" + uuid.uuid4().hex[:6], "q" + uuid.uuid4().hex[:6]
    connections.connect(a1, uri=node.uri)
    connections.connect(a2, uri=f"http://127.0.0.1:{cfg2.proxy_port}")
    try:
        coll2 = Collection("twoproxies", bench_schema(), using=a2)
        coll_id = coll2.describe()["collection_id"]
        ins = Inserter(coll2)
        ins.start()
        wait_until(lambda: len(ins.acked) >= 5_000, timeout=60, what="inserts through proxy 2")
        p2.kill()  # SIGKILL mid-insert
        ins.stop_flag.set()
        ins.join(60)
        coll1 = Collection("twoproxies", using=a1)  # the surviving proxy serves it
        ids, vecs, tags = batch(10_000_000, 1000)
        coll1.insert([ids, vecs, tags])
        ins.acked.extend(ids)
        _check_after_fault(node, coll1, coll_id, ins)
    finally:
        connections.disconnect(a1)
        connections.disconnect(a2)
        p2.kill()


def test_inserts_beyond_the_proxy_bound_get_the_rate_limit_code(node_factory, tmp_path):
    """Back-pressure: a Proxy holds at most KMILVUS_MAX_PENDING_INSERT_MB of inserts (queued or
    running); more is refused with Milvus' rate-limit code (which pymilvus retries with
    back-off), never queued without bound."""
    import grpc
    from pymilvus.grpc_gen import milvus_pb2_grpc

    from tests.system.test_flush import fd_long, fd_str, fd_vec

    coords = node_factory(roles=("rootcoord", "datacoord", "querycoord", "datanode", "indexnode"))
    log = tmp_path / "proxy.log"
    proxy = ProcessNode(coords.cfg, ("proxy",), log)
    proxy.start(
        wait_for="component started",
        failpoints="proxy.insert.before_assign=sleep(3)",
        env={"KMILVUS_MAX_PENDING_INSERT_MB": "1"},
    )
    alias = "b" + uuid.uuid4().hex[:6]
    addr = f"127.0.0.1:{coords.cfg.proxy_port}"
    wait_until(lambda: _log_has(log, "node ready"), timeout=30, what="proxy ready")
    connections.connect(alias, uri="http://" + addr)
    try:
        coll = Collection("bounded", bench_schema(), shards_num=1, using=alias)
        n = 1000  # ≈ 0.55 MB per request

        def request(start: int):
            with grpc.insecure_channel(addr) as ch:
                return milvus_pb2_grpc.MilvusServiceStub(ch).Insert(
                    milvus_pb2.InsertRequest(
                        collection_name="bounded",
                        num_rows=n,
                        fields_data=[
                            fd_long("id", range(start, start + n)),
                            fd_vec("vec", n, 128),
                            fd_str("tag", [f"t{i}" for i in range(n)]),
                        ],
                    )
                )

        results: list = []
        first = threading.Thread(target=lambda: results.append(request(0)))
        first.start()
        wait_until(lambda: _log_has(log, "proxy.insert.before_assign"), timeout=30, what="first insert held")
        second = request(n)
        third = request(2 * n)
        first.join(30)
        assert (second.status.code, third.status.code) == (8, 8)
        assert "rate limit exceeded" in second.status.reason
        assert results[0].status.code == 0 and results[0].insert_cnt == n
        coll.flush(timeout=30)
        assert coll.num_entities == n  # the refused inserts stored nothing
    finally:
        connections.disconnect(alias)
        proxy.stop()


def test_storage_unavailable_mid_flush_keeps_every_row_and_the_flush_finishes(node_factory, tmp_path):
    """Object storage away while a flush writes (the local root replaced by a file: root ignores
    permissions): the DataNode keeps the data and retries; once storage is back the flush
    finishes and every acknowledged row is stored once."""
    node = node_factory(insert_buffer_size_mb=2)
    storage = tmp_path / "storage"
    alias = "o" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    aside = tmp_path / "storage-aside"
    try:
        coll = Collection("outage", bench_schema(), using=alias)
        coll_id = coll.describe()["collection_id"]
        acked: list[int] = []
        for start in range(0, 6000, 1000):
            ids, vecs, tags = batch(start, 1000)
            coll.insert([ids, vecs, tags])
            acked += ids
        storage.rename(aside)
        storage.write_text("storage is away")
        done = threading.Event()
        errors: list[Exception] = []

        def flush() -> None:
            try:
                coll.flush(timeout=120)
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)
            done.set()

        threading.Thread(target=flush, daemon=True).start()
        for start in range(6000, 9000, 1000):  # inserts go on while storage is away
            ids, vecs, tags = batch(start, 1000)
            coll.insert([ids, vecs, tags])
            acked += ids
        time.sleep(2)  # time for a flush that wrongly finished without storage to say so
        assert not done.is_set(), "a flush cannot finish while storage is away"
        storage.unlink()
        aside.rename(storage)
        assert done.wait(120) and not errors, errors
        coll.flush(timeout=60)
        _check_exactly_once(node, coll, coll_id, acked)
    finally:
        connections.disconnect(alias)
        if aside.exists():
            if storage.is_file():
                storage.unlink()
            aside.rename(storage)


def test_a_failed_channel_watch_is_retried_without_a_node_event(node_factory, tmp_path):
    """Found by chaos: a DataNode taking a channel over could not read a flushed segment's
    stats log (collected meanwhile); DataCoord logged "watch channel failed" and retried only on
    the next DataNode session event. In a quiet cluster there is none: the channel stayed
    without a node and every later flush waited forever. A failed watch is retried by itself.
    (A watch reads no stats log any more: the new owner's watch fails at a failpoint until the
    test lets it through.)"""
    node = node_factory(roles=COORDS_AND_PROXY)
    dn1 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn1.log").start(wait_for="component started")
    alias = "w" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    dn2 = None
    try:
        coll = Collection("rewatch", bench_schema(), using=alias, shards_num=1)
        coll_id = coll.describe()["collection_id"]
        coll.insert(list(batch(0, 1_000)))
        coll.flush(timeout=60)
        watch_ok = tmp_path / "watch-ok"
        dn2 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn2.log").start(
            wait_for="component started", failpoints=f"datanode.watch=fail({watch_ok})"
        )
        dn1.kill()
        wait_until(lambda: _log_has(tmp_path / "dn2.log", "rpc failed"), timeout=60, what="the failed watch")
        watch_ok.touch()
        coll.insert(list(batch(1_000, 1_000)))
        coll.flush(timeout=60)
        _check_exactly_once(node, coll, coll_id, list(range(2_000)))
    finally:
        connections.disconnect(alias)
        dn1.kill()
        if dn2 is not None:
            dn2.stop()
