"""CreateCollection / DescribeCollection / HasCollection / ShowCollections through pymilvus 3.0
(ORM and MilvusClient) against a real node, and the bad-input answers."""

from __future__ import annotations

import grpc
import pytest
from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, MilvusClient, MilvusException, utility
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc, schema_pb2

from kmilvus.meta import EtcdKV
from tests.util import wait_until


def all_types_schema(auto_id=False, pk_type=DataType.INT64):
    pk_kwargs = {"max_length": 64} if pk_type == DataType.VARCHAR else {}
    return CollectionSchema(
        [
            FieldSchema("id", pk_type, is_primary=True, auto_id=auto_id, **pk_kwargs),
            FieldSchema("b", DataType.BOOL),
            FieldSchema("i8", DataType.INT8),
            FieldSchema("i16", DataType.INT16),
            FieldSchema("i32", DataType.INT32),
            FieldSchema("i64", DataType.INT64),
            FieldSchema("f", DataType.FLOAT),
            FieldSchema("d", DataType.DOUBLE),
            FieldSchema("s", DataType.VARCHAR, max_length=100),
            FieldSchema("j", DataType.JSON),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=8),
        ],
        description="all types",
    )


@pytest.mark.parametrize(
    "auto_id,pk", [(False, DataType.INT64), (True, DataType.INT64), (False, DataType.VARCHAR), (True, DataType.VARCHAR)]
)
def test_orm_create_describe_list(orm, auto_id, pk):
    schema = all_types_schema(auto_id, pk)
    coll = Collection("c1", schema, using=orm, shards_num=2)
    assert utility.has_collection("c1", using=orm)
    assert not utility.has_collection("nope", using=orm)
    assert utility.list_collections(using=orm) == ["c1"]
    again = Collection("c1", using=orm)  # describe
    got = {f.name: f for f in again.schema.fields}
    assert list(got) == [f.name for f in schema.fields]
    assert got["vec"].params["dim"] == 8 and got["s"].params["max_length"] == 100
    assert got["id"].is_primary and got["id"].auto_id == auto_id
    assert coll.schema.description == "all types"
    # Creating the same collection again with the same schema is fine (as in Milvus).
    Collection("c1", schema, using=orm, shards_num=2)


def test_milvus_client_create_describe_list(client):
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=128)
    schema.add_field("tag", DataType.VARCHAR, max_length=64)
    client.create_collection("mc", schema=schema)
    assert client.has_collection("mc")
    assert client.list_collections() == ["mc"]
    desc = client.describe_collection("mc")
    assert desc["collection_name"] == "mc"
    assert [f["name"] for f in desc["fields"]] == ["id", "vec", "tag"]
    assert desc["fields"][1]["params"]["dim"] == 128
    assert desc["num_shards"] == 1 and desc["collection_id"] > 0


def test_meta_lives_in_etcd_and_vchannels_assigned(node, client):
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=4)
    client.create_collection("m", schema=schema, num_shards=2)
    kv: EtcdKV = node.node.kv
    keys = [k for k, _ in node.call(kv.get_prefix("root-coord/"))]
    cid = client.describe_collection("m")["collection_id"]
    assert f"root-coord/collection/{cid}" in keys and "root-coord/collection-name/default/m" in keys
    # Each vchannel is watched by the DataNode.
    dn = node.component("datanode")
    desc = node.call(
        node.component("rootcoord").DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name="m"))
    )
    assert len(desc.virtual_channel_names) == 2
    wait_until(lambda: set(desc.virtual_channel_names) <= set(dn.flowgraphs))


def test_alloc_timestamp_and_health(node):
    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        a = stub.AllocTimestamp(milvus_pb2.AllocTimestampRequest()).timestamp
        b = stub.AllocTimestamp(milvus_pb2.AllocTimestampRequest()).timestamp
        assert 0 < a < b
        health = stub.CheckHealth(milvus_pb2.CheckHealthRequest())
        assert health.isHealthy and health.status.code == 0
        assert stub.GetVersion(milvus_pb2.GetVersionRequest()).version.startswith("v2.")
        assert stub.Connect(milvus_pb2.ConnectRequest()).status.code == 0


# Bad input: raw gRPC so that pymilvus' own client-side checks cannot hide the server's answer.


def _create_raw(node, name, fields, *, schema_name=None):
    schema = schema_pb2.CollectionSchema(name=schema_name or name, fields=fields)
    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        return stub.CreateCollection(
            milvus_pb2.CreateCollectionRequest(collection_name=name, schema=schema.SerializeToString(), shards_num=1)
        )


def F(name, dt, pk=False, **params):
    f = schema_pb2.FieldSchema(name=name, data_type=dt, is_primary_key=pk)
    for k, v in params.items():
        f.type_params.add(key=k, value=str(v))
    return f


PK = F("id", schema_pb2.DataType.Int64, pk=True)
VEC = F("v", schema_pb2.DataType.FloatVector, dim=4)


@pytest.mark.parametrize(
    "name,fields,needle",
    [
        ("1abc", [PK, VEC], "first character of a collection name must be an underscore or letter"),
        ("a-b", [PK, VEC], "can only contain numbers, letters and underscores"),
        ("x" * 256, [PK, VEC], "must be less than 255 characters"),
        ("c", [PK, VEC, F("v", schema_pb2.DataType.Int32)], "duplicated field name v"),
        ("c", [F("$x", schema_pb2.DataType.Int64, pk=True), VEC], "Invalid field name: $x"),
        ("c", [F("a", schema_pb2.DataType.Int64), VEC], "primary key is not specified"),
        (
            "c",
            [PK, F("id2", schema_pb2.DataType.Int64, pk=True), VEC],
            "more than one primary key, field name = id, id2",
        ),
        ("c", [PK, F("v", schema_pb2.DataType.FloatVector)], "dimension is not defined"),
        ("c", [PK, F("v", schema_pb2.DataType.FloatVector, dim=0)], "invalid dimension: 0 of field v"),
        ("c", [PK, F("v", schema_pb2.DataType.FloatVector, dim=-3)], "invalid dimension: -3"),
        ("c", [PK, F("v", schema_pb2.DataType.FloatVector, dim=32769)], "should be in range 1 ~ 32768"),
        (
            "c",
            [PK, VEC, F("s", schema_pb2.DataType.VarChar)],
            "type param(max_length) should be specified for varChar field(s)",
        ),
        ("c", [F("id", schema_pb2.DataType.Float, pk=True), VEC], "primary key should be Int64 or VarChar"),
    ],
)
def test_bad_schema_is_rejected_and_nothing_written(node, name, fields, needle):
    kv = node.node.kv
    before = node.call(kv.get_prefix("root-coord/"))
    st = _create_raw(node, name, fields)
    assert st.code == 1100 and st.error_code != 0, st
    assert needle in st.reason, st.reason
    assert node.call(kv.get_prefix("root-coord/")) == before


def test_existing_name_with_different_schema(node, orm):
    Collection(
        "dup",
        CollectionSchema(
            [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("v", DataType.FLOAT_VECTOR, dim=4)]
        ),
        using=orm,
    )
    kv = node.node.kv
    before = node.call(kv.get_prefix(""))
    with pytest.raises(MilvusException) as err:
        Collection(
            "dup",
            CollectionSchema(
                [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("v", DataType.FLOAT_VECTOR, dim=8)]
            ),
            using=orm,
        )
    assert "schema" in str(err.value).lower() or "different parameters" in str(err.value)
    st = _create_raw(node, "dup", [PK, F("v", schema_pb2.DataType.FloatVector, dim=16)])
    assert st.code == 1100 and "create duplicate collection with different parameters, collection: dup" in st.reason
    after = [kv_ for kv_ in node.call(kv.get_prefix("")) if not kv_[0].startswith(("tso/", "id/", "session/"))]
    assert after == [kv_ for kv_ in before if not kv_[0].startswith(("tso/", "id/", "session/"))]


def test_describe_unknown_collection(client):
    with pytest.raises(MilvusException) as err:
        client.describe_collection("missing")
    assert err.value.code == 100 and "collection not found" in err.value.message


def test_quick_start_create_collection_is_loaded_and_searchable(client):
    """MilvusClient.create_collection(name, dimension=…) sends CreateCollection, CreateIndex
    (AUTOINDEX, COSINE), LoadCollection: the collection Milvus creates (id, vector, dynamic
    field), indexed and loaded, so a search right after an insert finds the row."""
    client.create_collection("quick", dimension=4)
    desc = client.describe_collection("quick")
    assert [f["name"] for f in desc["fields"]] == ["id", "vector"] and desc["enable_dynamic_field"]
    assert client.get_load_state("quick")["state"].name == "Loaded"
    client.insert("quick", [{"id": 1, "vector": [0.1, 0.2, 0.3, 0.4], "extra": "kept in $meta"}])
    hits = client.search(
        "quick", data=[[0.1, 0.2, 0.3, 0.4]], limit=1, output_fields=["extra"], consistency_level="Strong"
    )[0]
    assert hits[0]["id"] == 1 and hits[0]["entity"]["extra"] == "kept in $meta"


def test_partition_key_on_the_primary_key_is_refused(client):
    """Milvus' validatePartitionKey: the partition key must not be the primary field."""
    for pk_type, extra in ((DataType.INT64, {}), (DataType.VARCHAR, {"max_length": 16})):
        schema = MilvusClient.create_schema()
        schema.add_field("pk", pk_type, is_primary=True, is_partition_key=True, **extra)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=4)
        with pytest.raises(MilvusException) as e:
            client.create_collection("pkp", schema=schema)
        assert e.value.code == 65535 and e.value.message == "the partition key field must not be primary field"
    assert not client.has_collection("pkp")
