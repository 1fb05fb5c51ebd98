"""Dynamic fields (`enable_dynamic_field=True`) end to end through pymilvus 3.0: the `$meta` JSON
column is created with the collection, filled by inserts (extra keys of a row, `{}` for a row
without any), flushed to Parquet like any JSON field, and hidden from DescribeCollection."""

from __future__ import annotations

import json

import grpc
import pyarrow.parquet as pq
import pytest
from pymilvus import CollectionSchema, DataType, FieldSchema, MilvusException
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc, schema_pb2

from kmilvus.storage import paths
from tests.system.test_flush import segments

META = "$meta"


def repro_schema() -> CollectionSchema:
    """The issue's repro: id INT64 pk, vec FLOAT_VECTOR(4), dynamic field on."""
    return CollectionSchema(
        [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=4)],
        enable_dynamic_field=True,
    )


def meta_field(node, name) -> schema_pb2.FieldSchema:
    """The stored `$meta` field (RootCoord's full schema, not the client's view)."""
    desc = node.call(
        node.component("rootcoord").DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name))
    )
    return next(f for f in desc.schema.fields if f.name == META)


def read_meta(node, client, name) -> dict[int, dict]:
    """{pk: $meta object} read back from the flushed Parquet binlogs with pyarrow."""
    cid = client.describe_collection(name)["collection_id"]
    fid = str(meta_field(node, name).fieldID)
    out = {}
    for s in segments(node, cid):
        seg_dir = node.node.store.path(paths.segment_prefix(s.collectionID, s.partitionID, s.ID))
        t = pq.read_table(seg_dir)
        for pk, raw in zip(t.column("100").to_pylist(), t.column(fid).to_pylist(), strict=True):
            out[pk] = json.loads(raw)
    return out


def test_repro_inserts_flushes_and_reads_back_meta(node, client):
    client.create_collection("dyn", schema=repro_schema())
    res = client.insert("dyn", [{"id": 1, "vec": [0.1, 0.2, 0.3, 0.4]}])
    assert res["insert_count"] == 1
    client.insert(
        "dyn",
        [
            {"id": 2, "vec": [0.5, 0.6, 0.7, 0.8], "color": "red", "n": 3},
            {"id": 3, "vec": [0.1, 0.1, 0.1, 0.1], "nested": {"a": [1, 2]}},
        ],
    )
    client.flush("dyn")
    assert client.get_collection_stats("dyn")["row_count"] == 3
    assert read_meta(node, client, "dyn") == {1: {}, 2: {"color": "red", "n": 3}, 3: {"nested": {"a": [1, 2]}}}
    f = meta_field(node, "dyn")
    assert f.data_type == schema_pb2.DataType.JSON and f.is_dynamic


def test_describe_hides_meta_and_reports_the_flag(node, client):
    client.create_collection("dyn", schema=repro_schema())
    desc = client.describe_collection("dyn")
    assert desc["enable_dynamic_field"] is True
    assert [f["name"] for f in desc["fields"]] == ["id", "vec"]
    # Creating the same collection again with the same schema still succeeds (as in Milvus).
    client.create_collection("dyn", schema=repro_schema())


def test_orm_insert_with_extra_keys(node, orm):
    from pymilvus import Collection

    coll = Collection("dyn_orm", repro_schema(), using=orm)
    coll.insert([{"id": i, "vec": [0.0, 1.0, 2.0, 3.0], "k": i * 10} for i in range(5)])
    coll.flush()
    assert coll.num_entities == 5


def test_extra_key_without_dynamic_field_is_refused(node, client):
    schema = repro_schema()
    schema.enable_dynamic_field = False
    client.create_collection("static", schema=schema)
    with pytest.raises(MilvusException) as err:
        client.insert("static", [{"id": 1, "vec": [0.1, 0.2, 0.3, 0.4], "extra": 1}])
    assert "extra" in err.value.message


def _raw_insert(node, name, fields_data, num_rows):
    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        return stub.Insert(milvus_pb2.InsertRequest(collection_name=name, fields_data=fields_data, num_rows=num_rows))


def _fd_meta(values: list[bytes]) -> schema_pb2.FieldData:
    fd = schema_pb2.FieldData(type=schema_pb2.DataType.JSON, field_name=META, is_dynamic=True)
    fd.scalars.json_data.data.extend(values)
    return fd


def _fd_base(n):
    ids = schema_pb2.FieldData(type=schema_pb2.DataType.Int64, field_name="id")
    ids.scalars.long_data.data.extend(range(n))
    vec = schema_pb2.FieldData(type=schema_pb2.DataType.FloatVector, field_name="vec")
    vec.vectors.dim = 4
    vec.vectors.float_vector.data.extend([0.5] * 4 * n)
    return [ids, vec]


@pytest.mark.parametrize(
    "meta,needle",
    [
        ([b"[1, 2]"], "dynamic field value must be a JSON object"),
        ([b'{"id": 5}'], "dynamic field name cannot include the static field name: id"),
        ([b"{not json"], "is not valid JSON"),
    ],
)
def test_bad_dynamic_values_are_refused_and_nothing_written(node, client, meta, needle):
    client.create_collection("dyn", schema=repro_schema())
    st = _raw_insert(node, "dyn", [*_fd_base(1), _fd_meta(meta)], 1)
    assert st.status.code == 1100 and needle in st.status.reason, st.status
    client.flush("dyn")
    assert client.get_collection_stats("dyn")["row_count"] == 0


def test_raw_insert_without_meta_column_fills_empty_objects(node, client):
    client.create_collection("dyn", schema=repro_schema())
    st = _raw_insert(node, "dyn", _fd_base(3), 3)
    assert st.status.code == 0, st.status
    client.flush("dyn")
    assert read_meta(node, client, "dyn") == {0: {}, 1: {}, 2: {}}


# Bulk import (the Spark job, in process): a row's extra keys / a file's extra columns → `$meta`.

from tests.system.test_spark_jobs import (  # noqa: E402,F401
    _compact_spec,
    _json_rows,
    _row,
    _run_import,
    _schema_pb,
    _spec,
    spark,
)


def _dynamic_schema_pb():
    s = _schema_pb()
    s.enable_dynamic_field = True
    s.fields.add(fieldID=104, name=META, data_type=schema_pb2.DataType.JSON, is_dynamic=True)
    return s


def _imported_meta(tmp_path, manifest) -> dict[int, dict]:
    from kmilvus.storage import ObjectStore, read_segment

    store = ObjectStore.from_uri((tmp_path / "store").as_uri())
    out = {}
    for s in manifest["segments"]:
        t = read_segment(store, 10, 11, s["segment_id"])
        out.update(
            {pk: json.loads(m) for pk, m in zip(t.column("100").to_pylist(), t.column("104").to_pylist(), strict=True)}
        )
    return out


def test_import_json_and_parquet_extras_go_to_meta(spark, tmp_path):
    import pyarrow as pa

    schema = _dynamic_schema_pb()
    rows = [_row(0), _row(1, color="red", n=2), _row(2, nested={"a": [1, "x"]}, flag=None)]
    m, err = _run_import(spark, _spec(tmp_path, [_json_rows(tmp_path, rows)], schema))
    assert err is None, err
    assert _imported_meta(tmp_path, m) == {
        0: {},
        1: {"color": "red", "n": 2},
        2: {"nested": {"a": [1, "x"]}, "flag": None},
    }
    table = pa.table(
        {
            "id": [10, 11],
            "vec": [[0.5] * 4, [1.0] * 4],
            "tag": ["a", "b"],
            "small": [1, 2],
            "color": ["blue", None],
            "score": [1.5, 2.5],
        }
    )
    pq.write_table(table, tmp_path / "extra.parquet")
    m, err = _run_import(spark, _spec(tmp_path, [tmp_path / "extra.parquet"], schema, segment_id_start=70))
    assert err is None, err
    assert _imported_meta(tmp_path, m) == {10: {"color": "blue", "score": 1.5}, 11: {"score": 2.5}}
    # Milvus 2.4: `$meta` given by name is refused; extra keys are the way.
    _, err = _run_import(
        spark,
        _spec(tmp_path, [_json_rows(tmp_path, [_row(5, **{META: {"a": 1}})], "m.json")], schema, segment_id_start=90),
    )
    assert "explicit specification of '$meta' is not allowed" in err["reason"], err


def test_bulk_insert_through_pymilvus_keeps_extra_keys(node, client, orm, tmp_path):
    """utility.do_bulk_insert of JSON rows with extra keys into the issue's repro collection."""
    from pymilvus import utility
    from pymilvus.client.types import BulkInsertState

    from tests.system.test_spark_jobs import _wait_import

    client.create_collection("dyn", schema=repro_schema())
    rows = [{"id": 1, "vec": [0.1, 0.2, 0.3, 0.4], "color": "red"}, {"id": 2, "vec": [0.5, 0.6, 0.7, 0.8]}]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": rows}))
    task = utility.do_bulk_insert("dyn", files=[str(path)], using=orm)
    st = _wait_import(task, orm)
    assert st.state == BulkInsertState.ImportCompleted, st.infos
    assert read_meta(node, client, "dyn") == {1: {"color": "red"}, 2: {}}


def test_compaction_keeps_meta(spark, tmp_path):
    """The compaction job carries `$meta` like any JSON column."""

    import numpy as np
    import pyarrow as pa

    from kmilvus.storage import ObjectStore, read_segment, write_insert_binlog
    from kmilvus.util import typeutil
    from kmilvus_jobs import compactor

    schema = _dynamic_schema_pb()
    store = ObjectStore.from_uri((tmp_path / "store").as_uri())
    srcs = []
    for s, (lo, hi) in enumerate([(0, 3), (3, 5)]):
        cols = {
            100: pa.array(np.arange(lo, hi, dtype=np.int64)),
            101: pa.FixedSizeListArray.from_arrays(pa.array(np.ones((hi - lo) * 4, np.float32)), 4),
            102: pa.array([f"t{i}" for i in range(lo, hi)]),
            103: pa.array(np.zeros(hi - lo, np.int8)),
            104: pa.array([json.dumps({"k": i}).encode() for i in range(lo, hi)], pa.binary()),
        }
        batch = typeutil.columns_to_record_batch(schema, cols, np.arange(lo, hi) + 100, np.arange(lo, hi) + 1)
        key = paths.insert_log_key(10, 11, 200 + s, 1)
        info = write_insert_binlog(store, key, batch)
        srcs.append({"segment_id": 200 + s, "binlogs": [{"key": key, "rows": info.entries_num, "size": info.size}]})
    spec = _compact_spec(schema, store, srcs, target_ids=(400,))
    compactor.run(spark, spec)
    t = read_segment(store, 10, 11, 400)
    assert {
        pk: json.loads(m) for pk, m in zip(t.column("100").to_pylist(), t.column("104").to_pylist(), strict=True)
    } == {i: {"k": i} for i in range(5)}
