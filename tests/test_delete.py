"""Delete and upsert through pymilvus (docs/architecture/write-path.md): Delete messages routed by primary
key, per-segment delete buffers, delta logs (Parquet: pk, ts) committed with SaveBinlogPaths,
compaction applying them, and a DataNode SIGKILL with buffered deletes."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, MilvusClient, MilvusException, connections
from pymilvus.grpc_gen import common_pb2

from kmilvus.meta import catalog
from kmilvus.storage import binlog, paths
from tests.harness import ProcessNode
from tests.util import wait_until

DIM = 8
COORDS_AND_PROXY = ("rootcoord", "datacoord", "querycoord", "proxy")
SPARK_TIMEOUT = 240


def _schema(pk_type=DataType.INT64, auto_id=False) -> CollectionSchema:
    pk = (
        FieldSchema("id", pk_type, is_primary=True, auto_id=auto_id)
        if pk_type == DataType.INT64
        else FieldSchema("id", pk_type, is_primary=True, max_length=32)
    )
    return CollectionSchema(
        [pk, FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM), FieldSchema("tag", DataType.VARCHAR, max_length=32)]
    )


def _rows(ids, tag="t"):
    rng = np.random.default_rng(len(ids))
    vecs = rng.random((len(ids), DIM), dtype=np.float32)
    return [{"id": k, "vec": vecs[i].tolist(), "tag": f"{tag}{k}"} for i, k in enumerate(ids)]


def _segments(node, coll: int, states=(common_pb2.Flushed,)):
    dc = node.component("datacoord")
    return sorted(dc.meta.by_collection(coll, states), key=lambda s: s.id)


def _deltas(node, coll: int) -> pa.Table:
    """Every committed delta log of the collection (what DataCoord's meta refers to), read with pyarrow."""
    store = node.node.store
    tables = [
        pq.read_table(store.path(b.log_path), filesystem=store.filesystem)
        for s in _segments(node, coll)
        for b in s.deltalogs.values()
    ]
    return (
        pa.concat_tables(tables)
        if tables
        else pa.table({"pk": pa.array([], pa.int64()), "ts": pa.array([], pa.int64())})
    )


def _read_rows(node, coll: int) -> pa.Table:
    tables = [binlog.read_segment(node.node.store, coll, s.info.partitionID, s.id) for s in _segments(node, coll)]
    return pa.concat_tables([t for t in tables if t.num_rows])


def _coll_id(client: MilvusClient, name: str) -> int:
    return client.describe_collection(name)["collection_id"]


# ------------------------------------------------------------------------------ delete


def test_delete_ten_keys_writes_delta_logs_on_flush(node, client):
    client.create_collection("del", schema=_schema())
    coll = _coll_id(client, "del")
    client.insert("del", _rows(range(100)))
    client.flush("del")
    res = client.delete("del", filter=f"id in {list(range(10))}")
    assert res["delete_count"] == 10
    assert client.delete("del", filter="id == 1000")["delete_count"] == 1  # no such key: accepted
    client.flush("del")
    deltas = wait_until(lambda: _deltas(node, coll).num_rows == 10 and _deltas(node, coll), what="delta logs")
    assert deltas.schema.names == ["pk", "ts"]
    assert sorted(deltas.column("pk").to_pylist()) == list(range(10))
    rows = _read_rows(node, coll)
    # The delete is newer than every row it removes.
    assert min(deltas.column("ts").to_pylist()) > max(rows.column("1").to_pylist())
    segs = _segments(node, coll)
    for s in segs:
        for b in s.deltalogs.values():
            assert b.log_path.startswith(f"delta_log/{coll}/{s.info.partitionID}/{s.id}/")
        assert s.statslogs, "a flushed segment has primary-key stats logs"
    # Statistics count rows in flushed segments: deletes count once compaction removed them.
    assert client.get_collection_stats("del")["row_count"] == 100
    # Drop removes delta logs, stats logs and their meta.
    client.drop_collection("del")
    store, kv = node.node.store, node.node.kv

    def left():
        files = [k for p in paths.collection_prefixes(coll) for k, _ in node.call(store.list(p))]
        meta = [k for p in catalog.segment_log_prefixes(coll) for k, _ in node.call(kv.get_prefix(p))]
        return files + meta

    wait_until(lambda: not left(), timeout=5, what="nothing left of the dropped collection")


def test_flush_after_deletes_writes_them_without_waiting_for_the_delta_sync(node_factory, monkeypatch):
    """A Flush that seals nothing but follows deletes of flushed rows: once the channel's tick
    passes the flush, DataCoord makes the DataNode write the buffered deletes at once (they hold
    the channel checkpoint back), instead of the flush waiting until they are DELTA_SYNC_SECONDS
    old. With that age an hour, the flush completing is the proof."""
    from kmilvus.datanode import flowgraph

    monkeypatch.setattr(flowgraph, "DELTA_SYNC_SECONDS", 3600.0)
    node = node_factory()
    c = MilvusClient(uri=node.uri)
    try:
        c.create_collection("dflush", schema=_schema())
        coll = _coll_id(c, "dflush")
        c.insert("dflush", _rows(range(100)))
        c.flush("dflush")
        assert c.delete("dflush", filter=f"id in {list(range(10))}")["delete_count"] == 10
        c.flush("dflush", timeout=60)
        assert sorted(_deltas(node, coll).column("pk").to_pylist()) == list(range(10))
    finally:
        c.close()


def test_delete_varchar_keys_orm(node, orm):
    coll = Collection("vdel", _schema(DataType.VARCHAR), using=orm)
    ids = [f"k{i}" for i in range(50)]
    coll.insert(_rows(ids))
    res = coll.delete('id in ["k1", "k2", "k3"] or id == "k4"')
    assert res.delete_count == 4
    coll.flush()  # the deletes ride with the growing segment's flush
    coll_id = coll.describe()["collection_id"]
    deltas = wait_until(lambda: _deltas(node, coll_id).num_rows == 4 and _deltas(node, coll_id), what="delta logs")
    assert sorted(deltas.column("pk").to_pylist()) == ["k1", "k2", "k3", "k4"]
    assert coll.num_entities == 50


def test_delete_bad_input_writes_nothing(node, client):
    client.create_collection("bad", schema=_schema())
    coll = _coll_id(client, "bad")
    client.insert("bad", _rows(range(20)))
    with pytest.raises(MilvusException) as e:
        client.delete("bad", filter='tag == "t1"')
    # Any other expression is a query first (the read path): the collection must be loaded.
    assert e.value.code == 101 and "collection not loaded" in e.value.message
    with pytest.raises(MilvusException):
        client.delete("bad", filter="id in [1, 2")
    with pytest.raises(MilvusException) as e:
        client.delete("nosuch", filter="id in [1]")
    assert e.value.code == 100
    client.flush("bad")
    time.sleep(1.5)
    assert _deltas(node, coll).num_rows == 0
    assert client.get_collection_stats("bad")["row_count"] == 20


# ------------------------------------------------------------------------------ upsert


def test_upsert_replaces_rows_and_compaction_keeps_the_new_version(node_factory):
    n = node_factory(auto_compaction=False)
    client = MilvusClient(uri=n.uri)
    try:
        client.create_collection("ups", schema=_schema())
        coll = _coll_id(client, "ups")
        client.insert("ups", _rows(range(100)))
        client.flush("ups")
        res = client.upsert("ups", _rows(range(10), tag="new"))
        assert res["upsert_count"] == 10
        client.flush("ups")
        # Binlogs hold both versions; the delta logs say which old ones are gone.
        rows = _read_rows(n, coll)
        assert rows.num_rows == 110
        new_ts = {r["100"]: r["1"] for r in rows.select(["100", "1", "102"]).to_pylist() if r["102"].startswith("new")}
        assert sorted(new_ts) == list(range(10)) and len(set(new_ts.values())) == 1
        deltas = wait_until(lambda: _deltas(n, coll).num_rows >= 10 and _deltas(n, coll), what="delta logs")
        old_seg = _segments(n, coll)[0]
        old_deltas = pa.concat_tables(
            pq.read_table(n.node.store.path(b.log_path), filesystem=n.node.store.filesystem)
            for b in old_seg.deltalogs.values()
        )
        assert sorted(old_deltas.column("pk").to_pylist()) == list(range(10))
        # Delete and insert share one timestamp: the delete removes the old rows only.
        assert set(deltas.column("ts").to_pylist()) == set(new_ts.values())
        assert client.get_collection_stats("ups")["row_count"] == 110

        alias = "u" + uuid.uuid4().hex[:6]
        connections.connect(alias, uri=n.uri)
        try:
            coll_orm = Collection("ups", using=alias)
            coll_orm.compact()
            assert coll_orm.wait_for_compaction_completed(timeout=SPARK_TIMEOUT)
            assert coll_orm.get_compaction_state().completed == 1
        finally:
            connections.disconnect(alias)
        segs = _segments(n, coll)
        assert len(segs) == 1 and not segs[0].deltalogs, "the compacted segment carries no delta logs"
        rows = _read_rows(n, coll)
        ids = rows.column("100").to_pylist()
        assert sorted(ids) == list(range(100))
        tags = dict(zip(ids, rows.column("102").to_pylist(), strict=True))
        assert all(tags[k] == f"new{k}" for k in range(10)) and tags[10] == "t10"
        assert client.get_collection_stats("ups")["row_count"] == 100
        # The sources' delta and stats logs are collected with them (the target has none).
        store = n.node.store

        def logs_left():
            return [
                k
                for p in (paths.delta_log_prefix(coll), paths.stats_log_prefix(coll))
                for k, _ in n.call(store.list(p))
            ]

        wait_until(lambda: not logs_left(), timeout=10, what="the sources' delta and stats logs collected")
    finally:
        client.close()


def test_upsert_into_autoid_collection_is_refused(node, orm):
    coll = Collection("auto", _schema(auto_id=True), using=orm)
    coll_id = coll.describe()["collection_id"]
    rng = np.random.default_rng(1)
    with pytest.raises(MilvusException) as e:
        coll.upsert([[1, 2], rng.random((2, DIM), dtype=np.float32), ["a", "b"]])
    assert e.value.code == 1100
    assert "upsert can not assign primary field data when auto id enabled" in e.value.message
    coll.flush()
    assert coll.num_entities == 0 and _segments(node, coll_id) == []


# ------------------------------------------------------------------------------ crash


class Deleter(threading.Thread):
    """Deletes 10 keys per request until stopped; remembers which deletes were acknowledged."""

    def __init__(self, client: MilvusClient, name: str, keys: int):
        super().__init__(daemon=True)
        self.client, self.name, self.keys = client, name, keys
        self.acked: list[int] = []
        self.failed = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        for start in range(0, self.keys, 10):
            if self.stop_flag.is_set():
                return
            ids = list(range(start, start + 10))
            try:
                assert self.client.delete(self.name, filter=f"id in {ids}")["delete_count"] == 10
                self.acked.extend(ids)
            except Exception:  # noqa: BLE001 - an unacknowledged delete may or may not be kept
                self.failed += 1
            time.sleep(0.005)


def test_datanode_sigkill_with_buffered_deletes_keeps_each_once(node_factory, tmp_path):
    node = node_factory(roles=COORDS_AND_PROXY)
    dn1 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn1.log").start(wait_for="component started")
    client = MilvusClient(uri=node.uri)
    try:
        client.create_collection("crashdel", schema=_schema())
        coll = _coll_id(client, "crashdel")
        for start in range(0, 6000, 2000):
            client.insert("crashdel", _rows(range(start, start + 2000)))
            client.flush("crashdel")
        dl = Deleter(client, "crashdel", 6000)
        dl.start()
        wait_until(lambda: len(dl.acked) >= 1500, timeout=60, what="first deletes")
        acked_before = set(dl.acked)
        dn1.kill()  # SIGKILL with deletes buffered (flushed segments' deletes wait up to a second)
        killed_at = len(dl.acked)
        # Some acknowledged deletes were only in dn1's memory: the takeover must recover them.
        assert not acked_before <= set(_deltas(node, coll).column("pk").to_pylist())
        dn2 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn2.log").start(wait_for="component started")
        wait_until(lambda: len(dl.acked) >= killed_at + 1500 or not dl.is_alive(), timeout=90, what="deletes after")
        dl.stop_flag.set()
        dl.join(30)
        client.flush("crashdel", timeout=120)
        acked = set(dl.acked)

        def settled():
            pks = _deltas(node, coll).column("pk").to_pylist()
            return pks if acked <= set(pks) else None

        pks = wait_until(settled, timeout=30, what="every acknowledged delete in a committed delta log")
        assert len(pks) == len(set(pks)), "a delete was written twice"
        assert dl.failed == 0 and set(pks) == acked
        assert "watching channel" in (tmp_path / "dn2.log").read_text()
        dn2.stop()
    finally:
        client.close()
        dn1.kill()
