"""JSON rows ↔ the Milvus API's columns (httpserver/utils.go): insert rows → FieldData, query and
search results → rows, query vectors → a PlaceholderGroup, a primary-key list → a filter.

JSON is row-oriented by nature, so each row is touched once here; the columns themselves are
built and read with Arrow and numpy (typeutil's converters, the ones the gRPC path uses).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.proxy.httpserver.constant import (
    DEFAULT_PRIMARY_FIELD,
    DISTANCE,
    IGNORE_GROWING,
    PARAMS,
    ROUND_DECIMAL,
    RestError,
    invalid,
)
from kmilvus.util import fielddata, merr, typeutil
from kmilvus.util.typeutil import DYNAMIC_FIELD_NAME

DT = schema_pb2.DataType
PH = common_pb2.PlaceholderType
_INT_TYPES = {DT.Int8: (-(2**7), 2**7 - 1), DT.Int16: (-(2**15), 2**15 - 1), DT.Int32: (-(2**31), 2**31 - 1)}
_INT_TYPES[DT.Int64] = (-(2**63), 2**63 - 1)


def type_name(dt: int) -> str:
    return str(schema_pb2.DataType.Name(dt))


def insert_error(message: str) -> RestError:
    return RestError(merr.INVALID_INSERT_DATA, f"fail to deal the insert data, error: {message}")


def _param_invalid(dt: int, actual: Any, message: str) -> str:
    return f"{message}: invalid parameter[expected={type_name(dt)}][actual={actual}]"


# ------------------------------------------------------------------------------ primary keys
def primary_filter(schema: schema_pb2.CollectionSchema, ids: Any) -> str:
    """`id` of entities/get and entities/delete → `pk in [...]` (Milvus' checkGetPrimaryKey)."""
    pk = next((f for f in schema.fields if f.is_primary_key), None)
    if pk is None:
        raise RestError(merr.CHECK_PRIMARY_KEY, f"{merr_check_pk()}, error: collection has no primary field")
    values = ids if isinstance(ids, list) else [ids]
    if pk.data_type == DT.Int64:
        out = []
        for v in values:
            try:
                if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
                    raise ValueError
                out.append(str(int(v)))
            except (TypeError, ValueError):
                raise RestError(
                    merr.CHECK_PRIMARY_KEY, f"{merr_check_pk()}, error: unable to cast {v!r} of type int64"
                ) from None
        return f"{pk.name} in [{','.join(out)}]"
    return f"{pk.name} in [{','.join(orjson.dumps(str(v)).decode() for v in values)}]"


def merr_check_pk() -> str:
    return "please check the primary key and its' type can only in [int, string]"


# ------------------------------------------------------------------------------ insert rows
def _scalar_column(f: schema_pb2.FieldSchema, values: list[Any]) -> pa.Array:
    dt = f.data_type
    if dt in _INT_TYPES:
        lo, hi = _INT_TYPES[dt]
        for v in values:
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, int | float) or v != math.floor(v) or not lo <= v <= hi
            ):
                raise insert_error(_param_invalid(dt, orjson.dumps(v).decode(), f"unable to cast {v!r} to {dt}"))
        return pa.array([None if v is None else int(v) for v in values], type=pa.int64()).cast(typeutil.arrow_type(f))
    if dt in (DT.Float, DT.Double):
        for v in values:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise insert_error(_param_invalid(dt, orjson.dumps(v).decode(), f"unable to cast {v!r} to float"))
        return pa.array(values, type=pa.float64()).cast(typeutil.arrow_type(f))
    if dt == DT.Bool:
        for v in values:
            if v is not None and not isinstance(v, bool):
                raise insert_error(_param_invalid(dt, orjson.dumps(v).decode(), f"unable to cast {v!r} of type bool"))
        return pa.array(values, type=pa.bool_())
    if dt == DT.VarChar:
        return pa.array(
            [v if v is None or isinstance(v, str) else orjson.dumps(v).decode() for v in values], type=pa.string()
        )
    if dt == DT.JSON:
        return pa.array([None if v is None else orjson.dumps(v) for v in values], type=pa.binary())
    if dt == DT.Array:
        try:
            return pa.array(values, type=typeutil.arrow_type(f))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise insert_error(
                _param_invalid(dt, "", f"{type_name(dt)} of {type_name(f.element_type)}: {exc}")
            ) from None
    raise insert_error(f"fieldName: {f.name}: invalid parameter[expected=][actual={type_name(dt)}]")


def _vector_column(f: schema_pb2.FieldSchema, values: list[Any]) -> pa.Array:
    dt = f.data_type
    for v in values:
        if v is None or v == "":
            raise insert_error(_param_invalid(dt, "", f"missing vector field: {f.name}"))
    if dt == DT.SparseFloatVector:
        return pa.array([_sparse_row(f, v) for v in values], type=typeutil.SPARSE_ARROW)
    dim = typeutil.dim_of(f)
    if dt == DT.FloatVector or (dt in (DT.Float16Vector, DT.BFloat16Vector) and isinstance(values[0], list)):
        try:
            arr = np.asarray(values, dtype=np.float32)
        except (ValueError, TypeError):
            arr = None
        if arr is None or arr.ndim != 2 or arr.shape[1] != dim:
            bad = next((v for v in values if not isinstance(v, list) or len(v) != dim), values[0])
            n = len(bad) if isinstance(bad, list) else 0
            raise insert_error(
                f"[]float32 size {n} doesn't equal to vector dimension {dim} of {type_name(DT.FloatVector)}"
            )
        if dt == DT.FloatVector:
            return pa.FixedSizeListArray.from_arrays(pa.array(arr.ravel(), type=pa.float32()), dim)
        raw = arr.astype(np.float16) if dt == DT.Float16Vector else _to_bfloat16(arr)
        return pa.array([r.tobytes() for r in raw], type=typeutil.arrow_type(f))
    width = typeutil.byte_width(f, dim)
    rows = []
    for v in values:
        b = _bytes_of(v)
        if b is None or len(b) != width:
            got = 0 if b is None else len(b)
            raise insert_error(f"[]byte size {got} doesn't equal to vector dimension {dim} of {type_name(dt)}")
        rows.append(b)
    return pa.array(rows, type=typeutil.arrow_type(f))


def _to_bfloat16(arr: np.ndarray) -> np.ndarray:
    return (arr.astype("<f4").view("<u4") >> 16).astype("<u2")


def _bytes_of(v: Any) -> bytes | None:
    """A byte vector as JSON carries it: base64 text (Go's []byte) or a list of byte values."""
    if isinstance(v, str):
        try:
            return base64.b64decode(v, validate=True)
        except ValueError:
            return None
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 256 for x in v):
        return bytes(v)
    return None


def _sparse_row(f: schema_pb2.FieldSchema, v: Any) -> list[tuple[int, float]]:
    """{"index": value} (Milvus' JSON sparse row) or {"indices": [...], "values": [...]}."""
    try:
        if isinstance(v, dict) and set(v) == {"indices", "values"}:
            pairs = list(zip(v["indices"], v["values"], strict=True))
        elif isinstance(v, dict):
            pairs = [(int(k), x) for k, x in v.items()]
        else:
            raise ValueError("not a JSON object")
        return [(int(i), float(x)) for i, x in pairs]
    except (TypeError, ValueError) as exc:
        raise insert_error(_param_invalid(DT.SparseFloatVector, orjson.dumps(v).decode(), str(exc))) from None


def rows_to_fields_data(
    schema: schema_pb2.CollectionSchema, rows: Sequence[Any], in_insert: bool
) -> list[schema_pb2.FieldData]:
    """The `data` rows of insert / upsert → the Milvus API's columns (Milvus' checkAndSetData
    and anyToColumns): every field by name, the dynamic field's keys packed as `$meta` JSON."""
    if not rows:
        raise insert_error("missing required parameters")
    fields = [f for f in schema.fields if not f.is_dynamic]
    names = {f.name for f in fields}
    for r in rows:
        if not isinstance(r, dict):
            raise insert_error(
                f"NULL:0, FALSE:1, NUMBER:2, STRING:3, TRUE:4, JSON:5: invalid parameter[expected=5][actual={_kind(r)}]"
            )
    out: list[schema_pb2.FieldData] = []
    for f in fields:
        if getattr(f, "is_function_output", False):
            continue
        skip_pk = f.is_primary_key and f.autoID and in_insert
        present = [f.name in r for r in rows]
        if skip_pk:
            if any(present):
                raise RestError(
                    merr.INVALID_INSERT_DATA,
                    f"fail to deal the insert data, error: no need to pass pk field({f.name}) when autoid==true "
                    f"in insert: invalid parameter",
                )
            continue
        optional = f.nullable or typeutil.has_default(f)
        values = [r.get(f.name) for r in rows]
        if not optional:
            if not all(present):
                i = present.index(False)
                raise insert_error(f"row {i} does not has field {f.name}")
        elif not any(v is not None for v in values):
            continue  # the Proxy fills an absent nullable / default column
        col = _vector_column(f, values) if typeutil.is_vector(f.data_type) else _scalar_column(f, values)
        field = f
        if optional and not f.nullable:  # a default-value field: the Proxy fills the null rows
            field = schema_pb2.FieldSchema()
            field.CopyFrom(f)
            field.nullable = True
        fd = fielddata.array_to_field_data(field, col)
        out.append(fd)
    extra = [{k: v for k, v in r.items() if k not in names} for r in rows]
    if any(extra):
        if not schema.enable_dynamic_field:
            raise RestError(
                merr.INVALID_INSERT_DATA,
                "fail to deal the insert data, error: has pass more field without dynamic schema, please check it: "
                "invalid parameter",
            )
        if any(DYNAMIC_FIELD_NAME in e for e in extra):
            raise RestError(
                merr.INVALID_INSERT_DATA,
                f"fail to deal the insert data, error: use the invalid field name({DYNAMIC_FIELD_NAME}) when enable "
                f"dynamicField: invalid parameter",
            )
    if schema.enable_dynamic_field:
        fd = schema_pb2.FieldData(type=DT.JSON, field_name=DYNAMIC_FIELD_NAME, is_dynamic=True)
        fd.scalars.json_data.data.extend(orjson.dumps({k: v for k, v in e.items() if v is not None}) for e in extra)
        out.append(fd)
    return out


def _kind(v: Any) -> int:
    """gjson's type number of a JSON value (Milvus names it in its message)."""
    if v is None:
        return 0
    if v is False:
        return 1
    if v is True:
        return 4
    if isinstance(v, int | float):
        return 2
    if isinstance(v, str):
        return 3
    return 5


# ------------------------------------------------------------------------------ result rows
def _with_nulls(values: Sequence[Any] | np.ndarray, valid: Sequence[bool], n: int) -> list[Any]:
    """Values of a nullable column: None where not valid (data full-length or only the valid)."""
    if len(values) >= n:
        return [v if ok else None for v, ok in zip(values, valid, strict=False)]
    it = iter(values)
    return [next(it) if ok else None for ok in valid]


def _column_values(fd: schema_pb2.FieldData, n: int) -> list[Any] | np.ndarray:
    """One result column as JSON-ready values, row by row (read as it is: results need no
    validation)."""
    dt = fd.type
    if dt == DT.FloatVector:
        dim = fd.vectors.dim
        return np.asarray(fd.vectors.float_vector.data, dtype=np.float32).reshape(-1, dim)[:n]
    if dt in typeutil.BYTE_VECTORS:
        raw = getattr(fd.vectors, typeutil.BYTE_VECTORS[dt])
        width = len(raw) // n
        return [base64.b64encode(raw[i * width : (i + 1) * width]).decode() for i in range(n)]
    if dt == DT.SparseFloatVector:
        f = schema_pb2.FieldSchema(name=fd.field_name, data_type=dt, fieldID=fd.field_id)
        col = fielddata.field_data_to_array(fd, f, n)
        return [None if row is None else {str(k): v for k, v in row} for row in col.to_pylist()]
    which = fd.scalars.WhichOneof("data")
    if which is None:
        return [None] * n
    data = getattr(fd.scalars, which).data
    if dt == DT.Array:
        values: Sequence[Any] | np.ndarray = [
            list(getattr(e, e.WhichOneof("data")).data) if e.WhichOneof("data") else [] for e in data
        ]
    elif dt == DT.Float:  # float32 as Go prints it (0.1, not 0.10000000149011612)
        values = np.asarray(data, dtype=np.float32)
    elif dt == DT.JSON:  # Milvus' REST answers a JSON field as its JSON text
        values = [b.decode() for b in data]
    else:
        values = data
    if fd.valid_data:
        return _with_nulls(values, fd.valid_data, n)
    return values[:n] if isinstance(values, np.ndarray) else list(values[:n])


def _num_rows(fields_data: Sequence[schema_pb2.FieldData], ids: schema_pb2.IDs | None) -> int:
    if ids is not None:
        which = ids.WhichOneof("id_field")
        if which:
            return len(getattr(ids, which).data)
    if not fields_data:
        return 0
    fd = fields_data[0]
    if fd.valid_data:
        return len(fd.valid_data)
    if fd.type == DT.FloatVector:
        return len(fd.vectors.float_vector.data) // max(int(fd.vectors.dim), 1)
    if fd.type in typeutil.BYTE_VECTORS:
        width = fd.vectors.dim // 8 if fd.type == DT.BinaryVector else 2 * fd.vectors.dim
        return len(getattr(fd.vectors, typeutil.BYTE_VECTORS[fd.type])) // max(int(width), 1)
    if fd.type == DT.SparseFloatVector:
        return len(fd.vectors.sparse_float_vector.contents)
    which = fd.scalars.WhichOneof("data")
    return len(getattr(fd.scalars, which).data) if which else 0


def result_rows(
    output_fields: Sequence[str],
    fields_data: Sequence[schema_pb2.FieldData],
    ids: schema_pb2.IDs | None = None,
    scores: Sequence[float] | None = None,
    allow_int64: bool = True,
) -> list[dict[str, Any]]:
    """Query or search results → rows (Milvus' buildQueryResp): each output field by name, the
    dynamic field's keys spread into the row, and for a search the primary key as `id` and the
    score as `distance`. Int64 values are strings unless the client accepts int64 numbers."""
    n = _num_rows(fields_data, ids)
    if n == 0:
        return []
    static = {fd.field_name for fd in fields_data if not fd.is_dynamic}
    wanted_dynamic = [name for name in output_fields if name not in static]
    columns: dict[str, Any] = {}
    spread: list[dict[str, Any]] | None = None
    for fd in fields_data:
        if fd.is_dynamic:
            objs = [orjson.loads(b) if b else {} for b in fd.scalars.json_data.data[:n]]
            # No dynamic key named (`*`), or `$meta` itself: every key, as pymilvus shows them.
            if not wanted_dynamic or fd.field_name in wanted_dynamic or DYNAMIC_FIELD_NAME in wanted_dynamic:
                spread = objs
            else:
                spread = [{k: o[k] for k in wanted_dynamic if k in o} for o in objs]
            continue
        values = _column_values(fd, n)
        if fd.type == DT.Int64 and not allow_int64:
            values = [None if v is None else str(v) for v in values]
        columns[fd.field_name] = values
    if ids is not None:
        which = ids.WhichOneof("id_field")
        if which == "int_id":
            pks: list[Any] = list(ids.int_id.data) if allow_int64 else [str(x) for x in ids.int_id.data]
        elif which == "str_id":
            pks = list(ids.str_id.data)
        else:
            raise RestError(
                merr.INVALID_SEARCH_RESULT,
                "fail to parse search result, error: "
                "the type of primary key(id) is not supported, use other sdk please",
            )
        columns[DEFAULT_PRIMARY_FIELD] = pks
    if scores is not None:
        columns[DISTANCE] = np.asarray(scores, dtype=np.float32)
    names = list(columns)
    cols = [columns[k] for k in names]
    rows = [dict(zip(names, vals, strict=True)) for vals in zip(*cols, strict=True)] if cols else [{} for _ in range(n)]
    if spread is not None:
        for row, extra in zip(rows, spread, strict=True):
            row.update(extra)
    return rows


# ------------------------------------------------------------------------------ search
def vector_field(schema: schema_pb2.CollectionSchema, anns_field: str) -> schema_pb2.FieldSchema:
    vectors = [f for f in schema.fields if typeutil.is_vector(f.data_type)]
    if not anns_field:
        if len(vectors) > 1:
            raise _format_error(
                f"search without annsField, but already found multiple vector fields: [{vectors[0].name}, "
                f"{vectors[1].name},,,]"
            )
        if vectors:
            return vectors[0]
    for f in vectors:
        if f.name == anns_field:
            return f
    raise _format_error(f"cannot find a vector field named: {anns_field}")


def _format_error(message: str) -> RestError:
    return RestError(merr.INCORRECT_PARAMETER_FORMAT, f"can only accept json format request, error: {message}")


def placeholder_group(schema: schema_pb2.CollectionSchema, anns_field: str, data: list[Any]) -> bytes:
    """The query vectors of `data` → a serialized PlaceholderGroup (Milvus' convertQueries2Placeholder)."""
    field = vector_field(schema, anns_field)
    dt = field.data_type
    ph = common_pb2.PlaceholderValue(tag="$0")
    if dt == DT.SparseFloatVector:
        ph.type = PH.SparseFloatVector
        col = pa.array([_sparse_row(field, v) for v in data], type=typeutil.SPARSE_ARROW)
        fd = fielddata.array_to_field_data(field, col)
        ph.values.extend(fd.vectors.sparse_float_vector.contents)
    elif dt == DT.FloatVector or (dt in (DT.Float16Vector, DT.BFloat16Vector) and data and isinstance(data[0], list)):
        dim = typeutil.dim_of(field)
        for v in data:
            if not isinstance(v, list) or len(v) != dim:
                got = len(v) if isinstance(v, list) else 0
                raise _format_error(
                    f"dimension: {dim}, but length of []float: {got}: "
                    f"invalid parameter[expected={type_name(dt)}][actual={orjson.dumps(v).decode()[:64]}]"
                )
        try:
            arr = np.asarray(data, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise _format_error(f"{exc}: invalid parameter[expected={type_name(dt)}]") from None
        if dt == DT.FloatVector:
            ph.type = PH.FloatVector
            ph.values.extend(r.tobytes() for r in arr)
        else:
            ph.type = PH.Float16Vector if dt == DT.Float16Vector else PH.BFloat16Vector
            raw = arr.astype(np.float16) if dt == DT.Float16Vector else _to_bfloat16(arr)
            ph.values.extend(r.tobytes() for r in raw)
    else:
        ph.type = {DT.BinaryVector: PH.BinaryVector, DT.Float16Vector: PH.Float16Vector}.get(dt, PH.BFloat16Vector)
        width = typeutil.byte_width(field, typeutil.dim_of(field))
        for v in data:
            b = _bytes_of(v)
            if b is None or len(b) != width:
                raise _format_error(f"bytesLen: {width}, but length of []byte: {0 if b is None else len(b)}")
            ph.values.append(b)
    group: bytes = common_pb2.PlaceholderGroup(placeholders=[ph]).SerializeToString()
    return group


def _text(value: Any) -> str:
    """A parameter value as Go's fmt %v prints it (true, 10, 0.5, text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def search_params(req_params: dict[str, Any]) -> list[common_pb2.KeyValuePair]:
    """`searchParams` → the Proxy's search_params (Milvus 2.5.2+'s generateSearchParams): every
    key also goes into the `params` JSON, so `{"ef": 64}` and `{"params": {"ef": 64}}` agree."""
    params = req_params.get(PARAMS)
    merged: dict[str, Any] = {}
    if params is not None:
        if not isinstance(params, dict):
            raise invalid("searchParams.params must be a dict")
        merged = dict(params)
    for key, value in req_params.items():
        if key == PARAMS:
            continue
        if key in merged and merged[key] != value:
            raise invalid(
                f"ambiguous parameter: {key}, in search_param: {value}, in search_param.params: {merged[key]}"
            )
        merged[key] = value
    out = [common_pb2.KeyValuePair(key=PARAMS, value=orjson.dumps(merged).decode())]
    for key, value in req_params.items():
        if key != PARAMS:
            out.append(
                common_pb2.KeyValuePair(key=IGNORE_GROWING if key == "ignoreGrowing" else key, value=_text(value))
            )
    out.append(common_pb2.KeyValuePair(key=ROUND_DECIMAL, value="-1"))
    return out


def kv(key: str, value: Any) -> common_pb2.KeyValuePair:
    return common_pb2.KeyValuePair(key=key, value=_text(value))


# ------------------------------------------------------------------------------ expression templates
def _template(value: Any) -> schema_pb2.TemplateValue:
    if isinstance(value, bool):
        return schema_pb2.TemplateValue(bool_val=value)
    if isinstance(value, str):
        return schema_pb2.TemplateValue(string_val=value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2**63):
        return schema_pb2.TemplateValue(int64_val=int(value))
    if isinstance(value, float):
        return schema_pb2.TemplateValue(float_val=value)
    if isinstance(value, list):
        return schema_pb2.TemplateValue(array_val=_template_array(value))
    raise invalid(f"unexpected value {orjson.dumps(value).decode()[:64]} in exprParams")


def _template_array(values: list[Any]) -> schema_pb2.TemplateArrayValue:
    kinds = {type(_template(v).WhichOneof("val")) for v in values} if values else set()
    whiches = {_template(v).WhichOneof("val") for v in values}
    out = schema_pb2.TemplateArrayValue()
    if len(whiches) != 1 or not kinds:
        out.json_data.data.extend(orjson.dumps(v) for v in values)
        return out
    which = whiches.pop()
    if which == "bool_val":
        out.bool_data.data.extend(values)
    elif which == "string_val":
        out.string_data.data.extend(values)
    elif which == "int64_val":
        out.long_data.data.extend(int(v) for v in values)
    elif which == "float_val":
        out.double_data.data.extend(float(v) for v in values)
    else:
        out.array_data.data.extend(_template_array(v) for v in values)
    return out


def expr_template(params: dict[str, Any]) -> dict[str, schema_pb2.TemplateValue]:
    """`exprParams` → expr_template_values (Milvus' generateExpressionTemplate)."""
    return {name: _template(value) for name, value in params.items()}
