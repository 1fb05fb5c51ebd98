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
            return pd.util.hash_array(keys.to_numpy(zero_copy_only=False).astype(object), categorize=False)
    return fmix64(np.asarray(keys, dtype=np.int64))


def shard_of(keys: pa.Array | np.ndarray, shards: int) -> np.ndarray:
    if shards == 1:
        return np.zeros(len(keys), dtype=np.int64)
    return (hash_keys(keys) % np.uint64(shards)).astype(np.int64)
