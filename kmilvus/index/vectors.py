"""Vectors as the indexes take them, converted once and column-wise from their stored or wire form.

- dense (FloatVector, Float16Vector, BFloat16Vector): an (n, dim) float32 matrix. A 16-bit
  vector is widened exactly (every float16 and bfloat16 value is a float32), so it is indexed and
  searched as float32 while the binlogs keep it as itself.
- binary: an (n, dim/8) uint8 matrix of packed bits, as stored.
- sparse: `SparseRows`, CSR-like arrays (row offsets, uint32 dimensions, float32 values), read
  from the binlogs' `map<uint32, float32>` without a per-row loop.

Queries travel from the Proxy to the QueryNodes as bytes (`encode` / `decode`): the field's type,
which both ends know from the schema, says how to read them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.util import fieldtypes, merr, typeutil

DT = schema_pb2.DataType
PH = common_pb2.PlaceholderType


@dataclass
class SparseRows:
    """Sparse vectors: row i's (dimension, value) pairs are indices/values[indptr[i]:indptr[i+1]],
    dimensions strictly increasing within a row (Milvus' sparse row format)."""

    indptr: np.ndarray  # int64, n + 1
    indices: np.ndarray  # uint32
    values: np.ndarray  # float32

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return len(self.indices)

    def row_ids(self) -> np.ndarray:
        """The row of every stored pair (int64, nnz)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.indptr))

    def take(self, rows: np.ndarray) -> SparseRows:
        rows = np.asarray(rows, dtype=np.int64)
        counts = np.diff(self.indptr)[rows]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        starts = np.repeat(self.indptr[rows] - indptr[:-1], counts)
        pos = np.arange(int(indptr[-1]), dtype=np.int64) + starts
        return SparseRows(indptr, self.indices[pos], self.values[pos])

    def to_arrow(self) -> pa.MapArray:
        return pa.MapArray.from_arrays(
            pa.array(self.indptr.astype(np.int32)), pa.array(self.indices), pa.array(self.values)
        )

    @classmethod
    def from_arrow(cls, col: pa.Array | pa.ChunkedArray) -> SparseRows:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        offsets = col.offsets.to_numpy().astype(np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        keys = col.keys.slice(first, last - first) if len(col.keys) != last - first else col.keys
        items = col.items.slice(first, last - first) if len(col.items) != last - first else col.items
        return cls(
            offsets - first,
            keys.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False),
            items.to_numpy(zero_copy_only=False).astype(np.float32, copy=False),
        )

    def to_bytes(self) -> bytes:
        return (
            self.indptr.astype("<i8").tobytes()
            + self.indices.astype("<u4").tobytes()
            + self.values.astype("<f4").tobytes()
        )

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, n: int) -> SparseRows:
        buf = memoryview(data)
        indptr = np.frombuffer(buf[: (n + 1) * 8], dtype="<i8").astype(np.int64)
        nnz = int(indptr[-1]) if n else 0
        start = (n + 1) * 8
        indices = np.frombuffer(buf[start : start + nnz * 4], dtype="<u4").astype(np.uint32)
        values = np.frombuffer(buf[start + nnz * 4 : start + nnz * 8], dtype="<f4").astype(np.float32)
        return cls(indptr, indices, values)


Vectors = np.ndarray | SparseRows


def _fixed_bytes(col: pa.Array | pa.ChunkedArray, width: int) -> np.ndarray:
    """A fixed_size_binary(width) column as an (n, width) uint8 matrix (one copy at most)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    raw = np.frombuffer(col.buffers()[1], dtype=np.uint8)
    return raw[col.offset * width : (col.offset + len(col)) * width].reshape(len(col), width)


def half_to_float32(raw: np.ndarray, data_type: int) -> np.ndarray:
    """Little-endian float16 / bfloat16 bytes (n, 2·dim) → (n, dim) float32, exactly."""
    n = raw.shape[0]
    if data_type == DT.Float16Vector:
        return np.ascontiguousarray(raw).view("<f2").astype(np.float32).reshape(n, -1)
    bits = np.ascontiguousarray(raw).view("<u2").astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32).reshape(n, -1)


def from_arrow(col: pa.Array | pa.ChunkedArray, data_type: int, dim: int) -> Vectors:
    """A vector column as stored in the binlogs → what an index is built from."""
    if data_type == DT.SparseFloatVector:
        return SparseRows.from_arrow(col)
    if data_type == DT.BinaryVector:
        return np.ascontiguousarray(_fixed_bytes(col, dim // 8))
    if data_type in (DT.Float16Vector, DT.BFloat16Vector):
        return half_to_float32(_fixed_bytes(col, 2 * dim), data_type)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    flat = col.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(-1, dim)


# ------------------------------------------------------------------------------ queries

# The placeholder types a field's search accepts: its own, and float32 for a 16-bit field
# (widened or narrowed as knowhere does, then searched as float32).
_PLACEHOLDERS = {
    DT.FloatVector: (PH.FloatVector,),
    DT.Float16Vector: (PH.Float16Vector, PH.FloatVector),
    DT.BFloat16Vector: (PH.BFloat16Vector, PH.FloatVector),
    DT.BinaryVector: (PH.BinaryVector,),
    DT.SparseFloatVector: (PH.SparseFloatVector,),
}
_WIDTH = {PH.FloatVector: 4, PH.Float16Vector: 2, PH.BFloat16Vector: 2}


def from_placeholder(ph: common_pb2.PlaceholderValue, field: schema_pb2.FieldSchema) -> Vectors:
    """A search's query vectors for `field`, checked as Milvus' proxy checks them: the
    placeholder's vector type, each vector's dim, a sparse row's format."""
    dt = field.data_type
    if ph.type not in _PLACEHOLDERS.get(dt, ()):
        raise merr.invalid(
            f"vector type must be the same, field {field.name} - type {typeutil.type_name(dt)}, "
            f"search info type {PH.Name(ph.type)}"
        )
    values = list(ph.values)
    if dt == DT.SparseFloatVector:
        return SparseRows.from_arrow(fieldtypes.sparse_rows_to_arrow(values, len(values), field.name))
    dim = typeutil.dim_of(field)
    width = dim // 8 if dt == DT.BinaryVector else dim * _WIDTH[ph.type]
    for v in values:
        if len(v) != width:
            got = len(v) * 8 if dt == DT.BinaryVector else len(v) // _WIDTH[ph.type]
            raise merr.MilvusError(
                merr.PARAMETER_INVALID,
                f"the dim ({got}) of field data({field.name}) is not equal to schema dim ({dim})",
            )
    raw = np.frombuffer(b"".join(values), dtype=np.uint8).reshape(len(values), width)
    if dt == DT.BinaryVector:
        return raw
    if ph.type == PH.FloatVector:
        return np.ascontiguousarray(raw).view("<f4").astype(np.float32).reshape(len(values), dim)
    return half_to_float32(raw, DT.Float16Vector if ph.type == PH.Float16Vector else DT.BFloat16Vector)


def encode(queries: Vectors) -> bytes:
    """Queries on the wire to the QueryNodes: float32, packed bits, or sparse rows."""
    if isinstance(queries, SparseRows):
        return queries.to_bytes()
    if queries.dtype == np.uint8:
        return np.ascontiguousarray(queries).tobytes()
    return np.ascontiguousarray(queries, dtype="<f4").tobytes()


def decode(data: bytes, nq: int, data_type: int) -> Vectors:
    """What `encode` sent, read by the field's type."""
    if data_type == DT.SparseFloatVector:
        return SparseRows.from_bytes(data, nq)
    if data_type == DT.BinaryVector:
        return np.frombuffer(data, dtype=np.uint8).reshape(nq, -1)
    return np.frombuffer(data, dtype="<f4").reshape(nq, -1)
