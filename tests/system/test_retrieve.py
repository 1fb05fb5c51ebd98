"""The retrieve core of Query / Get / count: output fields as Milvus resolves them, filter,
offset / limit, the visibility mask, `$meta` keys, and FieldData for QueryResults."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import parse
from kmilvus.parser.retrieve import count, resolve_output_fields, retrieve, to_field_data
from kmilvus.util import typeutil
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType
DIM = 2


def make_schema(dynamic: bool = True) -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="r", enable_dynamic_field=dynamic)
    s.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    s.fields.add(fieldID=101, name="s", data_type=DT.VarChar)
    s.fields.add(fieldID=102, name="vec", data_type=DT.FloatVector).type_params.add(key="dim", value=str(DIM))
    s.fields.add(fieldID=103, name="meta", data_type=DT.JSON)
    if dynamic:
        s.fields.add(fieldID=104, name="$meta", data_type=DT.JSON, is_dynamic=True)
    return s


SCHEMA = make_schema()
N = 10


def make_table(schema=SCHEMA) -> pa.Table:
    cols = {
        "0": pa.array(np.arange(N) + 1000, pa.int64()),
        "1": pa.array(np.full(N, 7), pa.int64()),
        "100": pa.array(np.arange(N), pa.int64()),
        "101": pa.array([f"s{i}" for i in range(N)], pa.string()),
        "102": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(N * DIM, dtype=np.float32)), DIM),
        "103": pa.array([json.dumps({"k": i}).encode() for i in range(N)], pa.binary()),
    }
    if typeutil.dynamic_field(schema) is not None:
        cols["104"] = pa.array([json.dumps({"color": "red" if i % 2 else "blue", "n": i}).encode() for i in range(N)])
    return pa.table(cols)


TABLE = make_table()


def test_output_fields_resolution():
    out = resolve_output_fields(SCHEMA, [])
    assert (out.field_ids, out.names, out.dynamic_keys) == ((100,), ("id",), None)
    out = resolve_output_fields(SCHEMA, ["s", " vec "])
    assert (out.field_ids, out.names) == ((100, 101, 102), ("id", "s", "vec"))
    out = resolve_output_fields(SCHEMA, ["*"])
    assert (out.field_ids, out.dynamic_keys) == ((100, 101, 102, 103, 104), None)
    out = resolve_output_fields(SCHEMA, ["color", "s"])
    assert (out.field_ids, out.names, out.dynamic_keys) == ((100, 101, 104), ("id", "color", "s"), ("color",))
    out = resolve_output_fields(SCHEMA, ["color", "$meta"])
    assert out.dynamic_keys is None
    with pytest.raises(MilvusError, match="field nope not exist") as info:
        resolve_output_fields(make_schema(dynamic=False), ["nope"])
    assert info.value.code == 1100
    with pytest.raises(MilvusError, match="field a-b not exist"):
        resolve_output_fields(SCHEMA, ["a-b"])


def test_retrieve_filters_offsets_and_limits():
    plan = parse("id >= 2 and meta['k'] != 5", SCHEMA)
    got = retrieve(TABLE, plan, ["s"], limit=3, offset=1)
    assert got.schema.names == ["100", "101"]
    assert got.column("100").to_pylist() == [3, 4, 6]
    assert retrieve(TABLE, plan, ["s"]).column("100").to_pylist() == [2, 3, 4, 6, 7, 8, 9]
    assert retrieve(TABLE, plan, ["s"], offset=20).num_rows == 0


def test_visible_mask_and_count():
    plan = parse("color == 'red'", SCHEMA)
    assert count(TABLE, plan) == 5
    visible = pa.array(np.arange(N) < 5)
    assert count(TABLE, plan, visible) == 2
    assert retrieve(TABLE, plan, [], visible=visible).column("100").to_pylist() == [1, 3]
    assert count(TABLE, parse("", SCHEMA)) == N


def test_dynamic_keys_are_picked_out_of_meta():
    got = retrieve(TABLE, parse("id < 2", SCHEMA), ["color"])
    assert [json.loads(v) for v in got.column("104").to_pylist()] == [{"color": "blue"}, {"color": "red"}]
    got = retrieve(TABLE, parse("id < 1", SCHEMA), ["*"])
    assert json.loads(got.column("104")[0].as_py()) == {"color": "blue", "n": 0}


def test_record_batch_input():
    batch = TABLE.to_batches()[0]
    assert retrieve(batch, parse("s in ['s1', 's9']", SCHEMA), ["s"]).column("101").to_pylist() == ["s1", "s9"]


def test_field_data_for_query_results():
    out = resolve_output_fields(SCHEMA, ["s", "vec", "color", "meta"])
    got = retrieve(TABLE, parse("id in [4, 5]", SCHEMA), out)
    fields = {fd.field_name: fd for fd in to_field_data(SCHEMA, got, out)}
    assert list(fields) == ["id", "s", "vec", "meta", "$meta"]
    assert list(fields["id"].scalars.long_data.data) == [4, 5]
    assert list(fields["s"].scalars.string_data.data) == ["s4", "s5"]
    assert list(fields["vec"].vectors.float_vector.data) == [8.0, 9.0, 10.0, 11.0]
    assert [json.loads(v) for v in fields["meta"].scalars.json_data.data] == [{"k": 4}, {"k": 5}]
    assert fields["$meta"].is_dynamic and not fields["meta"].is_dynamic
    assert [json.loads(v) for v in fields["$meta"].scalars.json_data.data] == [{"color": "blue"}, {"color": "red"}]


# -- over real binlogs: pymilvus insert → flush → Parquet → retrieve ------------------------------


def test_retrieve_over_flushed_binlogs(node, client):
    """Rows inserted through pymilvus and flushed by the data path read back from their Parquet
    binlogs and filter as Milvus would; the result decodes to the rows pymilvus inserted."""
    from pymilvus import CollectionSchema, DataType, FieldSchema
    from pymilvus.client import entity_helper
    from pymilvus.client.types import HybridExtraList
    from pymilvus.grpc_gen import milvus_pb2

    from kmilvus.storage import read_segment
    from tests.system.test_flush import segments

    schema = CollectionSchema(
        [
            FieldSchema("id", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM),
            FieldSchema("tag", DataType.VARCHAR, max_length=16),
            FieldSchema("age", DataType.INT32),
            FieldSchema("info", DataType.JSON),
        ],
        enable_dynamic_field=True,
    )
    client.create_collection("exprs", schema=schema)
    rows = [
        {
            "id": i,
            "vec": [float(i), 0.5],
            "tag": f"t{i % 3}",
            "age": 20 + i,
            "info": {"city": ["paris", "rome"][i % 2], "score": i / 2},
            **({"color": "red"} if i % 4 == 0 else {}),
        }
        for i in range(40)
    ]
    client.insert("exprs", rows)
    client.flush("exprs")
    full = node.call(
        node.component("rootcoord").DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name="exprs"))
    ).schema
    cid = client.describe_collection("exprs")["collection_id"]
    table = pa.concat_tables(
        [read_segment(node.node.store, s.collectionID, s.partitionID, s.ID) for s in segments(node, cid)]
    )
    assert table.num_rows == 40

    expr = 'tag like "t1%" and info["city"] == "rome" and age < 50 or color == "red" and id >= 36'
    expected = sorted(r["id"] for r in rows if (r["tag"] == "t1" and r["id"] % 2 == 1 and r["age"] < 50)
                      or (r.get("color") == "red" and r["id"] >= 36))  # fmt: skip
    plan = parse(expr, full)
    assert count(table, plan) == len(expected)
    out = resolve_output_fields(full, ["tag", "info", "color", "vec"])
    got = retrieve(table, plan, out)
    assert sorted(got.column("100").to_pylist()) == expected
    assert parse("id in [3, 5, 77]", full).primary_keys().tolist() == [3, 5, 77]

    # What pymilvus makes of these FieldData in a QueryResults (the steps of its GrpcHandler.query).
    response = milvus_pb2.QueryResults(fields_data=to_field_data(full, got, out), output_fields=list(out.names))
    _, dynamic = entity_helper.extract_dynamic_field_from_result(response)
    results = [dict.fromkeys(fd.field_name for fd in response.fields_data if fd.field_name != "$meta")]
    results = [dict(results[0]) for _ in range(got.num_rows)]
    lazy = [fd for fd in response.fields_data if entity_helper.extract_row_data_from_fields_data_v2(fd, results)]
    decoded = list(HybridExtraList(lazy, results, dynamic_fields=dynamic))
    by_id = {r["id"]: r for r in rows}
    for r in decoded:
        want = by_id[r["id"]]
        assert (r["tag"], r["info"], r["vec"]) == (want["tag"], want["info"], pytest.approx(want["vec"]))
        assert r.get("color") == want.get("color")
    assert dynamic == {"color"}


def test_json_cache_parses_a_segment_once(monkeypatch):
    from kmilvus.parser import evaluator

    reads = []
    real = evaluator.read_column
    monkeypatch.setattr(evaluator, "read_column", lambda col, exact=False: reads.append(exact) or real(col, exact))
    cache: dict = {}
    for expr in ("meta['k'] > 3", "meta['k'] in [1, 2] or color == 'red'", "meta['k'] < 2"):
        plan = parse(expr, SCHEMA)
        assert count(TABLE, plan, json_cache=cache) == count(TABLE, plan)
    # cached: meta once, $meta once; uncached: every call reads again
    assert reads.count(False) == 2 + 4
