"""The envelope of every index file kmilvus writes under index_files/ (vector and scalar alike):
an 8-byte magic naming the kind, the meta's JSON length, the meta JSON, then the kind's body."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

_HEADER = struct.Struct("<8sI")  # magic, meta JSON length


def pack(magic: bytes, meta: dict[str, Any]) -> bytes:
    """The envelope's head: the body follows it."""
    blob = json.dumps(meta).encode()
    return _HEADER.pack(magic, len(blob)) + blob


def has_magic(data: bytes | memoryview, magic: bytes) -> bool:
    return bytes(memoryview(data)[: len(magic)]) == magic


def unpack(data: bytes | memoryview, magic: bytes, what: str) -> tuple[dict[str, Any], memoryview]:
    """(meta, body) of a file `pack` began; ValueError naming `what` when it is another kind."""
    buf = memoryview(data)
    got, n = _HEADER.unpack_from(buf)
    if got != magic:
        raise ValueError(f"not a kmilvus {what} file")
    return json.loads(bytes(buf[_HEADER.size : _HEADER.size + n])), buf[_HEADER.size + n :]


def array_spec(arrays: dict[str, np.ndarray]) -> list[list[Any]]:
    """The [name, dtype, length] list of 1-d arrays a body carries one after another."""
    return [[name, a.dtype.str, len(a)] for name, a in arrays.items()]


def array_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    return b"".join(np.ascontiguousarray(a).tobytes() for a in arrays.values())


def read_arrays(body: memoryview, spec: list[list[Any]], pos: int = 0) -> dict[str, np.ndarray]:
    """What `array_bytes` wrote (from `pos` of `body`), as read-only views (no copy)."""
    out = {}
    for name, dtype, count in spec:
        dt = np.dtype(dtype)
        out[name] = np.frombuffer(body, dtype=dt, count=count, offset=pos)
        pos += count * dt.itemsize
    return out
