"""The schema and data changes Milvus 2.5–2.6 users make, through pymilvus 3.0: partial-update
upserts (only the given fields change), fields added to a collection, and what is refused."""

from __future__ import annotations

import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from tests.util import wait_until


def _products(client: MilvusClient, dynamic: bool = False):
    schema = client.create_schema(enable_dynamic_field=dynamic)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    schema.add_field("name", DataType.VARCHAR, max_length=100)
    schema.add_field("price", DataType.FLOAT)
    schema.add_field("note", DataType.VARCHAR, max_length=100, nullable=True)
    client.create_collection("p", schema=schema, consistency_level="Strong")
    ip = client.prepare_index_params()
    ip.add_index("vec", metric_type="L2")
    client.create_index("p", ip)
    client.load_collection("p")


def _rows(client) -> dict[int, dict]:
    return {r["id"]: r for r in client.query("p", "id >= 0", output_fields=["*"])}


@pytest.mark.parametrize("flushed", [False, True])
def test_partial_update_changes_only_the_given_fields(client, flushed):
    _products(client)
    client.insert(
        "p",
        [
            {"id": 1, "vec": [1.0, 2.0], "name": "A", "price": 100.0, "note": "n1"},
            {"id": 2, "vec": [3.0, 4.0], "name": "B", "price": 200.0, "note": None},
        ],
    )
    if flushed:
        client.flush("p")
    client.upsert("p", [{"id": 1, "price": 80.0}, {"id": 2, "price": 150.0}], partial_update=True)
    rows = _rows(client)
    assert (rows[1]["name"], rows[1]["price"], rows[1]["note"], rows[1]["vec"]) == ("A", 80.0, "n1", [1.0, 2.0])
    assert (rows[2]["name"], rows[2]["price"], rows[2]["note"], rows[2]["vec"]) == ("B", 150.0, None, [3.0, 4.0])
    client.upsert("p", [{"id": 2, "name": "B2", "note": "set"}], partial_update=True)
    rows = _rows(client)
    assert (rows[2]["name"], rows[2]["price"], rows[2]["note"]) == ("B2", 150.0, "set")
    assert len(rows) == 2


def test_partial_update_of_a_new_key_inserts_it_or_names_the_missing_field(client):
    _products(client)
    client.insert("p", [{"id": 1, "vec": [1.0, 2.0], "name": "A", "price": 1.0, "note": "n"}])
    client.upsert("p", [{"id": 3, "vec": [0.0, 0.0], "name": "C", "price": 3.0}], partial_update=True)
    assert _rows(client)[3]["note"] is None  # nullable: null
    with pytest.raises(MilvusException) as err:
        client.upsert("p", [{"id": 4, "price": 4.0}], partial_update=True)
    assert "insert missed an field `vec`" in err.value.message
    assert sorted(_rows(client)) == [1, 3]


def test_partial_update_merges_dynamic_keys(client):
    _products(client, dynamic=True)
    client.insert("p", [{"id": 1, "vec": [1.0, 2.0], "name": "A", "price": 1.0, "color": "red", "size": 3}])
    client.upsert("p", [{"id": 1, "price": 2.0, "size": 4}], partial_update=True)
    row = _rows(client)[1]
    assert (row["price"], row["color"], row["size"], row["name"]) == (2.0, "red", 4, "A")


# -- AddCollectionField ---------------------------------------------------------------------------


def _docs(client: MilvusClient) -> None:
    schema = client.create_schema(enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    schema.add_field("name", DataType.VARCHAR, max_length=32)
    client.create_collection("d", schema=schema, consistency_level="Strong")
    ip = client.prepare_index_params()
    ip.add_index("vec", metric_type="L2")
    client.create_index("d", ip)
    client.load_collection("d")


def _doc(i: int, **extra) -> dict:
    return {"id": i, "vec": [float(i), 1.0], "name": f"n{i}", **extra}


def _by_id(client: MilvusClient, expr: str = "id >= 0", **kw) -> dict[int, dict]:
    return {r["id"]: r for r in client.query("d", expr, output_fields=["*"], **kw)}


def _ids(client: MilvusClient, expr: str) -> list[int]:
    return sorted(r["id"] for r in client.query("d", expr, output_fields=["id"]))


OLD = [0, 1, 2, 3, 4, 5, 6, 7]  # rows written before the fields were added


def _check_added_fields(client: MilvusClient) -> None:
    """Old rows read `score` as null and `tag` as its default, in outputs and in filters; the rows
    written after the add carry what they were given (an omitted value: null / the default)."""
    rows = _by_id(client)
    assert sorted(rows) == [*OLD, 10, 11]
    for i in OLD:
        assert (rows[i]["score"], rows[i]["tag"], rows[i]["name"]) == (None, "none", f"n{i}"), rows[i]
    assert (rows[10]["score"], rows[10]["tag"]) == (7, "x")
    assert (rows[11]["score"], rows[11]["tag"]) == (None, "none")
    assert _ids(client, "score is null") == [*OLD, 11]
    assert _ids(client, "score == 7") == [10]
    assert _ids(client, 'tag == "none"') == [*OLD, 11]
    assert _ids(client, 'tag == "x" or score > 100') == [10]
    assert client.query("d", "score is null", output_fields=["count(*)"])[0]["count(*)"] == 9
    hits = client.search("d", [[0.0, 1.0]], limit=3, output_fields=["score", "tag"])[0]
    assert [(h["id"], h["entity"]["score"], h["entity"]["tag"]) for h in hits] == [
        (0, None, "none"),
        (1, None, "none"),
        (2, None, "none"),
    ]
    hits = client.search("d", [[10.0, 1.0]], limit=2, filter="score is not null", output_fields=["score"])[0]
    assert [(h["id"], h["entity"]["score"]) for h in hits] == [(10, 7)]


def test_added_fields_read_null_or_default_through_flush_compaction_reload_and_restart(node_factory):
    """Milvus 2.6's AddCollectionField: a nullable field and one with a default value added to a
    loaded collection holding flushed and growing rows; every stage of the data's life reads the
    same rows — growing, flushed (one segment mixes rows from before and after the add),
    compacted, released and loaded again, and after a restart of every component."""
    node = node_factory()
    client = MilvusClient(uri=node.uri)
    _docs(client)
    client.insert("d", [_doc(i) for i in range(5)])
    client.flush("d")
    client.insert("d", [_doc(i) for i in range(5, 8)])  # growing when the fields come
    before = client.describe_collection("d")
    client.add_collection_field("d", "score", DataType.INT64, nullable=True)
    client.add_collection_field("d", "tag", DataType.VARCHAR, max_length=16, nullable=True, default_value="none")
    fields = {f["name"]: f for f in client.describe_collection("d")["fields"]}
    last = max(f["field_id"] for f in before["fields"])
    assert (fields["score"]["field_id"], fields["tag"]["field_id"]) == (last + 1, last + 2)
    assert fields["score"]["nullable"] and fields["tag"]["default_value"].string_data == "none"
    client.insert("d", [_doc(10, score=7, tag="x"), _doc(11)])
    _check_added_fields(client)

    client.flush("d")
    _check_added_fields(client)
    coll_id = before["collection_id"]
    segs = node.call(node.component("datacoord").compactions.port.current_schema(coll_id))
    assert [f.name for f in segs.fields][-2:] == ["score", "tag"]  # DataCoord reads RootCoord's
    job = client.compact("d")
    wait_until(lambda: client.get_compaction_state(job) == "Completed", 120, what="compaction")
    wait_until(lambda: [s.num_rows for s in client.list_loaded_segments("d")] == [10], 60, what="handoff")
    _check_added_fields(client)

    client.release_collection("d")
    client.load_collection("d")
    _check_added_fields(client)
    client.close()
    node.stop()
    node = node_factory()
    client = MilvusClient(uri=node.uri)
    client.load_collection("d")
    _check_added_fields(client)
    client.close()


def test_an_index_on_an_added_field_covers_the_rows_written_before_it(client):
    _docs(client)
    client.insert("d", [_doc(i) for i in range(6)])
    client.flush("d")
    client.add_collection_field("d", "level", DataType.INT64, nullable=True, default_value=3)
    client.insert("d", [_doc(i, level=i - 10) for i in range(10, 13)])
    client.flush("d")
    ip = client.prepare_index_params()
    ip.add_index("level", index_type="STL_SORT")
    client.create_index("d", ip)
    wait_until(lambda: client.describe_index("d", "level")["state"] == "Finished", 60, what="index built")
    assert client.describe_index("d", "level")["indexed_rows"] == 9
    client.release_collection("d")
    client.load_collection("d")
    assert _ids(client, "level == 3") == [0, 1, 2, 3, 4, 5]
    assert _ids(client, "level < 3") == [10, 11, 12]


def test_a_lost_schema_broadcast_delays_no_reader(node):
    """The broadcast on the channels is how nodes learn the new schema in order with the data;
    when it is lost, a QueryNode behind the Proxy's schema asks RootCoord, and the DataNode's
    binlogs still carry the field."""
    from kmilvus.util import failpoint

    client = MilvusClient(uri=node.uri)
    _docs(client)
    client.insert("d", [_doc(i) for i in range(8)])
    with failpoint.activate("rootcoord.add_field.broadcast=raise"):
        client.add_collection_field("d", "score", DataType.INT64, nullable=True)
        client.add_collection_field("d", "tag", DataType.VARCHAR, max_length=16, nullable=True, default_value="none")
    client.insert("d", [_doc(10, score=7, tag="x"), _doc(11)])
    _check_added_fields(client)
    client.flush("d")
    client.release_collection("d")
    client.load_collection("d")
    _check_added_fields(client)
    client.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"field_name": "f", "data_type": DataType.INT64},
            "added field must be nullable, please check it, field name = f",
        ),
        (
            {"field_name": "f", "data_type": DataType.INT64, "default_value": 1},
            "added field must be nullable, please check it, field name = f",
        ),
        (
            {"field_name": "v", "data_type": DataType.FLOAT_VECTOR, "dim": 2, "nullable": True},
            "not support to add vector field, field name = v",
        ),
        (
            {"field_name": "f", "data_type": DataType.INT64, "nullable": True, "is_primary": True},
            "not support to add pk field, field name = f",
        ),
        (
            {"field_name": "f", "data_type": DataType.INT64, "nullable": True, "is_partition_key": True},
            "not support to add partition key field, field name  = f",
        ),
        ({"field_name": "name", "data_type": DataType.INT64, "nullable": True}, "duplicated field name name"),
        (
            {"field_name": "f", "data_type": DataType.VARCHAR, "nullable": True},
            "type param(max_length) should be specified for varChar field(f) of collection d",
        ),
        (
            {"field_name": "f", "data_type": DataType.INT64, "nullable": True, "default_value": "x"},
            "type (string_data) of field (f) is not equal to the type(Int64) of default_value",
        ),
        ({"field_name": "1f", "data_type": DataType.INT64, "nullable": True}, "Invalid field name: 1f"),
    ],
)
def test_add_field_refusals_are_milvus(client, kwargs, message):
    _docs(client)
    before = client.describe_collection("d")
    with pytest.raises(MilvusException) as err:
        client.add_collection_field("d", **kwargs)
    assert err.value.code == 1100 and message in err.value.message
    after = client.describe_collection("d")
    assert [f["name"] for f in after["fields"]] == [f["name"] for f in before["fields"]]  # nothing written


def test_add_field_to_a_missing_collection(client):
    with pytest.raises(MilvusException) as err:
        client.add_collection_field("nosuch", "f", DataType.INT64, nullable=True)
    assert err.value.code == 100 and "collection not found[collection=nosuch]" in err.value.message


def test_binlogs_written_before_a_field_read_it_as_the_schema_says(tmp_path):
    """A segment whose first binlog predates the field: one read of both binlogs, an index
    build's column read and a batch of mixed rows all give the field its default (else null)."""
    import pyarrow as pa
    from pymilvus.grpc_gen import schema_pb2

    from kmilvus.schemautil import add_field
    from kmilvus.storage import ObjectStore, binlog
    from kmilvus.util import typeutil

    schema = schema_pb2.CollectionSchema(name="c")
    schema.fields.add(fieldID=100, name="id", data_type=DataType.INT64, is_primary_key=True)
    schema.fields.add(fieldID=101, name="vec", data_type=DataType.FLOAT_VECTOR).type_params.add(key="dim", value="2")
    added = schema_pb2.FieldSchema(name="level", data_type=DataType.INT64, nullable=True)
    added.default_value.long_data = 3
    note = schema_pb2.FieldSchema(name="note", data_type=DataType.JSON, nullable=True)
    new = add_field(add_field(schema, added), note)
    assert [f.fieldID for f in new.fields] == [100, 101, 102, 103] and new.version == 2

    def rows(s, ids, cols=None):
        vec = [[float(i), 0.0] for i in ids]
        columns = {100: pa.array(ids, pa.int64()), 101: pa.array(vec, typeutil.arrow_type(s.fields[1]))}
        columns.update({fid: pa.array(v, typeutil.arrow_type(s.fields[fid - 100])) for fid, v in (cols or {}).items()})
        return typeutil.columns_to_record_batch(s, columns, list(ids), 5)

    store = ObjectStore.from_uri(f"file://{tmp_path}/root")
    old, mixed = rows(schema, [0, 1]), rows(new, [2, 3], {102: [7, None], 103: [b"{}", None]})
    binlog.write_insert_binlog(store, "insert_log/1/2/3/10", [old])
    binlog.write_insert_binlog(store, "insert_log/1/2/3/11", [old, mixed])  # a buffer from both sides
    t = typeutil.conform(binlog.read_binlogs(store, ["insert_log/1/2/3/10", "insert_log/1/2/3/11"]), new)
    assert t.column("100").to_pylist() == [0, 1, 0, 1, 2, 3]
    assert t.column("102").to_pylist() == [3, 3, 3, 3, 7, 3]  # a null of a field with a default is the default
    assert t.column("103").to_pylist() == [None, None, None, None, b"{}", None]
    field = typeutil.added_field(new, 102)
    missing = lambda n: pa.repeat(pa.scalar(3, pa.int64()), n)  # noqa: E731
    col = binlog.read_column(store, ["insert_log/1/2/3/10", "insert_log/1/2/3/11"], "102", missing)
    assert typeutil.conform_column(field, col).to_pylist() == [3, 3, 3, 3, 7, 3]
    assert typeutil.added_field(new, 101) is None and typeutil.added_field(new, 100) is None


# -- collection functions ---------------------------------------------------------------------------


def test_collection_function_changes_are_refused_as_milvus_2_6_refuses_them(client):
    """BM25 is the only function kmilvus runs, and Milvus 2.6 adds, alters and drops none on an
    existing collection (its output would lack the rows written before); other function types are
    refused as at create time. Nothing changes."""
    from pymilvus import Function, FunctionType

    from tests.system.test_full_text import bm25_schema

    client.create_collection("b", schema=bm25_schema(client))
    bm25 = Function(
        name="bm25", function_type=FunctionType.BM25, input_field_names=["text"], output_field_names="sparse"
    )
    other = Function(
        name="bm25", function_type=FunctionType.TEXTEMBEDDING, input_field_names=["text"], output_field_names="sparse"
    )
    cases = [
        (lambda: client.add_collection_function("b", bm25), "currently does not support adding BM25 function"),
        (
            lambda: client.add_collection_function("b", other),
            "function type TextEmbedding is not supported by this server",
        ),
        (lambda: client.alter_collection_function("b", "bm25", bm25), "currently does not support alter BM25 function"),
        (
            lambda: client.alter_collection_function("b", "bm25", other),
            "currently does not support alter BM25 function",
        ),
        (lambda: client.alter_collection_function("b", "x", other), "invalid function config, name not match"),
        (lambda: client.drop_collection_function("b", "bm25"), "currently does not support dropping BM25 function"),
    ]
    for call, message in cases:
        with pytest.raises(MilvusException) as err:
            call()
        assert err.value.code == 1100 and message in err.value.message, message
    missing = Function(
        name="gone", function_type=FunctionType.TEXTEMBEDDING, input_field_names=["text"], output_field_names="sparse"
    )
    with pytest.raises(MilvusException, match="function gone not found"):
        client.alter_collection_function("b", "gone", missing)
    client.drop_collection_function("b", "gone")  # Milvus: dropping a function the collection has not is a no-op
    with pytest.raises(MilvusException) as err:
        client.add_collection_function("nosuch", other)
    assert err.value.code == 100
    desc = client.describe_collection("b")
    assert [f["name"] for f in desc["functions"]] == ["bm25"]
    assert client.insert("b", [{"id": 1, "text": "still filled"}])["insert_count"] == 1


# -- TruncateCollection -----------------------------------------------------------------------------


def _files(node, coll_id: int, root: str = "insert_log") -> list[str]:
    return [k for k, _ in node.node.store.list_sync(f"{root}/{coll_id}/")]


def test_truncate_removes_every_row_and_keeps_the_collection(node, client):
    """Milvus 2.6's TruncateCollection: flushed, growing and deleted rows of every partition go,
    their segments and files with them; schema, partitions, indexes and the load stay, and rows
    written afterwards are kept."""
    _docs(client)
    client.create_partition("d", "p2")
    client.insert("d", [_doc(i) for i in range(5)])
    client.insert("d", [_doc(i) for i in range(100, 103)], partition_name="p2")
    client.flush("d")
    client.delete("d", ids=[1])
    client.insert("d", [_doc(i) for i in range(5, 8)])  # growing
    desc = client.describe_collection("d")
    coll_id = desc["collection_id"]
    assert _files(node, coll_id)
    client.truncate_collection("d")
    assert client.query("d", "", output_fields=["count(*)"])[0]["count(*)"] == 0
    assert client.search("d", [[0.0, 1.0]], limit=5)[0] == []
    assert client.get_collection_stats("d")["row_count"] == 0
    assert _files(node, coll_id) == []  # every insert binlog removed, through the fenced remover
    segs = node.call(node.node.kv.get_prefix(f"datacoord-meta/s/{coll_id}/", keys_only=True))
    assert segs == []
    after = client.describe_collection("d")
    assert [f["name"] for f in after["fields"]] == [f["name"] for f in desc["fields"]]
    assert client.list_partitions("d") == ["_default", "p2"] and client.list_indexes("d") == ["vec"]
    assert client.get_load_state("d")["state"].name == "Loaded"

    client.insert("d", [_doc(20), _doc(21)])
    client.insert("d", [_doc(120)], partition_name="p2")
    assert _ids(client, "id >= 0") == [20, 21, 120]
    client.flush("d")
    client.release_collection("d")
    client.load_collection("d")
    assert _ids(client, "id >= 0") == [20, 21, 120]
    assert client.get_collection_stats("d")["row_count"] == 3


def test_an_interrupted_truncate_is_finished_and_its_retry_waits_for_it(node, client):
    from kmilvus.util import failpoint

    _docs(client)
    client.insert("d", [_doc(i) for i in range(6)])
    client.flush("d")
    coll_id = client.describe_collection("d")["collection_id"]
    with failpoint.activate("rootcoord.truncate.broadcast=raise(1)"):
        with pytest.raises(MilvusException):
            client.truncate_collection("d")  # the task record is in etcd: RootCoord finishes it
        wait_until(
            lambda: node.call(node.node.kv.get(f"root-coord/truncate-task/{coll_id}")) is None,
            60,
            what="the truncate finished in the background",
        )
    client.truncate_collection("d")  # nothing left: a new truncate of an empty collection
    assert client.query("d", "", output_fields=["count(*)"])[0]["count(*)"] == 0
    assert _files(node, coll_id) == []
    with pytest.raises(MilvusException) as err:
        client.truncate_collection("nosuch")
    assert err.value.code == 100
