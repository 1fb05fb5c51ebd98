"""A QueryNode's share of one DML channel (Milvus' shard delegator): it consumes the vchannel
from the channel's checkpoint, keeps the rows of segments not flushed yet as growing segments
(keyed by segment ID), and tracks the channel's serviceable time from its time ticks.

Handoff: once the sealed copy of a segment is loaded (`QueryNode.LoadSegments`), its growing
copy is dropped and later stream messages of that segment are skipped, in one step of the event
loop — a search sees either copy, never both and never neither.

Behind the stream's retention: a delegator that reads the channel more than the retention time
after the DataNodes (or starts reading that long after its channel's logs were listed) finds
messages purged before it read them (`StreamGapError`) — a delete among them would be lost to its
reads. It stops serving (`lost`: reads of the channel fail, never answer without the delete) and
QueryCoord watches the channel again: the new watch lists the segments and their delta logs as
they are now, where everything purged already is.

DropPartition is read on the channel in order with the inserts before it (a load resumes the
channel from its checkpoint, before them): the partition's growing rows go, and its later
inserts are not kept. The dropped partitions are shared by the collection's delegators, so its
sealed segments are not read either until QueryCoord releases them.

A schema change (AlterCollection: a field added) is read the same way: the new schema goes to the
whole loaded collection (its sealed segments and every delegator's growing rows read the added
field from then on). So is TruncateCollection: rows older than its timestamp are hidden from
every read of the collection (growing segments holding nothing newer are dropped at once).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from pymilvus.grpc_gen import schema_pb2

from kmilvus.log import get_logger
from kmilvus.msgstream import MsgStream, MsgType, StreamGapError
from kmilvus.msgstream.message import read_ipc
from kmilvus.msgstream.reader import ChannelReader
from kmilvus.proto import internal_pb2, query_node_pb2
from kmilvus.querynode.deletes import DeleteSet
from kmilvus.querynode.segments import GrowingSegment
from kmilvus.querynode.versions import KeyVersions
from kmilvus.storage import deltalog
from kmilvus.util.constants import ALL_PARTITIONS

log = get_logger(__name__)


class ChannelDelegator:
    def __init__(
        self,
        stream: MsgStream,
        consumer_name: str,
        req: query_node_pb2.WatchDmChannelsRequest,
        dropped_partitions: set[int] | None = None,
        on_schema: Callable[[schema_pb2.CollectionSchema], None] | None = None,
        on_truncate: Callable[[int], None] | None = None,
    ):
        """`on_schema`: called with a newer schema read on the channel (a field was added);
        `on_truncate`: with the truncate timestamp of a TruncateCollection read on it."""
        self.stream = stream
        self.consumer_name = consumer_name
        self.vchannel = req.vchannel
        self.collection_id = req.collectionID
        self.schema = schema_pb2.CollectionSchema.FromString(req.schema)
        self.seek = req.seek_position.seq
        # Rows of these come from binlogs (flushed) or from a compaction's target (dropped).
        self.skip: set[int] = set(req.flushed_segmentIDs) | set(req.dropped_segmentIDs)
        # Rows of an unflushed segment up to this seq are in its binlogs (written under pressure).
        self.persisted_upto: dict[int, int] = {s.segmentID: s.dml_position.seq for s in req.unflushed_segments}
        self.growing: dict[int, GrowingSegment] = {}
        # The channel's deletes by partition (-1: every partition): its L0 delta logs, then every
        # Delete consumed; they apply to every segment of the channel (and partition).
        self.deletes: dict[int, DeleteSet] = {}
        self.versions = KeyVersions()  # older versions of keys held twice are hidden like deletes
        self.serviceable_ts = 0
        self.dropped = False
        # Partitions dropped on the channel (the collection's delegators share one set).
        self.dropped_partitions = dropped_partitions if dropped_partitions is not None else set()
        self.on_schema = on_schema
        self.on_truncate = on_truncate
        self.lost = False  # messages were purged before it read them: it no longer serves
        self.changed = asyncio.Condition()
        self._consumer: ChannelReader | None = None
        self._task: asyncio.Task | None = None

    @property
    def nbytes(self) -> int:
        return sum(g.nbytes for g in self.growing.values())

    async def start(self) -> None:
        reader = ChannelReader(self.stream, self.vchannel, self.seek, self.consumer_name)
        await reader.start()
        self._consumer = reader
        self._task = asyncio.create_task(self._run(reader), name=f"delegator-{self.vchannel}")

    async def stop(self) -> None:
        """Stop consuming, delete the server-side consumer and free the growing data."""
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.close()
            self._consumer = None
        self.growing.clear()
        self.deletes = {}
        self.versions = KeyVersions()

    def add_deletes(self, partition: int, pks, ts) -> None:
        self.deletes.setdefault(partition, DeleteSet()).add(pks, ts)

    def deletes_of(self, partition: int) -> tuple[DeleteSet, ...]:
        """The deletes that apply to a segment of `partition`, and the shadows of older versions
        (as of the last `KeyVersions.refresh`)."""
        own = tuple(d for p in (ALL_PARTITIONS, partition) if (d := self.deletes.get(p)) is not None)
        return (*own, self.versions.shadows)

    @property
    def consuming(self) -> bool:
        return self._consumer is not None and not self.lost

    def add_growing(self, seg_id: int, partition_id: int, table, deltas=None) -> None:
        """Rows of an unflushed segment read from its binlogs (before the stream resumes)."""
        g = self.growing.setdefault(seg_id, GrowingSegment(seg_id, partition_id, self.schema))
        g.add(table)
        if deltas is not None:
            g.deltas = deltas

    def seal(self, seg_id: int) -> None:
        """The segment's sealed copy is loaded: drop the growing copy, skip its messages."""
        self.skip.add(seg_id)
        self.growing.pop(seg_id, None)

    def adopt_schema(self, schema: schema_pb2.CollectionSchema) -> None:
        """A newer schema (`LoadedCollection.update_schema` calls this on every delegator):
        growing rows are read with its fields."""
        self.schema = schema
        for g in self.growing.values():
            g.adopt(schema)

    def drop_partition(self, part: int) -> None:
        """The partition's growing rows go; its later inserts are skipped."""
        self.dropped_partitions.add(part)
        for seg in [s for s, g in self.growing.items() if g.partition_id == part]:
            self.seal(seg)
        log.info("delegator saw DropPartition", channel=self.vchannel, partition=part)

    async def _run(self, reader: ChannelReader) -> None:
        try:
            await reader.run(self._handle)
        except StreamGapError as gap:
            log.warning("delegator behind the stream's retention: the channel is to be watched again", error=str(gap))
            self.lost = True
            self.growing.clear()
            async with self.changed:
                self.changed.notify_all()

    async def _handle(self, msg) -> bool:
        t = msg.type
        if t == MsgType.Insert:
            seg = int(msg.headers["segment"])
            if seg in self.skip or msg.position.seq <= self.persisted_upto.get(seg, 0):
                return False
            g = self.growing.get(seg)
            if g is None:
                part = int(msg.headers.get("partition", 0))
                if part in self.dropped_partitions:
                    self.skip.add(seg)
                    return False
                g = self.growing[seg] = GrowingSegment(seg, part, self.schema)
            g.add(read_ipc(msg.payload))
        elif t == MsgType.Delete:
            batch = read_ipc(msg.payload)
            self.add_deletes(
                int(msg.headers.get("partition", ALL_PARTITIONS)),
                deltalog.pk_numpy(batch.column(deltalog.PK)),
                batch.column(deltalog.TS).to_numpy(zero_copy_only=False),
            )
        elif t == MsgType.TimeTick:
            self.serviceable_ts = msg.timestamp
            async with self.changed:
                self.changed.notify_all()
        elif t == MsgType.DropPartition:
            self.drop_partition(internal_pb2.DropPartitionMsg.FromString(bytes(msg.payload)).partitionID)
        elif t == MsgType.AlterCollection:
            raw = internal_pb2.AlterCollectionMsg.FromString(bytes(msg.payload)).schema
            schema = schema_pb2.CollectionSchema.FromString(raw)
            if schema.version > self.schema.version:
                if self.on_schema is not None:
                    self.on_schema(schema)
                else:
                    self.adopt_schema(schema)
        elif t == MsgType.TruncateCollection:
            before = internal_pb2.TruncateCollectionMsg.FromString(bytes(msg.payload)).truncate_ts
            for seg in [s for s, g in self.growing.items() if g.max_ts() < before]:
                self.seal(seg)  # every row of it is truncated; later rows of it are skipped too
            if self.on_truncate is not None:
                self.on_truncate(before)
        elif t == MsgType.DropCollection:
            self.dropped = True
            self.growing.clear()
            async with self.changed:
                self.changed.notify_all()
            return True
        return False

    async def wait_serviceable(self, ts: int, timeout: float) -> bool:
        """True once every message with a timestamp below `ts` has been consumed; False after
        `timeout`, or once the delegator is `lost`."""
        if self.lost:
            return False
        if self.serviceable_ts >= ts or self.dropped:
            return True
        async with self.changed:
            try:
                async with asyncio.timeout(timeout):  # not wait_for: it may swallow a cancel (3.11)
                    await self.changed.wait_for(lambda: self.serviceable_ts >= ts or self.dropped or self.lost)
            except TimeoutError:
                return False
        return not self.lost
