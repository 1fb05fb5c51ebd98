"""One vchannel's flowgraph (one per vchannel: docs/architecture/ddl-flush.md).

input (JetStream consumer from the checkpoint) → DDNode (DDL of its collection; skips what is
already persisted) → InsertBufferNode (Arrow batches per segment) → DeleteNode (the channel's
deletes per partition) → time-tick reporting (`DataNodeTtMsg` with the channel checkpoint).

Deletes (Milvus 2.4's L0 deletes): a Delete message goes to the channel's delete buffer of its
partition (-1: every partition), not to the segments that may hold its keys, and is written as
the channel's L0 delta log once `DELTA_SYNC_SECONDS` old or when a flush reaches the channel. A
delete so never depends on which segments this flowgraph knows of: segments imported or
compacted after the watch, or made by another node, get it all the same, because readers and
compaction apply a channel's L0 deletes to every segment of the channel by key and timestamp.
L0 writes of a channel commit one at a time, in order, so every Delete up to the committed
`l0_position` is in a committed L0 delta log, and a replay skips exactly those.

Checkpoint: resuming after `seq` replays every message whose data is not yet in a binlog, and
every row with ts < `timestamp` is already durable. Replayed messages of segments that are
flushed, or whose rows are already in binlogs (their `dml_position`), are skipped, so each
acknowledged row lands in the binlogs exactly once. Every write taken out of the buffers holds
the checkpoint back under its own token until SaveBinlogPaths committed it — per write, not per
segment, so two writes of one segment in flight (a pressure write and the final flush) never
release each other's hold.

Ownership: the flowgraph acts under the channel's watch (node ID and `watch_version`); DataCoord
refuses time ticks and binlogs from any other watch, and a refused flowgraph drops the channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pymilvus.grpc_gen import schema_pb2

from kmilvus.config import Config
from kmilvus.datanode.buffer import DDLBuffer, DeleteBuffer, SegmentBuffer, started
from kmilvus.log import get_logger
from kmilvus.msgstream import MsgStream, MsgType, StreamGapError
from kmilvus.msgstream.message import read_ipc
from kmilvus.msgstream.reader import ChannelReader
from kmilvus.proto import internal_pb2
from kmilvus.storage import deltalog
from kmilvus.util.constants import ALL_PARTITIONS

log = get_logger(__name__)
DELTA_SYNC_SECONDS = 1.0  # how long deletes wait for company before an L0 delta log


class FlowGraphHost(Protocol):
    """What a flowgraph needs from the DataNode that runs it, and nothing more: where to
    consume, the memory account, the time-tick report, and to be forgotten once dropped."""

    cfg: Config
    stream: MsgStream
    server_id: int

    def account(self, nbytes: int) -> None: ...

    def release(self, nbytes: int) -> None: ...

    def forget(self, vchannel: str) -> None: ...

    async def report_tt(self, fg: FlowGraph, ts: int, cp: internal_pb2.MsgPosition) -> None: ...


@dataclass
class PendingWrite:
    """Data detached from a flowgraph's buffers for one binlog write; `token` is its hold on the
    checkpoint until the write is committed (or discarded)."""

    token: int
    segment_id: int
    buf: SegmentBuffer | None
    ddl: DDLBuffer | None
    final: bool
    l0: dict[int, DeleteBuffer] | None = None  # partition → deletes (segment_id 0: an L0 write)


class FlowGraph:
    def __init__(self, node: FlowGraphHost, info: internal_pb2.ChannelWatchInfo):
        self.node = node
        self.info = info
        self.vchannel = info.vchannel
        self.collection_id = info.collectionID
        self.schema = schema_pb2.CollectionSchema.FromString(info.schema)
        self.skip: set[int] = set(info.flushed_segmentIDs) | set(info.dropped_segmentIDs)
        self.flushed_here: set[int] = set()  # segments this flowgraph wrote its final binlogs of
        self.persisted_upto: dict[int, int] = {s.ID: s.dml_position.seq for s in info.unflushed_segments}
        self.partition_of: dict[int, int] = {s.ID: s.partitionID for s in info.unflushed_segments}
        self.buffers: dict[int, SegmentBuffer] = {}
        self.dropped_partitions: set[int] = set()  # seen DropPartition: their inserts are discarded
        self.inflight: dict[int, tuple[int, int]] = {}  # write token → (start seq, min ts) it holds
        self._tokens = itertools.count(1)
        self.watch_version = info.watch_version
        self.ddl = DDLBuffer()
        self.pk_field = next((f for f in self.schema.fields if f.is_primary_key), None)
        self.l0: dict[int, DeleteBuffer] = {}  # partition (-1: all) → deletes not in an L0 write yet
        self.l0_since = 0.0  # when the oldest of them arrived (monotonic)
        self.l0_upto = info.l0_position.seq  # Deletes up to here are in committed L0 delta logs
        self.l0_lock = asyncio.Lock()  # L0 writes commit one at a time, in the order taken
        seek = info.seek_position
        self.tick = internal_pb2.MsgPosition(channel_name=self.vchannel, seq=seek.seq, timestamp=seek.timestamp)
        self.dropped = False
        # A write gave up uncommitted, or the buffers were discarded: no later write commits
        # (DataNode._write_locked) — its checkpoint could pass data no binlog holds.
        self.abandoned = False
        self._consumer: ChannelReader | None = None
        self._task: asyncio.Task | None = None

    # Lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        reader = ChannelReader(
            self.node.stream, self.vchannel, self.tick.seq, f"{self.node.cfg.cluster}-dn{self.node.server_id}"
        )
        await reader.start()
        self._consumer = reader
        self._task = asyncio.create_task(self._run(reader), name=f"flowgraph-{self.vchannel}")

    async def stop(self, drop: bool = False) -> None:
        """Stop consuming and delete the consumer; `drop` also discards what is buffered. The
        consumer is closed before the loop is awaited: a closed consumer ends the loop even if
        its cancellation were lost on the way."""
        consumer, self._consumer = self._consumer, None
        # The loop, unless it is what stops (it cannot await itself).
        running = self._task if self._task is not asyncio.current_task() else None
        if running is not None:
            running.cancel()
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.close()
        if running is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running
        if drop:
            self._discard()

    def _discard(self) -> None:
        """Forget what is buffered: the channel's next owner replays it from the stored
        checkpoint. A write in flight must not commit after this: the checkpoint it takes would
        no longer be held back by the discarded rows, and would pass them for good."""
        self.abandoned = True
        freed = sum(b.nbytes for b in self.buffers.values())
        self.buffers.clear()
        self.l0.clear()
        self.ddl = DDLBuffer()
        self.node.release(freed)

    async def _run(self, reader: ChannelReader) -> None:
        try:
            await reader.run(self._handle)
        except StreamGapError as gap:
            # Never expected: the stream is trimmed only below the stored checkpoint, where this
            # flowgraph started. The channel stops here, loudly, rather than skip what is gone
            # (its checkpoint stays, its flushes wait).
            log.error(
                "acknowledged messages purged before this DataNode read them", channel=self.vchannel, error=str(gap)
            )
            return
        if self.dropped:
            # BackGroundGC (docs/architecture/drop.md): free everything, delete the consumer, forget the channel.
            await self.stop(drop=True)
            self.node.forget(self.vchannel)

    async def _handle(self, msg) -> bool:
        await self._process(msg)
        return self.dropped

    # DDNode + InsertBufferNode -------------------------------------------------------------
    async def _process(self, msg) -> None:
        pos = msg.position
        t = msg.type
        if t == MsgType.Insert:
            seg = int(msg.headers["segment"])
            if seg in self.skip or pos.seq <= self.persisted_upto.get(seg, 0):
                if seg in self.flushed_here and pos.seq > self.persisted_upto.get(seg, 0):
                    # Never expected: DataCoord flushes a segment only once this flowgraph's own
                    # tick passed every row promised to it. Loud, so a broken promise is seen.
                    log.error(
                        "rows of a segment flushed already: dropped", channel=self.vchannel, segment=seg, seq=pos.seq
                    )
                return  # already in binlogs (replay after a restart)
            if self.dropped_partitions and int(msg.headers.get("partition", 0)) in self.dropped_partitions:
                self.skip.add(seg)
                return
            batch = read_ipc(msg.payload)
            buf = self.buffers.get(seg)
            if buf is None:
                part = int(msg.headers.get("partition", 0))
                self.partition_of[seg] = part
                buf = self.buffers[seg] = SegmentBuffer(seg, part)
            buf.add(batch, pos, self.tick)
            self.node.account(batch.nbytes)
        elif t == MsgType.Delete:
            self._add_delete(msg)
        elif t == MsgType.TimeTick:
            self.tick = pos
            await self.node.report_tt(self, msg.timestamp, self.checkpoint())
        elif t in (MsgType.CreateCollection, MsgType.CreatePartition, MsgType.TruncateCollection):
            # A truncate's rows are flushed by the flush that took its timestamp, then DataCoord
            # drops their segments: the flowgraph keeps the DDL only.
            self.ddl.add(msg.timestamp, int(t), msg.payload, pos)
        elif t == MsgType.AlterCollection:
            self.ddl.add(msg.timestamp, int(t), msg.payload, pos)
            self.adopt_schema(internal_pb2.AlterCollectionMsg.FromString(bytes(msg.payload)).schema)
        elif t == MsgType.DropPartition:
            self.ddl.add(msg.timestamp, int(t), msg.payload, pos)
            self.drop_partition(internal_pb2.DropPartitionMsg.FromString(bytes(msg.payload)).partitionID)
        elif t == MsgType.DropCollection:
            self.ddl.add(msg.timestamp, int(t), msg.payload, pos)
            self.dropped = True
            log.info("flowgraph saw DropCollection", channel=self.vchannel)

    def adopt_schema(self, raw: bytes) -> None:
        """A newer schema (a field was added): buffered rows without the field are written with
        it as the readers see them (`typeutil.conform`). An older one (a replay) changes nothing."""
        schema = schema_pb2.CollectionSchema.FromString(raw)
        if schema.version > self.schema.version:
            self.schema = schema
            log.info("flowgraph adopted a new schema", channel=self.vchannel, version=schema.version)

    def drop_partition(self, part: int) -> None:
        """Discard the partition's buffers; its segments are never flushed from here on (DataCoord
        removes them and everything already written)."""
        self.dropped_partitions.add(part)
        for seg in [s for s, b in self.buffers.items() if b.partition_id == part]:
            self.skip.add(seg)
            self.node.release(self.buffers.pop(seg).nbytes)
        self.l0.pop(part, None)
        log.info("flowgraph saw DropPartition", channel=self.vchannel, partition=part)

    def _add_delete(self, msg) -> None:
        """Buffer a Delete for the channel's next L0 delta log (one replayed from before the
        committed `l0_position` is there already; one of a dropped partition has nothing left)."""
        part = int(msg.headers.get("partition", ALL_PARTITIONS))
        if msg.position.seq <= self.l0_upto or part in self.dropped_partitions:
            return
        batch = read_ipc(msg.payload)
        buf = self.l0.get(part)
        if buf is None:
            if not self.l0:
                self.l0_since = time.monotonic()
            buf = self.l0[part] = DeleteBuffer(part)
        buf.add(
            deltalog.pk_numpy(batch.column(deltalog.PK)),
            batch.column(deltalog.TS).to_numpy(zero_copy_only=False).astype(np.int64),
            msg.position,
            self.tick,
        )

    def l0_due(self, force: bool = False) -> bool:
        """Whether the buffered deletes should be written now (`DELTA_SYNC_SECONDS` old, or forced)."""
        return bool(self.l0) and (force or time.monotonic() - self.l0_since >= DELTA_SYNC_SECONDS)

    def take_l0(self) -> PendingWrite:
        """Detach every buffered delete for one L0 write; they hold the checkpoint under its token."""
        token = next(self._tokens)
        l0, self.l0 = self.l0, {}
        if l0:
            starts = [started(d.start) for d in l0.values()]
            self.inflight[token] = (min(p.seq for p in starts), min(d.min_ts for d in l0.values()))
        return PendingWrite(token, 0, None, None, False, l0=l0)

    def checkpoint(self, exclude: int | None = None) -> internal_pb2.MsgPosition:
        """Where a restart would resume: before every buffered row and every write in flight
        except `exclude` (the token of the write this checkpoint is committed with)."""
        seq, ts = self.tick.seq, self.tick.timestamp
        for b in self.buffers.values():
            seq, ts = min(seq, started(b.start).seq), min(ts, b.min_ts)
        for d in self.l0.values():
            seq, ts = min(seq, started(d.start).seq), min(ts, d.min_ts)
        for token, (s_seq, s_ts) in self.inflight.items():
            if token != exclude:
                seq, ts = min(seq, s_seq), min(ts, s_ts)
        return internal_pb2.MsgPosition(channel_name=self.vchannel, seq=seq, timestamp=ts)

    # Flush ---------------------------------------------------------------------------------
    def take(self, seg: int, final: bool) -> PendingWrite:
        """Detach a segment's buffer (and, for a manual flush, the DDL) for writing.

        The data keeps holding the checkpoint back, under the write's token, until
        SaveBinlogPaths has committed it (`done`).
        """
        buf = self.buffers.pop(seg, None)
        if final:
            self.skip.add(seg)
            self.flushed_here.add(seg)
        token = next(self._tokens)
        if buf is not None:
            self.inflight[token] = (started(buf.start).seq, buf.min_ts)
            self.node.release(buf.nbytes)
            self.persisted_upto[seg] = started(buf.end).seq
        ddl = None
        if final and len(self.ddl) and self.partition(seg) not in self.dropped_partitions:
            ddl, self.ddl = self.ddl, DDLBuffer()
        return PendingWrite(token, seg, buf, ddl, final)

    def partition(self, seg: int) -> int:
        return self.partition_of.get(seg, self.info.partitionID)

    def done(self, write: PendingWrite) -> None:
        self.inflight.pop(write.token, None)

    def largest_buffer(self) -> SegmentBuffer | None:
        return max(self.buffers.values(), key=lambda b: b.nbytes, default=None)
