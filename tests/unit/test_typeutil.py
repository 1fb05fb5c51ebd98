"""Milvus schema ↔ Arrow, FieldData → Arrow (values and Milvus' validation), and back."""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pyarrow as pa
import pytest
from pymilvus import CollectionSchema, DataType, FieldSchema
from pymilvus.client.prepare import Prepare
from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus.util import fielddata, merr, typeutil
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType
DIM = 4


def kv(**params) -> list[common_pb2.KeyValuePair]:
    return [common_pb2.KeyValuePair(key=k, value=str(v)) for k, v in params.items()]


def all_types_schema(auto_id: bool = False, pk_type=DT.Int64) -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="all_types")
    pk_params = kv(max_length=16) if pk_type == DT.VarChar else []
    s.fields.add(fieldID=100, name="pk", data_type=pk_type, is_primary_key=True, autoID=auto_id, type_params=pk_params)
    s.fields.add(fieldID=101, name="b", data_type=DT.Bool)
    s.fields.add(fieldID=102, name="i8", data_type=DT.Int8)
    s.fields.add(fieldID=103, name="i16", data_type=DT.Int16)
    s.fields.add(fieldID=104, name="i32", data_type=DT.Int32)
    s.fields.add(fieldID=105, name="i64", data_type=DT.Int64)
    s.fields.add(fieldID=106, name="f", data_type=DT.Float)
    s.fields.add(fieldID=107, name="d", data_type=DT.Double)
    s.fields.add(fieldID=108, name="tag", data_type=DT.VarChar, type_params=kv(max_length=8))
    s.fields.add(fieldID=109, name="j", data_type=DT.JSON)
    s.fields.add(fieldID=110, name="vec", data_type=DT.FloatVector, type_params=kv(dim=DIM))
    return s


VALUES = {
    "pk": [7, 8, 9],
    "b": [True, False, True],
    "i8": [-128, 0, 127],
    "i16": [-32768, 5, 32767],
    "i32": [-(2**31), 6, 2**31 - 1],
    "i64": [-(2**63), 7, 2**63 - 1],
    "f": [0.5, -1.25, 3.0],
    "d": [1e300, -2.5, 0.0],
    "tag": ["a", "ßü", "12345678"],
    "j": [b'{"a": 1}', b"[1, 2]", b'"x"'],
    "vec": [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [-1.5, 0.25, 8.0, 9.0]],
}


def field_data(name: str, dtype, values, dim: int = DIM) -> schema_pb2.FieldData:
    fd = schema_pb2.FieldData(type=dtype, field_name=name)
    if dtype == DT.FloatVector:
        fd.vectors.dim = dim
        fd.vectors.float_vector.data.extend(np.asarray(values, dtype=np.float32).ravel().tolist())
        return fd
    slot = {
        DT.Bool: "bool_data",
        DT.Int8: "int_data",
        DT.Int16: "int_data",
        DT.Int32: "int_data",
        DT.Int64: "long_data",
        DT.Float: "float_data",
        DT.Double: "double_data",
        DT.VarChar: "string_data",
        DT.JSON: "json_data",
    }[dtype]
    getattr(fd.scalars, slot).data.extend(values)
    return fd


def all_fields_data(schema, values=VALUES, skip=()) -> list[schema_pb2.FieldData]:
    return [field_data(f.name, f.data_type, values[f.name]) for f in schema.fields if f.name not in skip]


def convert(schema, fds, n=3):
    return fielddata.fields_data_to_columns(schema, fds, n)


@contextlib.contextmanager
def expect_error(code, *needles):
    """Expect a MilvusError with Milvus' (code, legacy error_code) and message fragments."""
    with pytest.raises(MilvusError) as info:
        yield info
    err = info.value
    assert (err.code, err.error_code) == code, (err.code, err.error_code, err.message)
    for needle in needles:
        assert needle in err.message, (needle, err.message)


# ------------------------------------------------------------------------------ schema → Arrow


def test_arrow_types_and_schema_for_every_supported_type():
    schema = all_types_schema()
    want = {
        "pk": pa.int64(),
        "b": pa.bool_(),
        "i8": pa.int8(),
        "i16": pa.int16(),
        "i32": pa.int32(),
        "i64": pa.int64(),
        "f": pa.float32(),
        "d": pa.float64(),
        "tag": pa.string(),
        "j": pa.binary(),
        "vec": pa.list_(pa.float32(), DIM),
    }
    for f in schema.fields:
        assert typeutil.arrow_type(f) == want[f.name]
    a = typeutil.arrow_schema(schema)
    assert a.names == ["0", "1"] + [str(i) for i in range(100, 111)]
    assert a.field("0").type == pa.int64() and a.field("1").type == pa.int64()
    assert a.field("0").metadata == {b"name": b"RowID", b"data_type": b"Int64"}
    assert a.field("1").metadata == {b"name": b"Timestamp", b"data_type": b"Int64"}
    for f in schema.fields:
        af = a.field(str(f.fieldID))
        assert af.type == want[f.name]
        assert not af.nullable
        assert af.metadata == {b"name": f.name.encode(), b"data_type": DT.Name(f.data_type).encode()}
    assert pa.types.is_fixed_size_list(a.field("110").type) and a.field("110").type.list_size == DIM


def test_schema_helpers():
    schema = all_types_schema()
    assert typeutil.primary_field(schema).name == "pk"
    assert typeutil.dim_of(schema.fields[10]) == DIM
    assert typeutil.max_length_of(schema.fields[8]) == 8
    # 16 (row id, ts) + 8 + 1 + 1 + 2 + 4 + 8 + 4 + 8 + 8 (max_length) + 512 (JSON) + 16 (vec)
    assert typeutil.estimate_row_size(schema) == 16 + 8 + 1 + 1 + 2 + 4 + 8 + 4 + 8 + 8 + 512 + 16
    with pytest.raises(MilvusError) as e:
        typeutil.dim_of(schema.fields[0])
    assert e.value.code == merr.PARAMETER_MISSING[0] and "pk" in e.value.message
    no_pk = schema_pb2.CollectionSchema(name="x")
    no_pk.fields.add(fieldID=100, name="a", data_type=DT.Int64)
    with pytest.raises(MilvusError):
        typeutil.primary_field(no_pk)


@pytest.mark.parametrize("dtype", [DT.String, DT.Int8Vector, DT.Geometry])
def test_unsupported_type(dtype):
    f = schema_pb2.FieldSchema(fieldID=100, name="x", data_type=dtype, type_params=kv(dim=8))
    with expect_error(merr.PARAMETER_INVALID, f"data type {DT.Name(dtype)} is not supported", "x"):
        typeutil.arrow_type(f)


def test_array_of_an_unsupported_element_type():
    f = schema_pb2.FieldSchema(
        fieldID=100, name="x", data_type=DT.Array, element_type=DT.JSON, type_params=kv(max_capacity=4)
    )
    with expect_error(merr.PARAMETER_INVALID, "element type JSON is not supported for array field x"):
        typeutil.arrow_type(f)


# ------------------------------------------------------------------------------ FieldData → Arrow


def test_all_types_convert_with_exact_values():
    schema = all_types_schema()
    cols = convert(schema, all_fields_data(schema))
    assert set(cols) == set(range(100, 111))
    by_name = {f.name: f.fieldID for f in schema.fields}
    for name, vals in VALUES.items():
        col = cols[by_name[name]]
        assert col.type == typeutil.arrow_type(schema.fields[by_name[name] - 100])
        if name == "f":
            assert col.to_pylist() == [np.float32(v) for v in vals]
        else:
            assert col.to_pylist() == vals, name


def test_float_values_are_float32_exact():
    schema = all_types_schema()
    vals = dict(VALUES, f=[0.1, 1 / 3, 1e-30], vec=[[0.1, 0.2, 0.3, 0.4]] * 3)
    cols = convert(schema, all_fields_data(schema, vals))
    np.testing.assert_array_equal(cols[106].to_numpy(), np.array(vals["f"], dtype=np.float32))
    np.testing.assert_array_equal(cols[110].flatten().to_numpy(), np.array(vals["vec"], dtype=np.float32).ravel())


def test_record_batch_columns_and_system_fields():
    schema = all_types_schema()
    cols = convert(schema, all_fields_data(schema))
    row_ids = np.array([11, 12, 13], dtype=np.int64)
    batch = typeutil.columns_to_record_batch(schema, cols, row_ids, 4242)
    assert batch.schema == typeutil.arrow_schema(schema)
    assert batch.schema.field("108").metadata[b"name"] == b"tag"
    assert batch.column("0").to_pylist() == [11, 12, 13]
    assert batch.column("1").to_pylist() == [4242] * 3
    batch2 = typeutil.columns_to_record_batch(schema, cols, row_ids, np.array([1, 2, 3]))
    assert batch2.column("1").to_pylist() == [1, 2, 3]
    assert batch2.column("110").to_pylist() == VALUES["vec"]


def test_record_batch_to_field_data_roundtrip():
    schema = all_types_schema()
    cols = convert(schema, all_fields_data(schema))
    batch = typeutil.columns_to_record_batch(schema, cols, np.arange(3), 1)
    fds = fielddata.record_batch_to_field_data(schema, batch)
    assert [fd.field_name for fd in fds] == [f.name for f in schema.fields]
    assert [fd.field_id for fd in fds] == [f.fieldID for f in schema.fields]
    assert [fd.type for fd in fds] == [f.data_type for f in schema.fields]
    vec = fds[-1]
    assert vec.vectors.dim == DIM
    assert list(vec.vectors.float_vector.data) == np.asarray(VALUES["vec"], np.float32).ravel().tolist()
    assert list(fds[0].scalars.long_data.data) == VALUES["pk"]
    assert list(fds[2].scalars.int_data.data) == VALUES["i8"]
    assert list(fds[8].scalars.string_data.data) == VALUES["tag"]
    assert list(fds[9].scalars.json_data.data) == VALUES["j"]
    # and back again: identical columns
    again = convert(schema, fds)
    for fid, col in cols.items():
        assert again[fid].equals(col), fid
    # a Table works too, and `fields` selects by ID or name
    sub = fielddata.record_batch_to_field_data(schema, pa.Table.from_batches([batch, batch]), fields=[110, "tag"])
    assert [fd.field_name for fd in sub] == ["tag", "vec"]
    assert len(sub[0].scalars.string_data.data) == 6
    assert len(sub[1].vectors.float_vector.data) == 6 * DIM


def test_pymilvus_prepared_request_converts():
    orm = CollectionSchema(
        [
            FieldSchema("pk", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM),
            FieldSchema("tag", DataType.VARCHAR, max_length=8),
            FieldSchema("j", DataType.JSON),
            FieldSchema("i8", DataType.INT8),
        ]
    )
    rows = [{"pk": i, "vec": [float(i)] * DIM, "tag": f"t{i}", "j": {"k": i}, "i8": -i} for i in range(5)]
    req = Prepare.row_insert_param("c", rows, "", fields_info=orm.to_dict()["fields"])
    req = milvus_pb2.InsertRequest.FromString(req.SerializeToString())
    schema = schema_pb2.CollectionSchema(name="c")
    schema.fields.add(fieldID=100, name="pk", data_type=DT.Int64, is_primary_key=True)
    schema.fields.add(fieldID=101, name="vec", data_type=DT.FloatVector, type_params=kv(dim=DIM))
    schema.fields.add(fieldID=102, name="tag", data_type=DT.VarChar, type_params=kv(max_length=8))
    schema.fields.add(fieldID=103, name="j", data_type=DT.JSON)
    schema.fields.add(fieldID=104, name="i8", data_type=DT.Int8)
    cols = fielddata.fields_data_to_columns(schema, req.fields_data, req.num_rows)
    assert cols[100].to_pylist() == list(range(5))
    assert cols[101].to_pylist() == [[float(i)] * DIM for i in range(5)]
    assert cols[102].to_pylist() == [f"t{i}" for i in range(5)]
    assert [json.loads(x) for x in cols[103].to_pylist()] == [{"k": i} for i in range(5)]
    assert cols[104].to_pylist() == [0, -1, -2, -3, -4]


def test_autoid_pk_is_left_to_the_caller():
    schema = all_types_schema(auto_id=True)
    cols = convert(schema, all_fields_data(schema, skip=("pk",)))
    assert 100 not in cols and len(cols) == 10


def test_primary_keys_to_ids():
    int_pk = schema_pb2.FieldSchema(fieldID=100, name="pk", data_type=DT.Int64, is_primary_key=True)
    ids = typeutil.primary_keys_to_ids(int_pk, pa.array([3, 1, 2], pa.int64()))
    assert ids.WhichOneof("id_field") == "int_id" and list(ids.int_id.data) == [3, 1, 2]
    ids = typeutil.primary_keys_to_ids(int_pk, np.arange(10_000, dtype=np.int64))
    assert len(ids.int_id.data) == 10_000 and ids.int_id.data[-1] == 9_999
    extremes = [-(2**63), -1, 0, 2**63 - 1, 449_000_000_000_000_000]
    assert list(typeutil.primary_keys_to_ids(int_pk, pa.array(extremes, pa.int64())).int_id.data) == extremes
    assert list(typeutil.primary_keys_to_ids(int_pk, [5, 7]).int_id.data) == [5, 7]
    str_pk = schema_pb2.FieldSchema(fieldID=100, name="pk", data_type=DT.VarChar, is_primary_key=True)
    ids = typeutil.primary_keys_to_ids(str_pk, pa.chunked_array([["a", "b"], ["c"]]))
    assert ids.WhichOneof("id_field") == "str_id" and list(ids.str_id.data) == ["a", "b", "c"]


def test_a_large_batch_round_trips_through_columns():
    """10,000 rows × 128 dims to Arrow columns and back, values intact (how fast this is:
    bench/bench_storage.py, never a timed assertion here)."""
    n, dim = 10_000, 128
    schema = schema_pb2.CollectionSchema(name="big")
    schema.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    schema.fields.add(fieldID=101, name="vec", data_type=DT.FloatVector, type_params=kv(dim=dim))
    schema.fields.add(fieldID=102, name="tag", data_type=DT.VarChar, type_params=kv(max_length=64))
    req = milvus_pb2.InsertRequest(num_rows=n)
    req.fields_data.append(field_data("id", DT.Int64, np.arange(n)))
    vec = np.random.default_rng(0).random((n, dim), dtype=np.float32)
    fd = req.fields_data.add(type=DT.FloatVector, field_name="vec")
    fd.vectors.dim = dim
    fd.vectors.float_vector.data.extend(vec.ravel().tolist())
    req.fields_data.append(field_data("tag", DT.VarChar, [f"tag{i}" for i in range(n)]))
    req = milvus_pb2.InsertRequest.FromString(req.SerializeToString())
    cols = fielddata.fields_data_to_columns(schema, req.fields_data, n)
    np.testing.assert_array_equal(cols[101].flatten().to_numpy().reshape(n, dim), vec)
    batch = typeutil.columns_to_record_batch(schema, cols, np.arange(n), 1)
    fds = fielddata.record_batch_to_field_data(schema, batch)
    assert np.array_equal(np.asarray(fds[1].vectors.float_vector.data, np.float32), vec.ravel())


# ------------------------------------------------------------------------------ validation


def test_wrong_dim():
    schema = all_types_schema()
    fds = all_fields_data(schema, skip=("vec",))
    fds.append(field_data("vec", DT.FloatVector, [[1.0] * 8] * 3, dim=8))
    with expect_error(merr.DIMENSION_INVALID, "the dim (8) of field data(vec) is not equal to schema dim (4)"):
        convert(schema, fds)


def test_vector_length_not_multiple_of_dim():
    schema = all_types_schema()
    fds = all_fields_data(schema, skip=("vec",))
    fd = field_data("vec", DT.FloatVector, [1.0] * 10)
    fds.append(fd)
    with expect_error(merr.PARAMETER_INVALID, "vec", "dim(4)"):
        convert(schema, fds)


def test_vector_row_count_mismatch():
    schema = all_types_schema()
    fds = all_fields_data(schema, skip=("vec",))
    fds.append(field_data("vec", DT.FloatVector, [[1.0] * DIM] * 2))
    with expect_error(merr.PARAMETER_INVALID, "the num_rows (2) of field (vec) is not equal to passed num_rows (3)"):
        convert(schema, fds)


def test_scalar_row_count_mismatch():
    schema = all_types_schema()
    vals = dict(VALUES, tag=["a", "b", "c", "d", "e"])
    with expect_error(merr.PARAMETER_INVALID, "the num_rows (5) of field (tag) is not equal to passed num_rows (3)"):
        convert(schema, all_fields_data(schema, vals))


def test_wrong_declared_type():
    schema = all_types_schema()
    fds = all_fields_data(schema, skip=("i32",))
    fds.append(field_data("i32", DT.Int64, [1, 2, 3]))  # long_data for an Int32 field
    with expect_error(merr.PARAMETER_INVALID, "the data type of field i32 is not match schema"):
        convert(schema, fds)


def test_wrong_container_type():
    schema = all_types_schema()
    fds = all_fields_data(schema, skip=("d",))
    fd = schema_pb2.FieldData(type=DT.Double, field_name="d")
    fd.scalars.float_data.data.extend([1.0, 2.0, 3.0])
    fds.append(fd)
    with expect_error(merr.PARAMETER_INVALID, "'d'", "array type mismatch"):
        convert(schema, fds)


def test_vector_sent_as_scalar():
    schema = all_types_schema()
    fds = all_fields_data(schema, skip=("vec",))
    fd = schema_pb2.FieldData(field_name="vec")
    fd.scalars.float_data.data.extend([1.0] * 12)
    fds.append(fd)
    with expect_error(merr.PARAMETER_INVALID, "the data type of field vec is not match schema"):
        convert(schema, fds)


def test_varchar_too_long():
    schema = all_types_schema()
    vals = dict(VALUES, tag=["ok", "x" * 9, "y" * 80])
    with expect_error(merr.PARAMETER_INVALID, "the length (9) of 1th VarChar tag exceeds max length (8)"):
        convert(schema, all_fields_data(schema, vals))


def test_varchar_length_is_in_bytes():
    schema = all_types_schema()
    vals = dict(VALUES, tag=["ü" * 4, "ü" * 5, "z"])  # 8 bytes fit, 10 bytes do not
    with expect_error(merr.PARAMETER_INVALID, "the length (10) of 1th VarChar tag"):
        convert(schema, all_fields_data(schema, vals))


def test_missing_field():
    schema = all_types_schema()
    with expect_error(merr.PARAMETER_MISSING, "insert missed an field `tag` to collection"):
        convert(schema, all_fields_data(schema, skip=("tag",)))


def test_missing_pk_without_autoid():
    schema = all_types_schema()
    with expect_error(merr.PARAMETER_MISSING, "`pk`"):
        convert(schema, all_fields_data(schema, skip=("pk",)))


def test_autoid_pk_supplied():
    schema = all_types_schema(auto_id=True)
    with expect_error(merr.PARAMETER_INVALID, "can not assign primary field data when auto id enabled pk"):
        convert(schema, all_fields_data(schema))


def test_unknown_field():
    schema = all_types_schema()
    fds = all_fields_data(schema)
    fds.append(field_data("x", DT.Int64, [1, 2, 3]))
    with expect_error(
        merr.FIELD_NOT_FOUND, "attempt to insert an unexpected field `x`", "without enabling dynamic field"
    ):
        convert(schema, fds)


def test_duplicate_field():
    schema = all_types_schema()
    fds = all_fields_data(schema)
    fds.append(field_data("b", DT.Bool, [True, True, True]))
    with expect_error(merr.PARAMETER_INVALID, "duplicated field name b"):
        convert(schema, fds)


@pytest.mark.parametrize(
    "name,bad,bounds", [("i8", 128, "[-128, 127]"), ("i8", -129, "[-128, 127]"), ("i16", 40000, "[-32768, 32767]")]
)
def test_small_int_out_of_range(name, bad, bounds):
    schema = all_types_schema()
    vals = dict(VALUES, **{name: [0, 1, bad]})
    with expect_error(merr.PARAMETER_INVALID, f"the 2th element ({bad}) of field ({name}) out of range", bounds):
        convert(schema, all_fields_data(schema, vals))


def test_nan_in_vector_and_float():
    schema = all_types_schema()
    vals = dict(VALUES, vec=[[0.0] * DIM, [0.0, math.nan, 0.0, 0.0], [0.0] * DIM])
    with expect_error(merr.PARAMETER_INVALID, "vec", "NaN or Inf", "1th row"):
        convert(schema, all_fields_data(schema, vals))
    vals = dict(VALUES, d=[1.0, math.inf, 2.0])
    with expect_error(merr.PARAMETER_INVALID, "(d)", "NaN or Inf"):
        convert(schema, all_fields_data(schema, vals))


def test_check_finite_skips_nulls_and_respects_slices():
    """The numpy fast path and Arrow's check agree: nulls are never offending, a slice is
    checked only within itself, and the offending row and position are those of the slice."""
    typeutil.check_finite("f", "float", pa.array([1.0, None, 2.0], pa.float32()))
    values = pa.array([math.nan, 1.0, 2.0, 3.0, -math.inf, 4.0], pa.float64())
    typeutil.check_finite("f", "double", values.slice(1, 3))
    with pytest.raises(typeutil.RowError) as info:
        typeutil.check_finite("v", "float vector", values.slice(1), dim=2)
    assert info.value.row == 1
    with pytest.raises(typeutil.RowError):
        typeutil.check_finite("f", "float", pa.array([None, math.inf], pa.float32()))


def test_invalid_json():
    schema = all_types_schema()
    vals = dict(VALUES, j=[b'{"a": 1}', b'{"a": ', b"2"])
    with expect_error(merr.PARAMETER_INVALID, "the 1th value of json field (j) is not valid JSON"):
        convert(schema, all_fields_data(schema, vals))
    # rows that are invalid alone but would merge into one valid value when joined
    vals = dict(VALUES, j=[b"[1", b"2]", b"3"])
    with expect_error(merr.PARAMETER_INVALID, "the 0th value of json field (j)"):
        convert(schema, all_fields_data(schema, vals))
    vals = dict(VALUES, j=[b"1", b"2", b'{"x": NaN}'])  # not standard JSON
    with expect_error(merr.PARAMETER_INVALID, "the 2th value of json field (j)"):
        convert(schema, all_fields_data(schema, vals))


def test_json_too_long():
    schema = all_types_schema()
    big = json.dumps({"k": "x" * typeutil.JSON_MAX_LENGTH}).encode()
    vals = dict(VALUES, j=[b"1", big, b"2"])
    with expect_error(merr.PARAMETER_INVALID, f"the length ({len(big)}) of json field (j) exceeds max length"):
        convert(schema, all_fields_data(schema, vals))
