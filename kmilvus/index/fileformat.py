"""The envelope of every index file kmilvus writes under index_files/ (vector and scalar alike):
an 8-byte magic naming the kind, the meta's JSON length, the meta JSON, then the kind's body."""

from __future__ import annotations

import json
import struct
from typing import Any

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
