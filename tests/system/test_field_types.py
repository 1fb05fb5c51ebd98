"""Milvus 2.4/2.5 field types through pymilvus 3.0: binary, float16, bfloat16 and sparse float
vectors, arrays of scalars, nullable fields and default values — inserted, flushed to Parquet
binlogs in their natural Arrow types and read back with pyarrow; bad input gets Milvus' messages
and writes nothing."""

from __future__ import annotations

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc, schema_pb2

from kmilvus.storage import binlog, paths
from tests.system.test_flush import segments


def _schema(client: MilvusClient):
    s = client.create_schema(enable_dynamic_field=False)
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("bin", DataType.BINARY_VECTOR, dim=16)
    s.add_field("f16", DataType.FLOAT16_VECTOR, dim=4)
    s.add_field("bf16", DataType.BFLOAT16_VECTOR, dim=4)
    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    s.add_field("tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=3, max_length=8)
    s.add_field("nums", DataType.ARRAY, element_type=DataType.INT64, max_capacity=4)
    s.add_field("note", DataType.VARCHAR, max_length=16, nullable=True)
    s.add_field("score", DataType.FLOAT, default_value=1.5)
    return s


def _row(i: int, **over):
    row = {
        "id": i,
        "bin": bytes([i, 255 - i]),
        "f16": np.array([i, 0.5, -1, 2], dtype=np.float16),
        "bf16": [float(i), 0.25, -1.0, 2.0],  # float32 data: the server converts to bfloat16
        "sparse": {1: 0.5, 7 + i: 1.25},
        "tags": ["a", f"t{i}"],
        "nums": list(range(i % 4)),
        "note": None if i % 2 else f"n{i}",
        "score": None if i % 3 == 0 else float(i),
    }
    row.update(over)
    return row


def _read(node, client, name) -> pa.Table:
    cid = client.describe_collection(name)["collection_id"]
    tables = []
    for s in segments(node, cid):
        seg_dir = node.node.store.path(paths.segment_prefix(s.collectionID, s.partitionID, s.ID))
        tables.append(binlog.from_storage(pq.read_table(seg_dir)))  # plain pyarrow, vectors decoded
    return pa.concat_tables(tables).sort_by("100")


def _fields(node, client, name) -> dict[str, str]:
    desc = client.describe_collection(name)
    return {f["name"]: str(f["field_id"]) for f in desc["fields"]}


def test_every_type_is_flushed_in_its_natural_arrow_type(node, client):
    client.create_collection("types", schema=_schema(client))
    assert client.insert("types", [_row(i) for i in range(6)])["insert_count"] == 6
    client.flush("types")
    t = _read(node, client, "types")
    f = _fields(node, client, "types")
    assert t.num_rows == 6
    assert t.schema.field(f["bin"]).type == pa.binary(2)
    assert t.column(f["bin"]).to_pylist()[3] == bytes([3, 252])
    assert t.schema.field(f["f16"]).type == pa.binary(8)
    f16 = np.frombuffer(t.column(f["f16"]).to_pylist()[5], dtype="<f2")
    np.testing.assert_array_equal(f16, np.array([5, 0.5, -1, 2], np.float16))
    assert t.schema.field(f["bf16"]).type == pa.binary(8)
    bf = np.frombuffer(t.column(f["bf16"]).to_pylist()[2], dtype="<u2").astype(np.uint32) << 16
    np.testing.assert_array_equal(bf.view(np.float32), np.array([2.0, 0.25, -1.0, 2.0], np.float32))
    assert t.schema.field(f["sparse"]).type == pa.map_(pa.uint32(), pa.float32())
    assert t.column(f["sparse"]).to_pylist()[4] == [(1, 0.5), (11, 1.25)]
    assert t.schema.field(f["tags"]).type == pa.list_(pa.string())
    assert t.column(f["tags"]).to_pylist()[1] == ["a", "t1"]
    assert t.column(f["nums"]).to_pylist() == [[], [0], [0, 1], [0, 1, 2], [], [0]]
    assert t.schema.field(f["note"]).nullable
    assert t.column(f["note"]).to_pylist() == ["n0", None, "n2", None, "n4", None]
    assert t.column(f["score"]).to_pylist() == [1.5, 1.0, 2.0, 1.5, 4.0, 5.0]
    assert client.get_collection_stats("types")["row_count"] == 6


def test_left_out_nullable_and_default_fields_are_filled(node, client):
    client.create_collection("types", schema=_schema(client))
    row = _row(1)
    del row["note"], row["score"]
    client.insert("types", [row])
    client.flush("types")
    t = _read(node, client, "types")
    f = _fields(node, client, "types")
    assert t.column(f["note"]).to_pylist() == [None]
    assert t.column(f["score"]).to_pylist() == [1.5]


def _raw_insert(node, fields_data, num_rows=1):
    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        return stub.Insert(
            milvus_pb2.InsertRequest(collection_name="types", fields_data=fields_data, num_rows=num_rows)
        )


def _fd_of(client: MilvusClient, row) -> list[schema_pb2.FieldData]:
    """The FieldData pymilvus would send for `row`, built by pymilvus itself."""
    from pymilvus.client.prepare import Prepare

    schema = client.describe_collection("types")
    req = Prepare.row_insert_param("types", [row], "", fields_info=schema["fields"], enable_dynamic=False)
    return list(req.fields_data)


@pytest.mark.parametrize(
    ("field", "mutate", "message"),
    [
        ("bin", lambda fd: setattr(fd.vectors, "binary_vector", b"\x01\x02\x03"), "byte length (3)"),
        ("f16", lambda fd: setattr(fd.vectors, "float16_vector", b"\x00" * 6), "byte length (6)"),
        (
            "sparse",
            lambda fd: fd.vectors.sparse_float_vector.contents.__setitem__(
                0, np.array([(5, 1.0), (2, 1.0)], dtype=[("i", "<u4"), ("v", "<f4")]).tobytes()
            ),
            "unsorted or same indices in sparse float vector",
        ),
        (
            "sparse",
            lambda fd: fd.vectors.sparse_float_vector.contents.__setitem__(
                0, np.array([(2, -1.0)], dtype=[("i", "<u4"), ("v", "<f4")]).tobytes()
            ),
            "negative value in sparse float vector",
        ),
        (
            "sparse",
            lambda fd: fd.vectors.sparse_float_vector.contents.__setitem__(0, b"\x01\x02"),
            "invalid data length",
        ),
        ("nums", lambda fd: fd.scalars.array_data.data[0].long_data.data.extend([9] * 9), "exceeds max capacity (4)"),
        ("tags", lambda fd: fd.scalars.array_data.data[0].string_data.data.append("x" * 9), "exceeds max length (8)"),
        ("score", lambda fd: fd.valid_data.__setitem__(0, False) or fd.scalars.float_data.data.pop(), None),
    ],
)
def test_bad_values_are_refused_and_nothing_is_written(node, client, field, mutate, message):
    client.create_collection("types", schema=_schema(client))
    fds = _fd_of(client, _row(2, note="x"))
    target = next(fd for fd in fds if fd.field_name == field)
    mutate(target)
    resp = _raw_insert(node, fds)
    if message is None:  # a missing value of a field with a default is filled, not refused
        assert resp.status.code == 0
        return
    assert resp.status.code == 1100, resp.status
    assert message in resp.status.reason
    client.flush("types")
    assert client.get_collection_stats("types")["row_count"] == 0


def test_null_into_a_field_that_is_not_nullable_is_refused(node, client):
    s = client.create_schema()
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    s.add_field("title", DataType.VARCHAR, max_length=8)
    client.create_collection("types", schema=s)
    fds = _fd_of(client, {"id": 1, "vec": [0.1, 0.2], "title": "a"})
    title = next(fd for fd in fds if fd.field_name == "title")
    title.valid_data.extend([False])
    del title.scalars.string_data.data[:]
    resp = _raw_insert(node, fds)
    assert resp.status.code == 1100
    assert "the 0th value of field (title) is null, but the field is not nullable" in resp.status.reason


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda s: s.add_field("b", DataType.BINARY_VECTOR, dim=12), "binary vector dimension should be multiple of 8"),
        (
            lambda s: s.add_field("a", DataType.ARRAY, element_type=DataType.JSON, max_capacity=2),
            "is not supported for array field a",
        ),
        (
            lambda s: s.add_field("a", DataType.ARRAY, element_type=DataType.INT64, max_capacity=5000),
            "the maximum capacity specified for a Array should be in (0, 4096]",
        ),
        (lambda s: s.add_field("v2", DataType.FLOAT_VECTOR, dim=2, nullable=True), "vector type not support null"),
        (
            lambda s: s.add_field("n", DataType.INT64, default_value="x"),
            "of field (n) is not equal to the type(Int64) of default_value",
        ),
    ],
)
def test_bad_schemas_are_refused(node, client, build, message):
    s = client.create_schema()
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    try:
        build(s)
    except MilvusException as exc:  # pymilvus refused it before sending: nothing to check here
        pytest.fail(f"pymilvus refused the schema client-side: {exc}")
    with pytest.raises(MilvusException) as err:
        client.create_collection("bad", schema=s)
    assert message in err.value.message
    assert not client.has_collection("bad")


def test_columns_convert_back_to_the_field_data_pymilvus_reads(node, client):
    """Arrow → FieldData (what query results will carry) gives back what was inserted."""
    from pymilvus.client.entity_helper import extract_row_data_from_fields_data_v2

    from kmilvus.schemautil import normalize
    from kmilvus.util import fielddata, typeutil

    client.create_collection("types", schema=_schema(client))
    fds = _fd_of(client, _row(1))
    desc = node.call(
        node.component("rootcoord").DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name="types"))
    )
    schema = normalize(desc.schema)
    cols = fielddata.fields_data_to_columns(schema, fds, 1)
    out = {f.name: fielddata.array_to_field_data(f, cols[f.fieldID]) for f in typeutil.user_fields(schema)}
    assert out["bin"].vectors.binary_vector == bytes([1, 254])
    assert np.frombuffer(out["f16"].vectors.float16_vector, np.float16).tolist() == [1, 0.5, -1, 2]
    assert len(out["bf16"].vectors.bfloat16_vector) == 8
    assert out["sparse"].vectors.sparse_float_vector.contents[0] == fds[4].vectors.sparse_float_vector.contents[0]
    assert list(out["tags"].scalars.array_data.data[0].string_data.data) == ["a", "t1"]
    assert list(out["note"].valid_data) == [False] and len(out["note"].scalars.string_data.data) == 1
    assert list(out["score"].scalars.float_data.data) == [1.0]
    row: dict = {}
    for fd in out.values():
        extract_row_data_from_fields_data_v2(fd, [row])
    assert row["note"] is None and row["tags"] == ["a", "t1"] and row["score"] == 1.0


def test_compaction_keeps_every_type_as_it_was(node_factory):
    """The Spark compaction job merges segments of every type without changing a value."""
    from pymilvus import Collection, connections

    from tests.system.test_spark_jobs import IMPORT_TIMEOUT, _read_all, _segments

    n = node_factory(auto_compaction=False)
    client = MilvusClient(uri=n.uri)
    connections.connect("types", uri=n.uri)
    try:
        client.create_collection("types", schema=_schema(client))
        for start in (0, 10, 20):
            client.insert("types", [_row(i) for i in range(start, start + 10)])
            client.flush("types")
        coll = client.describe_collection("types")["collection_id"]
        dc = n.component("datacoord")
        before = _read_all(n, coll, dc.compactions.schema_of(coll)).sort_by("100")
        assert len(_segments(n, coll)) == 3
        orm = Collection("types", using="types")
        orm.compact()
        assert orm.wait_for_compaction_completed(timeout=IMPORT_TIMEOUT)
        assert orm.get_compaction_state().completed == 1, [
            j.reason if hasattr(j, "reason") else j for j in dc.compactions.jobs.values()
        ]
        after = _read_all(n, coll, dc.compactions.schema_of(coll)).sort_by("100")
        assert len(_segments(n, coll)) == 1
        assert after.schema.remove_metadata() == before.schema.remove_metadata()
        for name in before.schema.names:
            assert after.column(name).to_pylist() == before.column(name).to_pylist(), name
    finally:
        connections.disconnect("types")
        client.close()


def test_bulk_import_of_the_new_types(node, client, tmp_path):
    """do_bulk_insert of a JSON file with every type: imported rows read back as inserted ones."""
    import json

    from pymilvus import connections, utility
    from pymilvus.client.types import BulkInsertState

    from tests.system.test_spark_jobs import _wait_import

    client.create_collection("types", schema=_schema(client))
    rows = []
    for i in range(6):
        r = _row(i)
        r["bin"] = list(r["bin"])
        r["f16"] = [float(x) for x in r["f16"]]
        r["sparse"] = {str(k): v for k, v in r["sparse"].items()}
        rows.append(r)
    del rows[1]["note"], rows[1]["score"]  # left out: null / the default
    f = tmp_path / "rows.json"
    f.write_text(json.dumps({"rows": rows}))
    connections.connect("imp-types", uri=node.uri)
    try:
        task = utility.do_bulk_insert("types", files=[str(f)], using="imp-types")
        st = _wait_import(task, "imp-types")
    finally:
        connections.disconnect("imp-types")
    assert st.state == BulkInsertState.ImportCompleted, st.infos
    t = _read(node, client, "types")
    fid = _fields(node, client, "types")
    assert t.num_rows == 6
    assert t.column(fid["bin"]).to_pylist()[3] == bytes([3, 252])
    assert t.column(fid["sparse"]).to_pylist()[4] == [(1, 0.5), (11, 1.25)]
    assert t.column(fid["tags"]).to_pylist()[1] == ["a", "t1"]
    assert t.column(fid["note"]).to_pylist() == ["n0", None, "n2", None, "n4", None]
    assert t.column(fid["score"]).to_pylist() == [1.5, 1.5, 2.0, 1.5, 4.0, 5.0]
