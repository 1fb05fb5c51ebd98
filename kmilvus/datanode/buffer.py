"""What a flowgraph holds in memory: Arrow batches and deletes per segment, and the DDL it has seen."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from kmilvus.proto import internal_pb2


def started(pos: internal_pb2.MsgPosition | None) -> internal_pb2.MsgPosition:
    """A buffer's position: its first add() sets them, and a buffer is created to be added to."""
    assert pos is not None, "a buffer's positions are set by its first add()"
    return pos


@dataclass
class SegmentBuffer:
    segment_id: int
    partition_id: int
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    # Resume point that still covers this buffer: the tick before its first message.
    start: internal_pb2.MsgPosition | None = None
    first: internal_pb2.MsgPosition | None = None  # its first message
    end: internal_pb2.MsgPosition | None = None  # its last message
    min_ts: int = 0  # smallest insert timestamp it holds

    def add(self, batch: pa.RecordBatch, pos: internal_pb2.MsgPosition, resume: internal_pb2.MsgPosition) -> None:
        if not self.batches:
            self.start, self.first, self.min_ts = resume, pos, pos.timestamp
        self.min_ts = min(self.min_ts, pos.timestamp)
        self.batches.append(batch)
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        self.end = pos


@dataclass
class DDLBuffer:
    """DDNode's DDL of its collection: flushed only with a segment, never on its own
    (docs/architecture/ddl-flush.md)."""

    timestamps: list[int] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    start: internal_pb2.MsgPosition | None = None
    end: internal_pb2.MsgPosition | None = None

    def add(self, ts: int, msg_type: int, payload: bytes, pos: internal_pb2.MsgPosition) -> None:
        if not self.timestamps:
            self.start = pos
        self.timestamps.append(ts)
        self.types.append(msg_type)
        self.payloads.append(bytes(payload))
        self.end = pos

    def __len__(self) -> int:
        return len(self.timestamps)


@dataclass
class DeleteBuffer:
    """A channel's deletes of one partition (-1: every partition): primary keys and their
    timestamps, written as the channel's next L0 delta log of that partition."""

    partition_id: int
    pks: list[np.ndarray] = field(default_factory=list)
    tss: list[np.ndarray] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    start: internal_pb2.MsgPosition | None = None  # resume point covering it (tick before the first)
    end: internal_pb2.MsgPosition | None = None  # its last Delete message
    min_ts: int = 0

    def add(self, pks: np.ndarray, ts: np.ndarray, pos: internal_pb2.MsgPosition, resume) -> None:
        if not self.rows:
            self.start, self.min_ts = resume, pos.timestamp
        self.min_ts = min(self.min_ts, pos.timestamp)
        self.pks.append(pks)
        self.tss.append(ts)
        self.rows += len(pks)
        self.nbytes += pks.nbytes + ts.nbytes
        self.end = pos
