"""The field types of Milvus 2.4/2.5 beyond scalars and float vectors: binary, float16, bfloat16
and sparse float vectors, arrays of scalars, and nullable fields with default values.

Each type has its natural Arrow form in the binlogs: a binary vector is `fixed_size_binary(dim/8)`,
float16 and bfloat16 vectors `fixed_size_binary(2·dim)` (as Milvus' own binlogs: Arrow has no
bfloat16, and Spark reads no Parquet FLOAT16), a sparse vector `map<uint32, float32>`, an array `list<element>`; a
nullable field is an Arrow column with nulls. Conversions are columnar: byte vectors are one
buffer, sparse rows are joined once and read as (index, value) pairs by numpy, nullable values are
placed by one `take`. An array column walks its rows once to read each row's ScalarField, which
is how the wire format packs them.

The types' facts (slots, Arrow types, widths, capacities, defaults) are `typeutil`'s; `fielddata`
converts whole FieldData messages and calls in here for these types.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.util import merr, typeutil
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType

_SPARSE_PAIR = np.dtype([("index", "<u4"), ("value", "<f4")])


# --------------------------------------------------------------------------------------------
# FieldData → Arrow


def _vector_mismatch(field: schema_pb2.FieldSchema, got: str | None) -> MilvusError:
    return MilvusError(
        merr.PARAMETER_INVALID, f"vector field '{field.name}' is illegal, array type mismatch: got {got}"
    )


def _fp32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 → bfloat16 (the upper half of the float32 bits)."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def half_bytes(field: schema_pb2.FieldSchema, values: np.ndarray) -> bytes:
    """float32 values → the little-endian float16 / bfloat16 bytes of a 16-bit vector field."""
    half = values.astype(np.float16).view(np.uint16) if field.data_type == DT.Float16Vector else _fp32_to_bf16(values)
    return half.astype("<u2").tobytes()


def byte_vector(fd: schema_pb2.FieldData, field: schema_pb2.FieldSchema, dim: int, num_rows: int) -> pa.Array:
    """Binary / float16 / bfloat16 vectors: one contiguous buffer of num_rows × width bytes.
    Float16 and bfloat16 fields also take float32 data (pymilvus sends lists of floats so), which
    is converted here as Milvus 2.6 does."""
    which = fd.vectors.WhichOneof("data")
    slot = typeutil.BYTE_VECTORS[field.data_type]
    width = typeutil.byte_width(field, dim)
    if fd.vectors.dim and fd.vectors.dim != dim:
        raise typeutil.dim_mismatch(field.name, fd.vectors.dim, dim)
    if which == "float_vector" and field.data_type != DT.BinaryVector:
        values = np.asarray(fd.vectors.float_vector.data, dtype=np.float32)
        if values.size != num_rows * dim:
            raise MilvusError(
                merr.PARAMETER_INVALID,
                f"the length({values.size}) of float data should be num_rows({num_rows}) × dim({dim}) of field "
                f"({field.name})",
            )
        raw = half_bytes(field, values)
    elif which in (None, slot):
        raw = getattr(fd.vectors, slot)
    else:
        raise _vector_mismatch(field, which)
    if len(raw) != num_rows * width:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"the byte length ({len(raw)}) of {slot} field ({field.name}) is not num_rows ({num_rows}) × "
            f"{width} bytes (dim {dim})",
        )
    if field.data_type == DT.Float16Vector:
        _check_finite_half(field.name, raw, dim)
    return pa.Array.from_buffers(pa.binary(width), num_rows, [None, pa.py_buffer(raw)])


def _check_finite_half(name: str, raw: bytes, dim: int) -> None:
    values = np.frombuffer(raw, dtype="<f2")
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise typeutil.RowError(
            "finite", i // dim, name, what="float16 vector", value=values[i], where=f" at position {i % dim}"
        )


def byte_vector_from_lists(field: schema_pb2.FieldSchema, lists: pa.Array) -> pa.Array:
    """An import's vectors as lists (no nulls) → the binlog's `fixed_size_binary` column: a binary
    vector's dim/8 byte values (0..255), or a 16-bit vector's dim numbers, converted as an
    Insert's float32 data is. Raises `typeutil.RowError` naming the first bad row."""
    name, dim, n = field.name, typeutil.dim_of(field), len(lists)
    binary = field.data_type == DT.BinaryVector
    per_row = dim // 8 if binary else dim
    lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
    if (hit := np.flatnonzero(lengths != per_row)).size:
        i = int(hit[0])
        got = int(lengths[i]) * 8 if binary else int(lengths[i])
        raise typeutil.dim_mismatch(name, got, dim, row=i)
    values = lists.flatten()
    if values.null_count:
        i = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise typeutil.RowError("element", i // per_row, name, index=i % per_row)
    if binary:
        typeutil.check_range(name, DT.BinaryVector, values, per_row, bounds=(0, 255))
        raw = values.cast(pa.uint8()).to_numpy(zero_copy_only=False).tobytes()
    else:
        floats = values.cast(pa.float32())
        what = "float16 vector" if field.data_type == DT.Float16Vector else "bfloat16 vector"
        typeutil.check_finite(name, what, floats, dim)
        raw = half_bytes(field, floats.to_numpy(zero_copy_only=False))
        if field.data_type == DT.Float16Vector:
            _check_finite_half(name, raw, dim)
    return pa.Array.from_buffers(pa.binary(typeutil.byte_width(field, dim)), n, [None, pa.py_buffer(raw)])


def sparse_rows_to_arrow(contents: Sequence[bytes], num_rows: int, name: str) -> pa.Array:
    """Milvus' sparse rows (bytes of little-endian (uint32 index, float32 value) pairs, indices
    strictly increasing) → `map<uint32, float32>`, checked as Milvus' ValidateSparseFloatRows."""
    if len(contents) != num_rows:
        raise typeutil._rows_mismatch(name, len(contents), num_rows)
    lengths = np.fromiter(map(len, contents), dtype=np.int64, count=num_rows)
    bad = np.flatnonzero(lengths % 8)
    if bad.size:
        raise _sparse_error(name, int(bad[0]), f"invalid data length in sparse float vector: {lengths[bad[0]]}")
    pairs = np.frombuffer(b"".join(contents), dtype=_SPARSE_PAIR)
    return sparse_pairs_to_arrow(pairs["index"], pairs["value"], lengths // 8, name)


def sparse_pairs_to_arrow(idx: np.ndarray, val: np.ndarray, counts: np.ndarray, name: str) -> pa.Array:
    """Flat (uint32 index, float32 value) pairs, `counts[i]` of them for row i → `map<uint32,
    float32>`, checked as Milvus' ValidateSparseFloatRows (indices strictly increasing)."""
    num_rows = len(counts)
    offsets = np.zeros(num_rows + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    row_of = np.repeat(np.arange(num_rows), counts)
    if idx.size:
        if (hit := np.flatnonzero(idx == np.uint32(0xFFFFFFFF))).size:
            raise _sparse_error(
                name, int(row_of[hit[0]]), "invalid index in sparse float vector: must be less than 2^32-1"
            )
        same_row = row_of[1:] == row_of[:-1]
        if (hit := np.flatnonzero(same_row & (idx[1:] <= idx[:-1]))).size:
            raise _sparse_error(name, int(row_of[hit[0] + 1]), "unsorted or same indices in sparse float vector")
        if (hit := np.flatnonzero(~np.isfinite(val))).size:
            raise _sparse_error(name, int(row_of[hit[0]]), f"invalid value in sparse float vector: {val[hit[0]]}")
        if (hit := np.flatnonzero(val < 0)).size:
            raise _sparse_error(name, int(row_of[hit[0]]), "negative value in sparse float vector")
    return pa.MapArray.from_arrays(
        pa.array(offsets), pa.array(np.ascontiguousarray(idx)), pa.array(np.ascontiguousarray(val))
    )


def _sparse_error(name: str, row: int, why: str) -> MilvusError:
    return typeutil.RowError("sparse", row, name, why=why)


def sparse_from_lists(field: schema_pb2.FieldSchema, rows: pa.Array) -> pa.Array:
    """An import's sparse rows as `struct<indices: list<int>, values: list<float>>` (no null
    rows) → `map<uint32, float32>`. As Milvus' import (CreateSparseFloatRowFromMap) each row's
    pairs are sorted by index first; indices must fit uint32, a row's lists be equally long."""
    name = field.name
    indices, values = rows.field("indices"), rows.field("values")
    for part in (indices, values):
        if part.null_count:
            raise _sparse_error(name, _first_null(part), "indices and values must be lists of numbers")
    ni = pc.list_value_length(indices).to_numpy(zero_copy_only=False)
    nv = pc.list_value_length(values).to_numpy(zero_copy_only=False)
    if (hit := np.flatnonzero(ni != nv)).size:
        raise _sparse_error(name, int(hit[0]), "indices and values length mismatch")
    flat_i, flat_v = indices.flatten(), values.flatten()
    row_of = np.repeat(np.arange(len(rows)), ni)
    for part in (flat_i, flat_v):
        if part.null_count:
            raise _sparse_error(name, int(row_of[_first_null(part)]), "indices and values must be numbers")
    idx = flat_i.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if (hit := np.flatnonzero((idx < 0) | (idx >= 0xFFFFFFFF))).size:
        raise _sparse_error(
            name, int(row_of[hit[0]]), f"invalid index in sparse float vector: {idx[hit[0]]} is not in [0, 2^32-1)"
        )
    val = flat_v.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float32)
    order = np.lexsort((idx, row_of))
    return sparse_pairs_to_arrow(idx[order].astype(np.uint32), val[order], ni, name)


def _first_null(arr: pa.Array) -> int:
    return int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])


def sparse_vector(fd: schema_pb2.FieldData, field: schema_pb2.FieldSchema, num_rows: int) -> pa.Array:
    which = fd.vectors.WhichOneof("data")
    if which not in (None, "sparse_float_vector"):
        raise _vector_mismatch(field, which)
    return sparse_rows_to_arrow(list(fd.vectors.sparse_float_vector.contents), num_rows, field.name)


def array_column(fd: schema_pb2.FieldData, field: schema_pb2.FieldSchema, num_rows: int) -> pa.Array:
    """ArrayArray (one ScalarField per row) → `list<element>`, with max_capacity and, for VarChar
    elements, max_length checked as Milvus' proxy does."""
    which = fd.scalars.WhichOneof("data")
    if which not in (None, "array_data"):
        raise MilvusError(
            merr.PARAMETER_INVALID, f"field '{field.name}' is illegal, array type mismatch: need array_data"
        )
    slot, np_type, _ = typeutil.ARRAY_ELEMENTS[field.element_type]
    rows = fd.scalars.array_data.data
    if len(rows) != num_rows:
        raise typeutil._rows_mismatch(field.name, len(rows), num_rows)
    for r in rows:  # one pass over the wire's per-row messages: a row of another type is refused
        got = r.WhichOneof("data")
        if got is not None and got != slot:
            raise MilvusError(
                merr.PARAMETER_INVALID,
                f"the element type of array field ({field.name}) is not match schema: expected {slot}, got {got}",
            )
    lists = [getattr(r, slot).data for r in rows]
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=num_rows)
    offsets = np.zeros(num_rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    if np_type is None:
        flat = pa.array([v for lst in lists for v in lst], pa.string())
    else:
        flat = pa.array(
            np.concatenate([np.asarray(x, dtype=np_type) for x in lists]) if lists else [],
            pa.from_numpy_dtype(np_type),
        )
    return array_from_lists(field, pa.ListArray.from_arrays(pa.array(offsets), flat))


def array_from_lists(field: schema_pb2.FieldSchema, lists: pa.Array) -> pa.Array:
    """A list column (no null rows; integers possibly wider than the element type) → the
    binlog's `list<element>`, with max_capacity, null elements, integer ranges and, for VarChar
    elements, max_length checked as Milvus' proxy does. Raises `typeutil.RowError`."""
    arrow = typeutil.ARRAY_ELEMENTS[field.element_type][2]
    lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
    capacity = typeutil.max_capacity_of(field)
    if (hit := np.flatnonzero(lengths > capacity)).size:
        i = int(hit[0])
        raise typeutil.RowError("capacity", i, field.name, value=int(lengths[i]), limit=capacity)
    flat = lists.flatten()
    row_of = np.repeat(np.arange(len(lists)), lengths)
    if flat.null_count:
        raise typeutil.RowError("element", int(row_of[_first_null(flat)]), field.name, index=-1)
    try:
        if field.element_type == DT.VarChar:
            typeutil.check_max_length(field.name, flat, typeutil.max_length_of(field))
        elif field.element_type in (DT.Int8, DT.Int16, DT.Int32) and flat.type != arrow:
            typeutil.check_range(field.name, field.element_type, flat)
    except typeutil.RowError as e:  # the element's index → its row's
        raise e.at(int(row_of[e.row])) from None
    offsets = np.zeros(len(lists) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), flat.cast(arrow))


# --------------------------------------------------------------------------------------------
# Nullable fields and default values


def expand_valid(values: pa.Array, valid: np.ndarray, field: schema_pb2.FieldSchema) -> pa.Array:
    """Compacted values of the valid rows + the validity of every row → one column of
    len(valid) rows: a missing value gets the field's default, else null (nullable fields only)."""
    n_valid = int(valid.sum())
    if len(values) != n_valid:
        raise typeutil._rows_mismatch(field.name, len(values), n_valid)
    if n_valid == len(valid):
        return values
    dflt = typeutil.default_value(field)
    if dflt is None and not field.nullable:
        i = int(np.flatnonzero(~valid)[0])
        raise MilvusError(
            merr.PARAMETER_INVALID, f"the {i}th value of field ({field.name}) is null, but the field is not nullable"
        )
    positions = np.cumsum(valid) - 1
    out = pc.take(values, pa.array(positions, mask=~valid))
    if dflt is not None:
        out = pc.fill_null(out, pa.scalar(dflt, type=values.type))
    return out


# --------------------------------------------------------------------------------------------
# Arrow → FieldData (query results)


def fill_to_field_data(field: schema_pb2.FieldSchema, col: pa.Array, fd: schema_pb2.FieldData, dim: int | None) -> None:
    """Fill `fd` from a column of one of this module's vector or array types."""
    dt = field.data_type
    if dt in typeutil.BYTE_VECTORS:
        fd.vectors.dim = dim
        width = col.type.byte_width
        raw = col.buffers()[1].to_pybytes()[col.offset * width : (col.offset + len(col)) * width]
        setattr(fd.vectors, typeutil.BYTE_VECTORS[dt], raw)
    elif dt == DT.SparseFloatVector:
        keys = col.keys.to_numpy(zero_copy_only=False).astype("<u4")
        items = col.items.to_numpy(zero_copy_only=False).astype("<f4")
        pairs = np.empty(len(keys), dtype=_SPARSE_PAIR)
        pairs["index"], pairs["value"] = keys, items
        offsets = col.offsets.to_numpy() - col.offsets[0].as_py()
        raw = pairs.tobytes()
        fd.vectors.sparse_float_vector.contents.extend(
            raw[offsets[i] * 8 : offsets[i + 1] * 8] for i in range(len(col))
        )
        fd.vectors.sparse_float_vector.dim = int(keys.max()) + 1 if len(keys) else 0
    elif dt == DT.Array:
        slot = typeutil.ARRAY_ELEMENTS[field.element_type][0]
        fd.scalars.array_data.element_type = field.element_type
        for row in col.to_pylist():
            getattr(fd.scalars.array_data.data.add(), slot).data.extend(row or [])
    else:
        raise KeyError(dt)
