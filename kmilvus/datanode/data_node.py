"""The DataNode service: runs flowgraphs for the vchannels DataCoord assigns it, writes binlogs
(insert, stats and delta logs) on FlushSegments (and under memory pressure), and commits them
with SaveBinlogPaths."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import components as roles
from kmilvus import metrics
from kmilvus.allocator import IDAllocator
from kmilvus.config import Config
from kmilvus.datanode.buffer import DeleteBuffer, started
from kmilvus.datanode.flowgraph import FlowGraph, PendingWrite
from kmilvus.log import get_logger
from kmilvus.msgstream import channels as chan
from kmilvus.proto import data_coord_pb2, data_node_pb2_grpc, internal_pb2
from kmilvus.storage import binlog, deltalog, paths
from kmilvus.util import merr, metricsinfo, typeutil
from kmilvus.util.failpoint import afailpoint
from kmilvus.util.retry import Backoff, supervise
from kmilvus.util.tasks import stopping

log = get_logger(__name__)


class DataNode(data_node_pb2_grpc.DataNodeServicer):
    role = roles.DATANODE

    def __init__(self, cfg: Config, stream, store, registry: roles.Registry, server_id: int):
        self.cfg = cfg
        self.stream = stream
        self.store = store
        self.registry = registry
        self.server_id = server_id
        self.datacoord = registry.late(roles.DATACOORD)
        self.ids = IDAllocator(registry.late(roles.ROOTCOORD), batch=1000)
        self.flowgraphs: dict[str, FlowGraph] = {}
        self.buffered = 0
        self._seg_locks: dict[int, asyncio.Lock] = {}
        self._writes: set[asyncio.Task] = set()
        self._tt_subject = chan.datanode_tt_subject(cfg.cluster)
        self._tt_batch: list[internal_pb2.DataNodeTtMsg] = []
        self._tt_sends: set[asyncio.Task] = set()
        self._pressure = asyncio.Event()
        self._pressure_task: asyncio.Task | None = None

    async def start(self) -> None:
        self._pressure_task = asyncio.create_task(
            supervise("datanode-memory", self._relieve_pressure), name="datanode-memory"
        )

    async def stop(self) -> None:
        for fg in list(self.flowgraphs.values()):
            await fg.stop()
        self.flowgraphs.clear()
        if self._pressure_task:
            self._pressure_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pressure_task
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    # Memory accounting ----------------------------------------------------------------------
    def account(self, nbytes: int) -> None:
        self.buffered += nbytes
        metrics.BUFFERED_BYTES.set(self.buffered)
        if self.buffered > self.cfg.insert_buffer_size_mb * 1024 * 1024:
            self._pressure.set()

    def release(self, nbytes: int) -> None:
        self.buffered = max(0, self.buffered - nbytes)
        metrics.BUFFERED_BYTES.set(self.buffered)

    async def _relieve_pressure(self) -> None:
        """Write the largest segment buffers out (not sealing them) until under the limit."""
        limit = self.cfg.insert_buffer_size_mb * 1024 * 1024
        while True:
            await self._pressure.wait()
            self._pressure.clear()
            while self.buffered > limit * 0.5:
                candidates = [(fg, b) for fg in self.flowgraphs.values() if (b := fg.largest_buffer()) is not None]
                if not candidates:
                    break
                fg, b = max(candidates, key=lambda c: c[1].nbytes)
                await self._write(fg, fg.take(b.segment_id, final=False))

    # Time ticks -------------------------------------------------------------------------------
    async def report_tt(self, fg: FlowGraph, ts: int, cp: internal_pb2.MsgPosition) -> None:
        """DataNodeTtMsg on every consumed tick, under the flowgraph's watch (docs/architecture/flush.md).

        A pchannel's tick reaches all its vchannels' flowgraphs at once: their reports go to
        DataCoord together, one NATS message per loop turn, not one per vchannel."""
        msg = internal_pb2.DataNodeTtMsg(
            channel_name=fg.vchannel, timestamp=ts, checkpoint=cp, nodeID=self.server_id, watch_version=fg.watch_version
        )
        msg.base.msg_type = common_pb2.DataNodeTt
        msg.base.timestamp = ts
        msg.base.sourceID = self.server_id
        if not self._tt_batch:
            asyncio.get_running_loop().call_soon(self._send_tts)
        self._tt_batch.append(msg)
        self._write_l0(fg)

    def _send_tts(self) -> None:
        batch, self._tt_batch = self._tt_batch, []
        task = asyncio.create_task(self._publish_tts(batch), name="datanode-tt")
        self._tt_sends.add(task)
        task.add_done_callback(self._tt_sends.discard)

    async def _publish_tts(self, batch: list[internal_pb2.DataNodeTtMsg]) -> None:
        data = data_coord_pb2.ReportDataNodeTtMsgsRequest(msgs=batch).SerializeToString()
        try:
            await self.stream.publish_core(self._tt_subject, data)
        except Exception as exc:  # noqa: BLE001 - NATS away: the next tick reports the same or newer
            log.warning("time tick report failed", channels=len(batch), error=repr(exc))

    def _write_l0(self, fg: FlowGraph, force: bool = False) -> None:
        """The channel's buffered deletes as L0 delta logs, in the background (they hold the
        checkpoint meanwhile), once due."""
        if fg.l0_due(force):
            self._spawn_write(fg, fg.take_l0(), f"l0-{fg.vchannel}")

    def _spawn_write(self, fg: FlowGraph, w: PendingWrite, name: str) -> None:
        task = asyncio.create_task(self._write(fg, w), name=name)
        self._writes.add(task)
        task.add_done_callback(self._write_ended)

    def _write_ended(self, task: asyncio.Task) -> None:
        """A write that ends without committing or discarding its data loses rows: say so."""
        self._writes.discard(task)
        if task.cancelled():
            log.warning("binlog write cancelled", task=task.get_name())
        elif task.exception() is not None:
            log.error("binlog write failed", task=task.get_name(), exc_info=task.exception())

    def forget(self, vchannel: str) -> None:
        self.flowgraphs.pop(vchannel, None)

    async def drop_all(self) -> None:
        """Stop every flowgraph and discard what it buffered (this node lost its session: its
        channels move to other nodes, which replay the unflushed data from the checkpoints)."""
        for ch in list(self.flowgraphs):
            fg = self.flowgraphs.pop(ch, None)
            if fg is not None:  # another task may have dropped it while an earlier one stopped
                await fg.stop(drop=True)
        log.warning("dropped every channel", node=self.server_id)

    # RPCs -----------------------------------------------------------------------------------
    @merr.rpc(milvus_pb2.GetMetricsResponse)
    async def GetMetrics(self, req, context=None):
        config = {"flush_insert_buffer_size": self.cfg.insert_buffer_size_mb * 1024 * 1024}
        return await metricsinfo.self_metrics(self, req, config)

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    @merr.rpc()
    async def WatchDmChannels(self, req, context=None):
        for info in req.channels:
            await afailpoint("datanode.watch")
            old = self.flowgraphs.get(info.vchannel)
            if old is not None and old.watch_version >= info.watch_version:
                # The same watch again, or an older one (versions only grow: a DataCoord deposed
                # between persisting a version and sending it, resuming after its successor's).
                if old.watch_version > info.watch_version:
                    log.warning("older watch ignored", channel=info.vchannel, version=info.watch_version)
                continue
            await self._check_collection(info.collectionID)
            if old is not None:
                # Reassigned to this node under a new watch: start over from the checkpoint.
                await old.stop(drop=True)
                self.flowgraphs.pop(info.vchannel, None)
            fg = FlowGraph(self, info)
            await fg.start()
            self.flowgraphs[info.vchannel] = fg
            log.info("watching channel", channel=info.vchannel, after_seq=info.seek_position.seq)
        return merr.success()

    async def _check_collection(self, coll_id: int) -> None:
        """A watch of a dropped collection's channel starts nothing (Milvus' DataNode asks
        RootCoord for the collection before it builds a flowgraph): a DataCoord that has not
        seen the drop yet may still send one."""
        resp = await self.registry.client(roles.ROOTCOORD).DescribeCollection(
            milvus_pb2.DescribeCollectionRequest(collectionID=coll_id)
        )
        merr.check(resp.status)

    @merr.rpc()
    async def UnwatchDmChannels(self, req, context=None):
        for ch in req.vchannels:
            fg = self.flowgraphs.pop(ch, None)
            if fg is not None:
                await fg.stop(drop=req.drop)
        return merr.success()

    @merr.rpc()
    async def FlushSegments(self, req, context=None):
        """Detach each segment's buffer now; write and commit in the background (docs/architecture/flush.md)."""
        fg = self.flowgraphs.get(req.channel)
        if fg is None:
            raise merr.MilvusError(merr.CHANNEL_NOT_FOUND, f"channel not found[channel={req.channel}]")
        for seg in req.segmentIDs:
            self._spawn_write(fg, fg.take(seg, final=True), f"flush-{seg}")
        self._write_l0(fg, force=True)
        return merr.success()

    # Writing binlogs ------------------------------------------------------------------------
    async def _write(self, fg: FlowGraph, w: PendingWrite) -> None:
        """Writes of one segment run one at a time, in the order they were taken; so do a
        channel's L0 writes (its `l0_position` then never passes a Delete not committed)."""
        lock = fg.l0_lock if w.l0 is not None else self._seg_locks.setdefault(w.segment_id, asyncio.Lock())
        async with lock:
            settled = False
            try:
                settled = await self._write_locked(fg, w)
            finally:
                if settled:
                    fg.done(w)
                else:
                    # Given up uncommitted (the channel left this node, or the node stops): the
                    # data keeps holding the flowgraph's checkpoint, and no later write of the
                    # flowgraph commits (its positions could pass this data). The channel's next
                    # owner replays it from the checkpoint.
                    fg.abandoned = True
                if w.final:
                    self._seg_locks.pop(w.segment_id, None)

    def _owns(self, fg: FlowGraph) -> bool:
        """Whether `fg` still runs here (not unwatched, moved or dropped meanwhile)."""
        return self.flowgraphs.get(fg.vchannel) is fg

    async def _write_locked(self, fg: FlowGraph, w: PendingWrite) -> bool:
        """Write and commit `w`; whether it is settled (committed, or discarded because its
        segment or collection was dropped) — False: given up uncommitted."""
        seg, buf, flushed = w.segment_id, w.buf, w.final
        # The buffer is detached from the flowgraph: giving up would drop acknowledged rows. When
        # storage, RootCoord's IDs or etcd are away for a while, keep the data and its hold on the
        # checkpoint and try again, for as long as the channel is ours; a failed attempt leaves
        # at most an unreferenced file for the garbage collector.
        backoff = Backoff(0.1, 2.0)
        while True:
            try:
                req, written = await self._write_files(fg, w)
                break
            except (Exception, asyncio.CancelledError) as exc:  # retried; the data stays in memory
                if stopping(exc):
                    raise  # the node stops (a call cancelled under us is a failure like others)
                log.warning("binlog write failed; retrying", segment=seg, error=repr(exc))
                if not self._owns(fg):
                    return False
                await backoff.sleep()
        await afailpoint("datanode.save.flush" if flushed else "datanode.save.pressure")
        # The checkpoint committed with these binlogs no longer needs THIS write's data; until
        # the commit succeeds the write stays in flight and holds tick-reported checkpoints back.
        req.checkpoint.CopyFrom(fg.checkpoint(exclude=w.token))
        backoff = Backoff(0.1, 2.0)
        while True:
            if fg.abandoned:
                # An earlier write gave up (see `_write`), or the channel's buffers were
                # discarded (`FlowGraph._discard`): its next owner replays this data.
                log.warning("binlog write not committed: the channel was given up", channel=fg.vchannel, segment=seg)
                return False
            try:
                status = await self.datacoord.SaveBinlogPaths(req)
            except (Exception, asyncio.CancelledError) as exc:  # DataCoord restarting: keep the data, retry
                # A call cancelled under us (its gRPC channel was reset) may or may not have
                # committed: ask again, as after a lost answer. Only a stop of this task ends it.
                if stopping(exc):
                    raise
                status = merr.status_of(exc)
            if merr.ok(status):
                if flushed:
                    metrics.FLUSHED_SEGMENTS.inc()
                log.info("binlogs saved", segment=seg, rows=buf.rows if buf else 0, flushed=flushed)
                return True
            if status.code in merr.BINLOGS_DROPPED:
                break  # dropped meanwhile: nothing may point at these files, so remove them
            if status.code == merr.CHANNEL_NOT_FOUND[0]:
                # Not this node's channel (any more): its new owner replays the data from the
                # checkpoint, so this node's buffers of the channel must go. The files stay: an
                # earlier attempt whose answer was lost may have committed them; if not, the
                # garbage collector removes them once no meta refers to them.
                log.warning(
                    "channel watched elsewhere: dropping it", channel=fg.vchannel, segment=seg, reason=status.reason
                )
                if self._owns(fg):
                    self.flowgraphs.pop(fg.vchannel, None)
                    await fg.stop(drop=True)
                return False
            log.warning("SaveBinlogPaths failed; retrying", segment=seg, reason=status.reason)
            if not self._owns(fg):
                return False  # the channel went elsewhere: its new owner replays this data (files: as above)
            await backoff.sleep()
        for key in written:
            with contextlib.suppress(OSError):  # storage away: the collector removes what no meta names
                await self.store.delete(key)
        log.warning("binlogs discarded", segment=seg, files=len(written))
        return True

    async def _write_files(
        self, fg: FlowGraph, w: PendingWrite
    ) -> tuple[internal_pb2.SaveBinlogPathsRequest, list[str]]:
        """Write the insert binlog and (final writes) the DDL binlogs, or the channel's L0 delta
        logs; the request that commits them."""
        if w.l0 is not None:
            return await self._write_l0_files(fg, w.l0)
        seg, buf, ddl, flushed = w.segment_id, w.buf, w.ddl, w.final
        coll, part = fg.collection_id, fg.partition(seg)
        req = internal_pb2.SaveBinlogPathsRequest(
            segmentID=seg,
            collectionID=coll,
            partitionID=part,
            flushed=flushed,
            channel=fg.vchannel,
            nodeID=self.server_id,
            watch_version=fg.watch_version,
        )
        written: list[str] = []
        if buf is not None and buf.rows:
            log_id = await self.ids.alloc()
            key = paths.insert_log_key(coll, part, seg, log_id)
            # The insert binlog and the stats log are written at the same time (each is fsynced:
            # a flush waits for the slower one, not for both one after the other).
            # Rows buffered before a field was added get it as readers see them (default or null).
            table = typeutil.conform(binlog.as_table(buf.batches), fg.schema)
            writes = [binlog.awrite_insert_binlog(self.store, key, table)]
            if fg.pk_field is not None:
                stats_id = await self.ids.alloc()
                stats_key = paths.stats_log_key(coll, part, seg, stats_id)
                pk_col = pa.concat_arrays([b.column(str(fg.pk_field.fieldID)) for b in buf.batches])
                writes.append(deltalog.awrite_stats_log(self.store, stats_key, deltalog.pk_numpy(pk_col)))
            # Both finish before a failure is raised (retried; a file left over is the garbage
            # collector's, as after any failed attempt).
            results = await asyncio.gather(*writes, return_exceptions=True)
            infos: list[binlog.BinlogInfo] = []
            for i in results:
                if isinstance(i, BaseException):
                    raise i
                infos.append(i)
            written.append(key)
            info = infos[0]
            metrics.BINLOG_BYTES.inc(info.size)
            metrics.BINLOG_ROWS.inc(info.entries_num)
            metrics.DATANODE_FLUSHED_ROWS.labels(str(self.server_id), "streaming").inc(info.entries_num)
            req.binlogs.append(_binlog(log_id, key, info))
            for f in table.column_names:
                req.field2BinlogPaths.add(ID=int(f), Paths=[key])
            if fg.pk_field is not None:
                sinfo = infos[1]
                written.append(stats_key)
                req.statslogs.add(
                    logID=stats_id, entries_num=sinfo.entries_num, log_path=stats_key, log_size=sinfo.size
                )
            req.dml_position.start_position.CopyFrom(started(buf.first))
            req.dml_position.end_position.CopyFrom(started(buf.end))
        if ddl is not None and len(ddl):
            ts_idx = await self.ids.alloc(2)
            ts_key, ddl_key = await asyncio.to_thread(
                binlog.write_ddl_binlogs, self.store, coll, ts_idx, ts_idx + 1, ddl.timestamps, ddl.types, ddl.payloads
            )
            written += [ts_key, ddl_key]
            req.ddl_binlog_metas.add(ddl_binlog_path=ddl_key, ts_binlog_path=ts_key)
            req.ddl_position.start_position.CopyFrom(started(ddl.start))
            req.ddl_position.end_position.CopyFrom(started(ddl.end))
        return req, written

    async def _write_l0_files(
        self, fg: FlowGraph, l0: dict[int, DeleteBuffer]
    ) -> tuple[internal_pb2.SaveBinlogPathsRequest, list[str]]:
        """One delta log per partition of the channel's deletes (Milvus' L0 segment), and the
        request (of no segment) that commits them with the last Delete they cover."""
        coll = fg.collection_id
        req = internal_pb2.SaveBinlogPathsRequest(
            collectionID=coll, channel=fg.vchannel, nodeID=self.server_id, watch_version=fg.watch_version
        )
        written: list[str] = []
        for part, dels in sorted(l0.items()):
            log_id = await self.ids.alloc()
            key = paths.l0_delta_log_key(coll, part, log_id)
            pks, tss = pa.array(np.concatenate(dels.pks)), pa.array(np.concatenate(dels.tss))
            info = await deltalog.awrite_delta_log(self.store, key, pks, tss)
            written.append(key)
            req.l0_deltalogs.add(channel=fg.vchannel, partitionID=part, binlog=_binlog(log_id, key, info))
            end = started(dels.end)
            if not req.HasField("l0_position") or end.seq > req.l0_position.seq:
                req.l0_position.CopyFrom(end)
        return req, written


def _binlog(log_id: int, key: str, info: binlog.BinlogInfo) -> internal_pb2.Binlog:
    """The meta of a file just written (insert binlog or delta log)."""
    return internal_pb2.Binlog(
        logID=log_id,
        entries_num=info.entries_num,
        timestamp_from=info.timestamp_from,
        timestamp_to=info.timestamp_to,
        log_path=key,
        log_size=info.size,
    )
