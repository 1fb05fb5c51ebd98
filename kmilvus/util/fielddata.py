"""FieldData ↔ Arrow: an Insert's columns (FieldData, as pymilvus sends them) to Arrow arrays,
checked as Milvus' proxy checks them (validate_util.go / insert task), and Arrow columns back to
FieldData for query and search results.

Every conversion is columnar: repeated protobuf fields go to numpy (protobuf ≥ 7 does that in C)
and from there to Arrow without a per-row Python loop. The only per-row work is the fallback that
names the offending row of a JSON column after the vectorised check has found one. Scalars and
float vectors are converted here, the other types by `fieldtypes`; the schema facts and the
column checks are `typeutil`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.util import fieldtypes, merr, typeutil
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType

# data type → (ScalarField oneof member, numpy dtype or None for object columns)
_SCALAR_SLOT = {
    DT.Bool: ("bool_data", np.bool_),
    DT.Int8: ("int_data", np.int32),
    DT.Int16: ("int_data", np.int32),
    DT.Int32: ("int_data", np.int32),
    DT.Int64: ("long_data", np.int64),
    DT.Float: ("float_data", np.float32),
    DT.Double: ("double_data", np.float64),
    DT.VarChar: ("string_data", None),
    DT.JSON: ("json_data", None),
}


_ZERO = {DT.Bool: False, DT.Float: 0.0, DT.Double: 0.0, DT.VarChar: "", DT.JSON: b"null"}  # stand-ins for nulls


# --------------------------------------------------------------------------------------------
# FieldData → Arrow (the Proxy's Insert hot path)


def _type_mismatch(name: str, want: int, got: int) -> MilvusError:
    return MilvusError(
        merr.PARAMETER_INVALID,
        f"the data type of field {name} is not match schema: "
        f"expected {typeutil.type_name(want)}, got {typeutil.type_name(got)}",
    )


def _illegal_array(name: str, need: str) -> MilvusError:
    return MilvusError(merr.PARAMETER_INVALID, f"field '{name}' is illegal, array type mismatch: need {need}")


def _float_vector(fd: schema_pb2.FieldData, field: schema_pb2.FieldSchema, num_rows: int) -> pa.Array:
    name = field.name
    if fd.WhichOneof("field") == "scalars":
        raise _type_mismatch(name, field.data_type, fd.type)
    which = fd.vectors.WhichOneof("data")
    if which not in (None, "float_vector"):
        raise MilvusError(
            merr.PARAMETER_INVALID, f"float vector field '{name}' is illegal, array type mismatch: got {which}"
        )
    dim = typeutil.dim_of(field)
    if fd.vectors.dim != dim:
        raise typeutil.dim_mismatch(name, fd.vectors.dim, dim)
    values = np.asarray(fd.vectors.float_vector.data, dtype=np.float32)
    if values.size % dim:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"the length({values.size}) of float data should divide the dim({dim}) of field ({name})",
        )
    if values.size // dim != num_rows:
        raise typeutil._rows_mismatch(name, values.size // dim, num_rows)
    flat = pa.array(values, pa.float32())
    typeutil.check_finite(name, "float vector", flat, dim)
    return pa.FixedSizeListArray.from_arrays(flat, dim)


def _scalar(fd: schema_pb2.FieldData, field: schema_pb2.FieldSchema, num_rows: int, validate_json: bool) -> pa.Array:
    name, dt = field.name, field.data_type
    if fd.WhichOneof("field") == "vectors":
        raise _type_mismatch(name, dt, fd.type)
    slot, np_type = _SCALAR_SLOT[dt]
    which = fd.scalars.WhichOneof("data")
    if which is not None and which != slot:
        raise _illegal_array(name, slot)
    container = getattr(fd.scalars, slot).data
    if len(container) != num_rows:
        raise typeutil._rows_mismatch(name, len(container), num_rows)
    if np_type is not None:
        arr = pa.array(np.asarray(container, dtype=np_type))
        typeutil.check_values(field, arr)
        return arr if arr.type == typeutil.FIXED_ARROW[dt] else arr.cast(typeutil.FIXED_ARROW[dt])
    if dt == DT.VarChar:
        arr = pa.array(container, pa.string())
        typeutil.check_values(field, arr)
        return arr
    # JSON
    arr = pa.array(container, pa.binary())
    if validate_json:
        typeutil.check_json(name, arr, container)
    return arr


def field_data_to_array(
    fd: schema_pb2.FieldData, field: schema_pb2.FieldSchema, num_rows: int, *, validate_json: bool = True
) -> pa.Array:
    """One FieldData column → an Arrow array of `typeutil.arrow_type(field)`, checked against `field`.

    With `valid_data` (nullable fields, fields with a default) the data holds only the valid
    rows; the others become null or the field's default."""
    typeutil.check_supported(field)
    if fd.type not in (typeutil.DT_NONE, field.data_type):
        raise _type_mismatch(field.name, field.data_type, fd.type)
    valid = None
    if len(fd.valid_data):
        if len(fd.valid_data) != num_rows:
            raise typeutil._rows_mismatch(field.name, len(fd.valid_data), num_rows)
        valid = np.asarray(fd.valid_data, dtype=np.bool_)
        num_rows = int(valid.sum())
    dt = field.data_type
    if dt == DT.FloatVector:
        arr = _float_vector(fd, field, num_rows)
    elif dt in typeutil.BYTE_VECTORS:
        arr = fieldtypes.byte_vector(fd, field, typeutil.dim_of(field), num_rows)
    elif dt == DT.SparseFloatVector:
        arr = fieldtypes.sparse_vector(fd, field, num_rows)
    elif dt == DT.Array:
        arr = fieldtypes.array_column(fd, field, num_rows)
    else:
        arr = _scalar(fd, field, num_rows, validate_json)
    return arr if valid is None else fieldtypes.expand_valid(arr, valid, field)


def empty_objects(num_rows: int) -> pa.Array:
    """`{}` for every row: the `$meta` of rows that carry no extra keys."""
    return pa.array(np.full(num_rows, b"{}", dtype=object), pa.binary())


def _check_dynamic_values(schema: schema_pb2.CollectionSchema, arr: pa.Array) -> None:
    """Milvus' verifyDynamicFieldData: every `$meta` value is a JSON object whose keys are
    neither `$meta` nor a static field's name. Vectorised pre-filters (first byte, quoted-name
    substring) leave only the rows that may offend to be parsed one by one."""
    if len(arr) == 0:
        return
    text = arr.cast(pa.string())
    objects = pc.starts_with(pc.utf8_ltrim_whitespace(text), "{")
    if not pc.all(objects).as_py():
        i = int(np.flatnonzero(~objects.to_numpy(zero_copy_only=False))[0])
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"the {i}th value of dynamic field ({typeutil.DYNAMIC_FIELD_NAME}) is not valid: "
            f"dynamic field value must be a JSON object",
        )
    for name in [typeutil.DYNAMIC_FIELD_NAME] + [f.name for f in typeutil.user_fields(schema) if not f.is_dynamic]:
        hits = np.flatnonzero(pc.match_substring(text, json.dumps(name)).to_numpy(zero_copy_only=False))
        for row in hits:
            if name in json.loads(text[int(row)].as_py()):
                if name == typeutil.DYNAMIC_FIELD_NAME:
                    raise MilvusError(merr.PARAMETER_INVALID, f"cannot set json key to: {name}")
                raise MilvusError(
                    merr.PARAMETER_INVALID, f"dynamic field name cannot include the static field name: {name}"
                )


def fields_data_to_columns(
    schema: schema_pb2.CollectionSchema,
    fields_data: Iterable[schema_pb2.FieldData],
    num_rows: int,
    *,
    validate_json: bool = True,
    partial: bool = False,
) -> dict[int, pa.Array]:
    """Insert payload → {field ID: Arrow array}, validated as Milvus' proxy does.

    Every field but an autoID primary key must be supplied exactly once, with `num_rows` rows;
    an autoID primary key must not be supplied (the caller fills it with allocated IDs).
    With a dynamic field, pymilvus packs each row's extra keys into one `$meta` JSON column
    (`is_dynamic`); a request without it gets `{}` per row, as Milvus' proxy fills it.
    A function's output field must not be given (kmilvus.function fills it afterwards); with
    `partial` (a partial-update upsert) only the given fields are returned.
    """
    by_name = {f.name: f for f in typeutil.user_fields(schema)}
    by_id = {f.fieldID: f for f in typeutil.user_fields(schema)}
    dynamic = typeutil.dynamic_field(schema)
    columns: dict[int, pa.Array] = {}
    for fd in fields_data:
        if fd.is_dynamic and dynamic is not None:
            field = dynamic
        else:
            field = by_name.get(fd.field_name) if fd.field_name else by_id.get(fd.field_id)
        if field is None:
            shown = fd.field_name or fd.field_id
            raise MilvusError(
                merr.FIELD_NOT_FOUND,
                f"attempt to insert an unexpected field `{shown}` to collection without enabling dynamic field",
            )
        if field.is_primary_key and field.autoID:
            raise MilvusError(
                merr.PARAMETER_INVALID, f"can not assign primary field data when auto id enabled {field.name}"
            )
        if field.is_function_output:
            raise MilvusError(
                merr.PARAMETER_INVALID,
                f"the field {field.name} is the output of a function: the server fills it, it cannot be given",
            )
        if field.fieldID in columns:
            raise MilvusError(merr.PARAMETER_INVALID, f"duplicated field name {field.name} found")
        columns[field.fieldID] = field_data_to_array(fd, field, num_rows, validate_json=validate_json)
        if dynamic is not None and field.fieldID == dynamic.fieldID:
            _check_dynamic_values(schema, columns[field.fieldID])
    if dynamic is not None and dynamic.fieldID not in columns and not partial:
        columns[dynamic.fieldID] = empty_objects(num_rows)
    for field in by_id.values():
        if partial or field.is_function_output:
            continue  # a partial update's other fields are the stored row's; functions fill theirs
        if field.fieldID not in columns and not (field.is_primary_key and field.autoID):
            filler = typeutil.missing_column(field, typeutil.arrow_type(field), num_rows)
            if filler is not None:
                columns[field.fieldID] = filler
                continue
            raise MilvusError(
                merr.PARAMETER_MISSING,
                f"insert missed an field `{field.name}` to collection without set nullable==true or set default_value",
            )
    return columns


# --------------------------------------------------------------------------------------------
# Arrow → FieldData (Query and Search results)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fill_packed(msg: Any, values: np.ndarray) -> None:
    """Set `msg.data` (field 1, packed fixed-width: float / double) from a numpy array.

    `repeated.extend(ndarray)` walks the array element by element in Python; parsing the packed
    wire form is a memcpy in upb.
    """
    values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
    if values.size == 0:
        return
    msg.MergeFromString(b"\x0a" + _varint(values.nbytes) + values.tobytes())


def _column(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    col = batch.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col


def array_to_field_data(field: schema_pb2.FieldSchema, col: pa.Array) -> schema_pb2.FieldData:
    """A column → FieldData; a column with nulls gets `valid_data` and zero values in its
    place (pymilvus reads `data[i]` only where `valid_data[i]`)."""
    typeutil.check_supported(field)
    dt = field.data_type
    fd = schema_pb2.FieldData(type=dt, field_name=field.name, field_id=field.fieldID)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if field.nullable:
        fd.valid_data.extend(pc.is_valid(col).to_numpy(zero_copy_only=False))
        if col.null_count and dt in typeutil.FIXED_ARROW:
            col = pc.fill_null(col, pa.scalar(_ZERO.get(dt, 0), type=col.type))
    if dt in typeutil.BYTE_VECTORS or dt in (DT.SparseFloatVector, DT.Array):
        fieldtypes.fill_to_field_data(field, col, fd, typeutil.dim_of(field) if dt in typeutil.BYTE_VECTORS else None)
        return fd
    if dt == DT.FloatVector:
        dim = typeutil.dim_of(field)
        fd.vectors.dim = dim
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        flat = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        fd.vectors.float_vector.SetInParent()
        _fill_packed(fd.vectors.float_vector, flat)
        return fd
    slot, _ = _SCALAR_SLOT[dt]
    target = getattr(fd.scalars, slot)
    target.SetInParent()
    if dt in (DT.VarChar, DT.JSON):
        target.data.extend(col.to_pylist())
    elif dt in (DT.Float, DT.Double):
        _fill_packed(target, col.to_numpy(zero_copy_only=False))
    elif dt == DT.Bool:
        target.data.extend(col.to_numpy(zero_copy_only=False))
    else:
        np_type = np.int32 if slot == "int_data" else np.int64
        target.data.extend(col.to_numpy(zero_copy_only=False).astype(np_type, copy=False))
    return fd


def record_batch_to_field_data(
    schema: schema_pb2.CollectionSchema, batch: pa.RecordBatch | pa.Table, fields: Iterable[int | str] | None = None
) -> list[schema_pb2.FieldData]:
    """Batch (columns by field ID) → one FieldData per schema field present in it.

    `fields` limits the output to those field IDs or names (in schema order).
    """
    present = set(batch.schema.names)
    wanted = None
    if fields is not None:
        wanted = {str(x) for x in fields}
    out = []
    for f in typeutil.user_fields(schema):
        key = str(f.fieldID)
        if key not in present:
            continue
        if wanted is not None and key not in wanted and f.name not in wanted:
            continue
        out.append(array_to_field_data(f, _column(batch, key)))
    return out
