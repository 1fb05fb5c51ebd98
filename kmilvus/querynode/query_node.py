"""The QueryNode: holds loaded segments and delegates DML channels for QueryCoord, and answers
Search / Query for the Proxy once its serviceable time reaches the request's guarantee
timestamp (Milvus' querynodev2, with the delegator and its workers in one process)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus import reduce as kreduce
from kmilvus.config import Config
from kmilvus.index import params as index_params
from kmilvus.log import get_logger
from kmilvus.parser import template_values
from kmilvus.proto import internal_pb2, query_node_pb2, query_node_pb2_grpc
from kmilvus.querynode import bm25, mmap, reduce
from kmilvus.querynode.delegator import ChannelDelegator
from kmilvus.querynode.deletes import DeleteSet
from kmilvus.querynode.filter import compile_filter
from kmilvus.querynode.search_plan import plan_from_request
from kmilvus.querynode.segments import SegmentData
from kmilvus.reduce import orderby
from kmilvus.storage import deltalog
from kmilvus.storage.binlog import read_binlogs
from kmilvus.util import memory, merr, metricsinfo, typeutil
from kmilvus.util.failpoint import afailpoint
from kmilvus.util.timetick import demand_tick

log = get_logger(__name__)
DEFAULT_TIMEOUT_MS = 10_000
# A search arriving within this time of the previous one's end was queued behind it: the node
# is busy, and small searches go to worker threads too (`QueryNode._compute`). One client's next
# request comes later than this (its round trip and its own work).
BUSY_GAP_S = 0.001
_T = TypeVar("_T")


@dataclass
class LoadedCollection:
    id: int
    schema: schema_pb2.CollectionSchema
    sealed: dict[int, SegmentData] = field(default_factory=dict)
    channel_of: dict[int, str] = field(default_factory=dict)  # sealed segment → its DML channel
    channels: dict[str, ChannelDelegator] = field(default_factory=dict)
    # Segments never to be served again: compacted into another, or dropped. A load prepared
    # before that (a QueryCoord's index check or feed catch-up) arrives late and is ignored.
    retired: set[int] = field(default_factory=set)
    # Partitions a DropPartition on a channel dropped (its delegators share the set): their
    # sealed segments are neither read nor loaded, before QueryCoord releases them.
    dropped_partitions: set[int] = field(default_factory=set)
    # TruncateCollection read on a channel: rows older than this are no longer read (hybrid ts),
    # before DataCoord drops their segments and QueryCoord releases them.
    truncated_before: int = 0

    @property
    def pk_field(self) -> int:
        result: int = typeutil.primary_field(self.schema).fieldID
        return result

    def update_schema(self, schema: schema_pb2.CollectionSchema) -> None:
        """A newer schema (a field was added; an older one changes nothing): every loaded row,
        sealed or growing, reads the added field from now on (its default, else null)."""
        if schema.version <= self.schema.version:
            return
        self.schema = schema
        for s in self.sealed.values():
            s.conform(schema)
        for d in self.channels.values():
            d.adopt_schema(schema)
        log.info("collection schema updated", collection=self.id, version=schema.version)

    def truncate(self, before: int) -> None:
        """TruncateCollection: rows older than `before` are hidden from every read from now on."""
        if before > self.truncated_before:
            self.truncated_before = before
            log.info("collection truncated", collection=self.id, before=before)

    def expire_before(self, ttl_ts: int) -> int:
        """A read's cutoff: rows older are not read (the TTL's, or a truncate's)."""
        return max(ttl_ts, self.truncated_before)

    def segments(self, vchannels, partitions, growing: bool = True) -> list[tuple[SegmentData, tuple[DeleteSet, ...]]]:
        """Sealed segments, then growing segments of `vchannels` (none is both: see `seal`; none
        without `growing`: Milvus' ignore_growing), each with its channel's deletes that apply
        to it."""
        parts = set(partitions)
        dropped = self.dropped_partitions
        segs = []
        for s in self.sealed.values():
            if (not parts or s.partition_id in parts) and s.partition_id not in dropped:
                d = self.channels.get(self.channel_of.get(s.segment_id, ""))
                segs.append((s, d.deletes_of(s.partition_id) if d is not None else ()))
        for ch in vchannels if growing else ():
            d = self.channels[ch]
            segs += [
                (g.data(), d.deletes_of(g.partition_id))
                for g in d.growing.values()
                if g.rows and (not parts or g.partition_id in parts)
            ]
        return segs

    def channel_segments(self, vchannel: str) -> list[tuple[SegmentData, tuple[DeleteSet, ...], bool]]:
        """Every loaded segment of one channel, sealed and growing (whatever a request's
        partitions), with the deletes that apply to it and whether it is growing: what its BM25
        statistics cover."""
        d = self.channels.get(vchannel)
        sealed = [s for s in self.sealed.values() if self.channel_of.get(s.segment_id) == vchannel]
        out = [(s, d.deletes_of(s.partition_id) if d is not None else (), False) for s in sealed]
        if d is not None:
            out += [(g.data(), d.deletes_of(g.partition_id), True) for g in d.growing.values() if g.rows]
        return out

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.sealed.values()) + sum(d.nbytes for d in self.channels.values())

    async def refresh_versions(self) -> None:
        """Bring each delegated channel's shadows of older key versions up to date (a worker
        thread does the work, when there is any) before a read takes its segments."""
        for ch, d in list(self.channels.items()):
            sealed = {sid: s for sid, s in self.sealed.items() if self.channel_of.get(sid) == ch}
            growing = {gid: list(g.batches) for gid, g in d.growing.items()}
            if d.versions.stale(sealed, growing):
                await asyncio.to_thread(d.versions.refresh, sealed, growing, self.pk_field)


class QueryNode(query_node_pb2_grpc.QueryNodeServicer):
    role = roles.QUERYNODE

    def __init__(self, cfg: Config, stream, store, registry: roles.Registry, server_id: int):
        self.cfg, self.stream, self.store, self.registry = cfg, stream, store, registry
        self.server_id = server_id
        self.collections: dict[int, LoadedCollection] = {}
        self._lock = asyncio.Lock()  # load / release steps of one node never interleave
        self._in_workers = 0  # searches computing in worker threads now (`_compute`)
        self._computed_at = 0.0  # monotonic time the last search's computation ended

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        await self.drop_all()

    async def drop_all(self) -> None:
        """Release everything (the node's session was lost: QueryCoord moved its work)."""
        for coll_id in list(self.collections):
            await self._release(coll_id)

    @merr.rpc(milvus_pb2.GetMetricsResponse)
    async def GetMetrics(self, req, context=None):
        return await metricsinfo.self_metrics(self, req, {})

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    def _collection(self, coll_id: int, schema: bytes) -> LoadedCollection:
        c = self.collections.get(coll_id)
        if c is None:
            c = self.collections[coll_id] = LoadedCollection(coll_id, schema_pb2.CollectionSchema.FromString(schema))
        else:
            c.update_schema(schema_pb2.CollectionSchema.FromString(schema))
        return c

    async def _schema_at(self, coll: LoadedCollection, version: int) -> None:
        """The schema a Proxy planned a read with (`version`): a node that has not read the
        schema's broadcast yet (or missed it) asks RootCoord, the schema's owner."""
        if coll.schema.version >= version:
            return
        resp = await self.registry.client(roles.ROOTCOORD).DescribeCollection(
            milvus_pb2.DescribeCollectionRequest(collectionID=coll.id)
        )
        merr.check(resp.status)
        coll.update_schema(resp.schema)

    async def _read(self, coll: LoadedCollection, info: query_node_pb2.SegmentLoadInfo) -> SegmentData:
        """Index files, binlogs (one Arrow read, without the vector columns an index holds),
        delta logs of one segment. A segment listed with rows but no binlogs was collected
        (compacted away) after it was listed: it is refused, never installed empty in place
        of the segments it was compacted from."""
        if info.num_of_rows and not info.binlog_paths:
            raise merr.MilvusError(
                merr.SEGMENT_NOT_FOUND,
                f"segment not found[segment={info.segmentID}]: its {info.num_of_rows} rows have no binlogs "
                "(compacted away and collected since it was listed)",
            )

        def load() -> SegmentData:
            indexes = self._index_files(info)
            raw = {str(f) for f, (ix, _) in indexes.items() if ix.holds_raw}
            table = read_binlogs(self.store, list(info.binlog_paths), skip=raw)
            if raw and any(ix.num_rows != table.num_rows for ix, _ in indexes.values()):
                table = read_binlogs(self.store, list(info.binlog_paths))  # an index is ignored below
            usable = [f for f, (ix, _) in indexes.items() if ix.num_rows == table.num_rows]
            table = mmap.map_columns(table, mmap.mapped_fields(coll.schema))  # mmap.enabled fields
            seg = SegmentData.build(info.segmentID, info.partitionID, table, coll.schema, usable)
            self._read_deltas(seg.deltas, info)
            self._add_indexes(seg, indexes)
            return seg

        seg = await asyncio.to_thread(load)
        if seg.num_rows >= memory.RELEASE_AFTER_ROWS:
            # The index files' bytes and the read buffers are free now, but malloc keeps them.
            await asyncio.to_thread(memory.release)
        return seg

    def _deltas_of(self, info: query_node_pb2.SegmentLoadInfo) -> DeleteSet:
        deltas = DeleteSet()
        self._read_deltas(deltas, info)
        return deltas

    def _read_deltas(self, deltas: DeleteSet, info: query_node_pb2.SegmentLoadInfo) -> None:
        for key in info.delta_paths:
            t = deltalog.read_delta_log(self.store, key)
            deltas.add(deltalog.pk_numpy(t.column(deltalog.PK)), t.column(deltalog.TS).to_numpy())

    def _read_l0(self, req: query_node_pb2.WatchDmChannelsRequest) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """The channel's L0 delta logs: (partition, keys, timestamps) of each."""
        out = []
        for d in req.l0_deltalogs:
            t = deltalog.read_delta_log(self.store, d.binlog.log_path)
            out.append((d.partitionID, deltalog.pk_numpy(t.column(deltalog.PK)), t.column(deltalog.TS).to_numpy()))
        return out

    def _index_files(self, info: query_node_pb2.SegmentLoadInfo, have: Collection[int] = ()) -> dict[int, tuple]:
        """{field ID: (VectorIndex or ScalarIndex, file size)} of the segment's finished index
        files not in `have`."""
        from kmilvus import index as kindex
        from kmilvus.index import scalar_index

        out = {}
        for key, fid in zip(info.index_paths, info.index_fieldIDs, strict=True):
            if fid not in have and fid not in out:
                data = self.store.filesystem.open_input_file(self.store.path(key)).readall()
                ix = scalar_index.load(data) if scalar_index.is_scalar_index_file(data) else kindex.load(data)
                out[fid] = (ix, len(data))
        return out

    def _add_indexes(self, seg: SegmentData, indexes: dict[int, tuple]) -> None:
        """Search through the loaded indexes; without one a field is searched exactly."""
        for fid, (ix, nbytes) in indexes.items():
            if ix.num_rows != seg.num_rows:
                log.warning("index ignored: row count differs", segment=seg.segment_id, index_rows=ix.num_rows)
                continue
            seg.add_index(fid, ix, nbytes)

    def _read_indexes(self, seg: SegmentData, info: query_node_pb2.SegmentLoadInfo) -> None:
        """Indexes finished after the segment was loaded."""
        self._add_indexes(seg, self._index_files(info, have=seg.indexes))

    def _install(self, coll: LoadedCollection, data: SegmentData, info: query_node_pb2.SegmentLoadInfo) -> None:
        """Sealed copy in, growing copy and compaction sources out — in one synchronous step. A
        retired segment (its compacted target is in) is not installed: its rows would show twice."""
        if data.segment_id in coll.retired or data.partition_id in coll.dropped_partitions:
            return
        data.conform(coll.schema)  # a field added while it was being read
        coll.retired.update(info.compaction_from)
        coll.sealed[data.segment_id] = data
        coll.channel_of[data.segment_id] = info.insert_channel
        for d in coll.channels.values():
            d.seal(data.segment_id)
            for src in info.compaction_from:
                d.seal(src)
        for src in info.compaction_from:
            coll.sealed.pop(src, None)
            coll.channel_of.pop(src, None)

    @merr.rpc()
    async def WatchDmChannels(self, req: query_node_pb2.WatchDmChannelsRequest, context=None):
        async with self._lock:
            coll = self._collection(req.collectionID, req.schema)
            old = coll.channels.get(req.vchannel)
            if old is not None and not old.lost:
                return merr.success()
            if old is not None:  # reloaded: it read behind the stream's retention
                await old.stop()
                del coll.channels[req.vchannel]
            name = f"{self.cfg.cluster}-qn{self.server_id}"
            d = ChannelDelegator(self.stream, name, req, coll.dropped_partitions, coll.update_schema, coll.truncate)
            if coll.schema.version > d.schema.version:
                d.adopt_schema(coll.schema)  # the node learnt a newer schema than this watch carries
            for part, pks, ts in await asyncio.to_thread(self._read_l0, req):
                d.add_deletes(part, pks, ts)
            for info in req.unflushed_segments:
                if info.binlog_paths:
                    data = await self._read(coll, info)
                    d.add_growing(info.segmentID, info.partitionID, data.table, data.deltas)
            for info in req.sealed_segments:
                have = coll.sealed.get(info.segmentID)
                if have is None and info.segmentID not in coll.retired:
                    self._install(coll, await self._read(coll, info), info)
                elif have is not None and old is not None:
                    # Deletes the lost delegator did not read are in delta logs committed since.
                    have.deltas = await asyncio.to_thread(self._deltas_of, info)
                d.skip.add(info.segmentID)
            # Sealed here, or compacted into a segment sealed here: never growing rows as well.
            d.skip.update(coll.sealed)
            d.skip.update(coll.retired)
            coll.channels[req.vchannel] = d
            await afailpoint("querynode.watch.before_consume")  # its logs were listed; not reading yet
            await d.start()
        log.info("channel watched", channel=req.vchannel, node=self.server_id, sealed=len(req.sealed_segments))
        return merr.success()

    @merr.rpc()
    async def LoadSegments(self, req: query_node_pb2.LoadSegmentsRequest, context=None):
        coll = self.collections.get(req.collectionID)
        if coll is None:
            return merr.success()  # released meanwhile
        await afailpoint("querynode.load_segments")  # a load that fails (storage away, node gone)
        for info in req.segments:
            have = coll.sealed.get(info.segmentID)
            if have is not None:
                if any(f not in have.indexes for f in info.index_fieldIDs):  # an index finished
                    await asyncio.to_thread(self._read_indexes, have, info)
                continue
            if info.segmentID in coll.retired:
                continue  # compacted away or dropped since the QueryCoord prepared this load
            data = await self._read(coll, info)
            if self.collections.get(req.collectionID) is coll:
                self._install(coll, data, info)
        return merr.success()

    @merr.rpc()
    async def ReleaseSegments(self, req: query_node_pb2.ReleaseSegmentsRequest, context=None):
        coll = self.collections.get(req.collectionID)
        if coll is not None and req.streaming_only:
            for d in coll.channels.values():  # flushed, of a partition not loaded: no copy kept
                for seg in req.segmentIDs:
                    d.seal(seg)
        elif coll is not None:
            coll.retired.update(req.segmentIDs)
            for seg in req.segmentIDs:
                coll.sealed.pop(seg, None)
                coll.channel_of.pop(seg, None)
                for d in coll.channels.values():
                    d.seal(seg)
        return merr.success()

    @merr.rpc()
    async def ReleasePartitions(self, req: query_node_pb2.ReleasePartitionsRequest, context=None):
        """The partitions' sealed segments leave (not retired: a later load installs them
        again); their growing rows stay on the delegators, which reads of them skip."""
        coll = self.collections.get(req.collectionID)
        if coll is not None:
            parts = set(req.partitionIDs)
            for seg in [s.segment_id for s in coll.sealed.values() if s.partition_id in parts]:
                del coll.sealed[seg]
                coll.channel_of.pop(seg, None)
            await asyncio.to_thread(memory.release)
        return merr.success()

    @merr.rpc()
    async def ReleaseCollection(self, req: internal_pb2.ReleaseCollectionRequest, context=None):
        async with self._lock:
            await self._release(req.collectionID)
        return merr.success()

    async def _release(self, coll_id: int) -> None:
        coll = self.collections.pop(coll_id, None)
        if coll is None:
            return
        for d in coll.channels.values():
            await d.stop()
        coll.sealed.clear()
        del coll
        await asyncio.to_thread(memory.release)  # its segments' pages back to the system (util.memory)
        log.info("collection released", collection=coll_id, node=self.server_id)

    @merr.rpc(query_node_pb2.GetDataDistributionResponse)
    async def GetDataDistribution(self, req: query_node_pb2.GetDataDistributionRequest, context=None):
        resp = query_node_pb2.GetDataDistributionResponse(nodeID=self.server_id)
        for coll in self.collections.values():
            if req.collectionID and coll.id != req.collectionID:
                continue
            for ch, d in coll.channels.items():
                resp.channels.add(
                    collectionID=coll.id,
                    vchannel=ch,
                    serviceable_ts=d.serviceable_ts,
                    growing_segmentIDs=sorted(d.growing),
                    consuming=d.consuming,
                )
            for s in coll.sealed.values():
                resp.segments.add(
                    collectionID=coll.id,
                    segmentID=s.segment_id,
                    partitionID=s.partition_id,
                    num_rows=s.num_rows,
                    memory_bytes=s.nbytes,
                    indexed_fieldIDs=sorted(s.indexes),
                    vchannel=coll.channel_of.get(s.segment_id, ""),
                )
            resp.memory_bytes += coll.nbytes
        return resp

    # Reads ----------------------------------------------------------------------------------
    def _serving(self, coll_id: int, vchannels) -> tuple[LoadedCollection, list[ChannelDelegator]]:
        """The loaded collection and its delegators of `vchannels` (none lost), else
        CHANNEL_NOT_FOUND: the Proxy's shard leaders are out of date."""
        coll = self.collections.get(coll_id)
        delegators = [coll.channels.get(ch) for ch in vchannels] if coll is not None else []
        if coll is None or any(d is None or d.lost for d in delegators):
            raise merr.MilvusError(
                merr.CHANNEL_NOT_FOUND, f"channel not available[collection={coll_id}] on querynode {self.server_id}"
            )
        return coll, [d for d in delegators if d is not None]

    def _still_serving(self, coll: LoadedCollection, vchannels, delegators: list[ChannelDelegator]) -> None:
        """A read that waited since `_serviceable` (for ticks, a schema, key versions) takes its
        segments only from the collection and delegators it waited on. A release meanwhile
        (ReleaseCollection, or a node whose session was lost while it was paused: it releases
        everything on resume) empties them, and the read would answer without their rows as if
        they did not exist; a re-watch meanwhile is not serviceable at its timestamp yet."""
        now, now_delegators = self._serving(coll.id, vchannels)
        if now is not coll or any(a is not b for a, b in zip(now_delegators, delegators, strict=True)):
            raise merr.MilvusError(
                merr.CHANNEL_NOT_FOUND,
                f"channel not available[collection={coll.id}] on querynode {self.server_id}: "
                "released and watched again while the read waited",
            )

    async def _serviceable(
        self, coll_id: int, vchannels, guarantee_ts: int, timeout_ms: int
    ) -> tuple[LoadedCollection, list[ChannelDelegator]]:
        coll, delegators = self._serving(coll_id, vchannels)
        timeout = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
        behind = [d.vchannel for d in delegators if d.serviceable_ts < guarantee_ts]
        if behind:
            await self._demand_tick(behind, guarantee_ts)
        for d in delegators:
            if not await d.wait_serviceable(guarantee_ts, timeout):
                raise merr.MilvusError(
                    merr.SERVICE_UNAVAILABLE,
                    f"channel {d.vchannel} not serviceable at guarantee timestamp {guarantee_ts} "
                    f"(serviceable {d.serviceable_ts})",
                )
        return coll, delegators

    async def _demand_tick(self, vchannels: list[str], ts: int) -> None:
        """The channels this read waits for get a tick past `ts` now, not at the idle interval."""
        await demand_tick(self.registry.client(roles.ROOTCOORD), vchannels, ts)

    @merr.rpc(query_node_pb2.SearchResults)
    async def Search(self, req: query_node_pb2.SearchRequest, context=None):
        return query_node_pb2.SearchResults(arrow=await self._search(req, kreduce.to_ipc))

    async def search_table(self, req: query_node_pb2.SearchRequest) -> pa.Table:
        """Search's answer as its Arrow table, not serialized: what a Proxy in this process
        takes (kmilvus/proxy/search.py), with no IPC stream written and read back. A failure
        is raised, as the status Search would answer."""
        table: pa.Table = await self._search(req, lambda t: t)
        return table

    async def _search(self, req: query_node_pb2.SearchRequest, then: Callable[[pa.Table], _T]) -> _T:
        """The search's answer, handed to `then` in the worker thread that computed it (the IPC
        stream of a gRPC answer is written there too, off the event loop: one hop out and back)."""
        coll, delegators = await self._serviceable(req.collectionID, req.vchannels, req.guarantee_ts, req.timeout_ms)
        await self._schema_at(coll, req.schema_version)
        req.collection_ttl_ts = coll.expire_before(req.collection_ttl_ts)
        await coll.refresh_versions()
        await afailpoint("querynode.read.before_segments")  # serviceable; segments not taken yet
        self._still_serving(coll, req.vchannels, delegators)  # no await from here to the segments taken
        plan = plan_from_request(req, coll.schema, coll.pk_field)
        if plan.metric == index_params.BM25:
            # Taken here, on the loop, like every search's segments: a flush or load changes the
            # maps on the loop while the worker computes.
            channels = [coll.channel_segments(ch) for ch in req.vchannels]
            return await asyncio.to_thread(lambda: then(bm25.search_channels(channels, req, plan)))
        segments = coll.segments(req.vchannels, req.partitionIDs, growing=not req.ignore_growing)
        return await self._compute(lambda: then(reduce.search_segments(segments, plan)), reduce.small(segments, plan))

    async def _compute(self, work: Callable[[], _T], small: bool) -> _T:
        """`work` (a search's segments, merge and answer) on the event loop when it is small
        and the node is not busy searching, else in a worker thread. The hand-over to a worker
        and back (two thread wake-ups, the GIL handed back and forth) costs more than a small
        search takes; under load, searches still compute in parallel in workers (faiss and
        BLAS release the GIL). Busy: a search is computing in a worker, or one ended less than
        `BUSY_GAP_S` ago (requests queue behind each other)."""
        if small and not self._in_workers and time.monotonic() - self._computed_at > BUSY_GAP_S:
            try:
                return work()
            finally:
                self._computed_at = time.monotonic()
        self._in_workers += 1
        try:
            return await asyncio.to_thread(work)
        finally:
            self._in_workers -= 1
            self._computed_at = time.monotonic()

    @merr.rpc(query_node_pb2.RetrieveResults)
    async def Query(self, req: query_node_pb2.QueryRequest, context=None):
        coll, delegators = await self._serviceable(req.collectionID, req.vchannels, req.guarantee_ts, req.timeout_ms)
        await self._schema_at(coll, req.schema_version)
        values = template_values(req.expr_template_values) if req.expr else None
        flt = compile_filter(req.expr, coll.schema, coll.expire_before(req.collection_ttl_ts), values)
        await coll.refresh_versions()
        await afailpoint("querynode.read.before_segments")  # serviceable; segments not taken yet
        self._still_serving(coll, req.vchannels, delegators)  # no await from here to the segments taken
        segments = coll.segments(req.vchannels, req.partitionIDs, growing=not req.ignore_growing)
        outputs = [] if req.count else list(req.output_fieldIDs)
        limit = 0 if req.count else req.limit  # count(*) builds no rows
        order = [orderby.OrderByField.from_proto(f) for f in req.order_by]
        table, count = await asyncio.to_thread(
            reduce.retrieve_segments, segments, coll.pk_field, outputs, flt, limit, req.mvcc_ts, order
        )
        resp = query_node_pb2.RetrieveResults(count=count)
        if table is not None and not req.count:
            resp.arrow = kreduce.to_ipc(table)
        return resp
