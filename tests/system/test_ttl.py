"""Collection TTL (`collection.ttl.seconds`) through pymilvus: expired rows disappear from Search,
Query and count(*) at once, and compaction removes them from the binlogs (Milvus' expiry
compaction), a single segment included."""

from __future__ import annotations

import time
import uuid

import numpy as np
from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, MilvusClient, connections
from pymilvus.grpc_gen import common_pb2

from kmilvus.storage import paths
from tests.util import wait_until

SPARK_TIMEOUT = 240
DIM = 4


def _schema() -> CollectionSchema:
    return CollectionSchema(
        [
            FieldSchema("id", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM),
        ]
    )


def _rows(ids):
    vecs = np.random.default_rng(len(ids)).random((len(ids), DIM), dtype=np.float32)
    return [{"id": k, "vec": vecs[i].tolist()} for i, k in enumerate(ids)]


def _count(client: MilvusClient, name: str) -> int:
    return client.query(name, output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]


def test_expired_rows_are_not_read_and_compaction_removes_them(node_factory):
    n = node_factory(auto_compaction=False)
    client = MilvusClient(uri=n.uri)
    try:
        client.create_collection("ttl", schema=_schema())
        coll = client.describe_collection("ttl")["collection_id"]
        client.insert("ttl", _rows(range(50)))
        client.flush("ttl")
        params = client.prepare_index_params()
        params.add_index(field_name="vec", index_type="FLAT", metric_type="L2")
        client.create_index("ttl", params)
        client.load_collection("ttl")
        assert _count(client, "ttl") == 50

        client.alter_collection_properties("ttl", properties={"collection.ttl.seconds": 1})
        time.sleep(1.2)  # the rows' TTL passes
        assert _count(client, "ttl") == 0
        assert client.query("ttl", filter="id >= 0", consistency_level="Strong") == []
        hits = client.search("ttl", data=[[0.1] * DIM], limit=10, consistency_level="Strong")
        assert list(hits[0]) == []
        assert client.get_collection_stats("ttl")["row_count"] == 50, "flushed rows count until compacted"
        client.release_collection("ttl")

        # One segment, every row expired: compacted alone, its binlogs collected.
        dc = n.component("datacoord")
        flushed = dc.meta.by_collection(coll, (common_pb2.Flushed,))
        old = [s.id for s in flushed]
        ddl = {k: b.ddl_binlog_path for s in flushed for k, b in s.ddl_binlogs.items()}
        assert len(old) == 1 and ddl, "the first manual flush wrote the DDL binlogs"
        alias = "t" + uuid.uuid4().hex[:6]
        connections.connect(alias, uri=n.uri)
        try:
            c = Collection("ttl", using=alias)
            c.compact()
            assert c.wait_for_compaction_completed(timeout=SPARK_TIMEOUT)
            assert c.get_compaction_state().completed == 1
        finally:
            connections.disconnect(alias)
        assert client.get_collection_stats("ttl")["row_count"] == 0
        after = dc.meta.by_collection(coll, (common_pb2.Flushed,))
        assert [s.info.num_of_rows for s in after] == [0], "an empty target keeps the DDL binlogs"
        assert {k: b.ddl_binlog_path for k, b in after[0].ddl_binlogs.items()} == ddl
        store = n.node.store

        def old_files():
            keys = [k for k, _ in n.call(store.list(paths.insert_log_prefix(coll)))]
            return [k for k in keys for s in old if f"/{s}/" in k]

        wait_until(lambda: not old_files(), timeout=10, what="the expired segment's binlogs collected")

        # A longer TTL: new rows are read again.
        client.alter_collection_properties("ttl", properties={"collection.ttl.seconds": 3600})
        client.insert("ttl", _rows(range(100, 105)))
        client.load_collection("ttl")
        assert _count(client, "ttl") == 5
    finally:
        client.close()
