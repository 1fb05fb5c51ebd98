"""DropCollection end to end (docs/architecture/drop.md), with nothing left behind: etcd keys, files, stream
consumers, Proxy caches — also when the coordinator or the DataNode is killed mid-drop."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from pymilvus import Collection, MilvusClient, MilvusException, connections

from kmilvus.meta import EtcdKV
from kmilvus.msgstream import MsgStream, pchannel_of
from kmilvus.storage import ObjectStore
from kmilvus.util.embedded import free_port
from tests.flushutil import batch, bench_schema
from tests.harness import ProcessNode, make_config
from tests.util import wait_until

IGNORED = ("tso/", "id/", "session/")
COORDS = ("rootcoord", "datacoord", "querycoord")


def etcd_keys(cfg) -> list[str]:
    async def go():
        kv = await EtcdKV.connect(cfg.etcd_endpoints, f"{cfg.cluster}/meta")
        try:
            return sorted(k for k, _ in await kv.get_prefix("", keys_only=True) if not k.startswith(IGNORED))
        finally:
            await kv.close()

    return asyncio.run(go())


def storage_tree(cfg) -> list[str]:
    return sorted(ObjectStore.from_uri(cfg.storage_uri).walk_sync())


def consumers(cfg, vchannels) -> list[str]:
    async def go():
        stream = await MsgStream.connect(cfg.nats_url, cfg.cluster)
        try:
            # A vchannel's own consumers (catching up) and its pchannel's shared ones.
            chans = [*vchannels, *{pchannel_of(v) for v in vchannels}]
            return [n for ch in chans for n in await stream.consumer_names(ch)]
        finally:
            await stream.close()

    return asyncio.run(go())


class Cluster:
    """Coordinators, one DataNode and two Proxies, each its own `kmilvus run` process."""

    def __init__(self, cfg, tmp_path):
        self.cfg, self.tmp = cfg, tmp_path
        self.procs: dict[str, ProcessNode] = {}

    def start(self, name, roles, wait_for="node ready", failpoints="", **cfg_changes):
        p = ProcessNode(self.cfg.replace(**cfg_changes), roles, self.tmp / f"{name}-{len(self.procs)}.log")
        self.procs[name] = p.start(wait_for=wait_for, failpoints=failpoints)
        return p

    def proxy_uri(self, name):
        return f"http://127.0.0.1:{self.procs[name].cfg.proxy_port}"

    def stop(self):
        for p in self.procs.values():
            p.kill()


@pytest.fixture
def cluster(etcd_endpoint, nats_url, root, tmp_path):
    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")
    c = Cluster(cfg, tmp_path)
    yield c
    c.stop()


def start_all(cluster, coord_failpoints=""):
    cluster.start("coords", COORDS, failpoints=coord_failpoints)
    cluster.start("datanode", ("datanode", "indexnode"))
    for name in ("p1", "p2"):
        cluster.start(name, ("proxy",), proxy_port=free_port())


def fill(uri, name="victim", rows=50_000, unflushed=1_000):
    alias = "d" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=uri)
    try:
        coll = Collection(name, bench_schema(), using=alias)
        for off in range(0, rows, 10_000):
            coll.insert(list(batch(off, 10_000)))
        coll.flush()
        assert coll.num_entities == rows
        # An index (meta in etcd, one file per segment) is among what a drop must remove.
        coll.create_index("vec", {"index_type": "IVF_FLAT", "metric_type": "L2", "params": {"nlist": 32}})
        coll.insert(list(batch(rows, unflushed)))  # buffered in the DataNode, not flushed
        return coll.describe()
    finally:
        connections.disconnect(alias)


def assert_nothing_left(cluster, keys_before, files_before, vchannels, within=5.0):
    def left() -> tuple[list, list, list]:
        keys, files, cons = etcd_keys(cluster.cfg), storage_tree(cluster.cfg), consumers(cluster.cfg, vchannels)
        return sorted(set(keys) ^ set(keys_before)), sorted(set(files) ^ set(files_before)), cons

    def left_behind() -> str:
        keys, files, cons = left()
        return f"nothing left behind: keys={keys[:10]} files={files[:10]} consumers={cons}"

    wait_until(lambda: not any(left()), within, 0.1, left_behind)
    for name in ("p1", "p2"):
        c = MilvusClient(uri=cluster.proxy_uri(name))
        try:
            assert not c.has_collection("victim")
            with pytest.raises(MilvusException) as err:
                c.describe_collection("victim")
            assert err.value.code == 100
            with pytest.raises(MilvusException) as err:
                c.insert("victim", [{"id": 1, "vec": [0.0] * 128, "tag": "x"}])
            assert err.value.code == 100
        finally:
            c.close()


def warm_caches(cluster):
    for name in ("p1", "p2"):  # both Proxies cache the collection before the drop
        c = MilvusClient(uri=cluster.proxy_uri(name))
        assert c.describe_collection("victim")["collection_name"] == "victim"
        c.insert("victim", [{"id": 10**9 + hash(name) % 1000, "vec": [0.5] * 128, "tag": name}])
        c.close()


def test_drop_leaves_nothing_behind(cluster):
    start_all(cluster)
    keys_before, files_before = etcd_keys(cluster.cfg), storage_tree(cluster.cfg)
    desc = fill(cluster.proxy_uri("p1"))
    warm_caches(cluster)
    assert storage_tree(cluster.cfg) != files_before and etcd_keys(cluster.cfg) != keys_before
    assert any(k.startswith("index_files/") for k in storage_tree(cluster.cfg))
    assert any(k.startswith("datacoord-meta/segment-index/") for k in etcd_keys(cluster.cfg))
    c = MilvusClient(uri=cluster.proxy_uri("p2"))
    t0 = time.perf_counter()
    c.drop_collection("victim")
    rpc = time.perf_counter() - t0
    c.close()
    assert rpc < 5
    assert_nothing_left(cluster, keys_before, files_before, vchannels_of(desc, cluster))


def vchannels_of(desc, cluster):
    """Every vchannel name the collection could have had (one shard, any physical channel)."""
    cid = desc["collection_id"]
    return [f"{cluster.cfg.cluster}-dml_{i}_{cid}v0" for i in range(cluster.cfg.dml_channel_num)]


def test_coordinator_killed_after_meta_txn_finishes_drop_on_restart(cluster):
    start_all(cluster, coord_failpoints="rootcoord.drop.after_meta_txn")
    keys_before, files_before = etcd_keys(cluster.cfg), storage_tree(cluster.cfg)
    desc = fill(cluster.proxy_uri("p1"), rows=20_000)
    warm_caches(cluster)
    c = MilvusClient(uri=cluster.proxy_uri("p1"), timeout=5)
    with pytest.raises(Exception):  # noqa: B017 - whatever pymilvus raises when the server dies mid-call
        c.drop_collection("victim", timeout=5)  # the coordinator dies inside this call
    c.close()
    coords = cluster.procs["coords"]
    assert coords.proc.wait(10) != 0
    assert any(k.startswith("root-coord/drop-task/") for k in etcd_keys(cluster.cfg))
    cluster.start("coords", COORDS)  # restarted without the failpoint
    assert_nothing_left(cluster, keys_before, files_before, vchannels_of(desc, cluster), within=15)


def test_datanode_killed_during_drop_brings_nothing_back(cluster):
    start_all(cluster)
    keys_before, files_before = etcd_keys(cluster.cfg), storage_tree(cluster.cfg)
    desc = fill(cluster.proxy_uri("p1"), rows=20_000)
    warm_caches(cluster)
    c = MilvusClient(uri=cluster.proxy_uri("p2"))
    c.drop_collection("victim")
    cluster.procs["datanode"].kill()
    c.close()
    cluster.start("datanode", ("datanode", "indexnode"))
    assert_nothing_left(cluster, keys_before, files_before, vchannels_of(desc, cluster), within=10)
    time.sleep(1.0)  # the new DataNode has had time to pick up anything it wrongly could
    assert etcd_keys(cluster.cfg) == keys_before and storage_tree(cluster.cfg) == files_before


def test_drop_unknown_succeeds_and_same_name_starts_fresh(client):
    client.drop_collection("never_existed")
    client.create_collection("again", schema=bench_schema())
    first = client.describe_collection("again")["collection_id"]
    ids, vecs, tags = batch(0, 500)
    client.insert("again", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
    client.flush("again")
    client.drop_collection("again")
    client.create_collection("again", schema=bench_schema())
    assert client.describe_collection("again")["collection_id"] != first
    client.insert("again", [{"id": 7, "vec": vecs[0], "tag": "new"}])
    client.flush("again")
    assert client.get_collection_stats("again")["row_count"] == 1


def test_drop_while_flush_in_flight_ends_flush(node, client):
    client.create_collection("inflight", schema=bench_schema())
    ids, vecs, tags = batch(0, 2000)
    client.insert("inflight", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
    import threading

    errors = []

    def flush():
        try:
            client.flush("inflight", timeout=30)
        except MilvusException as exc:  # not-found is a clean end too
            errors.append(exc)

    t = threading.Thread(target=flush)
    t.start()
    client.drop_collection("inflight")
    t.join(30)
    assert not t.is_alive()
    assert all(e.code == 100 for e in errors)
    assert not client.has_collection("inflight")


def held_tail(tmp_path) -> tuple[str, object]:
    """Failpoints that hold every drop's tail (after the answer) until the returned file exists."""
    go = tmp_path / "tail-go"
    return f"rootcoord.drop.tail=wait({go}),rootcoord.drop_partition.tail=wait({go})", go


def raw_insert(uri: str, name: str, ids: list[int], partition: str = ""):
    """An Insert sent straight to one Proxy: no client-side describe first, so what answers is
    that Proxy's own view of the collection."""
    import grpc
    from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

    from tests.system.test_flush import fd_long, fd_str, fd_vec

    req = milvus_pb2.InsertRequest(
        collection_name=name,
        partition_name=partition,
        num_rows=len(ids),
        fields_data=[fd_long("id", ids), fd_vec("vec", len(ids), 128), fd_str("tag", [f"t{i}" for i in ids])],
    )
    with grpc.insecure_channel(uri.removeprefix("http://")) as ch:
        return milvus_pb2_grpc.MilvusServiceStub(ch).Insert(req, timeout=30)


def test_coordinators_killed_right_after_the_drop_answered_finish_it_on_restart(cluster, tmp_path):
    """The drop answers once its meta transaction and its broadcast are durable; a coordinator
    that dies right after the answer, before any of the tail ran, leaves nothing behind once
    restarted."""
    failpoints, _ = held_tail(tmp_path)  # the file is never created: the tail waits for the kill
    start_all(cluster, coord_failpoints=failpoints)
    keys_before, files_before = etcd_keys(cluster.cfg), storage_tree(cluster.cfg)
    desc = fill(cluster.proxy_uri("p1"), rows=20_000)
    warm_caches(cluster)
    c = MilvusClient(uri=cluster.proxy_uri("p1"))
    c.drop_collection("victim")  # answered
    assert not c.has_collection("victim")
    c.close()
    assert any(k.startswith("root-coord/drop-task/") for k in etcd_keys(cluster.cfg))
    cluster.procs["coords"].kill()
    cluster.start("coords", COORDS)  # restarted without the failpoint
    assert_nothing_left(cluster, keys_before, files_before, vchannels_of(desc, cluster), within=15)


def test_a_proxy_that_has_not_heard_of_a_drop_writes_nothing_into_it(cluster, tmp_path):
    """Every Proxy hears of a drop only after it answered (the tail tells them; here it is held):
    one that has not yet refuses a write into the dropped collection or partition as Milvus
    refuses one that does not exist, instead of acknowledging rows nothing will keep."""
    failpoints, go = held_tail(tmp_path)
    start_all(cluster, coord_failpoints=failpoints)
    keys_before, files_before = etcd_keys(cluster.cfg), storage_tree(cluster.cfg)
    desc = fill(cluster.proxy_uri("p1"), rows=10_000)
    p1, p2 = MilvusClient(uri=cluster.proxy_uri("p1")), MilvusClient(uri=cluster.proxy_uri("p2"))
    try:
        p1.create_partition("victim", "part")
        warm_caches(cluster)
        assert raw_insert(cluster.proxy_uri("p2"), "victim", [5_000_000], "part").status.code == 0
        p1.drop_partition("victim", "part")
        resp = raw_insert(cluster.proxy_uri("p2"), "victim", [5_000_001], "part")
        assert (resp.status.code, resp.status.reason) == (200, "partition not found[partition=part]")
        assert raw_insert(cluster.proxy_uri("p2"), "victim", [5_000_002]).status.code == 0  # _default lives
        p1.drop_collection("victim")
        resp = raw_insert(cluster.proxy_uri("p2"), "victim", [5_000_003])
        assert resp.status.code == 100 and "collection not found" in resp.status.reason
        go.touch()  # the tails run: everything of the collection goes
    finally:
        p1.close()
        p2.close()
    assert_nothing_left(cluster, keys_before, files_before, vchannels_of(desc, cluster), within=15)


def test_a_name_dropped_and_created_again_gets_the_writes_of_a_proxy_that_had_not_heard(cluster, tmp_path):
    """Right after the drop answered, the same name is created again (a new collection); a Proxy
    that still holds the dropped one's meta writes into the new one, and every row is counted."""
    failpoints, go = held_tail(tmp_path)
    start_all(cluster, coord_failpoints=failpoints)
    keys_before, files_before = etcd_keys(cluster.cfg), storage_tree(cluster.cfg)
    desc = fill(cluster.proxy_uri("p1"), rows=10_000)
    warm_caches(cluster)
    p1 = MilvusClient(uri=cluster.proxy_uri("p1"))
    try:
        p1.drop_collection("victim")
        p1.create_collection("victim", schema=bench_schema())
        fresh = p1.describe_collection("victim")
        assert fresh["collection_id"] != desc["collection_id"]
        resp = raw_insert(cluster.proxy_uri("p2"), "victim", list(range(100)))
        assert resp.status.code == 0 and resp.insert_cnt == 100
        p1.flush("victim")
        assert p1.get_collection_stats("victim")["row_count"] == 100
        go.touch()
        p1.drop_collection("victim")
    finally:
        p1.close()
    assert_nothing_left(cluster, keys_before, files_before, vchannels_of(desc, cluster) + vchannels_of(fresh, cluster))
