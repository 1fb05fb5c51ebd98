"""Partitions through pymilvus 3.0 (MilvusClient and ORM): CreatePartition, HasPartition,
ShowPartitions, GetPartitionStatistics, inserts per partition, DDL binlogs, and DropPartition
with nothing of the partition left (also when the coordinators die after its meta transaction)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import Collection, MilvusClient, MilvusException, Partition, utility
from pymilvus.client.types import BulkInsertState
from pymilvus.grpc_gen import common_pb2

from kmilvus.msgstream import MsgType
from kmilvus.proto import internal_pb2
from kmilvus.storage import binlog, paths
from kmilvus.util import failpoint
from tests.flushutil import batch, bench_schema
from tests.harness import make_config
from tests.system.test_drop import COORDS, Cluster, etcd_keys, storage_tree
from tests.util import segment_loads_failing, wait_until


def rows(start: int, n: int) -> list[dict]:
    ids, vecs, tags = batch(start, n)
    return [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)]


def segments(node, coll_id: int):
    dc = node.component("datacoord")
    return [s.info for s in dc.meta.by_collection(coll_id)]


def partition_ids(node, coll_id: int) -> dict[str, int]:
    """The collection's partitions as RootCoord holds them, name → ID."""
    return {p.partitionName: p.partitionID for p in node.component("rootcoord").collections[coll_id].partitions}


def partition_pks(node, coll_id: int, part_id: int) -> list[int]:
    """Every primary key in the binlogs of one partition's live segments, sorted (a compaction's
    Dropped sources are being collected: their files may be half gone)."""
    segs = [s for s in segments(node, coll_id) if s.partitionID == part_id and s.state != common_pb2.Dropped]
    tables = [binlog.read_segment(node.node.store, coll_id, part_id, s.ID) for s in segs]
    return sorted(pk for t in tables for pk in t.column("100").to_pylist())


def partition_leftovers(node, coll_id: int, part_id: int) -> list[str]:
    """Files and DataCoord keys of one partition that still exist."""
    store, kv = node.node.store, node.node.kv
    files = [k for p in paths.partition_prefixes(coll_id, part_id) for k, _ in node.call(store.list(p))]
    keys = [k for k, _ in node.call(kv.get_prefix(f"datacoord-meta/s/{coll_id}/{part_id}/"))]
    return files + keys


def test_partitions_insert_flush_stats_and_drop(node, client):
    client.create_collection("docs", schema=bench_schema())
    client.create_partition("docs", "p1")
    client.create_partition("docs", "p2")
    assert client.list_partitions("docs") == ["_default", "p1", "p2"]
    assert client.has_partition("docs", "p1") and not client.has_partition("docs", "p3")
    client.insert("docs", rows(0, 5))
    client.insert("docs", rows(100, 10), partition_name="p1")
    client.insert("docs", rows(200, 20), partition_name="p2")
    client.flush("docs")
    assert client.get_collection_stats("docs")["row_count"] == 35
    assert [client.get_partition_stats("docs", p)["row_count"] for p in ("_default", "p1", "p2")] == [5, 10, 20]

    coll_id = client.describe_collection("docs")["collection_id"]
    part_ids = partition_ids(node, coll_id)
    assert len(set(part_ids.values()) | {coll_id}) == 4  # each an allocated ID of its own
    # Segments belong to one partition; each partition's binlogs hold exactly its rows.
    for name, (start, n) in {"_default": (0, 5), "p1": (100, 10), "p2": (200, 20)}.items():
        segs = [s for s in segments(node, coll_id) if s.partitionID == part_ids[name]]
        assert segs and all(s.state == common_pb2.Flushed for s in segs)
        assert partition_pks(node, coll_id, part_ids[name]) == list(range(start, start + n))

    client.drop_partition("docs", "p2")
    assert client.list_partitions("docs") == ["_default", "p1"]
    assert not client.has_partition("docs", "p2")
    wait_until(lambda: not partition_leftovers(node, coll_id, part_ids["p2"]), timeout=5, what="p2's data gone")
    assert client.get_collection_stats("docs")["row_count"] == 15
    with pytest.raises(MilvusException) as e:
        client.get_partition_stats("docs", "p2")
    assert e.value.code == 200 and "partition not found[partition=p2]" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.insert("docs", rows(300, 3), partition_name="p2")
    assert e.value.code == 200
    # The other partitions keep their rows; inserting and flushing goes on.
    client.insert("docs", rows(400, 4), partition_name="p1")
    client.flush("docs")
    assert client.get_partition_stats("docs", "p1")["row_count"] == 14
    assert client.get_collection_stats("docs")["row_count"] == 19


def test_orm_partitions(node, orm):
    coll = Collection("orm_docs", bench_schema(), using=orm)
    p1 = coll.create_partition("p1")
    assert isinstance(p1, Partition) and coll.has_partition("p1")
    assert [p.name for p in coll.partitions] == ["_default", "p1"]
    coll.insert(list(batch(0, 7)), partition_name="p1")
    coll.insert(list(batch(100, 3)))
    coll.flush()
    assert coll.num_entities == 10
    assert Partition(coll, "p1").num_entities == 7 and Partition(coll, "_default").num_entities == 3
    coll.drop_partition("p1")
    assert [p.name for p in coll.partitions] == ["_default"]
    wait_until(lambda: coll.num_entities == 3, timeout=5, what="p1's rows gone from the stats")


def test_partition_ddl_in_ddl_binlogs(node, client):
    """CreatePartition/DropPartition are kept by the DDNode and written with the next
    manual flush, like the collection DDL."""
    client.create_collection("ddl", schema=bench_schema())
    client.create_partition("ddl", "p1")
    client.create_partition("ddl", "p2")
    client.drop_partition("ddl", "p2")
    client.insert("ddl", rows(0, 10), partition_name="p1")
    client.flush("ddl")
    coll_id = client.describe_collection("ddl")["collection_id"]
    store = node.node.store
    ddl_keys = sorted(
        (k for k, _ in node.call(store.list(f"{paths.ddl_prefix(coll_id)}ddl/"))),
        key=lambda k: int(k.rsplit("/", 1)[1]),
    )
    records = [r for k in ddl_keys for r in node.call(binlog.aread_ddl_records(store, k))]
    types = [typ for _, typ, _ in records]
    msg_cls = {
        MsgType.CreatePartition: internal_pb2.CreatePartitionMsg,
        MsgType.DropPartition: internal_pb2.DropPartitionMsg,
    }
    names = [(typ, msg_cls[typ].FromString(payload).partition_name) for _, typ, payload in records if typ in msg_cls]
    assert types[0] == MsgType.CreateCollection
    assert names == [(MsgType.CreatePartition, "p1"), (MsgType.CreatePartition, "p2"), (MsgType.DropPartition, "p2")]


def test_partition_bad_input(node, client):
    client.create_collection("bad", schema=bench_schema())
    cases = [
        (lambda: client.drop_partition("bad", "_default"), 65535, "default partition cannot be deleted"),
        (lambda: client.insert("bad", rows(0, 2), partition_name="nope"), 200, "partition not found[partition=nope]"),
        (lambda: client.get_partition_stats("bad", "nope"), 200, "partition not found[partition=nope]"),
        (lambda: client.create_partition("bad", "1p"), 1100, "Invalid partition name: 1p"),
        (lambda: client.create_partition("nope", "p1"), 100, "collection not found"),
    ]
    for call, code, message in cases:
        with pytest.raises(MilvusException) as e:
            call()
        assert e.value.code == code and message in e.value.message, (e.value.code, e.value.message)
    client.create_partition("bad", "p1")
    client.create_partition("bad", "p1")  # Milvus: a duplicate partition is a no-op
    client.drop_partition("bad", "nope")  # Milvus: dropping an unknown partition succeeds
    node.component("rootcoord").cfg.max_partition_num = 3
    client.create_partition("bad", "p2")
    with pytest.raises(MilvusException) as e:
        client.create_partition("bad", "p3")
    assert "partition number (3) exceeds max configuration (3), collection: bad" in e.value.message
    assert client.list_partitions("bad") == ["_default", "p1", "p2"]
    client.flush("bad")
    assert client.get_collection_stats("bad")["row_count"] == 0  # nothing of the refused insert


def test_coordinators_killed_after_drop_partition_meta_txn_finish_on_restart(etcd_endpoint, nats_url, root, tmp_path):
    cluster = Cluster(make_config(root, etcd_endpoint, nats_url, tmp_path / "storage"), tmp_path)
    try:
        cluster.start("coords", COORDS, failpoints="rootcoord.drop_partition.after_meta_txn")
        cluster.start("datanode", ("datanode", "indexnode"))
        cluster.start("proxy", ("proxy",))
        c = MilvusClient(uri=cluster.proxy_uri("proxy"), timeout=10)
        c.create_collection("victim", schema=bench_schema())
        c.create_partition("victim", "p2")
        c.insert("victim", rows(0, 50))
        c.insert("victim", rows(1000, 500), partition_name="p2")
        c.flush("victim")
        coll_id = c.describe_collection("victim")["collection_id"]
        p2_files = [f for f in storage_tree(cluster.cfg) if f.startswith(f"insert_log/{coll_id}/")]
        assert len({f.split("/")[2] for f in p2_files}) == 2  # two partitions' binlogs
        with pytest.raises(Exception):  # noqa: B017 - whatever pymilvus raises when the server dies mid-call
            c.drop_partition("victim", "p2", timeout=5)
        c.close()
        assert cluster.procs["coords"].proc.wait(10) != 0
        assert any(k.startswith("root-coord/drop-partition-task/") for k in etcd_keys(cluster.cfg))
        cluster.start("coords", COORDS)  # restarted without the failpoint
        c = MilvusClient(uri=cluster.proxy_uri("proxy"), timeout=10)

        def finished():
            keys = etcd_keys(cluster.cfg)
            parts = {f.split("/")[2] for f in storage_tree(cluster.cfg) if f.startswith(f"insert_log/{coll_id}/")}
            return not any(k.startswith("root-coord/drop-partition-task/") for k in keys) and len(parts) == 1

        wait_until(finished, timeout=20, what="the partition drop finished after the restart")
        assert c.list_partitions("victim") == ["_default"]
        assert c.get_collection_stats("victim")["row_count"] == 50
        c.close()
    finally:
        cluster.stop()


@pytest.mark.spark
@pytest.mark.timeout(600)  # a Spark job on a loaded 2-core machine can take minutes
def test_bulk_import_into_a_partition(node, client, orm, tmp_path):
    """Import takes `partition_name`: the imported segments belong to that partition."""
    client.create_collection("imp", schema=bench_schema())
    client.create_partition("imp", "p1")
    ids, vecs, tags = batch(5000, 200)
    table = pa.table(
        {
            "id": pa.array(ids, type=pa.int64()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), 128),
            "tag": pa.array(tags),
        }
    )
    pq.write_table(table, tmp_path / "p1.parquet")
    task = utility.do_bulk_insert("imp", files=[str(tmp_path / "p1.parquet")], partition_name="p1", using=orm)
    wait_until(
        lambda: utility.get_bulk_insert_state(task, using=orm).state == BulkInsertState.ImportCompleted,
        timeout=500,
        what="the import into p1",
    )
    assert client.get_partition_stats("imp", "p1")["row_count"] == 200
    assert client.get_partition_stats("imp", "_default")["row_count"] == 0
    coll_id = client.describe_collection("imp")["collection_id"]
    parts = partition_ids(node, coll_id)
    assert partition_pks(node, coll_id, parts["p1"]) == list(range(5000, 5200))
    with pytest.raises(MilvusException) as e:
        utility.do_bulk_insert("imp", files=[str(tmp_path / "p1.parquet")], partition_name="nope", using=orm)
    assert e.value.code == 200


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_compaction_never_merges_across_partitions(node, client, orm):
    client.create_collection("cp", schema=bench_schema())
    client.create_partition("cp", "p1")
    for i in range(3):
        client.insert("cp", rows(i * 50, 50))
        client.insert("cp", rows(1000 + i * 50, 50), partition_name="p1")
        client.flush("cp")
    coll_id = client.describe_collection("cp")["collection_id"]
    parts = partition_ids(node, coll_id)
    before = {s.ID: s.partitionID for s in segments(node, coll_id)}
    assert sorted(before.values()) == sorted([parts["_default"]] * 3 + [parts["p1"]] * 3)
    coll = Collection("cp", using=orm)
    coll.compact()
    assert coll.wait_for_compaction_completed(timeout=500)
    targets = [s for s in segments(node, coll_id) if s.compaction_from]
    assert {t.partitionID for t in targets} == set(parts.values())  # one merge per partition
    for t in targets:
        assert {before[src] for src in t.compaction_from} == {t.partitionID}
    assert partition_pks(node, coll_id, parts["_default"]) == list(range(150))
    assert partition_pks(node, coll_id, parts["p1"]) == list(range(1000, 1150))


def test_drop_partition_discards_its_buffered_rows(node, client):
    """Rows of a partition still buffered in the DataNode when it is dropped are never written;
    the collection's next flush finishes with the other partitions' rows only."""
    client.create_collection("buf", schema=bench_schema())
    client.create_partition("buf", "p2")
    client.insert("buf", rows(0, 30))
    client.insert("buf", rows(500, 40), partition_name="p2")  # buffered, not flushed
    coll_id = client.describe_collection("buf")["collection_id"]
    p2 = next(
        p.partitionID for p in node.component("rootcoord").collections[coll_id].partitions if p.partitionName == "p2"
    )
    dn = node.component("datanode")
    wait_until(
        lambda: any(b.partition_id == p2 for fg in dn.flowgraphs.values() for b in fg.buffers.values()),
        what="p2's rows buffered in the DataNode",
    )
    client.drop_partition("buf", "p2")
    wait_until(lambda: not partition_leftovers(node, coll_id, p2), timeout=5, what="p2's segments gone")
    client.flush("buf")
    assert client.get_collection_stats("buf")["row_count"] == 30
    assert not any(b.partition_id == p2 for fg in dn.flowgraphs.values() for b in fg.buffers.values())
    assert not partition_leftovers(node, coll_id, p2)
    files = [k for k, _ in node.call(node.node.store.list(paths.insert_log_prefix(coll_id)))]
    assert files and all(f"/{coll_id}/{p2}/" not in k for k in files)


def _indexed(client, name: str) -> None:
    idx = client.prepare_index_params()
    idx.add_index(field_name="vec", index_type="FLAT", metric_type="L2")
    client.create_index(name, idx)


def _count(client, name: str, **kw) -> int:
    return client.query(name, output_fields=["count(*)"], consistency_level="Strong", **kw)[0]["count(*)"]


def _ids(client, name: str, ids: list[int]) -> list[int]:
    got = client.query(name, filter=f"id in {ids}", output_fields=["id"], consistency_level="Strong")
    return sorted(r["id"] for r in got)


def test_a_dropped_partitions_rows_are_never_read_again(node, client):
    """Found by chaos: after release, drop_partition, create_partition and load, thousands of the
    dropped partition's keys were returned by queries again (and count(*) counted them). The
    QueryNode ignored DropPartition: a load resumes the channel from its checkpoint, before the
    partition's inserts, and kept them as growing rows. The drop is read on the channel like the
    inserts before it: the partition's growing rows go, and no later insert of it is kept."""
    client.create_collection("resurrect", schema=bench_schema())
    client.create_partition("resurrect", "p1")
    _indexed(client, "resurrect")
    client.load_collection("resurrect")
    client.insert("resurrect", rows(0, 30))
    client.insert("resurrect", rows(1000, 40), partition_name="p1")  # growing on the QueryNode
    assert _count(client, "resurrect") == 70
    client.release_collection("resurrect")
    client.drop_partition("resurrect", "p1")
    client.create_partition("resurrect", "p1")
    client.load_collection("resurrect")
    assert _ids(client, "resurrect", list(range(1000, 1040))) == []
    assert _count(client, "resurrect") == 30
    client.insert("resurrect", rows(2000, 5), partition_name="p1")  # the new p1
    assert _count(client, "resurrect") == 35
    assert _count(client, "resurrect", partition_names=["p1"]) == 5


def test_release_one_partition_of_a_collection_loaded_whole(node, client):
    """Milvus 2.5's ReleasePartitions: releasing some partitions of a collection loaded as a
    whole releases those partitions only (reads no longer see them; their sealed segments leave
    the QueryNode); releasing every loaded partition releases the collection. Loading them again
    brings their flushed and growing rows back."""
    client.create_collection("halves", schema=bench_schema())
    for p in ("p1", "p2"):
        client.create_partition("halves", p)
    _indexed(client, "halves")
    client.insert("halves", rows(0, 10))
    client.insert("halves", rows(100, 20), partition_name="p1")
    client.insert("halves", rows(200, 40), partition_name="p2")
    client.flush("halves")
    client.load_collection("halves")
    client.insert("halves", rows(300, 5), partition_name="p1")  # growing
    assert _count(client, "halves") == 75
    coll_id = client.describe_collection("halves")["collection_id"]
    p1 = partition_ids(node, coll_id)["p1"]
    qn = node.component("querynode")
    assert any(s.partition_id == p1 for s in qn.collections[coll_id].sealed.values())

    client.release_partitions("halves", ["p1"])
    assert client.get_load_state("halves")["state"].name == "Loaded"
    assert client.get_load_state("halves", partition_name="p1")["state"].name == "NotLoad"
    assert client.get_load_state("halves", partition_name="p2")["state"].name == "Loaded"
    assert _count(client, "halves") == 50
    assert _ids(client, "halves", [100, 300, 200]) == [200]
    with pytest.raises(MilvusException, match="partition not loaded"):
        client.query("halves", filter="id >= 0", partition_names=["p1"], consistency_level="Strong")
    assert not any(s.partition_id == p1 for s in qn.collections[coll_id].sealed.values())
    client.drop_partition("halves", "p1")  # released: Milvus lets it go
    assert _count(client, "halves") == 50
    client.create_partition("halves", "p1")
    client.insert("halves", rows(400, 3), partition_name="p1")
    client.load_partitions("halves", ["p1"])
    assert _count(client, "halves") == 53
    assert _ids(client, "halves", [100, 300, 400]) == [400]

    client.release_partitions("halves", ["p2"])
    assert _count(client, "halves") == 13
    client.load_partitions("halves", ["p2"])  # its flushed segments come back
    assert _count(client, "halves") == 53
    client.release_partitions("halves", ["_default", "p1", "p2"])
    assert client.get_load_state("halves")["state"].name == "NotLoad"


def test_a_partition_loaded_later_is_loaded_only_once_its_flushed_segments_are(node, client):
    """LoadPartitions on a loaded collection: the partition reports Loaded only once its flushed
    segments are on the QueryNode, so a read after `load_partitions` returns sees them (found by
    CI on a busy machine: count(*) 13 of 53 right after the load)."""
    client.create_collection("later", schema=bench_schema())
    client.create_partition("later", "p2")
    _indexed(client, "later")
    client.insert("later", rows(0, 10))
    client.insert("later", rows(200, 40), partition_name="p2")
    client.flush("later")
    client.load_partitions("later", ["_default"])
    assert _count(client, "later") == 10
    with segment_loads_failing():
        # pymilvus' load_partitions waits until the partition reports Loaded: run it aside.
        loader = threading.Thread(target=client.load_partitions, args=("later", ["p2"]), daemon=True)
        loader.start()
        wait_until(
            lambda: client.get_load_state("later", partition_name="p2")["state"].name != "NotLoad",
            what="the load of p2 accepted",
        )
        states = {client.get_load_state("later", partition_name="p2")["state"].name for _ in range(20)}
        assert states == {"Loading"}, f"p2 while its segments cannot be loaded: {states}"
    loader.join(timeout=120)
    assert not loader.is_alive(), "load_partitions returned once p2's segments could load"
    assert client.get_load_state("later", partition_name="p2")["state"].name == "Loaded"
    assert _count(client, "later") == 50


def test_load_partitions_of_a_loaded_collection_answers_once_their_segments_are_served(node, client):
    """LoadPartitions on a collection loaded already: the answer (and the Loaded state) comes once
    the partitions' flushed segments are served, so a Strong read right after counts them. They
    used to be loaded in the background after the answer (the load state said Loaded at once)."""
    client.create_collection("more", schema=bench_schema())
    client.create_partition("more", "p2")
    _indexed(client, "more")
    client.insert("more", rows(0, 10))
    client.insert("more", rows(100, 40), partition_name="p2")
    client.flush("more")
    client.load_collection("more")
    assert _count(client, "more") == 50
    client.release_partitions("more", ["p2"])
    assert _count(client, "more") == 10
    with failpoint.activate("querynode.load_segments=sleep(1)"):  # a slow segment load
        client.load_partitions("more", ["p2"])
    assert _count(client, "more") == 50
