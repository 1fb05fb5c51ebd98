"""Stream messages: a type, a hybrid timestamp, an opaque payload and a few string headers.

On NATS the payload is the message data as is (insert payloads are multi-MB Arrow IPC buffers:
no envelope, no copy), and type/timestamp/headers travel as NATS headers (`K-Type`, `K-Ts`,
`K-<name>`), so routing code never has to parse a payload.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pyarrow as pa

from kmilvus.proto import internal_pb2

MsgPosition = internal_pb2.MsgPosition

H_TYPE = "K-Type"
H_TS = "K-Ts"
H_CHUNK = "K-Chunk"  # "i/n" on each part of a split message
H_CHUNK_ID = "K-Chunk-Id"  # groups the parts of one split message
H_CHUNK_START = "K-Chunk-Start"  # stream seq of part 0, on parts i > 0: lets a resume recover it
H_PREFIX = "K-"
# A time tick's header (`Msg.headers`): the vchannels a flush or a read waits on, comma-separated.
# A node's dispatcher hands a pchannel's tick to idle vchannels only now and then, and to these
# at once.
TICK_FOR = "vchannels"
RESERVED = frozenset({H_TYPE, H_TS, H_CHUNK, H_CHUNK_ID, H_CHUNK_START})
_PREFIX_LEN = len(H_PREFIX)


class MsgType(enum.IntEnum):
    """Message types; numeric values are Milvus' `common.MsgType` (pymilvus' common_pb2), kept
    literal so importing the stream does not import pymilvus (a test checks they agree)."""

    CreateCollection = 100
    DropCollection = 101
    AlterCollection = 111
    TruncateCollection = 119
    CreatePartition = 200
    DropPartition = 201
    Insert = 400
    Delete = 401
    TimeTick = 1200
    DataNodeTt = 1208


@dataclass(slots=True)
class Msg:
    """One logical stream message. `position` is set on consumed messages only.

    `incomplete` (consumed time ticks only): the channels with a split message whose first part
    came before this tick and whose last part has not come yet. Such a tick must not become
    their resume point: a checkpoint there would let a purge remove the earlier parts."""

    type: MsgType
    timestamp: int
    payload: bytes | memoryview = b""
    headers: dict[str, str] = field(default_factory=dict)
    position: MsgPosition | None = None
    incomplete: frozenset[str] = frozenset()

    def get_int(self, name: str, default: int | None = None) -> int | None:
        """An integer header (segment id, collection id, num rows...), or `default`."""
        v = self.headers.get(name)
        return default if v is None else int(v)


def read_ipc(payload: bytes | memoryview) -> pa.RecordBatch:
    """An Insert's or a Delete's payload (an Arrow IPC stream, as the Proxy writes it) → one
    record batch: what the DataNode buffers and a QueryNode's delegator serves."""
    reader = pa.ipc.open_stream(pa.py_buffer(payload))
    batches = list(reader)
    return batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def nats_headers(msg: Msg) -> dict[str, str]:
    """The NATS headers carrying `msg`'s type, timestamp and extra headers."""
    h = {H_TYPE: str(int(msg.type)), H_TS: str(msg.timestamp)}
    for k, v in msg.headers.items():
        key = H_PREFIX + k
        if key in RESERVED:
            raise ValueError(f"header name {k!r} is reserved")
        h[key] = str(v)
    return h


def from_nats(headers: dict[str, str] | None, data: bytes | memoryview) -> Msg:
    """Decode a NATS message published by `nats_headers` (chunk headers are dropped)."""
    if not headers or H_TYPE not in headers:
        raise ValueError("not a kmilvus stream message (no K-Type header)")
    extra = {k[_PREFIX_LEN:]: v for k, v in headers.items() if k.startswith(H_PREFIX) and k not in RESERVED}
    t = headers[H_TYPE]
    return Msg(_TYPES.get(t) or MsgType(int(t)), int(headers[H_TS]), data, extra)


_TYPES = {str(int(t)): t for t in MsgType}  # header value → enum without an enum call per message
