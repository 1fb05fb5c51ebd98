"""The Flush path end to end (docs/architecture/flush.md) against real etcd, JetStream and storage."""

from __future__ import annotations

import os
import uuid

import grpc
import numpy as np
import pyarrow.parquet as pq
import pytest
from pymilvus import Collection, MilvusClient, MilvusException, connections, utility
from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc, schema_pb2

from kmilvus.proto import data_coord_pb2
from kmilvus.storage import paths
from tests.flushutil import batch, bench_schema, read_collection
from tests.util import wait_until

Flushed = common_pb2.SegmentState.Flushed


def segments(node, coll_id, states=()):
    dc = node.component("datacoord")
    resp = node.call(
        dc.GetSegmentsByCollection(
            data_coord_pb2.GetSegmentsByCollectionRequest(collectionID=coll_id, states=list(states))
        )
    )
    return list(resp.infos)


def insert_batches(coll, total, size=10_000, start=0):
    for off in range(start, start + total, size):
        ids, vecs, tags = batch(off, size)
        res = coll.insert([ids, vecs, tags])
        assert res.insert_count == size


def test_orm_200k_flush_and_read_back_with_pyarrow_and_spark(node, orm):
    coll = Collection("bench", bench_schema(), using=orm)
    insert_batches(coll, 200_000)
    coll.flush()
    assert coll.num_entities == 200_000
    infos = utility.get_query_segment_info if False else None  # noqa: F841 - query side not built
    persistent = utility.get_persistent_segment_info if False else None  # noqa: F841
    coll_id = coll.describe()["collection_id"]
    segs = segments(node, coll_id)
    assert segs and all(s.state == Flushed for s in segs)
    # pymilvus' own view of persistent segments.
    conn = connections._fetch_handler(orm)
    psegs = conn.get_persistent_segment_infos("bench")
    assert sum(s.num_rows for s in psegs) == 200_000 and all(s.state == Flushed for s in psegs)

    table = read_collection(node.node.store, segs)
    pk = table.column(str(100)).to_numpy()
    assert table.num_rows == 200_000 and len(np.unique(pk)) == 200_000 and pk.min() == 0 and pk.max() == 199_999
    order = np.argsort(pk)
    vecs = np.stack(table.column("101").to_numpy(zero_copy_only=False))[order]
    for start in (0, 70_000, 190_000):
        np.testing.assert_array_equal(vecs[start : start + 10_000], batch(start, 10_000)[1])
    tags = np.asarray(table.column("102").to_pylist(), dtype=object)[order]
    assert tags[12345] == "tag12345"

    # Plain pyarrow.parquet on one segment directory.
    s = segs[0]
    seg_dir = node.node.store.path(paths.segment_prefix(s.collectionID, s.partitionID, s.ID))
    assert pq.read_table(seg_dir).num_rows == s.num_of_rows

    # And Spark, on every segment directory — in its own process, as a user's job would run. A
    # float vector is its 4·dim little-endian bytes there (Milvus' Parquet type for it).
    dirs = [node.node.store.uri(paths.segment_prefix(s.collectionID, s.partitionID, s.ID)) for s in segs]
    got = spark_read(dirs, pk=123456)
    assert got["count"] == 200_000 and got["distinct"] == 200_000
    np.testing.assert_array_equal(np.asarray(got["vec"], dtype=np.float32), batch(120_000, 10_000)[1][3456])
    assert got["tag"] == "tag123456"


SPARK_READ = """
import json, sys
import numpy as np
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("kmilvus-readback")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
args = json.loads(sys.argv[1])
df = spark.read.parquet(*args["dirs"])
row = df.filter(f"`100` = {args['pk']}").select("101", "102").collect()[0]
print(json.dumps({"count": df.count(), "distinct": df.select("100").distinct().count(),
                  "vec": np.frombuffer(row[0], "<f4").tolist(), "tag": row[1]}))
spark.stop()
"""


def spark_read(dirs, pk):
    """spark.read.parquet over segment directories, in a separate Python process."""
    import json
    import subprocess
    import sys

    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    out = subprocess.run(
        [sys.executable, "-c", SPARK_READ, json.dumps({"dirs": dirs, "pk": pk})],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_milvus_client_200k_insert_flush_num_entities(node, client):
    schema = MilvusClient.create_schema()
    schema.add_field("id", pymilvus_dt("INT64"), is_primary=True)
    schema.add_field("vec", pymilvus_dt("FLOAT_VECTOR"), dim=128)
    schema.add_field("tag", pymilvus_dt("VARCHAR"), max_length=64)
    client.create_collection("mc", schema=schema)
    _, vecs, _ = batch(0, 10_000)
    vec_rows = vecs.tolist()
    for off in range(0, 200_000, 10_000):
        rows = [{"id": off + j, "vec": vec_rows[j], "tag": f"tag{off + j}"} for j in range(10_000)]
        res = client.insert("mc", rows)
        assert res["insert_count"] == 10_000 and res["ids"][0] == off
    client.flush("mc")
    assert client.get_collection_stats("mc")["row_count"] == 200_000
    segs = segments(node, client.describe_collection("mc")["collection_id"])
    assert segs and all(s.state == Flushed for s in segs)
    pk = read_collection(node.node.store, segs).column("100").to_numpy()
    assert len(pk) == 200_000 and len(np.unique(pk)) == 200_000


def pymilvus_dt(name):
    from pymilvus import DataType

    return getattr(DataType, name)


def test_auto_id_returns_generated_keys(node, orm):
    coll = Collection("auto", bench_schema(auto_id=True), using=orm)
    _, vecs, tags = batch(0, 1000)
    res = coll.insert([vecs, tags])
    keys = list(res.primary_keys)
    assert len(keys) == 1000 and len(set(keys)) == 1000 and res.timestamp > 0
    coll.flush()
    table = read_collection(node.node.store, segments(node, coll.describe()["collection_id"]))
    assert sorted(table.column("100").to_pylist()) == sorted(keys)


def test_flush_answers_sealed_segments_and_flush_ts(node, orm):
    coll = Collection("f", bench_schema(), using=orm)
    insert_batches(coll, 3000, size=1000)
    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        resp = stub.Flush(milvus_pb2.FlushRequest(collection_names=["f"]))
        assert resp.status.code == 0
        seg_ids = list(resp.coll_segIDs["f"].data)
        flush_ts = resp.coll_flush_ts["f"]
        assert seg_ids and flush_ts > 0
        wait_until(
            lambda: (
                stub.GetFlushState(
                    milvus_pb2.GetFlushStateRequest(segmentIDs=seg_ids, flush_ts=flush_ts, collection_name="f")
                ).flushed
            ),
            what="flush state",
        )
    dc = node.component("datacoord")
    infos = node.call(dc.GetSegmentInfo(data_coord_pb2.GetSegmentInfoRequest(segmentIDs=seg_ids))).infos
    for info in infos:  # Milvus' SegmentInfo fields
        assert info.state == Flushed and info.num_of_rows > 0 and info.insert_channel.endswith("v0")
        assert info.max_row_num > 0 and info.last_expire_time > 0 and info.seal_timestamp <= flush_ts
        assert info.dml_position.seq > 0 and info.start_position.seq > 0
    assert sum(i.num_of_rows for i in infos) == 3000


def test_flush_ticks_its_channels_on_demand(node_factory):
    """A Flush does not wait for the periodic time tick: the Proxy reports a tick past the flush
    and RootCoord publishes it on the collection's channels at once. With the periodic tick an
    hour apart the flush still completes, so the on-demand tick is what carried it."""
    node = node_factory(time_tick_interval=3600)
    tt = node.component("rootcoord").tt_sync
    c = MilvusClient(uri=node.uri)
    try:
        c.create_collection("ondemand", schema=bench_schema())
        ids, vecs, tags = batch(0, 1000)
        c.insert("ondemand", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
        assert tt.on_demand == 0  # no flush, no tick on demand: idle tick traffic is unchanged
        periodic = tt.last
        c.flush("ondemand", timeout=60)
        assert tt.last == periodic  # no periodic tick came in between
        # One channel (one shard): ticked on the Proxy's report, and again if DataCoord's own
        # demand (Flush names its vchannels) comes after that tick was published.
        assert 1 <= tt.on_demand <= 2
        coll_id = c.describe_collection("ondemand")["collection_id"]
        segs = segments(node, coll_id)
        assert segs and all(s.state == Flushed for s in segs)
        assert sum(s.num_of_rows for s in segs) == 1000
        assert c.get_collection_stats("ondemand")["row_count"] == 1000
    finally:
        c.close()


def test_ddl_binlogs_written_with_the_segment_flush(node, orm):
    coll = Collection("ddl", bench_schema(), using=orm)
    insert_batches(coll, 1000, size=1000)
    coll.flush()
    coll_id = coll.describe()["collection_id"]
    keys = [k for k, _ in node.call(node.node.store.list(f"data_definition_log/{coll_id}"))]
    assert any(f"/{coll_id}/ts/" in k for k in keys) and any(f"/{coll_id}/ddl/" in k for k in keys)
    seg = segments(node, coll_id)[0]
    ddl_meta = node.call(node.node.kv.get_prefix(f"datacoord-meta/ddl-binlog/{coll_id}/{seg.ID}/"))
    assert len(ddl_meta) == 1
    binlog_meta = node.call(node.node.kv.get_prefix(f"datacoord-meta/binlog/{coll_id}/{seg.ID}/"))
    assert len(binlog_meta) == seg.binlog_count >= 1


def test_seal_by_size_makes_several_segments(node_factory):
    node = node_factory(segment_max_size_mb=1)  # ≈ 1,800 rows of this schema per segment
    alias = "s" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    try:
        coll = Collection("small", bench_schema(), using=alias)
        insert_batches(coll, 10_000, size=2_500)
        coll.flush()
        assert coll.num_entities == 10_000
        segs = segments(node, coll.describe()["collection_id"])
        assert len(segs) >= 5 and all(s.state == Flushed and s.num_of_rows <= s.max_row_num for s in segs)
    finally:
        connections.disconnect(alias)


def test_idle_segments_seal_and_flush_without_being_asked(node_factory):
    """Also on an idle channel (ticked only every `vchannel_idle_tick_interval`, an hour here):
    DataCoord asks for the tick the sealed segment's flush waits for."""
    node = node_factory(segment_max_idle_time=0.3, time_tick_idle_interval=3600, vchannel_idle_tick_interval=3600)
    c = MilvusClient(uri=node.uri)
    c.create_collection("idle", schema=bench_schema())
    ids, vecs, tags = batch(0, 100)
    c.insert("idle", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
    coll_id = c.describe_collection("idle")["collection_id"]
    wait_until(
        lambda: (s := segments(node, coll_id)) and all(x.state == Flushed for x in s),
        timeout=15,
        what="idle segment flushed",
    )
    assert c.get_collection_stats("idle")["row_count"] == 100
    c.close()


def test_buffer_pressure_writes_several_binlogs_exactly_once(node_factory):
    node = node_factory(insert_buffer_size_mb=2)
    alias = "p" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    try:
        coll = Collection("pressure", bench_schema(), using=alias)
        insert_batches(coll, 30_000, size=5_000)
        coll.flush()
        segs = segments(node, coll.describe()["collection_id"])
        assert sum(s.binlog_count for s in segs) >= 3
        pk = read_collection(node.node.store, segs).column("100").to_numpy()
        assert len(pk) == 30_000 and len(np.unique(pk)) == 30_000
        assert coll.num_entities == 30_000
    finally:
        connections.disconnect(alias)


# Bad input -------------------------------------------------------------------------------


async def insert_messages(stream, vchannel) -> int:
    """How many Insert messages the vchannel holds (time ticks and DDL aside)."""
    from kmilvus.msgstream import MsgType

    last = await stream.last_seq(vchannel)
    if not last:
        return 0  # the subject holds nothing (its DDL message already purged)
    consumer = await stream.consume(vchannel, after_seq=0)
    count = 0
    try:
        while True:
            msg = await consumer.next(timeout=2)
            if msg is None:
                # Purged meanwhile: DataCoord trims what the checkpoint passed (the DDL message;
                # an Insert stays until flushed, which nothing here asks for).
                assert await stream.last_seq(vchannel) < last, "stream ended before its last message"
                return count
            count += msg.type == MsgType.Insert
            if msg.position.seq >= last:
                return count
    finally:
        await consumer.close()


def raw_insert(node, name, fields, num_rows):
    with grpc.insecure_channel(
        node.uri.removeprefix("http://"), options=[("grpc.max_send_message_length", 512 << 20)]
    ) as ch:
        return milvus_pb2_grpc.MilvusServiceStub(ch).Insert(
            milvus_pb2.InsertRequest(collection_name=name, fields_data=fields, num_rows=num_rows)
        )


def fd_long(name, values):
    f = schema_pb2.FieldData(field_name=name, type=schema_pb2.DataType.Int64)
    f.scalars.long_data.data.extend(values)
    return f


def fd_vec(name, n, dim):
    f = schema_pb2.FieldData(field_name=name, type=schema_pb2.DataType.FloatVector)
    f.vectors.dim = dim
    f.vectors.float_vector.data.extend(np.zeros(n * dim, dtype=np.float32))
    return f


def fd_str(name, values):
    f = schema_pb2.FieldData(field_name=name, type=schema_pb2.DataType.VarChar)
    f.scalars.string_data.data.extend(values)
    return f


@pytest.mark.parametrize(
    "case,code,needle",
    [
        ("wrong_dim", 1100, "the dim (64) of field data(vec) is not equal to schema dim (128)"),
        ("wrong_type", 1100, "tag"),
        ("varchar_too_long", 1100, "exceeds max length (64)"),
        ("missing_pk", 1101, "`id`"),
        ("row_count_mismatch", 1100, "num_rows"),
        ("unknown_collection", 100, "collection not found[collection=nope]"),
        ("too_large", 1106, "exceeds the limit"),
    ],
)
def test_bad_insert_is_rejected_and_nothing_is_published(node_factory, case, code, needle):
    node = node_factory(max_insert_bytes=4 * 1024 * 1024)
    c = MilvusClient(uri=node.uri)
    c.create_collection("bad", schema=bench_schema())
    vch = c.describe_collection("bad")["collection_id"]
    stream = node.node.stream
    rc = node.component("rootcoord")
    vchannels = list(next(iter(rc.collections.values())).virtual_channel_names)
    n = 10
    fields = {
        "wrong_dim": [fd_long("id", range(n)), fd_vec("vec", n, 64), fd_str("tag", ["a"] * n)],
        "wrong_type": [fd_long("id", range(n)), fd_vec("vec", n, 128), fd_long("tag", range(n))],
        "varchar_too_long": [fd_long("id", range(n)), fd_vec("vec", n, 128), fd_str("tag", ["x" * 65] * n)],
        "missing_pk": [fd_vec("vec", n, 128), fd_str("tag", ["a"] * n)],
        "row_count_mismatch": [fd_long("id", range(n)), fd_vec("vec", n, 128), fd_str("tag", ["a"] * (n - 1))],
        "unknown_collection": [fd_long("id", range(n)), fd_vec("vec", n, 128), fd_str("tag", ["a"] * n)],
        "too_large": [fd_long("id", range(20_000)), fd_vec("vec", 20_000, 128), fd_str("tag", ["a"] * 20_000)],
    }[case]
    resp = raw_insert(
        node, "nope" if case == "unknown_collection" else "bad", fields, 20_000 if case == "too_large" else n
    )
    assert resp.status.code == code, resp.status
    assert needle in resp.status.reason, resp.status.reason
    assert all(node.call(insert_messages(stream, v)) == 0 for v in vchannels)  # nothing published
    assert segments(node, vch) == []  # nothing allocated
    c.close()


def test_flush_unknown_collection(client):
    with pytest.raises(MilvusException) as err:
        client.flush("nope")
    assert err.value.code == 100 and "collection not found" in err.value.message


def test_garbage_collector_removes_unreferenced_binlogs_only(node_factory):
    node = node_factory(gc_interval=0.2, gc_tolerance=0.5)
    c = MilvusClient(uri=node.uri)
    c.create_collection("gc", schema=bench_schema())
    ids, vecs, tags = batch(0, 300)
    c.insert("gc", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
    c.flush("gc")
    seg = segments(node, c.describe_collection("gc")["collection_id"])[0]
    store = node.node.store
    prefix = paths.segment_prefix(seg.collectionID, seg.partitionID, seg.ID)
    committed = sorted(k for k, _ in node.call(store.list(prefix)))
    orphan = prefix + "999999999"  # what a DataNode killed before SaveBinlogPaths leaves behind
    stats_orphan = paths.stats_log_key(seg.collectionID, seg.partitionID, seg.ID, 999999998)
    # A segment no meta knows and no unfinished job reserved (a write refused after its segment
    # was dropped) is garbage too; tests/integration/test_fencing_and_drops.py keeps a running import's.
    unknown = paths.insert_log_key(seg.collectionID, seg.partitionID, 123456789, 1)
    for key in (orphan, stats_orphan, unknown):
        node.call(store.write(key, b"PAR1 partial"))
    wait_until(
        lambda: not any(node.call(store.exists(k)) for k in (orphan, stats_orphan, unknown)),
        timeout=10,
        what="orphans collected",
    )
    assert sorted(k for k, _ in node.call(store.list(prefix))) == committed
    assert c.get_collection_stats("gc")["row_count"] == 300
    c.close()


def test_flush_state_demands_the_tick_an_idle_channel_waits_for(node_factory):
    """Found by chaos: flushes took 60–120 s although their segments were flushed in a second.
    GetFlushState waits for every channel checkpoint to pass the flush timestamp; an idle
    channel is ticked only every `vchannel_idle_tick_interval`, and only the Flush itself asked
    for a tick. When DataCoord restarts between Flush and GetFlushState (its checkpoints are the
    stored ones: a checkpoint only ticks moved is stored once a minute) nothing asks again, and
    the idle shard's checkpoint stays behind until its idle tick. With the idle ticks an hour
    apart, the flush must still complete: GetFlushState demands the tick it waits for."""
    idle = {"vchannel_idle_tick_interval": 3600, "time_tick_idle_interval": 3600}
    coords = node_factory(roles=("rootcoord", "datacoord", "querycoord"), **idle)
    data = node_factory(roles=("datanode", "proxy"), **idle)
    c = MilvusClient(uri=data.uri)
    try:
        c.create_collection("busyidle", schema=bench_schema(), num_shards=2)
        ids, vecs, tags = batch(0, 1000)
        c.insert("busyidle", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
        channel = grpc.insecure_channel(data.uri.removeprefix("http://"))
        stub = milvus_pb2_grpc.MilvusServiceStub(channel)
        flushed = stub.Flush(milvus_pb2.FlushRequest(collection_names=["busyidle"]))
        assert flushed.status.code == 0, flushed.status
        flush_ts = flushed.coll_flush_ts["busyidle"]
        segs = list(flushed.coll_segIDs["busyidle"].data)
        coords.stop()  # a coordinator restart between the Flush and its GetFlushState
        coords = node_factory(roles=("rootcoord", "datacoord", "querycoord"), **idle)
        req = milvus_pb2.GetFlushStateRequest(segmentIDs=segs, flush_ts=flush_ts, collection_name="busyidle")
        wait_until(lambda: stub.GetFlushState(req).flushed, timeout=60, interval=0.5, what="the flush to complete")
        assert c.get_collection_stats("busyidle")["row_count"] == 1000
        channel.close()
    finally:
        c.close()
