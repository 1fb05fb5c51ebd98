"""Primary key → shard, vectorized (no per-row Python)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S = np.uint64(33)


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer: cheap and well mixed for sequential IDs."""
    h = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        h ^= h >> _S
        h *= _M1
        h ^= h >> _S
        h *= _M2
        h ^= h >> _S
    return h


def hash_keys(keys: pa.Array | np.ndarray) -> np.ndarray:
    """uint64 hash per primary key (Int64 or VarChar)."""
    if isinstance(keys, pa.Array):
        if pa.types.is_integer(keys.type):
            keys = keys.to_numpy(zero_copy_only=False)
        else:
            hashed: np.ndarray = pd.util.hash_array(
                keys.to_numpy(zero_copy_only=False).astype(object), categorize=False
            )
            return hashed
    return fmix64(np.asarray(keys, dtype=np.int64))


def shard_of(keys: pa.Array | np.ndarray, shards: int) -> np.ndarray:
    if shards == 1:
        return np.zeros(len(keys), dtype=np.int64)
    return (hash_keys(keys) % np.uint64(shards)).astype(np.int64)


# Milvus' typeutil hashes, which place a partition key's rows (HashKey2Partitions): the same
# values Milvus computes, so data lands in the partition Milvus would put it in.
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def hash32_int64(keys: np.ndarray) -> np.ndarray:
    """Milvus' Hash32Int64: MurmurHash3 x86_32 (seed 0) of the key's 8 little-endian bytes,
    masked to 31 bits; uint32 per key, columnar."""
    raw = np.ascontiguousarray(keys, dtype="<i8").view("<u4").reshape(-1, 2)
    h = np.zeros(len(raw), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for block in (raw[:, 0], raw[:, 1]):
            k = block.astype(np.uint32) * _C1
            k = _rotl32(k, 15) * _C2
            h ^= k
            h = _rotl32(h, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(8)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h & np.uint32(0x7FFFFFFF)


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> np.uint32(1)) ^ np.uint32(0xEDB88320), table >> np.uint32(1))
    return table.astype(np.uint32)


_CRC_TABLE = _crc_table()
CRC_PREFIX_BYTES = 100  # Milvus' substringLengthForCRC


def hash_string2uint32(keys: pa.Array) -> np.ndarray:
    """Milvus' HashString2Uint32: CRC-32 (IEEE) of each string's first 100 bytes (UTF-8), uint32
    per key — one table step per byte position over all keys at once, never per key."""
    arr = keys.cast(pa.string()) if not pa.types.is_string(keys.type) else keys
    if arr.offset or arr.null_count:
        arr = pa.concat_arrays([arr.fill_null("")])  # a fresh buffer starting at offset 0
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1)
    data = np.frombuffer(arr.buffers()[2] or b"", dtype=np.uint8)
    starts = offsets[:-1].astype(np.int64)
    lengths = np.minimum(np.diff(offsets), CRC_PREFIX_BYTES)
    crc = np.full(len(arr), 0xFFFFFFFF, dtype=np.uint32)
    for j in range(int(lengths.max()) if len(arr) else 0):
        live = np.flatnonzero(lengths > j)
        byte = data[starts[live] + j].astype(np.uint32)
        c = crc[live]
        crc[live] = _CRC_TABLE[(c ^ byte) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)
