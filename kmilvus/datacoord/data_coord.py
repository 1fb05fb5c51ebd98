"""DataCoord (Milvus' internal/datacoord).

`Flush` → `SealAllSegments` + a flush timestamp; `startDataNodeTsLoop` consumes
`DataNodeTtMsg` and sends `FlushSegments` once a channel's tick has passed a sealed segment's
seal time; `SaveBinlogPaths` commits binlogs, DDL binlog meta and positions
(docs/architecture/flush.md). DropCollection removes every file, key and stream consumer the
collection owns (docs/architecture/drop.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus import metrics
from kmilvus.allocator import IDAllocator, TimestampAllocator
from kmilvus.config import Config
from kmilvus.datacoord.channel_manager import ChannelManager
from kmilvus.datacoord.garbage_collector import GarbageCollector
from kmilvus.datacoord.index_service import DataCoordIndexRPCs
from kmilvus.datacoord.job_lifecycle import JobPort
from kmilvus.datacoord.jobs import DataCoordJobsRPCs, JobService
from kmilvus.datacoord.meta import SegmentMeta, SegmentState
from kmilvus.datacoord.partitions import DataCoordPartitionsMixin
from kmilvus.datacoord.remover import FencedRemover
from kmilvus.datacoord.segment_manager import SegmentManager
from kmilvus.datacoord.stream_trimmer import StreamTrimmer
from kmilvus.datacoord.truncate import DataCoordTruncateMixin
from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV
from kmilvus.msgstream import channels as chan
from kmilvus.proto import data_coord_pb2, data_coord_pb2_grpc, data_node_pb2, internal_pb2
from kmilvus.sessionutil.leader import no_leader_lock
from kmilvus.spark.runner import JobRunner
from kmilvus.storage import paths
from kmilvus.util import merr, metricsinfo
from kmilvus.util.constants import LIVE_SEGMENT_STATES
from kmilvus.util.tasks import BackgroundTasks
from kmilvus.util.timetick import demand_tick
from kmilvus.util.ttl import ttl_seconds

log = get_logger(__name__)
FLUSH_RESEND_AFTER = 10.0  # seconds before a FlushSegments without answer is sent again
CHECKPOINT_PERSIST_EVERY = 1.0  # the background step's pace
# A checkpoint that only ticks moved is stored at most this often per channel (Milvus'
# updateChanCPInterval): a restart then replays at most a minute of ticks, while storing every
# advance would be a write per channel per tick. Data made durable (SaveBinlogPaths) is stored
# at the next step.
TICK_CHECKPOINT_STORE_AFTER = 60.0
# A pchannel no collection uses is looked at this often (what is left there is trimmed).
UNUSED_PCHANNEL_CHECK_EVERY = 10.0


class DataCoord(
    DataCoordJobsRPCs,
    DataCoordPartitionsMixin,
    DataCoordTruncateMixin,
    DataCoordIndexRPCs,
    data_coord_pb2_grpc.DataCoordServicer,
):
    role = roles.DATACOORD

    def __init__(self, cfg: Config, kv: EtcdKV, stream, store, registry: roles.Registry, server_id: int = 0):
        self.cfg = cfg
        self.kv = kv
        self.stream = stream
        self.store = store
        self.registry = registry
        self.server_id = server_id
        rootcoord = registry.late(roles.ROOTCOORD)
        self.tso = TimestampAllocator(rootcoord)
        self.ids = IDAllocator(rootcoord, batch=1000)
        self.meta = SegmentMeta(kv)
        self.segments = SegmentManager(cfg, self.meta, self.ids, self.tso)
        # Every file deletion is decided on etcd, by the leader only (datacoord/remover.py).
        self.remover = FencedRemover(kv, store, lambda: self.leader_check())
        self.channels = ChannelManager(kv, self.meta, registry, on_assigned=self._channel_moved)
        self.gc = GarbageCollector(self.meta, self.remover, cfg.gc_tolerance, self.channels.collections)
        # Latest DataNodeTtMsg per vchannel, with the watch (node, version) that reported it: a
        # tick decides a flush only while that watch is current (see `_check_flushable`).
        self.ticks: dict[str, tuple[int, int, int]] = {}
        self._dirty_cps: set[str] = set()  # checkpoint moved in memory, not yet stored
        self._cp_stored_at: dict[str, float] = {}  # channel → when its checkpoint was last stored
        self._store_due: set[str] = set()  # channels whose data SaveBinlogPaths made durable
        self.trimmer = StreamTrimmer(cfg.stream_retention_seconds)
        self._unused_checked: dict[str, float] = {}  # pchannel no collection uses → its last look
        self._dropping: set[int] = set()
        self.dropped_partitions: set[tuple[int, int]] = set()  # (collection, partition) dropped
        self._tasks = BackgroundTasks()
        self._tt_sub = None
        self._assign_lock = asyncio.Lock()
        self.leader_check: Callable[[], Awaitable[bool]] = no_leader_lock  # Node sets its lock's check
        self._flush_ts: dict[int, int] = {}  # collection → latest flush timestamp
        # Channels of a flush not yet passed by their checkpoint: the periodic check looks at
        # these and at channels with sealed segments, not at every channel (1,000s of them).
        self._flushing_chans: set[str] = set()
        self._deltas_sent: dict[str, int] = {}  # channel → flush_ts its buffered deletes were asked for
        self._flush_tick_demanded: dict[str, float] = {}  # channel → when GetFlushState last asked
        self.jobs = JobService(
            JobPort(
                cfg=cfg,
                kv=kv,
                store=store,
                meta=self.meta,
                alloc_ids=self.ids.alloc,
                alloc_ts=self.tso.alloc,
                channels_of=self.channels.channels_of,
                collections=self.channels.collections,
                schema_of=self.channels.schema_of,
                current_schema=self.channels.current_schema,
                rows_per_segment=self.segments.rows_per_segment,
                dropping=self._dropping.__contains__,
                partition_dropped=lambda coll, part: (coll, part) in self.dropped_partitions,
                ttl_of=self._collection_ttl,
                remover=self.remover,
            )
        )
        self.imports = self.jobs.imports  # shortcuts for in-process callers (tests)
        self.compactions = self.jobs.compactions
        self._init_indexes()

    async def _collection_ttl(self, coll: int) -> int:
        """The collection's `collection.ttl.seconds`, asked of RootCoord (AlterCollection may change
        it at any time, so it is not cached)."""
        resp = await self.registry.client(roles.ROOTCOORD).DescribeCollection(
            milvus_pb2.DescribeCollectionRequest(collectionID=coll)
        )
        merr.check(resp.status)
        return ttl_seconds(resp.properties)

    def set_job_runner(self, runner: JobRunner) -> None:
        """Run Spark jobs with `runner` (the operator's SparkApplication runner); before start."""
        self.jobs.scheduler.runner = runner

    # Lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.meta.load()
        await self._load_dropped_partitions()
        await self.channels.load()
        for info in self.channels.infos.values():
            self.segments.set_schema(info.collectionID, schema_pb2.CollectionSchema.FromString(info.schema))
        await self.segments.seal_recovered()
        self._tt_sub = await self.stream.subscribe_core(chan.datanode_tt_subject(self.cfg.cluster), self._on_tt)
        self.channels.start()
        metrics.SEGMENTS.source = self._segment_counts
        metrics.DATACOORD_SEGMENT_NUM.source = self._segment_counts  # Milvus' name for the same count
        self._tasks.every(CHECKPOINT_PERSIST_EVERY, self._background_step, "datacoord-background")
        self._tasks.every(lambda: self.cfg.gc_interval, self.gc.collect, "datacoord-gc")
        await self.jobs.start()
        await self._start_indexes()

    async def stop(self) -> None:
        if metrics.SEGMENTS.source == self._segment_counts:
            metrics.SEGMENTS.source = None
        if metrics.DATACOORD_SEGMENT_NUM.source == self._segment_counts:
            metrics.DATACOORD_SEGMENT_NUM.source = None
        await self._stop_indexes()
        await self.jobs.stop()
        await self._tasks.stop()
        await self.channels.stop()
        if self._tt_sub is not None:
            try:
                await self._tt_sub.unsubscribe()
            except Exception:  # the connection may already be closed; nothing to undo
                log.info("time tick unsubscribe failed", exc_info=True)

    async def _background_step(self) -> None:
        """Seal policies, checkpoint persistence and stream trimming, at a steady pace."""
        sealed = await self.segments.apply_seal_policies()
        if sealed:
            # Their flush waits for a tick past the seal; an idle channel's DataNode would get
            # one only at the idle interval.
            chans = sorted({s.info.insert_channel for s in sealed})
            await demand_tick(self.registry.client(roles.ROOTCOORD), chans, max(s.info.seal_timestamp for s in sealed))
        await self._store_checkpoints()
        try:
            await self._trim_streams()
        except Exception as exc:  # noqa: BLE001 - NATS away: trimmed at a later step; flushes go on
            log.warning("stream trim failed", error=repr(exc))
        await self._check_flushable(self._flush_candidates())

    async def _store_checkpoints(self) -> None:
        """Store moved checkpoints (see `TICK_CHECKPOINT_STORE_AFTER`); those of channels whose
        data was made durable at once (their stream can then be trimmed)."""
        now = time.monotonic()
        due = sorted(
            ch
            for ch in self._dirty_cps
            if ch in self._store_due
            or now - self._cp_stored_at.get(ch, -TICK_CHECKPOINT_STORE_AFTER) >= TICK_CHECKPOINT_STORE_AFTER
        )
        await self.meta.persist_checkpoints(due)
        for ch in due:
            self._dirty_cps.discard(ch)
            self._cp_stored_at[ch] = now
        self._store_due.clear()

    async def _trim_streams(self) -> None:
        """Purge each pchannel below what its readers still need (`StreamTrimmer`): below every
        vchannel's stored checkpoint, for the retention time. A pchannel no collection uses any
        more is purged through its last message (the drop of its last collection)."""
        pchannels = chan.pchannel_names(self.cfg.cluster, self.cfg.dml_channel_num)
        by_pchannel: dict[str, list[str]] = {p: [] for p in pchannels}
        for ch in self.channels.infos:
            by_pchannel.setdefault(chan.pchannel_of(ch), []).append(ch)
        now = time.monotonic()
        for gone in self._unused_checked.keys() - {p for p, v in by_pchannel.items() if not v}:
            del self._unused_checked[gone]  # in use again: checked from scratch once unused
        for pchannel, vchans in by_pchannel.items():
            if vchans:
                candidate = min(self.meta.stored_checkpoints.get(v, 0) for v in vchans) + 1
            elif now - self._unused_checked.get(pchannel, -math.inf) < UNUSED_PCHANNEL_CHECK_EVERY:
                continue
            else:
                self._unused_checked[pchannel] = now
                seqs = await self.stream.stream_seqs(pchannel)
                if seqs is None:
                    continue  # never used
                candidate = seqs[1] + 1
            point = self.trimmer.observe(pchannel, candidate, now)
            if self.trimmer.due(pchannel, point):
                await self.stream.purge(pchannel, before_seq=point)
                self.trimmer.done(pchannel, point)

    def _channel_moved(self, ch: str) -> None:
        """A node (re)started the channel's flowgraph: pending flushes go to it as soon as it
        reports a tick of its own (`_tick` ignores the previous owner's), not after the resend
        timeout."""
        self._deltas_sent.pop(ch, None)
        for s in self.meta.by_channel(ch, (SegmentState.Sealed,)):
            s.flush_sent_at = 0

    def _segment_counts(self) -> dict[str, int]:
        """Segments by state, for a scrape (on the metrics thread: `list` copies the values in
        one step, so the loop's changes cannot break the iteration)."""
        counts = dict.fromkeys(SegmentState.keys(), 0)
        for s in list(self.meta.segments.values()):
            counts[SegmentState.Name(s.info.state)] += 1
        return counts

    # startDataNodeTsLoop (docs/architecture/flush.md) -------------------------------------
    async def _on_tt(self, data: bytes) -> None:
        """A DataNode's reports of one loop turn (every vchannel a pchannel tick reached)."""
        await self.handle_tts(data_coord_pb2.ReportDataNodeTtMsgsRequest.FromString(data).msgs)

    async def handle_tt(self, msg: internal_pb2.DataNodeTtMsg) -> None:
        await self.handle_tts([msg])

    async def handle_tts(self, msgs) -> None:
        """Apply a batch of ticks, then wake waiters and check the channels once for the batch."""
        chans, moved = [], False
        for msg in msgs:
            ch = msg.channel_name
            if ch not in self.channels.infos:
                continue
            if not self.channels.is_current_watch(ch, msg.nodeID, msg.watch_version):
                continue  # a stale watch (the channel moved): its checkpoint must not count
            if msg.timestamp > self._tick(ch):
                self.ticks[ch] = (msg.timestamp, msg.nodeID, msg.watch_version)
            if msg.HasField("checkpoint") and msg.checkpoint.seq and self.meta.update_checkpoint(msg.checkpoint):
                self._dirty_cps.add(ch)
                moved = True
            chans.append(ch)
        if moved:
            await self.meta.notify()
        if chans:
            await self._check_flushable(chans)

    def _flush_candidates(self) -> list[str]:
        """Channels the periodic check must look at (FlushSegments to send or resend)."""
        sealed = {s.info.insert_channel for s in self.meta.unflushed((SegmentState.Sealed,))}
        return sorted(sealed | self._flushing_chans)

    async def _check_flushable(self, chans: list[str] | None = None) -> None:
        """FlushSegments for sealed segments whose channel tick passed their seal time and
        every insert they were promised to."""
        if not await self.leader_check():
            return  # a DataCoord that lost its lock must not make a DataNode seal its data
        now = time.monotonic()
        for ch in chans if chans is not None else list(self.ticks):
            tick = self._tick(ch)
            due = [
                s.id
                for s in self.meta.by_channel(ch, (SegmentState.Sealed,))
                if tick > s.info.seal_timestamp
                and tick > s.info.last_expire_time
                and (not s.flush_sent_at or now - s.flush_sent_at > FLUSH_RESEND_AFTER)
            ]
            info = self.channels.infos.get(ch)
            coll = info.collectionID if info is not None else 0
            # A flush whose timestamp the channel's tick passed while its checkpoint did not: what
            # holds the checkpoint back may be deletes of flushed segments, which no segment flush
            # carries; FlushSegments (even with no segment) makes the DataNode write them now.
            flush_ts = self._flush_ts.get(coll, 0)
            cp = self.meta.checkpoints.get(ch)
            if not flush_ts or (cp is not None and cp.timestamp >= flush_ts):
                self._flushing_chans.discard(ch)
            deltas_due = (
                flush_ts
                and tick > flush_ts
                and (cp is None or cp.timestamp < flush_ts)
                and self._deltas_sent.get(ch, 0) < flush_ts
            )
            if not due and not deltas_due:
                continue
            node = self.channels.node_of(ch)
            if not node:
                continue
            if due:
                coll = self.meta.segments[due[0]].info.collectionID
            for sid in due:
                self.meta.segments[sid].flush_sent_at = now
            sent_before = self._deltas_sent.get(ch, 0)
            if flush_ts and tick > flush_ts:
                self._deltas_sent[ch] = max(sent_before, flush_ts)
            try:
                client = self.registry.client(roles.DATANODE, node)
                merr.check(
                    await client.FlushSegments(
                        data_node_pb2.FlushSegmentsRequest(collectionID=coll, segmentIDs=due, channel=ch)
                    )
                )
            except Exception as exc:  # noqa: BLE001 - resent later
                log.warning("FlushSegments failed", channel=ch, node=node, error=str(exc))
                if isinstance(exc, merr.MilvusError) and exc.code == merr.CHANNEL_NOT_FOUND[0]:
                    # The node gave the channel up (a refused commit): resending to it would
                    # wait for ever; the channel's next owner replays it from the checkpoint.
                    await self.channels.rewatch(ch, node)
                self._deltas_sent[ch] = sent_before
                for sid in due:
                    if sid in self.meta.segments:
                        self.meta.segments[sid].flush_sent_at = 0

    def _tick(self, ch: str) -> int:
        """The channel's tick as its current owner reported it (0: none yet). A tick of an
        earlier watch says nothing about what the current owner has consumed: a new owner
        replays from the checkpoint, and FlushSegments on the old owner's tick would make it
        flush a segment before it has read the segment's rows."""
        ts, node, version = self.ticks.get(ch, (0, 0, 0))
        return ts if self.channels.is_current_watch(ch, node, version) else 0

    # RPCs ---------------------------------------------------------------------------------
    @merr.rpc(milvus_pb2.GetMetricsResponse)
    async def GetMetrics(self, req, context=None):
        config = {"segment_max_size": float(self.cfg.segment_max_size_mb)}  # Milvus: MB
        return await metricsinfo.coordinator_metrics(
            self,
            req,
            config,
            roles.DATANODE,
            (roles.ROOTCOORD,),
            cluster_key="connected_data_nodes",
            more_nodes=((roles.INDEXNODE, "connected_index_nodes"),),
        )

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    @merr.rpc()
    async def WatchChannels(self, req: data_coord_pb2.WatchChannelsRequest, context=None):
        self.segments.set_schema(req.collectionID, schema_pb2.CollectionSchema.FromString(req.schema))
        for ch in req.channelNames:
            await self.channels.watch(
                internal_pb2.ChannelWatchInfo(
                    vchannel=ch, collectionID=req.collectionID, schema=req.schema, partitionID=req.partitionID
                )
            )
        return merr.success()

    async def _check_leader(self) -> None:
        """Quota is handed out from memory, without etcd: a leader paused past its lease must not
        grant it when it resumes (its successor may have sealed and flushed those segments)."""
        if not await self.leader_check():
            raise merr.MilvusError(merr.SERVICE_NOT_READY, "datacoord lost its leader lock")

    @merr.rpc(data_coord_pb2.AssignSegmentIDResponse)
    async def AssignSegmentID(self, req: data_coord_pb2.AssignSegmentIDRequest, context=None):
        resp = data_coord_pb2.AssignSegmentIDResponse()
        await self._check_leader()
        async with self._assign_lock:
            for r in req.segmentIDRequests:
                if r.collectionID in self._dropping or r.channel_name not in self.channels.infos:
                    raise merr.MilvusError(merr.CHANNEL_NOT_FOUND, f"channel not found[channel={r.channel_name}]")
                self.check_partition_live(r.collectionID, r.partitionID)
                granted = await self.segments.assign(r)
                resp.segIDAssignments.extend(granted)
                if r.timestamp < self._flush_ts.get(r.collectionID, 0):
                    # An insert older than a flush that already sealed its collection (its
                    # timestamp was taken before the flush's): seal what it went to, so the flush
                    # waits a few ticks for it, not for the idle seal.
                    await self.segments.seal([self.meta.segments[a.segID] for a in granted])
        return resp

    @merr.rpc(data_coord_pb2.FlushResponse)
    async def Flush(self, req: data_coord_pb2.FlushRequest, context=None):
        """Seal every Growing segment; answer with them and the flush timestamp (docs/architecture/flush.md)."""
        async with self._assign_lock:
            flush_ts = await self.tso.alloc()
            await self.segments.seal_all_segments(req.collectionID, flush_ts)
            self._flush_ts[req.collectionID] = flush_ts
        pending = self.meta.by_collection(req.collectionID, (SegmentState.Sealed, SegmentState.Flushing))
        flushed = self.meta.by_collection(req.collectionID, (SegmentState.Flushed,))
        chans = self.channels.channels_of(req.collectionID)
        self._flushing_chans.update(chans)
        # Idle vchannels get a tick only now and then: name them in one past the flush, so
        # their checkpoints pass it now (the operator's FlushRequest calls here, not a Proxy).
        await self._demand_ticks(chans, flush_ts, time.monotonic())
        await self._check_flushable(chans)
        return data_coord_pb2.FlushResponse(
            dbID=req.dbID,
            collectionID=req.collectionID,
            segmentIDs=[s.id for s in pending],
            flushSegmentIDs=[s.id for s in flushed],
            flush_ts=flush_ts,
            time_of_seal=int(time.time()),
        )

    def _flush_done(self, segment_ids, flush_ts: int, coll_id: int) -> bool:
        for sid in segment_ids:
            s = self.meta.segments.get(sid)
            if s is not None and s.info.state in LIVE_SEGMENT_STATES:
                return False
        if coll_id:
            for ch in self.channels.channels_of(coll_id):
                cp = self.meta.checkpoints.get(ch)
                if cp is None or cp.timestamp < flush_ts:
                    return False
        return True

    async def _demand_flush_ticks(self, segment_ids, flush_ts: int, coll_id: int) -> None:
        """The tick a waiting flush needs, on the channels still short of it whose current owner
        has not reported a tick past `flush_ts`: their sealed segments flush once a tick passes
        the seal, their checkpoints pass `flush_ts` once a tick past it is consumed (then the
        writes it waits for carry it). Flush asked once; that tick may have reached a DataNode
        that was replaced since, or a DataCoord that restarted with its stored checkpoints (a
        checkpoint only ticks moved is stored once a minute) — and an idle channel is ticked
        only every `vchannel_idle_tick_interval`. At most one demand a second per channel."""
        lagging = {
            s.info.insert_channel
            for sid in segment_ids
            if (s := self.meta.segments.get(sid)) is not None and s.info.state in LIVE_SEGMENT_STATES
        }
        if coll_id:
            lagging.update(
                ch
                for ch in self.channels.channels_of(coll_id)
                if (cp := self.meta.checkpoints.get(ch)) is None or cp.timestamp < flush_ts
            )
            # A restarted DataCoord learns the flush here: what holds a checkpoint back may be
            # deletes of flushed segments, written on FlushSegments (`_check_flushable`).
            if flush_ts > self._flush_ts.get(coll_id, 0):
                self._flush_ts[coll_id] = flush_ts
            self._flushing_chans.update(lagging)
        now = time.monotonic()
        due = sorted(
            ch
            for ch in lagging
            if self._tick(ch) <= flush_ts and now - self._flush_tick_demanded.get(ch, -math.inf) >= 1.0
        )
        if due:
            await self._demand_ticks(due, flush_ts, now)

    async def _demand_ticks(self, chans: list[str], ts: int, now: float) -> None:
        for ch in chans:
            self._flush_tick_demanded[ch] = now
        await demand_tick(self.registry.client(roles.ROOTCOORD), chans, ts)

    @merr.rpc(milvus_pb2.GetFlushStateResponse)
    async def GetFlushState(self, req: data_coord_pb2.GetFlushStateRequest, context=None):
        """True when every segment sealed by the flush is Flushed (or gone) and every channel
        checkpoint passed the flush timestamp; waits up to `wait_ms` for that to happen."""
        check = lambda: self._flush_done(req.segmentIDs, req.flush_ts, req.collectionID)  # noqa: E731
        done = check()
        if not done:
            await self._demand_flush_ticks(req.segmentIDs, req.flush_ts, req.collectionID)
        if not done and req.wait_ms:
            with contextlib.suppress(asyncio.TimeoutError):
                async with self.meta.changed:
                    async with asyncio.timeout(req.wait_ms / 1000):  # not wait_for: may swallow a cancel (3.11)
                        await self.meta.changed.wait_for(check)
            done = check()
        if done:
            await self._check_leader()  # a deposed DataCoord knows nothing of a flush after its time
        return milvus_pb2.GetFlushStateResponse(flushed=done)

    @merr.rpc(data_coord_pb2.GetSegmentInfoResponse)
    async def GetSegmentInfo(self, req: data_coord_pb2.GetSegmentInfoRequest, context=None):
        resp = data_coord_pb2.GetSegmentInfoResponse()
        for sid in req.segmentIDs:
            s = self.meta.segments.get(sid)
            if s is None:
                if not req.includeUnHealthy:
                    raise merr.MilvusError(merr.SEGMENT_NOT_FOUND, f"segment not found[segment={sid}]")
                continue
            resp.infos.append(s.info)
        return resp

    @merr.rpc(data_coord_pb2.GetSegmentInfoResponse)
    async def GetSegmentsByCollection(self, req, context=None):
        states = set(req.states) or None
        segs = sorted(self.meta.by_collection(req.collectionID, states), key=lambda s: s.id)
        return data_coord_pb2.GetSegmentInfoResponse(infos=[s.info for s in segs])

    async def WatchSegments(self, req: data_coord_pb2.WatchSegmentsRequest, context=None):
        """Server-streaming: every segment meta change from now on (the operator's feed)."""
        async for ev in self.meta.feed.subscribe(req.collectionIDs):
            yield ev

    @merr.rpc(data_coord_pb2.GetCollectionStatisticsResponse)
    async def GetCollectionStatistics(self, req, context=None):
        rows = sum(s.info.num_of_rows for s in self.meta.by_collection(req.collectionID, (SegmentState.Flushed,)))
        resp = data_coord_pb2.GetCollectionStatisticsResponse()
        resp.stats.add(key="row_count", value=str(rows))
        return resp

    @merr.rpc()
    async def SaveBinlogPaths(self, req: internal_pb2.SaveBinlogPathsRequest, context=None):
        """`_save_binlog_paths`; its refusals make the DataNode give data up (buffers or files)
        and are decided from memory, so only the leader refuses. A DataCoord paused past its
        lease may resume with memory its successor has moved past (a channel handed out under a
        newer watch version, a collection or segment created since); it answers "not ready",
        and the DataNode's next call reaches the leader (docs/architecture/fencing.md)."""
        try:
            await self._save_binlog_paths(req)
        except merr.MilvusError as err:
            if err.code in merr.DATANODE_GIVES_UP:
                await self._check_leader()
            raise
        return merr.success()

    async def _save_binlog_paths(self, req: internal_pb2.SaveBinlogPathsRequest) -> None:
        # A dropped (or dropping) collection or partition is refused before the watch check: its
        # DataNode then deletes what it wrote at once (a channel moved elsewhere keeps its files
        # for the new owner's sake, and only the garbage collector would find them).
        if req.collectionID in self._dropping or req.collectionID not in self.channels.collections():
            raise merr.collection_not_found(req.collectionID)
        if (req.collectionID, req.partitionID) in self.dropped_partitions:
            raise merr.MilvusError(merr.SEGMENT_NOT_FOUND, f"segment not found[segment={req.segmentID}]")
        if req.channel and not self.channels.is_current_watch(req.channel, req.nodeID, req.watch_version):
            raise merr.MilvusError(
                merr.CHANNEL_NOT_FOUND,
                f"channel {req.channel} is not watched by node {req.nodeID} "
                f"(watch version {req.watch_version}) any more",
            )
        if not req.segmentID:
            await self._save_l0(req)
            return
        seg = await self.meta.save_binlog_paths(req, self.channels.watch_guard(req.channel) if req.channel else None)
        if req.flushed:
            log.info("segment flushed", segment=seg.id, rows=seg.info.num_of_rows, binlogs=seg.info.binlog_count)
            if seg.info.num_of_rows == 0:
                await self.meta.remove_segment(seg)  # an empty segment leaves nothing behind
        self._checkpoint_committed(req)

    def _checkpoint_committed(self, req: internal_pb2.SaveBinlogPathsRequest) -> None:
        if req.checkpoint.seq:
            self._dirty_cps.add(req.checkpoint.channel_name)
            self._store_due.add(req.checkpoint.channel_name)

    async def _save_l0(self, req: internal_pb2.SaveBinlogPathsRequest) -> None:
        """A channel's L0 delta logs (SaveBinlogPaths of no segment). Those of a partition
        dropped meanwhile are not committed: their files go instead (nothing else removes them)."""
        if not req.channel:
            raise merr.invalid("L0 delta logs need their channel")
        coll = req.collectionID
        refused = await self.meta.save_l0(
            req, self.channels.watch_guard(req.channel), lambda d: (coll, d.partitionID) not in self.dropped_partitions
        )
        for d in refused:
            with contextlib.suppress(OSError):  # storage away: the collector removes what no meta names
                await self.store.delete(d.binlog.log_path)
        self._checkpoint_committed(req)

    @merr.rpc()
    async def ReportDataNodeTtMsgs(self, req, context=None):
        await self.handle_tts(req.msgs)
        return merr.success()

    @merr.rpc()
    async def DropCollection(self, req: data_coord_pb2.DropCollectionRequest, context=None):
        """Remove everything the collection owns; each step idempotent, files before meta."""
        coll = req.collectionID
        if not await self.remover.is_dropped(coll):
            raise merr.MilvusError(
                merr.UNEXPECTED, f"collection {coll} still exists: DataCoord removes only what RootCoord dropped"
            )
        self._dropping.add(coll)
        await self.jobs.cancel_collection(coll)
        try:
            await self._drop_collection_indexes(coll)
            vchans = list(req.channelNames) or self.channels.channels_of(coll)
            await self.channels.unwatch(vchans, drop=True)
            await self.remover.remove_dropped(paths.collection_prefixes(coll), coll)
            for ch in vchans:  # its messages go when their pchannel is trimmed (`_trim_streams`)
                await self.stream.delete_consumers(ch)
                self.ticks.pop(ch, None)
                self._deltas_sent.pop(ch, None)
                self._flush_tick_demanded.pop(ch, None)
                self._dirty_cps.discard(ch)
                self._cp_stored_at.pop(ch, None)
                self._store_due.discard(ch)
                self._flushing_chans.discard(ch)
            await self.meta.drop_collection_meta(coll, vchans)
            self.index_meta.forget_collection(coll)
            self.segments.max_rows.pop(coll, None)
            self._flush_ts.pop(coll, None)
            self.dropped_partitions = {k for k in self.dropped_partitions if k[0] != coll}
        finally:
            self._dropping.discard(coll)
        metrics.DROPPED_COLLECTIONS.inc()
        log.info("collection data dropped", collection=coll)
        return merr.success()
