"""Indexes through pymilvus: CreateIndex → one faiss index file per flushed segment in object
storage and SegmentIndex meta in etcd; DescribeIndex / GetIndexState / progress as Milvus 2.3
answers them; DropIndex and DropCollection leave nothing; Milvus' codes and messages for bad input."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pymilvus import Collection, DataType, MilvusClient, MilvusException, utility
from pymilvus.grpc_gen import common_pb2

from kmilvus import index as kindex
from kmilvus.meta import EtcdKV
from kmilvus.proto import data_coord_pb2
from kmilvus.storage import ObjectStore, paths
from tests.flushutil import batch, bench_schema
from tests.util import wait_until

HNSW = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 8, "efConstruction": 64}}


def etcd_keys(cfg, prefix: str) -> list[str]:
    async def go():
        kv = await EtcdKV.connect(cfg.etcd_endpoints, f"{cfg.cluster}/meta")
        try:
            return sorted(k for k, _ in await kv.get_prefix(prefix, keys_only=True))
        finally:
            await kv.close()

    return asyncio.run(go())


def index_files(node, coll_id: int) -> list[str]:
    return sorted(k for k, _ in node.node.store.list_sync(paths.index_files_prefix(coll_id)))


def filled(orm, name: str, rows: int = 6_000, chunk: int = 2_000) -> Collection:
    """`rows` rows in rows/chunk flushed segments."""
    coll = Collection(name, bench_schema(), using=orm)
    for off in range(0, rows, chunk):
        coll.insert(list(batch(off, chunk)))
        coll.flush()
    return coll


def test_create_index_builds_one_file_per_flushed_segment(node, orm):
    coll = filled(orm, "idx")
    coll_id = coll.describe()["collection_id"]
    coll.create_index("vec", HNSW)  # waits for Finished (pymilvus polls DescribeIndex)
    assert utility.wait_for_index_building_complete("idx", using=orm)
    assert utility.index_building_progress("idx", using=orm) == {
        "total_rows": 6_000,
        "indexed_rows": 6_000,
        "pending_index_rows": 0,
        "state": "Finished",
    }
    ix = coll.index()
    assert ix.field_name == "vec" and ix.index_name == "vec"
    assert ix.params == {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 8, "efConstruction": 64}}

    files = index_files(node, coll_id)
    segs = {int(k.split("/")[3]) for k in files}
    assert len(files) == len(segs) == 3
    seg_keys = etcd_keys(node.cfg, f"datacoord-meta/segment-index/{coll_id}/")
    assert len(seg_keys) == 3 and len(etcd_keys(node.cfg, f"datacoord-meta/field-index/{coll_id}/")) == 1

    # The file is a searchable index over the segment's rows, in binlog order.
    idx = kindex.load(node.node.store.read_sync(files[0]))
    assert idx.index_type == "HNSW" and idx.metric_type == "L2" and idx.num_rows == 2_000 and idx.dim == 128
    seg_id = int(files[0].split("/")[3])
    dc = node.component("datacoord")
    seg = dc.meta.segments[seg_id]
    first_log = min(seg.binlogs.values(), key=lambda b: b.logID)
    import pyarrow.parquet as pq

    from kmilvus.storage import binlog

    raw = pq.read_table(node.node.store.path(first_log.log_path), columns=["101"])
    vec = binlog.from_storage(raw)["101"][7].values.to_numpy()
    d, o = idx.search(np.asarray(vec, np.float32)[None, :], 3, {"ef": 32})
    assert o[0, 0] == 7 and d[0, 0] < 1e-5

    # Newly flushed data is indexed in the background.
    coll.insert(list(batch(6_000, 1_000)))
    coll.flush()
    wait_until(lambda: len(index_files(node, coll_id)) == 4, timeout=60, what="4th segment indexed")
    wait_until(
        lambda: utility.index_building_progress("idx", using=orm)["indexed_rows"] == 7_000,
        timeout=30,
        what="progress counts the new segment",
    )

    # DropIndex: files and meta gone.
    coll.drop_index()
    assert not coll.has_index()
    assert index_files(node, coll_id) == []
    assert etcd_keys(node.cfg, f"datacoord-meta/segment-index/{coll_id}/") == []
    assert etcd_keys(node.cfg, f"datacoord-meta/field-index/{coll_id}/") == []

    # Create again (another type), then drop the collection: nothing of the index is left.
    coll.create_index("vec", {"index_type": "IVF_FLAT", "metric_type": "IP", "params": {"nlist": 16}})
    assert len(index_files(node, coll_id)) == 4
    coll.drop()  # the DataCoord step of the drop finishes in the background
    wait_until(lambda: index_files(node, coll_id) == [], timeout=10, what="index files dropped")
    wait_until(
        lambda: (
            etcd_keys(node.cfg, f"datacoord-meta/segment-index/{coll_id}/") == []
            and etcd_keys(node.cfg, f"datacoord-meta/field-index/{coll_id}/") == []
        ),
        timeout=10,
        what="index meta dropped",
    )


def vec_schema(client: MilvusClient, dim: int):
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    return schema


def test_milvus_client_indexes(node, client):
    client.create_collection("mc", schema=vec_schema(client, 16))
    rows = [{"id": i, "vector": np.random.default_rng(i).random(16).tolist()} for i in range(500)]
    client.insert("mc", rows)
    client.flush("mc")
    params = client.prepare_index_params()
    params.add_index(field_name="vector", index_type="AUTOINDEX", metric_type="COSINE")
    client.create_index("mc", params)
    assert client.list_indexes("mc") == ["vector"]
    desc = client.describe_index("mc", "vector")
    # described as given, as Milvus shows it: not the HNSW build params it resolves to
    assert desc["index_type"] == "AUTOINDEX" and desc["metric_type"] == "COSINE" and desc["params"] == {}
    assert desc["field_name"] == "vector" and desc["index_name"] == "vector"
    assert desc["total_rows"] == 500
    wait_until(lambda: client.describe_index("mc", "vector")["state"] == "Finished", timeout=30)
    assert client.describe_index("mc", "vector")["indexed_rows"] == 500
    assert client.describe_index("mc", "nope") is None
    client.drop_index("mc", "vector")
    assert client.list_indexes("mc") == []
    client.drop_index("mc", "vector")  # dropping what is not there succeeds, as in Milvus


def test_index_bad_input(node, orm):
    coll = filled(orm, "bad", rows=100, chunk=100)

    def err(field, params, **kw):
        with pytest.raises(MilvusException) as e:
            coll.create_index(field, params, **kw)
        return e.value

    e = err("vec", {"index_type": "NOPE", "metric_type": "L2", "params": {}})
    assert e.code == 65535 and "invalid index type: NOPE" in e.message
    e = err("vec", {"index_type": "HNSW", "metric_type": "HAMMING", "params": {"M": 8, "efConstruction": 64}})
    assert "metric type HAMMING not found or not supported, supported: [L2 IP COSINE]" in e.message
    e = err("vec", {"index_type": "IVF_FLAT", "metric_type": "L2", "params": {"nlist": 0}})
    assert "nlist out of range: [1, 65536]" in e.message
    e = err("vec", {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 100, "efConstruction": 64}})
    assert "M out of range: [4, 64]" in e.message
    e = err("tag", {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 8, "efConstruction": 64}})
    assert "can't build hnsw in not vector type." in e.message
    e = err("nope", HNSW)
    assert e.code == 1700 and "field not found[field=nope]" in e.message
    # An index type given empty is refused (Milvus' checkTrain); one not given is AUTOINDEX.
    e = err("vec", {"index_type": "", "metric_type": "L2", "params": {}})
    assert e.code == 1100
    assert (
        e.message == "invalid index type: : invalid parameter[expected=valid index params][actual=invalid index params]"
    )
    # AUTOINDEX takes a metric type and nothing else (Milvus' autoindex handling).
    e = err("vec", {"index_type": "AUTOINDEX", "metric_type": "L2", "params": {"M": 8}})
    assert e.code == 65535 and e.message == "only metric type can be passed when use AutoIndex"
    e = err("vec", {"metric_type": "L2", "params": {"nlist": 8}})
    assert e.code == 65535 and e.message == "only metric type can be passed when use AutoIndex"
    assert not coll.has_index()  # nothing of a rejected request is stored

    coll.create_index("vec", HNSW)
    coll.create_index("vec", HNSW)  # the same again: accepted, nothing changes
    e = err("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}}, index_name="other")
    assert "creating multiple indexes on same field is not supported" in e.message
    e = err("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
    assert "index already exist, but parameters are inconsistent" in e.message
    with pytest.raises(MilvusException) as e:
        utility.index_building_progress("bad", index_name="nope", using=orm)
    assert e.value.code == 700 and "index not found[indexName=nope]" in e.value.message
    with pytest.raises(MilvusException) as e:
        utility.index_building_progress("missing", using=orm)
    assert e.value.code == 100


def test_builds_resume_after_restart(node_factory):
    """Index meta outlives its DataCoord: a node started after the first stopped (whatever state
    the build was in) answers Finished with one file and one SegmentIndex per segment (a file an
    attempt stopped with the first node wrote is collected). The exact mid-build crashes are the
    `*_killed_*` tests below."""
    first = node_factory()
    c = MilvusClient(uri=first.uri)
    c.create_collection("rs", schema=vec_schema(c, 32))
    c.insert("rs", [{"id": i, "vector": np.random.default_rng(i).random(32).tolist()} for i in range(3_000)])
    c.flush("rs")
    coll_id = c.describe_collection("rs")["collection_id"]
    params = c.prepare_index_params()
    params.add_index(field_name="vector", index_type="HNSW", metric_type="IP", params={"M": 8, "efConstruction": 32})
    c.create_index("rs", params, sync=False)
    c.close()
    first.stop()  # whatever state the build was in
    second = node_factory(gc_interval=0.2, gc_tolerance=0.5)  # same etcd root and storage: the same cluster
    c = MilvusClient(uri=second.uri)
    wait_until(lambda: c.describe_index("rs", "vector")["state"] == "Finished", timeout=60, what="resumed build")
    builds = _segment_indexes(second.cfg, coll_id)
    recorded = sorted(k for b in builds for k in b.index_file_keys)
    assert len(recorded) == len(builds) == len({b.segmentID for b in builds}) >= 1
    wait_until(lambda: index_files(second, coll_id) == recorded, timeout=20, what="one file per segment")
    c.drop_collection("rs")
    c.close()


def _segment_indexes(cfg, coll_id: int) -> list[data_coord_pb2.SegmentIndex]:
    async def read():
        kv = await EtcdKV.connect(cfg.etcd_endpoints, f"{cfg.cluster}/meta")
        try:
            raw = await kv.get_prefix(f"datacoord-meta/segment-index/{coll_id}/")
            return [data_coord_pb2.SegmentIndex.FromString(v) for _, v in raw]
        finally:
            await kv.close()

    return asyncio.run(read())


def _build_one_flat_index(cfg, name: str) -> tuple[MilvusClient, int]:
    c = MilvusClient(uri=f"http://127.0.0.1:{cfg.proxy_port}")
    c.create_collection(name, schema=vec_schema(c, 16))
    c.insert(name, [{"id": i, "vector": np.random.default_rng(i).random(16).tolist()} for i in range(1_000)])
    c.flush(name)
    params = c.prepare_index_params()
    params.add_index(field_name="vector", index_type="FLAT", metric_type="L2")
    c.create_index(name, params, sync=False)
    return c, c.describe_collection(name)["collection_id"]


def _split_cluster(cfg, tmp_path, *, coords_failpoints: str = "", coords_env=None, indexnode_failpoints: str = ""):
    """Coordinators, a DataNode, a Proxy and an IndexNode, each its own `kmilvus run` process
    (in that order in the list returned)."""
    from tests.harness import ProcessNode
    from tests.system.test_drop import COORDS

    return [
        ProcessNode(cfg, COORDS, tmp_path / "coords.log").start(
            wait_for="node ready", failpoints=coords_failpoints, env=coords_env
        ),
        ProcessNode(cfg, ("datanode",), tmp_path / "datanode.log").start(wait_for="node ready"),
        ProcessNode(cfg, ("proxy",), tmp_path / "proxy.log").start(wait_for="node ready"),
        ProcessNode(cfg, ("indexnode",), tmp_path / "indexnode.log").start(
            wait_for="node ready", failpoints=indexnode_failpoints
        ),
    ]


def test_indexnode_killed_mid_build_is_assigned_again(etcd_endpoint, nats_url, root, tmp_path):
    """SIGKILL of the IndexNode after it wrote the index file, before DataCoord heard of it: its
    session expires, DataCoord assigns the build again (same build ID, next version) to the new
    IndexNode, records that attempt's file, and the garbage collector removes the first one's."""
    from tests.harness import ProcessNode, make_config

    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")
    gc = {"KMILVUS_GC_INTERVAL": "0.3", "KMILVUS_GC_TOLERANCE": "0.5"}
    procs = _split_cluster(cfg, tmp_path, coords_env=gc, indexnode_failpoints="indexnode.build.after_write")
    try:
        c, coll_id = _build_one_flat_index(cfg, "crash")
        assert procs[3].proc.wait(30) != 0  # killed at the failpoint
        before = _segment_indexes(cfg, coll_id)
        assert [(b.state, b.index_version) for b in before] == [(common_pb2.IndexState.InProgress, 1)]
        store = ObjectStore.from_uri(cfg.storage_uri)
        first = [k for k, _ in store.list_sync(paths.index_files_prefix(coll_id))]
        assert len(first) == 1 and paths.parse_index_file_key(first[0]) == (before[0].buildID, 1)
        procs[3] = ProcessNode(cfg, ("indexnode",), tmp_path / "indexnode2.log").start(wait_for="node ready")
        wait_until(lambda: c.describe_index("crash", "vector")["state"] == "Finished", timeout=60, what="redone")
        after = _segment_indexes(cfg, coll_id)
        assert [(b.buildID, b.state, b.index_version) for b in after] == [
            (before[0].buildID, common_pb2.IndexState.Finished, 2)
        ]
        assert after[0].nodeID != before[0].nodeID
        wait_until(
            lambda: (
                [k for k, _ in store.list_sync(paths.index_files_prefix(coll_id))] == list(after[0].index_file_keys)
            ),
            timeout=30,
            what="the first attempt's file collected",
        )
        assert kindex.load(store.read_sync(after[0].index_file_keys[0])).num_rows == 1_000
        c.close()
    finally:
        for p in procs:
            p.kill()


def test_coordinator_killed_before_recording_resumes_the_job(etcd_endpoint, nats_url, root, tmp_path):
    """SIGKILL of DataCoord after the IndexNode finished, before the outcome was recorded: the
    restarted DataCoord finds the build InProgress on a live IndexNode that still holds the job,
    and records it without building again (same version, one file)."""
    from tests.harness import ProcessNode, make_config
    from tests.system.test_drop import COORDS

    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")
    procs = _split_cluster(cfg, tmp_path, coords_failpoints="datacoord.index.before_record")
    try:
        c, coll_id = _build_one_flat_index(cfg, "resume")
        assert procs[0].proc.wait(30) != 0  # killed at the failpoint
        before = _segment_indexes(cfg, coll_id)
        assert [(b.state, b.index_version) for b in before] == [(common_pb2.IndexState.InProgress, 1)]
        procs[0] = ProcessNode(cfg, COORDS, tmp_path / "coords2.log").start(wait_for="node ready")
        wait_until(lambda: c.describe_index("resume", "vector")["state"] == "Finished", timeout=60, what="recorded")
        after = _segment_indexes(cfg, coll_id)
        assert [(b.buildID, b.state, b.index_version, b.nodeID) for b in after] == [
            (before[0].buildID, common_pb2.IndexState.Finished, 1, before[0].nodeID)
        ]
        store = ObjectStore.from_uri(cfg.storage_uri)
        assert [k for k, _ in store.list_sync(paths.index_files_prefix(coll_id))] == list(after[0].index_file_keys)
        assert procs[3].log_path.read_text().count("segment index built") == 1
        c.close()
    finally:
        for p in procs:
            p.kill()


def test_coordinator_stopped_mid_build_leaves_the_job_to_its_successor(etcd_endpoint, nats_url, root, tmp_path):
    """A DataCoord stopped gracefully (a failover, an upgrade) while an IndexNode builds does not
    cancel the job: the next DataCoord follows it on the same node and records it (version 1,
    built once)."""
    from tests.harness import ProcessNode, make_config
    from tests.system.test_drop import COORDS

    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")
    go = tmp_path / "go"
    procs = _split_cluster(cfg, tmp_path, indexnode_failpoints=f"indexnode.build.after_write=wait({go})")
    try:
        c, coll_id = _build_one_flat_index(cfg, "handover")
        wait_until(lambda: "failpoint reached" in procs[3].log_path.read_text(), timeout=30, what="the build paused")
        assert procs[0].stop() == 0
        procs[0] = ProcessNode(cfg, COORDS, tmp_path / "coords2.log").start(wait_for="node ready")
        go.touch()
        wait_until(lambda: c.describe_index("handover", "vector")["state"] == "Finished", timeout=60, what="recorded")
        (after,) = _segment_indexes(cfg, coll_id)
        assert (after.state, after.index_version) == (common_pb2.IndexState.Finished, 1)
        assert procs[3].log_path.read_text().count("segment index built") == 1
        c.close()
    finally:
        for p in procs:
            p.kill()


def test_drop_index_while_an_indexnode_builds_leaves_no_file(etcd_endpoint, nats_url, root, tmp_path):
    """DropIndex while a remote IndexNode holds a built index in memory: DataCoord drops the job,
    the node writes nothing, and no file, key or job is left."""
    from tests.harness import make_config

    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")
    go = tmp_path / "go"
    procs = _split_cluster(cfg, tmp_path, indexnode_failpoints=f"indexnode.build.before_write=wait({go})")
    try:
        c, coll_id = _build_one_flat_index(cfg, "dropping")
        wait_until(lambda: "failpoint reached" in procs[3].log_path.read_text(), timeout=30, what="the build paused")
        c.drop_index("dropping", "vector")
        wait_until(lambda: not _segment_indexes(cfg, coll_id), timeout=30, what="the build's record removed")
        go.touch()
        wait_until(lambda: "index build given up" in procs[3].log_path.read_text(), timeout=30, what="given up")
        store = ObjectStore.from_uri(cfg.storage_uri)
        assert not [k for k, _ in store.list_sync(paths.index_files_prefix(coll_id))]
        assert "segment index built" not in procs[3].log_path.read_text()
        assert c.list_indexes("dropping") == []
        c.close()
    finally:
        for p in procs:
            p.kill()


def test_indexnode_stopped_mid_build_hands_the_build_to_another(etcd_endpoint, nats_url, root, tmp_path):
    """Two IndexNodes; the one building is stopped gracefully (a rolling update): it gives its
    job up, DataCoord assigns the build to the other (next version), and the stopped node's file
    is collected."""
    from tests.harness import ProcessNode, make_config

    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")
    gc = {"KMILVUS_GC_INTERVAL": "0.3", "KMILVUS_GC_TOLERANCE": "0.5"}
    procs = _split_cluster(
        cfg, tmp_path, coords_env=gc, indexnode_failpoints=f"indexnode.build.after_write=wait({tmp_path / 'never'})"
    )
    try:
        c, coll_id = _build_one_flat_index(cfg, "handoff")
        wait_until(lambda: "failpoint reached" in procs[3].log_path.read_text(), timeout=30, what="a builds")
        (first,) = _segment_indexes(cfg, coll_id)
        procs.append(ProcessNode(cfg, ("indexnode",), tmp_path / "indexnode-b.log").start(wait_for="node ready"))
        assert procs[3].stop() == 0
        wait_until(lambda: c.describe_index("handoff", "vector")["state"] == "Finished", timeout=60, what="b built")
        (after,) = _segment_indexes(cfg, coll_id)
        assert (after.buildID, after.index_version) == (first.buildID, first.index_version + 1)
        assert after.nodeID != first.nodeID and "segment index built" in procs[4].log_path.read_text()
        store = ObjectStore.from_uri(cfg.storage_uri)
        wait_until(
            lambda: [k for k, _ in store.list_sync(paths.index_files_prefix(coll_id))] == list(after.index_file_keys),
            timeout=30,
            what="a's file collected",
        )
        c.close()
    finally:
        for p in procs:
            p.kill()


def test_a_build_storage_refused_is_tried_again_until_it_finishes(node_factory):
    """Storage refuses the index file (its directory is a file: the write fails with an OSError):
    the IndexNode answers Retry, not Failed, and DataCoord assigns the build again, with a
    back-off, until storage takes it."""
    from pathlib import Path
    from urllib.parse import urlparse

    node = node_factory()
    blocker = Path(urlparse(node.cfg.storage_uri).path) / paths.INDEX_FILES
    blocker.write_bytes(b"not a directory")
    c = MilvusClient(uri=node.uri)
    c.create_collection("away", schema=vec_schema(c, 8))
    c.insert("away", [{"id": i, "vector": [float(i)] * 8} for i in range(100)])
    c.flush("away")
    coll_id = c.describe_collection("away")["collection_id"]
    params = c.prepare_index_params()
    params.add_index(field_name="vector", index_type="FLAT", metric_type="L2")
    c.create_index("away", params, sync=False)
    wait_until(
        lambda: any(b.index_version >= 2 for b in _segment_indexes(node.cfg, coll_id)),
        timeout=30,
        what="a second attempt",
    )
    assert c.describe_index("away", "vector")["state"] != "Failed"
    blocker.unlink()
    wait_until(lambda: c.describe_index("away", "vector")["state"] == "Finished", timeout=60, what="built")
    (b,) = _segment_indexes(node.cfg, coll_id)
    assert b.state == common_pb2.IndexState.Finished and b.index_version >= 2
    assert index_files(node, coll_id) == list(b.index_file_keys)
    c.close()


def test_garbage_collector_removes_index_files_no_build_refers_to(node_factory):
    node = node_factory(gc_interval=0.2, gc_tolerance=0.5)
    c = MilvusClient(uri=node.uri)
    c.create_collection("gcx", schema=vec_schema(c, 8))
    c.insert("gcx", [{"id": i, "vector": [float(i)] * 8} for i in range(200)])
    c.flush("gcx")
    params = c.prepare_index_params()
    params.add_index(field_name="vector", index_type="FLAT", metric_type="L2")
    c.create_index("gcx", params)
    coll_id = c.describe_collection("gcx")["collection_id"]
    kept = index_files(node, coll_id)
    assert len(kept) == 1
    _, _, part, seg, build, version, _ = kept[0].split("/")
    orphan = paths.index_file_key(coll_id, int(part), int(seg), 999_999_999, 1)  # a build that never recorded itself
    older = paths.index_file_key(coll_id, int(part), int(seg), int(build), int(version) - 1)  # an older attempt
    node.call(node.node.store.write(older, b"late"))
    node.call(node.node.store.write(orphan, b"partial"))
    wait_until(lambda: not node.call(node.node.store.exists(orphan)), timeout=10, what="orphan index file collected")
    wait_until(lambda: not node.call(node.node.store.exists(older)), timeout=10, what="older attempt's file collected")
    assert index_files(node, coll_id) == kept
    assert c.describe_index("gcx", "vector")["state"] == "Finished"
    c.close()


class _NoRemote:
    """Stands in for a remote coordinator client that must not be used."""

    def __getattr__(self, name):
        raise AssertionError(f"remote DataCoord called: {name}")


def test_standalone_index_lookups_stay_in_process(node, client):
    """With every role in one process, DescribeIndex / index progress and every Search reach
    the in-process DataCoord, not its gRPC server (a loopback round trip on every search)."""
    from kmilvus import components as roles

    client.create_collection("inproc", schema=vec_schema(client, 8))
    client.insert("inproc", [{"id": i, "vector": [float(i % 7)] * 8} for i in range(300)])
    client.flush("inproc")
    params = client.prepare_index_params()
    params.add_index(field_name="vector", index_type="HNSW", metric_type="L2", params={"M": 8, "efConstruction": 32})
    client.create_index("inproc", params)
    wait_until(lambda: client.describe_index("inproc", "vector")["indexed_rows"] == 300, timeout=30)
    client.load_collection("inproc")
    proxy = node.component(roles.PROXY)
    proxy.datacoord = _NoRemote()  # the read path resolves DataCoord at each call, never through a kept client
    assert client.describe_index("inproc", "vector")["indexed_rows"] == 300
    hits = client.search("inproc", data=[[1.0] * 8], limit=3, search_params={"params": {"ef": 16}})
    assert len(hits[0]) == 3 and hits[0][0]["distance"] == 0.0


def test_search_reads_index_definitions_without_progress(node, client):
    """A search needs only the index's metric: DataCoord answers it without counting every
    segment's build progress (which DescribeIndex / GetIndexBuildProgress still report)."""
    from kmilvus import components as roles

    client.create_collection("noprog", schema=vec_schema(client, 8))
    client.insert("noprog", [{"id": i, "vector": [float(i % 5)] * 8} for i in range(200)])
    client.flush("noprog")
    params = client.prepare_index_params()
    params.add_index(field_name="vector", index_type="FLAT", metric_type="IP")
    client.create_index("noprog", params)
    wait_until(lambda: client.describe_index("noprog", "vector")["indexed_rows"] == 200, timeout=30)
    client.load_collection("noprog")
    dc = node.component(roles.DATACOORD)
    counting = dc._index_info

    def no_progress(_ix):
        raise AssertionError("search counted index build progress")

    dc._index_info = no_progress
    hits = client.search("noprog", data=[[1.0] * 8], limit=2)  # the metric (IP) from the index
    assert len(hits[0]) == 2 and hits[0][0]["distance"] == 32.0
    dc._index_info = counting
    coll_id = client.describe_collection("noprog")["collection_id"]
    req = data_coord_pb2.DescribeIndexRequest(collectionID=coll_id, without_progress=True)
    bare = node.call(dc.DescribeIndex(req))
    assert [i.index.index_name for i in bare.infos] == ["vector"] and bare.infos[0].total_rows == 0
    assert client.describe_index("noprog", "vector")["indexed_rows"] == 200
