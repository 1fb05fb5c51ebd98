"""Databases through pymilvus 3.0 (MilvusClient and ORM): CreateDatabase, ListDatabases,
DescribeDatabase, AlterDatabase, DropDatabase, and every collection RPC honouring the database
a client names (in the request or as pymilvus' `dbname` gRPC metadata)."""

from __future__ import annotations

import pytest
from pymilvus import Collection, DataType, MilvusClient, MilvusException, connections, db, utility

from tests.flushutil import bench_schema


def _rows(start: int, n: int) -> list[dict]:
    return [{"id": i, "vec": [0.5] * 128, "tag": f"t{i}"} for i in range(start, start + n)]


def _schema():
    s = MilvusClient.create_schema()
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=128)
    s.add_field("tag", DataType.VARCHAR, max_length=64)
    return s


def test_unknown_database_is_refused_and_nothing_written(node, client):
    """The defect: a client naming an unknown database wrote into `default`."""
    other = MilvusClient(uri=node.uri, db_name="nosuchdb")
    try:
        with pytest.raises(MilvusException) as e:
            other.create_collection("c", schema=_schema())
        assert e.value.code == 800 and "database not found[database=nosuchdb]" in e.value.message
        with pytest.raises(MilvusException) as e:
            other.insert("c", _rows(0, 3))
        assert e.value.code == 800
    finally:
        other.close()
    assert client.list_collections() == []


def test_create_list_describe_alter_drop(node, client):
    assert client.list_databases() == ["default"]
    client.create_database("db1", properties={"database.replica.number": "1"})
    assert sorted(client.list_databases()) == ["db1", "default"]
    desc = client.describe_database("db1")
    assert desc["name"] == "db1" and desc["database.replica.number"] == "1"
    client.alter_database_properties("db1", {"database.max.collections": "10"})
    desc = client.describe_database("db1")
    assert desc["database.max.collections"] == "10" and desc["database.replica.number"] == "1"
    client.drop_database_properties("db1", ["database.replica.number"])
    assert "database.replica.number" not in client.describe_database("db1")
    with pytest.raises(MilvusException) as e:
        client.create_database("db1")
    assert "database already exist: db1" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.describe_database("nope")
    assert e.value.code == 800 and "database not found[database=nope]" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.drop_database("default")
    assert "can not drop default database" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.create_database("1bad")
    assert e.value.code == 1100
    client.drop_database("db1")
    client.drop_database("db1")  # dropping an unknown database succeeds, as in Milvus
    assert client.list_databases() == ["default"]


def test_same_name_in_two_databases_are_two_collections(node, client):
    client.create_database("db1")
    c1 = MilvusClient(uri=node.uri, db_name="db1")
    try:
        client.create_collection("docs", schema=_schema())
        c1.create_collection("docs", schema=_schema())
        d0, d1 = client.describe_collection("docs"), c1.describe_collection("docs")
        assert d0["collection_id"] != d1["collection_id"]
        client.insert("docs", _rows(0, 5))
        c1.insert("docs", _rows(100, 7))
        client.flush("docs")
        c1.flush("docs")
        assert client.get_collection_stats("docs")["row_count"] == 5
        assert c1.get_collection_stats("docs")["row_count"] == 7
        c1.use_database("default")
        assert c1.get_collection_stats("docs")["row_count"] == 5
        c1.use_database("db1")
        # Dropping a database that holds collections is refused with Milvus' message.
        with pytest.raises(MilvusException) as e:
            client.drop_database("db1")
        assert "database:db1 not empty, must drop all collections before drop database" in e.value.message
        c1.drop_collection("docs")
        assert client.has_collection("docs")  # default's collection untouched
        client.drop_database("db1")
        assert client.list_databases() == ["default"]
        assert client.get_collection_stats("docs")["row_count"] == 5
    finally:
        c1.close()


def test_orm_using_database(node):
    alias = "dbs-orm"
    connections.connect(alias, uri=node.uri)
    try:
        db.create_database("orm_db", using=alias)
        db.using_database("orm_db", using=alias)
        Collection("c", bench_schema(), using=alias)
        assert utility.list_collections(using=alias) == ["c"]
        db.using_database("default", using=alias)
        assert utility.list_collections(using=alias) == []
        assert not utility.has_collection("c", using=alias)
        assert sorted(db.list_database(using=alias)) == ["default", "orm_db"]
    finally:
        connections.disconnect(alias)


def test_database_limit(node, client):
    """Milvus' rootCoord.maxDatabaseNum (64 by default, `default` included)."""
    node.component("rootcoord").cfg.max_database_num = 3
    client.create_database("a1")
    client.create_database("a2")
    with pytest.raises(MilvusException) as e:
        client.create_database("a3")
    assert e.value.code == 801 and "exceeded the limit number of database[limit=3]" in e.value.message
    assert sorted(client.list_databases()) == ["a1", "a2", "default"]


def test_aliases_live_in_their_database(node, client):
    client.create_database("db1")
    c1 = MilvusClient(uri=node.uri, db_name="db1")
    try:
        c1.create_collection("docs", schema=_schema())
        c1.create_alias("docs", "latest")
        assert c1.describe_alias("latest")["collection_name"] == "docs"
        assert client.list_aliases()["aliases"] == []
        with pytest.raises(MilvusException) as e:
            client.create_alias("docs", "latest")  # no `docs` in default
        assert e.value.code == 100
    finally:
        c1.close()
    other = MilvusClient(uri=node.uri, db_name="nosuchdb")
    try:
        with pytest.raises(MilvusException) as e:
            other.create_alias("docs", "a")
        assert e.value.code == 800
    finally:
        other.close()


def test_connect_and_using_database_of_an_unknown_database_are_refused(node, client):
    """Milvus' Connect refuses a database that does not exist (the `dbname` metadata, which
    pymilvus 2.x and the other SDKs send on Connect too); pymilvus 3.0's `use_database` asks
    DescribeDatabase, and an ORM alias switched to an unknown database is refused on its next
    call — never served from `default`."""
    import grpc
    from pymilvus.client.prepare import Prepare
    from pymilvus.grpc_gen import milvus_pb2_grpc

    client.create_collection("seen", dimension=4)
    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        req = Prepare.register_request("", "h")
        resp = stub.Connect(req, metadata=(("dbname", "nosuchdb"),))
        assert resp.status.code == 800 and resp.status.reason == "database not found[database=nosuchdb]"
        assert stub.Connect(req, metadata=(("dbname", "default"),)).status.code == 0
        assert stub.Connect(req).status.code == 0  # no database named: default
    with pytest.raises(MilvusException) as e:
        client.use_database("nosuchdb")
    assert e.value.code == 800
    assert client.list_collections() == ["seen"]  # still on default
    alias = "dbs-unknown"
    connections.connect(alias, uri=node.uri, db_name="nosuchdb")
    try:
        with pytest.raises(MilvusException) as e:
            utility.list_collections(using=alias)
        assert e.value.code == 800
        db.using_database("default", using=alias)
        assert utility.list_collections(using=alias) == ["seen"]
        db.using_database("nosuchdb", using=alias)
        with pytest.raises(MilvusException) as e:
            utility.has_collection("seen", using=alias)
        assert e.value.code == 800
    finally:
        connections.disconnect(alias)
