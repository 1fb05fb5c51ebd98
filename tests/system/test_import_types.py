"""Bulk import of Milvus 2.4/2.5's newer field types (binary, float16, bfloat16 and sparse
vectors, arrays, nullable fields, default values) from JSON, Parquet and CSV files: the import
job writes binlogs identical to what Insert + Flush writes for the same rows, and refuses bad
rows with Milvus' reasons, registering nothing."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import DataType, MilvusClient
from pymilvus.grpc_gen import milvus_pb2

from kmilvus.storage import ObjectStore, read_segment
from kmilvus.util import typeutil
from tests.system.test_field_types import _read
from tests.system.test_field_types import _schema as field_types_schema
from tests.system.test_spark_jobs import _run_import, _spec, spark  # noqa: F401 - the fixture

pytestmark = pytest.mark.spark


def _schema(client: MilvusClient):
    """test_field_types' schema, plus an Int16 array and a nullable field with a default."""
    s = field_types_schema(client)
    s.add_field("small", DataType.ARRAY, element_type=DataType.INT16, max_capacity=4)
    s.add_field("level", DataType.INT64, nullable=True, default_value=7)
    return s


def _row(i: int) -> dict:
    """One row as pymilvus inserts it and as a JSON import file carries it."""
    row = {
        "id": i,
        "bin": [i % 256, 255 - i % 256],
        "f16": [float(i), 0.5, -1.0, 2.0 + i / 3],
        "bf16": [float(i), 0.25, -1.0, 1.0 + i / 7],
        "sparse": {str(1 + i % 5): 0.5, str(7 + i): 1.25},
        "tags": ["a", f"t{i}"][: i % 3],
        "nums": list(range(i % 5)),
        "small": [i, -i][: i % 3],
        "note": None if i % 2 else f"n{i}",
        "score": None if i % 3 == 0 else float(i),
        "level": None if i % 4 == 0 else i,
    }
    if i % 5 == 1:
        del row["note"], row["score"], row["level"]  # missing → null / default
    if i % 4 == 2:
        row["sparse"] = {"indices": [9 + i, 2], "values": [0.75, 0.125]}  # Milvus sorts them
    return row


def _insert_row(row: dict) -> dict:
    r = dict(row)
    r["bin"] = bytes(r["bin"])
    sp = r["sparse"]
    r["sparse"] = (
        dict(zip(sp["indices"], sp["values"], strict=True)) if "indices" in sp else {int(k): v for k, v in sp.items()}
    )
    return r


def _schema_pb(node, name: str):
    from kmilvus.schemautil import normalize

    desc = node.call(
        node.component("rootcoord").DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name))
    )
    return normalize(desc.schema)


def _imported(tmp_path, m) -> pa.Table:
    store = ObjectStore.from_uri((tmp_path / "store").as_uri())
    return pa.concat_tables([read_segment(store, 10, 11, s["segment_id"]) for s in m["segments"]]).sort_by("100")


def _assert_same_rows(imported: pa.Table, inserted: pa.Table, schema) -> None:
    assert imported.num_rows == inserted.num_rows
    for f in typeutil.user_fields(schema):
        col = str(f.fieldID)
        assert imported.schema.field(col).type == inserted.schema.field(col).type, f.name
        assert imported.schema.field(col).type == typeutil.arrow_type(f), f.name
        assert imported.column(col).to_pylist() == inserted.column(col).to_pylist(), f.name


N = 24


@pytest.fixture
def inserted(node, client):
    """The collection with N rows inserted and flushed; (schema, binlog table, rows)."""
    client.create_collection("types", schema=_schema(client))
    rows = [_row(i) for i in range(N)]
    assert client.insert("types", [_insert_row(r) for r in rows])["insert_count"] == N
    client.flush("types")
    return _schema_pb(node, "types"), _read(node, client, "types"), rows


def test_json_import_writes_what_insert_writes(spark, tmp_path, inserted):
    schema, flushed, rows = inserted
    f = tmp_path / "rows.json"
    f.write_text(json.dumps({"rows": rows}))
    m, err = _run_import(spark, _spec(tmp_path, [f], schema, segment_max_rows=100))
    assert err is None, err
    _assert_same_rows(_imported(tmp_path, m), flushed, schema)


def _parquet_table(rows: list[dict], sparse_as: str = "json", f16_as: str = "float") -> pa.Table:
    n = len(rows)

    def sparse(r):
        sp = r["sparse"]
        return dict(zip(sp["indices"], sp["values"], strict=True)) if "indices" in sp else sp

    cols = {
        "id": pa.array([r["id"] for r in rows], pa.int64()),
        "bin": pa.array([r["bin"] for r in rows], pa.list_(pa.uint8())),
        "bf16": pa.array([r["bf16"] for r in rows], pa.list_(pa.float32())),
        "tags": pa.array([r["tags"] for r in rows], pa.list_(pa.string())),
        "nums": pa.array([r["nums"] for r in rows], pa.list_(pa.int64())),
        "small": pa.array([r["small"] for r in rows], pa.list_(pa.int16())),
        "note": pa.array([r.get("note") for r in rows], pa.string()),
        "score": pa.array([r.get("score") for r in rows], pa.float32()),
        "level": pa.array([r.get("level") for r in rows], pa.int64()),
    }
    if f16_as == "float":
        cols["f16"] = pa.array([r["f16"] for r in rows], pa.list_(pa.float32()))
    else:  # the float16 bytes, as list<uint8>
        raw = np.array([r["f16"] for r in rows], np.float16).view(np.uint8).reshape(n, -1)
        cols["f16"] = pa.array(raw.tolist(), pa.list_(pa.uint8()))
    if sparse_as == "json":
        cols["sparse"] = pa.array([json.dumps(r["sparse"]) for r in rows])
    else:  # map<uint32, float32>
        cols["sparse"] = pa.array(
            [[(int(k), float(v)) for k, v in sorted(sparse(r).items(), key=lambda kv: int(kv[0]))] for r in rows],
            pa.map_(pa.uint32(), pa.float32()),
        )
    return pa.table(cols)


@pytest.mark.parametrize(("sparse_as", "f16_as"), [("json", "float"), ("map", "bytes")])
def test_parquet_import_writes_what_insert_writes(spark, tmp_path, inserted, sparse_as, f16_as):
    schema, flushed, rows = inserted
    f = tmp_path / "rows.parquet"
    pq.write_table(_parquet_table(rows, sparse_as, f16_as), f, row_group_size=10)
    m, err = _run_import(spark, _spec(tmp_path, [f], schema, segment_max_rows=100))
    assert err is None, err
    _assert_same_rows(_imported(tmp_path, m), flushed, schema)


def test_parquet_without_the_optional_columns(spark, tmp_path, inserted):
    """Nullable / default columns may be left out of a Parquet file: all null / all default."""
    schema, _, rows = inserted
    f = tmp_path / "rows.parquet"
    pq.write_table(_parquet_table(rows).drop_columns(["note", "score", "level"]), f)
    m, err = _run_import(spark, _spec(tmp_path, [f], schema, segment_max_rows=100))
    assert err is None, err
    t = _imported(tmp_path, m)
    by = {fl.name: str(fl.fieldID) for fl in schema.fields}
    assert t.column(by["note"]).to_pylist() == [None] * N
    assert t.column(by["score"]).to_pylist() == [1.5] * N
    assert t.column(by["level"]).to_pylist() == [7] * N


def test_csv_import_writes_what_insert_writes(spark, tmp_path, inserted):
    import csv

    schema, flushed, rows = inserted
    names = ["id", "bin", "f16", "bf16", "sparse", "tags", "nums", "small", "note", "score", "level"]
    f = tmp_path / "rows.csv"
    with open(f, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for r in rows:
            out = []
            for n in names:
                v = r.get(n)
                out.append("" if v is None else json.dumps(v) if isinstance(v, (list, dict)) else v)
            w.writerow(out)
    m, err = _run_import(spark, _spec(tmp_path, [f], schema, segment_max_rows=100))
    assert err is None, err
    _assert_same_rows(_imported(tmp_path, m), flushed, schema)


def _bad(i: int, **kw) -> dict:
    r = _row(i)
    r.update(kw)
    return r


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("bin", [1, 2, 3], "the dim (24) of field data(bin) is not equal to schema dim (16)"),
        ("bin", [1, 256], "the value (256) of field (bin) is out of range: [0, 255]"),
        ("f16", [1.0, 2.0], "the dim (2) of field data(f16) is not equal to schema dim (4)"),
        ("f16", [1.0, 2.0, 1e6, 0.0], "float16 vector field (f16) contains NaN or Inf"),
        ("bf16", [1.0, 2.0, 3.0, 4.0, 5.0], "the dim (5) of field data(bf16) is not equal to schema dim (4)"),
        ("sparse", {"indices": [1, 1], "values": [0.5, 0.5]}, "unsorted or same indices in sparse float vector"),
        ("sparse", {"indices": [-1], "values": [0.5]}, "sparse float vector"),
        ("sparse", {"3": -0.5}, "negative value in sparse float vector"),
        ("sparse", {"indices": [1, 2], "values": [0.5]}, "sparse float vector"),
        ("sparse", [1, 2], "sparse"),
        ("tags", ["a", "b", "c", "d"], "the length (4) of array field (tags) exceeds max capacity (3)"),
        ("tags", ["a", 5], "expected element type 'VarChar' in array field"),
        ("tags", ["123456789"], "exceeds max length (8)"),
        ("nums", [1, 2, 3, 4, 5], "the length (5) of array field (nums) exceeds max capacity (4)"),
        ("small", [1, 70000], "out of range: [-32768, 32767]"),
        ("small", "x", "small"),
        ("id", None, "the value of field 'id' is null"),
    ],
)
def test_bad_rows_fail_the_job_and_write_nothing(spark, tmp_path, node, client, field, value, needle):
    client.create_collection("types", schema=_schema(client))
    schema = _schema_pb(node, "types")
    rows = [_row(i) for i in range(4)] + [_bad(4, **{field: value})]
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(rows))
    m, err = _run_import(spark, _spec(tmp_path, [f], schema, segment_max_rows=100))
    assert m is None and needle in err["reason"], err
    assert err["row"] == 4 and err["file"] == str(f)
    assert not (tmp_path / "store" / "insert_log").exists() or not any((tmp_path / "store" / "insert_log").rglob("*"))


def test_null_into_a_required_field_is_refused_in_parquet(spark, tmp_path, node, client):
    s = client.create_schema()
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    s.add_field("title", DataType.VARCHAR, max_length=8)
    client.create_collection("req", schema=s)
    schema = _schema_pb(node, "req")
    f = tmp_path / "n.parquet"
    pq.write_table(
        pa.table({"id": [1, 2], "vec": [[0.1, 0.2], [0.3, 0.4]], "title": pa.array(["a", None], pa.string())}), f
    )
    m, err = _run_import(spark, _spec(tmp_path, [f], schema))
    assert m is None and err["row"] == 1 and "the value of field 'title' is null" in err["reason"], err
    pq.write_table(pa.table({"id": [1, 2], "vec": [[0.1, 0.2], [0.3, 0.4]]}), f)
    m, err = _run_import(spark, _spec(tmp_path, [f], schema))
    assert m is None and "field 'title' is missing" in err["reason"], err


def test_unimportable_fields_refuses_nothing_the_job_reads(node, client):
    from kmilvus.spark import files

    client.create_collection("types", schema=_schema(client))
    assert files.unimportable_fields(_schema_pb(node, "types")) == []


def test_sparse_map_with_a_repeated_index_is_refused(spark, tmp_path, node, client):
    """A sparse `{"index": value}` object naming an index twice is a bad row (Milvus' Go map
    would keep the last value silently; kmilvus says so instead)."""
    client.create_collection("types", schema=_schema(client))
    schema = _schema_pb(node, "types")
    row = json.dumps(_row(0)).replace('"sparse": {"1": 0.5, "7": 1.25}', '"sparse": {"3": 0.5, "3": 0.75}')
    assert '"3": 0.75' in row
    f = tmp_path / "dup.json"
    f.write_text(row)
    m, err = _run_import(spark, _spec(tmp_path, [f], schema))
    assert m is None and err["row"] == 0 and "unsorted or same indices in sparse float vector" in err["reason"], err


def test_parquet_of_scalar_types_with_nullable_and_default_fields(spark, tmp_path, node, client):
    """Spark's own Parquet reader (no newer type in the schema): nulls and left-out columns."""
    s = client.create_schema()
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    s.add_field("note", DataType.VARCHAR, max_length=8, nullable=True)
    s.add_field("score", DataType.DOUBLE, default_value=0.5)
    s.add_field("rank", DataType.INT64, nullable=True)
    client.create_collection("opt", schema=s)
    schema = _schema_pb(node, "opt")
    f = tmp_path / "o.parquet"
    pq.write_table(
        pa.table(
            {
                "id": [1, 2, 3],
                "vec": [[0.1, 0.2]] * 3,
                "note": pa.array(["a", None, "c"], pa.string()),
                "score": pa.array([None, 2.0, None], pa.float64()),
            }
        ),
        f,
    )
    m, err = _run_import(spark, _spec(tmp_path, [f], schema, segment_max_rows=100))
    assert err is None, err
    t = _imported(tmp_path, m)
    by = {fl.name: str(fl.fieldID) for fl in schema.fields}
    assert t.column(by["note"]).to_pylist() == ["a", None, "c"]
    assert t.column(by["score"]).to_pylist() == [0.5, 2.0, 0.5]
    assert t.column(by["rank"]).to_pylist() == [None, None, None]
    assert t.schema.field(by["rank"]).nullable and t.schema.field(by["rank"]).type == pa.int64()


def test_import_fills_a_bm25_field_as_insert_does(spark, tmp_path, node, client):
    """A BM25 function's output is the server's: the import computes it from the text column
    (binlogs equal to insert + flush), and a file that carries it is refused as Milvus does."""
    from pymilvus import Function, FunctionType

    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    english = {"type": "english"}
    schema.add_field("text", DataType.VARCHAR, max_length=200, enable_analyzer=True, analyzer_params=english)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["text"], output_field_names="sparse")
    )
    client.create_collection("docs", schema=schema)
    rows = [{"id": i, "text": f"Document {i}: running dogs and {'cats ' * (i % 3)}jumping foxes"} for i in range(12)]
    client.insert("docs", rows)
    client.flush("docs")
    pb = _schema_pb(node, "docs")
    f = tmp_path / "docs.json"
    f.write_text(json.dumps(rows))
    m, err = _run_import(spark, _spec(tmp_path, [f], pb, segment_max_rows=100))
    assert err is None, err
    _assert_same_rows(_imported(tmp_path, m), _read(node, client, "docs"), pb)

    bad = tmp_path / "with_sparse.json"
    bad.write_text(json.dumps([{**r, "sparse": {"1": 1.0}} for r in rows]))
    m, err = _run_import(spark, _spec(tmp_path, [bad], pb, segment_max_rows=100, manifest_key="m2.json"))
    assert m is None, m
    assert "the field 'sparse' is output by function, no need to provide" in str(err), err
