"""Milvus schemas and their Arrow form (Milvus' typeutil): type names and params, the system
and dynamic fields, each field type's Arrow type and size, defaults, and the column checks the
Proxy's Insert and the Spark import share.

Columns are named by field ID (`str(fieldID)`); every record batch starts with the system
columns "0" (row ID) and "1" (timestamp), then the schema's fields in declaration order. The
conversions of FieldData to and from Arrow build on this module: `fielddata` (every field),
`fieldtypes` (the types beyond scalars and float vectors).

Validation follows Milvus' proxy (validate_util.go / insert task) and its wording, raising
`MilvusError` with the code Milvus uses: `PARAMETER_INVALID` for most problems,
`DIMENSION_INVALID` for a wrong vector dim, `PARAMETER_MISSING` for a field the insert lacks and
`FIELD_NOT_FOUND` for a field the collection does not have.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.util import merr
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType
DT_NONE = DT.Value("None")

ROW_ID_FIELD = 0
TIMESTAMP_FIELD = 1
ROW_ID_NAME = "RowID"
TIMESTAMP_NAME = "Timestamp"
DYNAMIC_FIELD_NAME = "$meta"  # Milvus' common.MetaFieldName
SYSTEM_FIELDS = (ROW_ID_FIELD, TIMESTAMP_FIELD)

# Milvus' common.JSONMaxLength default (bytes per JSON value).
JSON_MAX_LENGTH = 65536
# Estimated bytes per JSON value for segment sizing (Milvus uses a configured average too).
JSON_AVG_SIZE = 512

SUPPORTED_TYPES = (
    DT.Bool,
    DT.Int8,
    DT.Int16,
    DT.Int32,
    DT.Int64,
    DT.Float,
    DT.Double,
    DT.VarChar,
    DT.JSON,
    DT.FloatVector,
    DT.BinaryVector,
    DT.Float16Vector,
    DT.BFloat16Vector,
    DT.SparseFloatVector,
    DT.Array,
)

FIXED_ARROW = {
    DT.Bool: pa.bool_(),
    DT.Int8: pa.int8(),
    DT.Int16: pa.int16(),
    DT.Int32: pa.int32(),
    DT.Int64: pa.int64(),
    DT.Float: pa.float32(),
    DT.Double: pa.float64(),
    DT.VarChar: pa.string(),
    DT.JSON: pa.binary(),
}
# Byte vector type → its FieldData slot (`VectorField` oneof member)
BYTE_VECTORS = {
    DT.BinaryVector: "binary_vector",
    DT.Float16Vector: "float16_vector",
    DT.BFloat16Vector: "bfloat16_vector",
}
VECTORS = (DT.FloatVector, *BYTE_VECTORS, DT.SparseFloatVector)
# Element type → (ScalarField slot, numpy dtype or None, Arrow type)
ARRAY_ELEMENTS = {
    DT.Bool: ("bool_data", np.bool_, pa.bool_()),
    DT.Int8: ("int_data", np.int32, pa.int8()),
    DT.Int16: ("int_data", np.int32, pa.int16()),
    DT.Int32: ("int_data", np.int32, pa.int32()),
    DT.Int64: ("long_data", np.int64, pa.int64()),
    DT.Float: ("float_data", np.float32, pa.float32()),
    DT.Double: ("double_data", np.float64, pa.float64()),
    DT.VarChar: ("string_data", None, pa.string()),
}
MAX_CAPACITY_LIMIT = 4096  # Milvus' proxy.maxArrayCapacity default
SPARSE_AVG_SIZE = 1024  # bytes per sparse row, for segment sizing
SPARSE_ARROW = pa.map_(pa.uint32(), pa.float32())


_INT_RANGE = {
    DT.Int8: (-(1 << 7), (1 << 7) - 1),
    DT.Int16: (-(1 << 15), (1 << 15) - 1),
    DT.Int32: (-(1 << 31), (1 << 31) - 1),
}

_FIXED_SIZE = {DT.Bool: 1, DT.Int8: 1, DT.Int16: 2, DT.Int32: 4, DT.Int64: 8, DT.Float: 4, DT.Double: 8}


def type_name(data_type: int) -> str:
    try:
        return str(DT.Name(data_type))
    except ValueError:
        return str(data_type)


def check_supported(field: schema_pb2.FieldSchema) -> None:
    if field.data_type not in SUPPORTED_TYPES:
        raise MilvusError(
            merr.PARAMETER_INVALID, f"data type {type_name(field.data_type)} is not supported (field {field.name})"
        )


def type_param(field: schema_pb2.FieldSchema, key: str) -> str | None:
    """A field's type param (`dim`, `max_length`) as written, or None."""
    for kv in field.type_params:
        if kv.key == key:
            return str(kv.value)
    return None


def dim_of(field: schema_pb2.FieldSchema) -> int:
    raw = type_param(field, "dim")
    if raw is None:
        raise MilvusError(
            merr.PARAMETER_MISSING,
            f"dimension is not defined in field type params of field {field.name}, "
            f"check type param `dim` for vector field",
        )
    try:
        return int(raw)
    except ValueError:
        raise MilvusError(
            merr.PARAMETER_INVALID, f"invalid dimension: {raw} of field {field.name}. dimension must be an integer"
        ) from None


def max_length_of(field: schema_pb2.FieldSchema) -> int:
    raw = type_param(field, "max_length")
    if raw is None:
        raise MilvusError(
            merr.PARAMETER_MISSING, f"type param(max_length) should be specified for the field({field.name})"
        )
    try:
        return int(raw)
    except ValueError:
        raise MilvusError(
            merr.PARAMETER_INVALID, f"the maximum length of field {field.name} must be an integer, got {raw}"
        ) from None


def is_vector(data_type: int) -> bool:
    return data_type in VECTORS


def byte_width(field: schema_pb2.FieldSchema, dim: int) -> int:
    """Bytes of one row of a byte vector field."""
    return dim // 8 if field.data_type == DT.BinaryVector else 2 * dim


def max_capacity_of(field: schema_pb2.FieldSchema) -> int:
    raw = type_param(field, "max_capacity")
    if raw is None:
        raise MilvusError(
            merr.PARAMETER_MISSING, f"type param(max_capacity) should be specified for array field {field.name}"
        )
    return int(raw)


def default_value(field: schema_pb2.FieldSchema) -> Any:
    """The field's default as a Python scalar, or None."""
    if not field.HasField("default_value"):
        return None
    which = field.default_value.WhichOneof("data")
    return None if which is None else getattr(field.default_value, which)


def has_default(field: schema_pb2.FieldSchema) -> bool:
    return default_value(field) is not None


def user_fields(schema: schema_pb2.CollectionSchema) -> list[schema_pb2.FieldSchema]:
    """The schema's own fields (system fields 0 / 1 skipped should a schema carry them)."""
    return [f for f in schema.fields if f.fieldID not in SYSTEM_FIELDS]


def primary_field(schema: schema_pb2.CollectionSchema) -> schema_pb2.FieldSchema:
    for f in schema.fields:
        if f.is_primary_key:
            return f
    raise MilvusError(
        merr.COLLECTION_ILLEGAL_SCHEMA, f"primary key is not specified in the schema of collection {schema.name}"
    )


def field_by_name(schema: schema_pb2.CollectionSchema, name: str) -> schema_pb2.FieldSchema:
    for f in schema.fields:
        if f.name == name:
            return f
    raise MilvusError(merr.FIELD_NOT_FOUND, f"field not found[field={name}]")


def arrow_type(field: schema_pb2.FieldSchema) -> pa.DataType:
    check_supported(field)
    if field.data_type == DT.FloatVector:
        return pa.list_(pa.float32(), dim_of(field))
    if field.data_type in FIXED_ARROW:
        return FIXED_ARROW[field.data_type]
    if field.data_type in BYTE_VECTORS:
        return pa.binary(byte_width(field, dim_of(field)))
    if field.data_type == DT.SparseFloatVector:
        return SPARSE_ARROW
    if field.element_type not in ARRAY_ELEMENTS:  # an Array
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"element type {type_name(field.element_type)} is not supported for array field {field.name}",
        )
    return pa.list_(ARRAY_ELEMENTS[field.element_type][2])


def arrow_field(field: schema_pb2.FieldSchema) -> pa.Field:
    return pa.field(
        str(field.fieldID),
        arrow_type(field),
        nullable=field.nullable,
        metadata={"name": field.name, "data_type": type_name(field.data_type)},
    )


_ROW_ID_ARROW = pa.field(
    str(ROW_ID_FIELD), pa.int64(), nullable=False, metadata={"name": ROW_ID_NAME, "data_type": "Int64"}
)
_TS_ARROW = pa.field(
    str(TIMESTAMP_FIELD), pa.int64(), nullable=False, metadata={"name": TIMESTAMP_NAME, "data_type": "Int64"}
)


def arrow_schema(schema: schema_pb2.CollectionSchema) -> pa.Schema:
    """Row ID, timestamp, then every field of `schema` by ID (nullable only if the field is)."""
    return pa.schema([_ROW_ID_ARROW, _TS_ARROW] + [arrow_field(f) for f in user_fields(schema)])


def added_scalar_fields(schema: schema_pb2.CollectionSchema) -> list[schema_pb2.FieldSchema]:
    """The fields a row written before `AddCollectionField` may lack: nullable scalars (a vector,
    the primary key and the dynamic field are in every row ever written)."""
    return [
        f
        for f in user_fields(schema)
        if f.nullable and not f.is_primary_key and not f.is_dynamic and not is_vector(f.data_type)
    ]


def added_field(schema: schema_pb2.CollectionSchema | None, field_id: int) -> schema_pb2.FieldSchema | None:
    """The field if rows written before it was added may lack it (see `added_scalar_fields`)."""
    return next((f for f in added_scalar_fields(schema) if f.fieldID == field_id), None) if schema else None


def conform_column(field: schema_pb2.FieldSchema, col: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A stored column as the field reads: a null of a field with a default is the default (what
    an insert of that null stores; rows written before the field was added may hold null)."""
    dflt = default_value(field)
    return pc.fill_null(col, pa.scalar(dflt, col.type)) if dflt is not None and col.null_count else col


def missing_column(field: schema_pb2.FieldSchema, arrow: pa.DataType, num_rows: int) -> pa.Array | None:
    """The column of a field the insert left out: all default, all null, or None (required)."""
    dflt = default_value(field)
    if dflt is not None:
        return pa.repeat(pa.scalar(dflt, type=arrow), num_rows)
    if field.nullable:
        return pa.nulls(num_rows, arrow)
    return None


def conform(table: pa.Table, schema: schema_pb2.CollectionSchema) -> pa.Table:
    """Rows as the current schema reads them (Milvus: old segments lack an added field): a
    field the data has no column for reads as its default value, else null; a null of a field
    with a default reads as the default (what an insert of that null stores). Columns the schema
    does not name are kept. A table without columns (an emptied segment) stays as it is."""
    if table.num_columns == 0:
        return table
    for f in added_scalar_fields(schema):
        name = str(f.fieldID)
        if name not in table.column_names:
            filler = missing_column(f, arrow_type(f), table.num_rows)
            table = table.append_column(arrow_field(f), filler)
            continue
        col = table.column(name)
        filled = conform_column(f, col)
        if filled is not col:
            table = table.set_column(table.column_names.index(name), table.field(name), filled)
    return table


def _rows_mismatch(name: str, got: int, num_rows: int) -> MilvusError:
    return MilvusError(
        merr.PARAMETER_INVALID, f"the num_rows ({got}) of field ({name}) is not equal to passed num_rows ({num_rows})"
    )


# --------------------------------------------------------------------------------------------
# Column checks: one implementation for the Proxy's Insert and the Spark import writer. Each finds
# the first offending row with a vectorised pass and raises `RowError`: its `message` is Milvus'
# Proxy wording (naming the row), its `reason` the import report's (the file and row go apart).

_PROBLEMS = {
    "range": (
        "the {row}th element ({value}) of field ({name}) out of range: [{lo}, {hi}]",
        "the value ({value}) of field ({name}) is out of range: [{lo}, {hi}]",
    ),
    "finite": (
        "{what} field ({name}) contains NaN or Inf: the {row}th row, value {value}",
        "{what} field ({name}) contains NaN or Inf: value {value}{where}",
    ),
    "varchar_length": (
        "the length ({value}) of {row}th VarChar {name} exceeds max length ({limit})",
        "the length ({value}) of VarChar field ({name}) exceeds max length ({limit})",
    ),
    "json_length": (
        "the length ({value}) of json field ({name}) exceeds max length ({limit})",
        "the length ({value}) of json field ({name}) exceeds max length ({limit})",
    ),
    "json": (
        "the {row}th value of json field ({name}) is not valid JSON: {value}",
        "the value of json field ({name}) is not valid JSON: {value}",
    ),
    "dim": (
        "the dim ({value}) of field data({name}) is not equal to schema dim ({dim})",
        "the dim ({value}) of field data({name}) is not equal to schema dim ({dim})",
    ),
    "sparse": (
        "the {row}th row of sparse float vector field ({name}) is invalid: {why}",
        "the sparse float vector of field ({name}) is invalid: {why}",
    ),
    "capacity": (
        "the length ({value}) of {row}th array exceeds max capacity ({limit})",
        "the length ({value}) of array field ({name}) exceeds max capacity ({limit})",
    ),
    "element": (
        "the {row}th value of field ({name}) has a null element",
        "the value of field ({name}) has a null element or one of another type",
    ),
}


class RowError(MilvusError):
    """A value of field `field` at `row` breaks the schema."""

    def __init__(
        self, problem: str, row: int, field: str, kind: tuple[int, int] = merr.PARAMETER_INVALID, **values: object
    ):
        message, reason = _PROBLEMS[problem]
        super().__init__(kind, message.format(row=row, name=field, **values))
        self.row, self.field = row, field
        self.reason = reason.format(name=field, **values)
        self._args = (problem, field, kind, values)

    def at(self, row: int) -> RowError:
        """The same problem, found at another row (a flat element's index → its row's)."""
        problem, field, kind, values = self._args
        return RowError(problem, row, field, kind, **values)


def dim_mismatch(name: str, got: int, dim: int, row: int = 0) -> RowError:
    return RowError("dim", row, name, merr.DIMENSION_INVALID, value=got, dim=dim)


def _first(mask: pa.Array) -> int:
    return int(pc.indices_nonzero(mask)[0].as_py())


def check_finite(name: str, what: str, values: pa.Array, dim: int = 1) -> None:
    """No NaN / Inf among `values` (a float column, or a vector column's flat values).

    Without nulls numpy answers "all finite?" on the values in place, ~4× faster than Arrow's
    is_finite / invert / any over a 10,000 × 128 vector column; only a column that fails is
    searched again for the offending value (a null is never offending: Arrow skips it)."""
    if (
        isinstance(values, pa.Array)
        and values.null_count == 0
        and pa.types.is_floating(values.type)
        and np.isfinite(values.to_numpy(zero_copy_only=True)).all()
    ):
        return
    bad = pc.invert(pc.is_finite(values))
    if pc.any(bad).as_py():
        i = _first(bad)
        raise RowError(
            "finite",
            i // dim,
            name,
            what=what,
            value=values[i].as_py(),
            where=f" at position {i % dim}" if dim > 1 else "",
        )


def check_range(
    name: str, data_type: int, values: pa.Array, width: int = 1, bounds: tuple[int, int] | None = None
) -> None:
    """An integer column fits its field's type (Int8 / Int16 / Int32 arrive wider), or `bounds`;
    `width` values make a row (a binary vector's bytes)."""
    lo, hi = bounds or _INT_RANGE[data_type]
    bad = pc.or_(pc.less(values, lo), pc.greater(values, hi))
    if pc.any(bad).as_py():
        i = _first(bad)
        raise RowError("range", i // width, name, value=values[i].as_py(), lo=lo, hi=hi)


def check_max_length(name: str, values: pa.Array, limit: int, problem: str = "varchar_length") -> None:
    lengths = pc.binary_length(values)
    bad = pc.greater(lengths, limit)
    if pc.any(bad).as_py():
        i = _first(bad)
        raise RowError(problem, i, name, value=lengths[i].as_py(), limit=limit)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def first_invalid_json(rows: Sequence[bytes]) -> tuple[int, Exception] | None:
    """(index, error) of the first row that is not one standard JSON value, or None.

    One C-level parse of all rows joined as `[[r0],[r1],...]` (much faster than a json.loads per
    row) must give one single-element list per row; only if it does not is each row parsed alone
    to name the offending one.
    """
    try:
        parsed = json.loads(b"[[" + b"],[".join(rows) + b"]]", parse_constant=_reject_constant)
        if len(parsed) == len(rows) and all(len(e) == 1 for e in parsed):
            return None
    except (ValueError, TypeError):
        pass
    for i, raw in enumerate(rows):
        try:
            json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, TypeError) as exc:
            return i, exc
    return None


def check_json(name: str, values: pa.Array, rows: Sequence[bytes] | None = None) -> None:
    """Every row one (standard: no NaN / Infinity) JSON value, at most JSON_MAX_LENGTH bytes.
    `rows`: the same values as bytes when the caller has them already. Residual gap of
    `first_invalid_json`'s joined parse: rows crafted to nest into the joined shape (e.g.
    `1],[2`, `[[3`, `]]`) pass; no SDK produces such values."""
    if len(values) == 0:
        return
    check_max_length(name, values, JSON_MAX_LENGTH, "json_length")
    bad = first_invalid_json(rows if rows is not None else values.cast(pa.binary()).to_pylist())
    if bad is not None:
        raise RowError("json", bad[0], name, value=bad[1])


def check_values(field: schema_pb2.FieldSchema, values: pa.Array) -> None:
    """The value checks of a scalar column (types already matched; nulls are the caller's)."""
    dt = field.data_type
    if dt in _INT_RANGE and values.type != FIXED_ARROW[dt]:
        check_range(field.name, dt, values)
    elif dt in (DT.Float, DT.Double):
        check_finite(field.name, type_name(dt), values)
    elif dt == DT.VarChar and not field.autoID:
        check_max_length(field.name, values, max_length_of(field))
    elif dt == DT.JSON:
        check_json(field.name, values)


def dynamic_field(schema: schema_pb2.CollectionSchema) -> schema_pb2.FieldSchema | None:
    """The collection's `$meta` field (present when `enable_dynamic_field` is on), or None."""
    for f in schema.fields:
        if f.is_dynamic:
            return f
    return None


def columns_to_record_batch(
    schema: schema_pb2.CollectionSchema, columns: dict[int, pa.Array], row_ids: np.ndarray, timestamps: np.ndarray | int
) -> pa.RecordBatch:
    """Columns by field ID + row IDs + timestamps → one batch in `arrow_schema(schema)` order."""
    a_schema = arrow_schema(schema)
    n = len(row_ids)
    if isinstance(timestamps, (int, np.integer)):
        ts = np.full(n, int(timestamps), dtype=np.int64)
    else:
        ts = np.asarray(timestamps, dtype=np.int64)
        if len(ts) != n:
            raise ValueError(f"{len(ts)} timestamps for {n} rows")
    arrays: list[pa.Array] = [pa.array(np.asarray(row_ids, dtype=np.int64), pa.int64()), pa.array(ts, pa.int64())]
    for f in user_fields(schema):
        col = columns.get(f.fieldID)
        if col is None:
            raise ValueError(f"no column for field {f.name} ({f.fieldID})")
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if len(col) != n:
            raise ValueError(f"column of field {f.name} has {len(col)} rows, expected {n}")
        want = a_schema.field(str(f.fieldID)).type
        if col.type != want:
            col = col.cast(want)
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=a_schema)


# --------------------------------------------------------------------------------------------
# Arrow → IDs (Insert responses, Query results)


def primary_keys_to_ids(field: schema_pb2.FieldSchema, array: Any) -> schema_pb2.IDs:
    """Primary keys (Arrow array / ChunkedArray / numpy / list) → `schema.IDs`."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    ids = schema_pb2.IDs()
    if field.data_type == DT.Int64:
        values = array.to_numpy(zero_copy_only=False) if isinstance(array, pa.Array) else np.asarray(array)
        ids.int_id.SetInParent()
        # A list of Python ints extends in C; a numpy array is walked element by element (2× slower).
        ids.int_id.data.extend(values.astype(np.int64, copy=False).tolist())
    elif field.data_type == DT.VarChar:
        values = array.to_pylist() if isinstance(array, pa.Array) else [str(x) for x in array]
        ids.str_id.SetInParent()
        ids.str_id.data.extend(values)
    else:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"the data type of primary key should be Int64 or VarChar, field name = {field.name}",
        )
    return ids


def estimate_row_size(schema: schema_pb2.CollectionSchema) -> int:
    """Bytes per row, for segment row quotas (Milvus' EstimateSizePerRecord): fixed widths,
    max_length for VarChar, JSON_AVG_SIZE for JSON, dim × 4 for float vectors, plus the row ID
    and timestamp."""
    size = 16
    for f in user_fields(schema):
        dt = f.data_type
        if dt in _FIXED_SIZE:
            size += _FIXED_SIZE[dt]
        elif dt == DT.VarChar:
            size += max_length_of(f)
        elif dt == DT.JSON:
            size += JSON_AVG_SIZE
        elif dt == DT.FloatVector:
            size += dim_of(f) * 4
        elif dt in BYTE_VECTORS:
            size += byte_width(f, dim_of(f))
        elif dt == DT.SparseFloatVector:
            size += SPARSE_AVG_SIZE
        elif dt == DT.Array:
            elem = f.element_type
            per = max_length_of(f) if elem == DT.VarChar else _FIXED_SIZE.get(elem, 8)
            size += max_capacity_of(f) * per
        else:
            check_supported(f)
    return size
