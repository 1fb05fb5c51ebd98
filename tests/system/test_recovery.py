"""Crash recovery: a DataNode killed with SIGKILL, coordinators restarted. Every acknowledged
insert ends up in the binlogs exactly once."""

from __future__ import annotations

import asyncio
import threading
import uuid

import numpy as np
from pymilvus import Collection, connections

from kmilvus.datacoord.verify import committed_keys_at
from kmilvus.proto import data_coord_pb2
from tests.flushutil import batch, bench_schema, read_collection
from tests.harness import ProcessNode
from tests.util import wait_until

COORDS_AND_PROXY = ("rootcoord", "datacoord", "querycoord", "proxy")


def all_segments(node, coll_id):
    dc = node.component("datacoord")
    return list(
        node.call(dc.GetSegmentsByCollection(data_coord_pb2.GetSegmentsByCollectionRequest(collectionID=coll_id))).infos
    )


class Inserter(threading.Thread):
    """Inserts 500-row batches until stopped; remembers exactly which keys were acknowledged."""

    def __init__(self, coll: Collection):
        super().__init__(daemon=True)
        self.coll = coll
        self.acked: list[int] = []
        self.failed = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        start = 0
        while not self.stop_flag.is_set():
            ids, vecs, tags = batch(start, 500, dim=128)
            try:
                res = self.coll.insert([ids, vecs, tags])
                assert list(res.primary_keys) == ids
                self.acked.extend(ids)
            except Exception:  # noqa: BLE001 - an unacknowledged insert may or may not be kept
                self.failed += 1
            start += 500


def test_datanode_sigkill_then_restart_keeps_every_acked_row_once(node_factory, tmp_path):
    node = node_factory(roles=COORDS_AND_PROXY, insert_buffer_size_mb=4)
    dn1 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn1.log").start(wait_for="component started")
    alias = "r" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    try:
        coll = Collection("crash", bench_schema(), using=alias)
        coll_id = coll.describe()["collection_id"]
        ins = Inserter(coll)
        ins.start()
        wait_until(lambda: len(ins.acked) >= 10_000, timeout=60, what="first inserts")
        dn1.kill()  # SIGKILL mid-stream
        killed_at = len(ins.acked)
        dn2 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn2.log").start(wait_for="component started")
        wait_until(lambda: len(ins.acked) >= killed_at + 10_000, timeout=60, what="inserts after the kill")
        ins.stop_flag.set()
        ins.join(30)
        coll.flush(timeout=120)
        # What a reader sees: binlogs DataCoord's meta refers to (the killed DataNode may have
        # left a file it never committed; the garbage collector removes those).
        pk = asyncio.run(committed_keys_at(node.cfg.etcd_endpoints[0], node.cfg.cluster, node.cfg.storage_uri, coll_id))
        acked = np.asarray(ins.acked)
        assert len(pk) == len(np.unique(pk)), "a primary key was written twice"
        assert set(acked.tolist()) <= set(pk.tolist()), "an acknowledged row was lost"
        assert ins.failed == 0 and len(pk) == len(acked)
        assert coll.num_entities == len(acked)
        assert "watching channel" in (tmp_path / "dn2.log").read_text()
        dn2.stop()
    finally:
        connections.disconnect(alias)
        dn1.kill()


def test_coordinator_restart_loses_no_segment_state(node_factory):
    first = node_factory()
    alias = "c" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=first.uri)
    coll = Collection("durable", bench_schema(), using=alias)
    for off in (0, 2000):
        ids, vecs, tags = batch(off, 2000)
        coll.insert([ids, vecs, tags])
    coll.flush()
    coll_id = coll.describe()["collection_id"]
    ids, vecs, tags = batch(4000, 1000)
    coll.insert([ids, vecs, tags])  # growing, unflushed
    before = {s.ID: (s.state, s.num_of_rows, s.binlog_count) for s in all_segments(first, coll_id)}
    connections.disconnect(alias)
    first.stop()

    second = node_factory()
    connections.connect(alias, uri=second.uri)
    try:
        after = {s.ID: (s.state, s.num_of_rows, s.binlog_count) for s in all_segments(second, coll_id)}
        for sid, (state, rows, binlogs) in before.items():
            if rows:  # flushed segments come back exactly as they were
                assert after[sid] == (state, rows, binlogs)
        coll = Collection("durable", using=alias)
        coll.flush(timeout=60)  # the unflushed 1,000 rows are replayed
        assert coll.num_entities == 5000
        pk = read_collection(second.node.store, all_segments(second, coll_id)).column("100").to_numpy()
        assert sorted(pk.tolist()) == list(range(5000))
    finally:
        connections.disconnect(alias)
