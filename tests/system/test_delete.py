"""Delete and upsert through pymilvus (docs/architecture/write-path.md): Delete messages routed by
primary key, the channel's delete buffers, L0 delta logs (Parquet: pk, ts) committed with
SaveBinlogPaths, compaction and readers applying them to every segment of the channel (imported
and compacted ones included), deletes committed while a compaction runs, delete writes of a
channel committing in order, a DataNode SIGKILL with buffered deletes, partition-scoped deletes,
and the newest version of a key."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import (
    BulkInsertState,
    Collection,
    CollectionSchema,
    DataType,
    FieldSchema,
    MilvusClient,
    MilvusException,
    connections,
    utility,
)
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


def _delta_paths(node, coll: int) -> list[str]:
    """Every committed delta log of the collection (what DataCoord's meta refers to): its
    segments' and its channels' L0 delta logs."""
    meta = node.component("datacoord").meta
    paths_ = [b.log_path for s in _segments(node, coll) for b in s.deltalogs.values()]
    return paths_ + [d.binlog.log_path for d in getattr(meta, "l0", {}).get(coll, {}).values()]


def _deltas(node, coll: int) -> pa.Table:
    """Every committed delete of the collection, read with pyarrow."""
    store = node.node.store
    tables = [pq.read_table(store.path(k), filesystem=store.filesystem) for k in _delta_paths(node, coll)]
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
    # The channel's deletes as L0 delta logs: every key deleted, held or not (as Milvus' L0).
    deltas = wait_until(lambda: _deltas(node, coll).num_rows == 11 and _deltas(node, coll), what="delta logs")
    assert deltas.schema.names == ["pk", "ts"]
    assert sorted(deltas.column("pk").to_pylist()) == [*range(10), 1000]
    rows = _read_rows(node, coll)
    # The delete is newer than every row it removes.
    assert min(deltas.column("ts").to_pylist()) > max(rows.column("1").to_pylist())
    dc = node.component("datacoord")
    (vchannel,) = dc.channels.channels_of(coll)
    for d in dc.meta.l0[coll].values():
        assert d.channel == vchannel and d.partitionID == -1  # no partition named: every partition
        assert d.binlog.log_path.startswith(f"delta_log/{coll}/-1/l0/")
    segs = _segments(node, coll)
    for s in segs:
        assert not s.deltalogs
        assert s.statslogs, "a flushed segment has primary-key stats logs"
    # Statistics count rows in flushed segments: deletes count once compaction removed them.
    assert client.get_collection_stats("del")["row_count"] == 100
    # Drop removes delta logs, stats logs and their meta.
    client.drop_collection("del")
    store, kv = node.node.store, node.node.kv

    def left():
        files = [k for p in paths.collection_prefixes(coll) for k, _ in node.call(store.list(p))]
        prefixes = [*catalog.segment_log_prefixes(coll), catalog.l0_deltalog_prefix(coll)]
        meta = [k for p in prefixes for k, _ in node.call(kv.get_prefix(p))]
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
    time.sleep(1.5)  # past DELTA_SYNC_SECONDS: a delete buffered by mistake would be written by now
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
        assert sorted(deltas.column("pk").to_pylist()) == list(range(10))  # the channel's L0 delta logs
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
        # The sources' stats logs are collected with them (the target has none); the channel's
        # L0 delta logs stay (they are the collection's, removed with it).
        store = n.node.store

        def logs_left():
            files = [
                k
                for p in (paths.delta_log_prefix(coll), paths.stats_log_prefix(coll))
                for k, _ in n.call(store.list(p))
            ]
            return [k for k in files if paths.parse_l0_delta_log_key(k) is None]

        wait_until(lambda: not logs_left(), timeout=10, what="the sources' stats logs collected")
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
            time.sleep(0.005)  # paced: deletes go on while the DataNode is killed


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


# ------------------------------------------------------------------------------ deletes stay deleted


def _indexed_and_loaded(client: MilvusClient, name: str) -> None:
    index = client.prepare_index_params()
    index.add_index("vec", index_type="FLAT", metric_type="L2")
    client.create_index(name, index)
    client.load_collection(name)


def _loaded_in_four_segments(client: MilvusClient, name: str) -> None:
    """A loaded collection of 400 rows (keys 0–399) in four flushed segments of 100."""
    client.create_collection(name, schema=_schema())
    _indexed_and_loaded(client, name)
    for start in range(0, 400, 100):
        client.insert(name, _rows(range(start, start + 100)))
        client.flush(name)


def _visible(client: MilvusClient, name: str, ids) -> set[int]:
    """Which of `ids` a Strong query returns."""
    got = client.query(name, filter=f"id in {sorted(ids)}", output_fields=["id"], consistency_level="Strong")
    return {r["id"] for r in got}


def _count(client: MilvusClient, name: str) -> int:
    return client.query(name, filter="", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]


def _compact(uri: str, name: str) -> None:
    alias = "c" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=uri)
    try:
        coll = Collection(name, using=alias)
        coll.compact()
        assert coll.wait_for_compaction_completed(timeout=SPARK_TIMEOUT)
    finally:
        connections.disconnect(alias)


def _stages(client: MilvusClient, uri: str, name: str, stages=("flushed", "released and loaded", "compacted")):
    """Yield each stage's name once the collection is there: as it is, released and loaded
    again, compacted."""
    for when in stages:
        if when == "released and loaded":
            client.release_collection(name)
            client.load_collection(name)
        if when == "compacted":
            _compact(uri, name)
        yield when


def _write_parquet(path, ids) -> None:
    """Rows of `_schema()` for `ids` as one Parquet file, the way a bulk import reads them."""
    vecs = np.random.default_rng(3).random((len(ids), DIM), dtype=np.float32)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.asarray(ids, dtype=np.int64)),
                "vec": pa.array(list(vecs), pa.list_(pa.float32())),
                "tag": pa.array([f"i{k}" for k in ids]),
            }
        ),
        path,
    )


def _import(uri: str, name: str, path, ids) -> None:
    _write_parquet(path, ids)
    alias = "i" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=uri)
    try:
        task = utility.do_bulk_insert(name, files=[str(path)], using=alias)
        st = wait_until(
            lambda: (
                (x := utility.get_bulk_insert_state(task, using=alias)).state
                in (BulkInsertState.ImportCompleted, BulkInsertState.ImportFailed)
                and x
            ),
            timeout=SPARK_TIMEOUT,
            interval=0.1,
            what="the import",
        )
        assert st.state == BulkInsertState.ImportCompleted, st.infos
    finally:
        connections.disconnect(alias)


def test_deletes_of_imported_rows_on_two_shards_stay_deleted(node, client, tmp_path):
    """A DataNode never learns of an imported segment: its deletes must still reach every
    reader and the compaction of that segment, on whichever shard the key lives."""
    client.create_collection("imp", schema=_schema(), num_shards=2)
    coll = _coll_id(client, "imp")
    _indexed_and_loaded(client, "imp")
    _import(node.uri, "imp", tmp_path / "rows.parquet", list(range(2000)))
    gone = list(range(0, 2000, 10))
    assert client.delete("imp", ids=gone)["delete_count"] == 200
    client.flush("imp")
    assert set(gone) <= set(_deltas(node, coll).column("pk").to_pylist()), "deletes in committed delta logs"
    client.insert("imp", _rows(range(2000, 2400)))  # a second segment on each shard: compaction merges
    client.flush("imp")
    for when in _stages(client, node.uri, "imp"):
        assert not _visible(client, "imp", gone), f"deleted imported rows are back once {when}"
        assert _count(client, "imp") == 2200, when
    # Compaction removed them for good: no committed binlog holds them any more.
    assert set(_read_rows(node, coll).column("100").to_pylist()) == set(range(2400)) - set(gone)
    # Every row is on the shard its key hashes to, imported ones too (where its deletes go).
    from kmilvus.msgstream import channels
    from kmilvus.util.hashing import shard_of

    for s in _segments(node, coll):
        keys = binlog.read_segment(node.node.store, coll, s.info.partitionID, s.id).column("100")
        assert set(shard_of(keys.combine_chunks(), 2).tolist()) == {channels.shard_of(s.info.insert_channel)}


def test_deletes_of_a_segment_compacted_twice_after_the_watch_stay_deleted(node, client):
    """Segments made by compactions after the DataNode started watching its channel (the
    compaction target of a target included) get their deletes too."""
    client.create_collection("twice", schema=_schema())
    _indexed_and_loaded(client, "twice")
    for start in range(0, 300, 100):
        client.insert("twice", _rows(range(start, start + 100)))
        client.flush("twice")
    _compact(node.uri, "twice")
    client.insert("twice", _rows(range(300, 400)))
    client.flush("twice")
    _compact(node.uri, "twice")
    coll = _coll_id(client, "twice")
    wait_until(
        lambda: len(_segments(node, coll, states=None)) == 1, timeout=30, what="the intermediate target collected"
    )
    gone = list(range(0, 400, 7))
    client.delete("twice", ids=gone)
    client.flush("twice")
    # A flush of new rows commits the channel checkpoint past the deletes: a reader loaded
    # from here on no longer replays them from the stream.
    client.insert("twice", _rows(range(400, 410)))
    client.flush("twice")
    client.release_collection("twice")
    client.load_collection("twice")
    assert not _visible(client, "twice", gone)
    assert _count(client, "twice") == 410 - len(gone)


def test_delete_writes_commit_in_order_so_a_replayed_channel_loses_none(node_factory):
    """Two delete writes of one channel in flight (one taken while the segment's final flush was
    held, one after): if the later commits first, its position passes deletes not committed yet,
    and a replay after the node's restart skips them. Forced here, in DataCoord's meta (where
    every commit lands): the final write is held, the first delete write is held at its commit,
    the DataNode loses its session."""
    node = node_factory()
    dc, dn = node.component("datacoord"), node.component("datanode")
    client = MilvusClient(uri=node.uri)
    meta = dc.meta
    real_save, real_l0 = meta.save_binlog_paths, getattr(meta, "save_l0", None)
    state: dict = {"final": None, "first": None, "committed": 0}
    release_final, crash = asyncio.Event(), asyncio.Event()

    async def deletes(real, req, *args):
        if state["first"] is None:
            state["first"] = req
            await crash.wait()
            raise ConnectionError("the first delete write never commits")
        out = await real(req, *args)
        state["committed"] += 1
        return out

    async def save(req, *args):
        if req.flushed and state["final"] is None:
            state["final"] = req.segmentID
            await release_final.wait()
        elif req.deltalogs:
            return await deletes(real_save, req, *args)
        return await real_save(req, *args)

    async def save_l0(req, *args):
        return await deletes(real_l0, req, *args)

    meta.save_binlog_paths = save
    if real_l0 is not None:
        meta.save_l0 = save_l0
    try:
        client.create_collection("order", schema=_schema())
        coll = _coll_id(client, "order")
        client.insert("order", _rows(range(1000)))
        flushers: list[threading.Thread] = []

        def flush_in_background() -> None:
            """A flush makes the DataNode write buffered deletes at once (it then waits for them)."""
            flushers.append(threading.Thread(target=lambda: client.flush("order", timeout=120), daemon=True))
            flushers[-1].start()

        flush_in_background()
        wait_until(lambda: state["final"] is not None, timeout=30, what="the final write held")
        (ch, fg), *_ = dn.flowgraphs.items()
        assert client.delete("order", ids=list(range(10)))["delete_count"] == 10
        flush_in_background()
        wait_until(lambda: len(fg.inflight) >= 2, timeout=30, what="deletes taken while the final write is held")
        node.loop.call_soon_threadsafe(release_final.set)
        wait_until(lambda: state["first"] is not None, timeout=30, what="the first delete write held")
        assert client.delete("order", ids=list(range(10, 20)))["delete_count"] == 10
        flush_in_background()
        wait_until(
            lambda: (
                state["committed"]
                or (getattr(fg, "l0_lock", None) is not None and fg.l0_lock.locked() and len(fg.inflight) >= 2)
            ),
            timeout=30,
            what="the second delete write committed, or waiting behind the first",
        )
        # The DataNode restarts (its session lost): the channel is watched again and replayed.
        session = next(s for s in node.node.sessions if s.role == "datanode")
        node.call(node.node.kv.revoke(session.lease))
        wait_until(lambda: dn.flowgraphs.get(ch) not in (None, fg), timeout=60, what="the channel watched again")
        node.loop.call_soon_threadsafe(crash.set)
        for t in flushers:
            t.join(120)
        client.flush("order", timeout=120)
        committed = set(_deltas(node, coll).column("pk").to_pylist())
        assert set(range(20)) <= committed, f"acknowledged deletes lost: {sorted(set(range(20)) - committed)}"
    finally:
        meta.save_binlog_paths = real_save
        if real_l0 is not None:
            meta.save_l0 = real_l0
        node.loop.call_soon_threadsafe(release_final.set)
        node.loop.call_soon_threadsafe(crash.set)
        client.close()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("route", ["inprocess", "spark"])
def test_deletes_committed_while_a_compaction_runs_stay_deleted(node_factory, tmp_path, route):
    """A compaction planned before deletes of its sources were committed: the swap must not drop
    them — neither the channel's deletes nor a source's own delta log committed meanwhile (as a
    DataNode of an earlier version writes them), on either job route."""
    from kmilvus.proto import internal_pb2
    from kmilvus.storage import deltalog
    from kmilvus.util import failpoint

    go = tmp_path / "go"
    failpoint.enable("datacoord.compaction.before_swap", f"wait({go})")
    routes = {"inprocess": {}, "spark": {"inprocess_job_max_mb": 0}}  # Spark: the warm local driver
    node = node_factory(**routes[route])
    client = MilvusClient(uri=node.uri)
    try:
        _loaded_in_four_segments(client, "during")
        coll = _coll_id(client, "during")
        sources = _segments(node, coll)
        alias = "c" + uuid.uuid4().hex[:6]
        connections.connect(alias, uri=node.uri)
        orm_coll = Collection("during", using=alias)
        orm_coll.compact()
        dc = node.component("datacoord")
        job = wait_until(
            lambda: next((j for j in dc.compactions.of_collection(coll) if j.spec), None),
            timeout=60,
            what="the compaction planned (its sources' delta logs read)",
        )
        assert not dc.compactions.finished(job)  # its swap waits for the failpoint's file
        # The channel's deletes, committed while the job runs...
        gone = list(range(0, 400, 9))
        client.delete("during", ids=gone)
        client.flush("during")
        # ...and a source's own delta log, as an earlier DataNode committed deletes of a segment.
        src = sources[0]
        key = paths.delta_log_key(coll, src.info.partitionID, src.id, 999_000_001)
        info = deltalog.write_delta_log(
            node.node.store, key, pa.array([150, 151], pa.int64()), pa.array([2**62, 2**62], pa.int64())
        )
        req = internal_pb2.SaveBinlogPathsRequest(segmentID=src.id, collectionID=coll, partitionID=src.info.partitionID)
        req.deltalogs.add(logID=999_000_001, entries_num=2, log_path=key, log_size=info.size)
        assert node.call(dc.SaveBinlogPaths(req)).code == 0
        gone += [150, 151]
        go.touch()
        assert orm_coll.wait_for_compaction_completed(timeout=SPARK_TIMEOUT)
        connections.disconnect(alias)
        assert not {s.id for s in sources} & {s.id for s in _segments(node, coll)}, "the sources were swapped"
        for when in _stages(client, node.uri, "during", ("compacted", "released and loaded")):
            assert not _visible(client, "during", gone), f"deleted rows are back once {when}"
            assert _count(client, "during") == 400 - len(set(gone)), when
        client.insert("during", _rows(range(400, 450)))
        client.flush("during")
        _compact(node.uri, "during")
        rows = set(_read_rows(node, coll).column("100").to_pylist())
        assert rows == set(range(450)) - set(gone), "a second compaction removes them for good"
    finally:
        failpoint.disable("datacoord.compaction.before_swap")
        go.touch()
        client.close()


def test_delete_with_a_partition_applies_to_that_partition_only(node, client):
    client.create_collection("parts", schema=_schema())
    client.create_partition("parts", "p1")
    client.create_partition("parts", "p2")
    _indexed_and_loaded(client, "parts")
    for start in range(0, 200, 50):  # two flushed segments per partition: compaction merges them
        client.insert("parts", _rows(range(start, start + 50)), partition_name="p1" if start < 100 else "p2")
        client.flush("parts")
    # Keys of both partitions, deleted in p1: p2's rows stay (as in Milvus).
    assert client.delete("parts", ids=list(range(50, 150)), partition_name="p1")["delete_count"] == 100
    assert client.delete("parts", filter="id >= 190", partition_name="p1")["delete_count"] == 0
    assert client.delete("parts", filter="id >= 190", partition_name="p2")["delete_count"] == 10
    with pytest.raises(MilvusException) as e:
        client.delete("parts", ids=[1], partition_name="nope")
    assert e.value.code == 200 and "partition not found" in e.value.message
    client.flush("parts")
    want = set(range(50)) | set(range(100, 190))
    for when in _stages(client, node.uri, "parts"):
        assert _visible(client, "parts", range(200)) == want, when
    assert set(_read_rows(node, _coll_id(client, "parts")).column("100").to_pylist()) == want


def test_a_key_written_twice_is_read_once_in_its_newest_version(node, client):
    """Inserted twice (and upserted): query, get and search return the key once, in its newest
    version — growing, sealed, across segments, and after compaction."""
    client.create_collection("twice2", schema=_schema())
    _indexed_and_loaded(client, "twice2")
    old_vec = [0.0] * DIM
    new_vec = [1.0] * DIM
    client.insert("twice2", [{"id": k, "vec": old_vec, "tag": f"old{k}"} for k in range(10)])
    client.insert("twice2", _rows(range(10, 100)))
    client.flush("twice2")
    client.insert("twice2", [{"id": k, "vec": new_vec, "tag": f"new{k}"} for k in range(5)])  # growing over sealed
    client.upsert("twice2", [{"id": k, "vec": new_vec, "tag": f"new{k}"} for k in range(5, 10)])

    def check(when: str) -> None:
        got = client.query("twice2", filter="id < 10", output_fields=["tag"], consistency_level="Strong")
        assert sorted((r["id"], r["tag"]) for r in got) == [(k, f"new{k}") for k in range(10)], when
        got = client.get("twice2", ids=[0, 1, 7])
        assert sorted(r["tag"] for r in got) == ["new0", "new1", "new7"], when
        assert client.query("twice2", filter="tag like 'old%'", consistency_level="Strong") == [], when
        assert _count(client, "twice2") == 100, when
        hits = client.search("twice2", [old_vec], limit=20, output_fields=["tag"], consistency_level="Strong")[0]
        ids = [h["id"] for h in hits]
        assert len(ids) == len(set(ids)), f"{when}: a key returned twice"
        assert all(not h["entity"]["tag"].startswith("old") for h in hits), f"{when}: an old version found"

    check("growing over sealed")
    client.flush("twice2")
    check("both sealed")
    client.insert("twice2", [{"id": k, "vec": old_vec, "tag": f"old{k}"} for k in range(20, 25)])
    client.insert("twice2", [{"id": k, "vec": new_vec, "tag": f"new{k}"} for k in range(20, 25)])  # both growing
    got = client.query("twice2", filter="id >= 20 and id < 25", output_fields=["tag"], consistency_level="Strong")
    assert sorted(r["tag"] for r in got) == [f"new{k}" for k in range(20, 25)]
    client.flush("twice2")
    _compact(node.uri, "twice2")
    check("compacted")
    client.release_collection("twice2")
    client.load_collection("twice2")
    check("released and loaded")


def test_an_upsert_into_a_partition_replaces_the_row_there(node, client):
    """The delete half of an upsert goes to the upsert's partition, as in Milvus (a chaos run
    reported it going to `_default`'s): a key upserted twice in "p1" is read once, in its newest
    version — with both versions growing, the old one flushed, both flushed, and after release
    and load — and the upserts' deletes are p1's L0 delta logs (in `_default`'s, p1's
    compaction would keep the old rows)."""
    client.create_collection("upp", schema=_schema())
    coll = _coll_id(client, "upp")
    client.create_partition("upp", "p1")
    _indexed_and_loaded(client, "upp")
    client.upsert("upp", _rows([8], tag="old"), partition_name="p1")
    client.flush("upp")
    client.upsert("upp", _rows([7], tag="old"), partition_name="p1")
    client.upsert("upp", _rows([7, 8], tag="new"), partition_name="p1")

    def read(parts: list[str]) -> list[tuple[int, str]]:
        got = client.query(
            "upp", filter="id in [7, 8]", output_fields=["tag"], partition_names=parts, consistency_level="Strong"
        )
        return sorted((r["id"], r["tag"]) for r in got)

    def check(when: str) -> None:
        assert read(["p1"]) == read([]) == [(7, "new7"), (8, "new8")], when
        assert read(["_default"]) == [], when

    check("growing")
    client.flush("upp")
    check("flushed")
    parts = {p.partitionName: p.partitionID for p in node.component("rootcoord").collections[coll].partitions}
    wait_until(lambda: _deltas(node, coll).num_rows == 4, what="the upserts' 4 deletes in delta logs")
    assert {d.partitionID for d in node.component("datacoord").meta.l0[coll].values()} == {parts["p1"]}
    client.release_collection("upp")
    client.load_collection("upp")
    check("released and loaded")


def test_a_key_repeated_in_one_insert_is_counted_once(node, client):
    """One insert naming keys twice (rows of one timestamp): count(*) counts each key once, as
    query returns it once — growing, flushed, compacted, and loaded again."""
    client.create_collection("rep", schema=_schema())
    _indexed_and_loaded(client, "rep")
    client.insert("rep", _rows([1, 2, 2, 3, 3, 3]))
    client.insert("rep", _rows([3, 4, 4]))

    def check(when: str) -> None:
        got = client.query("rep", filter="id > 0", output_fields=["id"], consistency_level="Strong")
        assert sorted(r["id"] for r in got) == [1, 2, 3, 4], when
        assert _count(client, "rep") == 4, when
        n = client.query("rep", filter="id >= 2", output_fields=["count(*)"], consistency_level="Strong")
        assert n[0]["count(*)"] == 3, when

    check("growing")
    client.flush("rep")
    check("flushed")
    client.insert("rep", _rows([4, 5]))
    client.flush("rep")
    _compact(node.uri, "rep")
    client.insert("rep", _rows([5, 5]))
    client.release_collection("rep")
    client.load_collection("rep")
    got = client.query("rep", filter="id > 0", output_fields=["id"], consistency_level="Strong")
    assert sorted(r["id"] for r in got) == [1, 2, 3, 4, 5]
    assert _count(client, "rep") == 5


def test_deletes_of_a_partition_loaded_later_stay_deleted(node, client):
    """A partition loaded after its channel's delegator started (load_partitions again) gets the
    deletes committed before the delegator started: it holds every partition's L0 delta logs."""
    client.create_collection("later", schema=_schema())
    client.create_partition("later", "p1")
    client.create_partition("later", "p2")
    index = client.prepare_index_params()
    index.add_index("vec", index_type="FLAT", metric_type="L2")
    client.create_index("later", index)
    client.insert("later", _rows(range(100)), partition_name="p2")
    client.flush("later")
    client.delete("later", ids=list(range(10)), partition_name="p2")
    client.flush("later")
    client.insert("later", _rows(range(100, 110)), partition_name="p1")  # the checkpoint passes the deletes
    client.flush("later")
    client.load_partitions("later", ["p1"])
    assert _visible(client, "later", range(110)) == set(range(100, 110))
    client.load_partitions("later", ["p1", "p2"])

    def served() -> set[int] | None:
        ids = _visible(client, "later", range(110))
        return ids if ids & set(range(10, 100)) else None  # p2's segment loaded

    assert wait_until(served, timeout=90, what="p2's rows served") == set(range(10, 110))
