"""The Proxy: Milvus' MilvusService (what pymilvus talks to) plus its internal service.

Requests become tasks on `DdTaskQueue` (DDL, Flush) or `DmTaskQueue` (Insert); task bodies call
RootCoord / DataCoord, which may live in this process or behind gRPC.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc

from kmilvus import __version__, metrics
from kmilvus import components as roles
from kmilvus.allocator import IDAllocator, TimestampAllocator
from kmilvus.config import Config
from kmilvus.log import get_logger
from kmilvus.proto import data_coord_pb2, internal_pb2, proxy_pb2_grpc, query_coord_pb2, security_pb2_grpc
from kmilvus.proxy.alter import ProxyAlterMixin
from kmilvus.proxy.analyzer import ProxyAnalyzerMixin
from kmilvus.proxy.credentials import ProxyCredentialsMixin
from kmilvus.proxy.databases import DB_METADATA_KEY, ProxyDatabasesMixin
from kmilvus.proxy.delete import ProxyDeleteMixin
from kmilvus.proxy.hybrid_search import ProxyHybridSearchMixin
from kmilvus.proxy.import_visibility import ImportVisibility
from kmilvus.proxy.index import ProxyIndexMixin
from kmilvus.proxy.insert import InsertTask, estimate_fields_data_bytes
from kmilvus.proxy.jobs import ProxyJobsMixin
from kmilvus.proxy.load import ProxyLoadMixin
from kmilvus.proxy.meta_cache import CollectionMeta, MetaCache
from kmilvus.proxy.partitions import ProxyPartitionsMixin
from kmilvus.proxy.privilege import ProxyRbacMixin, ProxySecurity
from kmilvus.proxy.query import ProxyQueryMixin
from kmilvus.proxy.search import ProxySearchMixin
from kmilvus.proxy.search_iterator import SearchIterators
from kmilvus.proxy.system import ProxySystemMixin
from kmilvus.proxy.task import DdTaskQueue, DmTaskQueue, Task
from kmilvus.schemautil import validate_name
from kmilvus.sessionutil import always_valid
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB
from kmilvus.util.metricsinfo import SERVER_VERSION
from kmilvus.util.tasks import BackgroundTasks
from kmilvus.util.timetick import TickSource

log = get_logger(__name__)
IDLE_REPORT_EVERY = 1.0  # seconds between an idle Proxy's reports (busy: every tick interval)


class Proxy(
    ProxyAnalyzerMixin,
    ProxyDeleteMixin,
    ProxyJobsMixin,
    ProxyAlterMixin,
    ProxyCredentialsMixin,
    ProxyRbacMixin,
    ProxyIndexMixin,
    ProxyDatabasesMixin,
    ProxyPartitionsMixin,
    ProxyLoadMixin,
    ProxySearchMixin,
    ProxyHybridSearchMixin,
    ProxyQueryMixin,
    ProxySystemMixin,
    milvus_pb2_grpc.MilvusServiceServicer,
    proxy_pb2_grpc.ProxyServicer,
    security_pb2_grpc.ProxySecurityServicer,
):
    role = roles.PROXY

    def __init__(self, cfg: Config, registry: roles.Registry, stream, server_id: int):
        self.cfg = cfg
        self.registry = registry
        self.stream = stream
        self.server_id = server_id
        self.session_valid: Callable[[], Awaitable[bool]] = always_valid  # Node sets its session's check
        self.pending_insert_bytes = 0
        self.rootcoord = registry.late(roles.ROOTCOORD)
        self.datacoord = registry.late(roles.DATACOORD)
        self.meta_cache = MetaCache(self.rootcoord, lambda: self.tso.meta_epoch)
        self.security = ProxySecurity(cfg, self.rootcoord)
        self.tso = TimestampAllocator(self.rootcoord)
        self.ids = IDAllocator(self.rootcoord)
        self.ticks = TickSource(self.tso, producer_id=server_id)
        self._reported_at = 0.0  # monotonic time of the last report
        self.reported_tick = 0  # the last tick RootCoord accepted from this Proxy
        self.producer = stream.producer()
        self.dd_queue = DdTaskQueue()
        self.dm_queue = DmTaskQueue()
        self._tasks = BackgroundTasks()
        self.search_iterators = SearchIterators()
        self.import_visibility = ImportVisibility(registry)

    @contextlib.asynccontextmanager
    async def publishing(self, meta: CollectionMeta, partitions: Iterable[int] = ()) -> AsyncIterator[int]:
        """A write's timestamp (`TickSource.publishing` on the collection's vchannels), with its
        meta checked against the drops committed since it was read (`MetaCache.revalidate`)
        before anything is published: no Proxy writes into a collection or partition whose drop
        has answered, whether or not it has heard of the drop yet."""
        async with self.ticks.publishing(meta.vchannels) as ts:
            await self.meta_cache.revalidate(meta, partitions)
            yield ts

    async def start(self) -> None:
        # Report a first tick before serving: RootCoord must count this producer before any of
        # its inserts can exist, or a tick could pass them.
        await self.report_tick()
        self._tasks.every(lambda: self.cfg.time_tick_interval, self._periodic_report, "proxy-timetick")
        self.dd_queue.start()
        self.dm_queue.start()

    async def stop(self) -> None:
        await self._tasks.stop()
        await self.dd_queue.stop()
        await self.dm_queue.stop()

    async def _periodic_report(self) -> None:
        """An idle Proxy that said so stays quiet (RootCoord does not wait on it), except for one
        report every `IDLE_REPORT_EVERY`: a RootCoord that restarted meanwhile learns of it."""
        if self.ticks.idle_reported and self.ticks.quiet() and time.monotonic() - self._reported_at < IDLE_REPORT_EVERY:
            return
        await self.report_tick()

    async def report_tick(self, flush_channels: Sequence[str] = ()) -> None:
        """Report the tick this Proxy can promise and the channels it published on since its
        last report; with `flush_channels`, ask RootCoord to tick them at once (a flush or a Strong
        read waits for them, not for the periodic tick)."""

        async def send(ts: int, active: list[str], idle: bool) -> None:
            msg = internal_pb2.ChannelTimeTickMsg(
                sourceID=self.server_id, timestamp=ts, flush_channels=flush_channels, active_channels=active, idle=idle
            )
            merr.check(await self.rootcoord.UpdateChannelTimeTick(msg))

        ts = await self.ticks.report(send)
        self._reported_at = time.monotonic()
        self.reported_tick = max(self.reported_tick, ts)

    async def report_tick_now(self, flush_channels: Sequence[str] = ()) -> None:
        """`report_tick` for someone waiting (a flush, a Strong or Session read), best effort:
        if it fails the request is still correct, only as late as the periodic report."""
        try:
            await self.report_tick(flush_channels)
        except Exception as exc:  # noqa: BLE001 - the periodic report and tick still come
            log.warning("tick report on demand failed", channels=len(flush_channels), error=repr(exc))

    # Connection and health -----------------------------------------------------------------
    @merr.rpc(milvus_pb2.ConnectResponse)
    async def Connect(self, req, context=None):
        """Milvus refuses to connect to a database that does not exist (the client's `dbname`
        metadata; none names `default`): a client is never served another database."""
        db_name = next((v for k, v in _metadata(context) if k == DB_METADATA_KEY and v), DEFAULT_DB)
        dbs = await self.rootcoord.ListDatabases(milvus_pb2.ListDatabasesRequest())
        merr.check(dbs.status)
        if db_name not in dbs.db_names:
            raise merr.MilvusError(merr.DATABASE_NOT_FOUND, f"database not found[database={db_name}]")
        resp = milvus_pb2.ConnectResponse(identifier=self.server_id)
        info = resp.server_info
        info.build_tags = SERVER_VERSION
        info.deploy_mode = "kmilvus"
        info.reserved["kmilvus_version"] = __version__
        return resp

    @merr.rpc(milvus_pb2.GetVersionResponse)
    async def GetVersion(self, req, context=None):
        return milvus_pb2.GetVersionResponse(version=SERVER_VERSION)

    @merr.rpc(milvus_pb2.CheckHealthResponse)
    async def CheckHealth(self, req, context=None):
        reasons = []
        for role in (roles.ROOTCOORD, roles.DATACOORD):
            try:
                st = await self.registry.client(role).GetComponentStates(milvus_pb2.GetComponentStatesRequest())
                if st.state.state_code != common_pb2.Healthy:
                    reasons.append(f"{role} is {common_pb2.StateCode.Name(st.state.state_code)}")
            except Exception as exc:  # noqa: BLE001 - an unreachable coordinator is the answer, not a failure
                reasons.append(f"{role} unreachable: {exc}")
        return milvus_pb2.CheckHealthResponse(isHealthy=not reasons, reasons=reasons)

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    @merr.rpc(milvus_pb2.AllocTimestampResponse)
    async def AllocTimestamp(self, req, context=None):
        return milvus_pb2.AllocTimestampResponse(timestamp=await self.tso.alloc())

    # DDL ----------------------------------------------------------------------------------
    async def _dd(self, task: Task):
        return await self.dd_queue.enqueue(task)

    async def _dd_call(self, call, pre=None):
        """A DDL task whose Execute is one coordinator call answering a bare Status."""
        return await self._dd(_CallTask(call, pre=pre))

    @merr.rpc()
    async def CreateCollection(self, req, context=None):
        return await self._dd(
            _CallTask(
                lambda: self.rootcoord.CreateCollection(req),
                pre=lambda: validate_name(req.collection_name, "collection"),
            )
        )

    @merr.rpc()
    async def DropCollection(self, req, context=None):
        return await self._dd(DropCollectionTask(self, req))

    @merr.rpc(milvus_pb2.DescribeCollectionResponse)
    async def DescribeCollection(self, req, context=None):
        if req.collection_name:
            validate_name(req.collection_name, "collection")
        return hide_dynamic_field(await self.rootcoord.DescribeCollection(req))

    @merr.rpc(milvus_pb2.BoolResponse)
    async def HasCollection(self, req, context=None):
        return await self.rootcoord.HasCollection(req)

    @merr.rpc(milvus_pb2.ShowCollectionsResponse)
    async def ShowCollections(self, req, context=None):
        resp = await self.rootcoord.ShowCollections(req)
        if req.type != milvus_pb2.ShowType.InMemory:
            return resp
        return await self._loaded_only(resp)

    async def _loaded_only(self, shown: milvus_pb2.ShowCollectionsResponse) -> milvus_pb2.ShowCollectionsResponse:
        """Milvus' showCollectionsTask for type InMemory: only the collections QueryCoord has
        loaded (or is loading), with their load percentage and whether they serve queries."""
        out = milvus_pb2.ShowCollectionsResponse()
        for i, coll_id in enumerate(shown.collection_ids):
            state = await self.querycoord.GetLoadState(query_coord_pb2.GetLoadStateRequest(collectionID=coll_id))
            merr.check(state.status)
            if state.state == common_pb2.LoadState.LoadStateNotLoad:
                continue
            out.collection_names.append(shown.collection_names[i])
            out.collection_ids.append(coll_id)
            out.created_timestamps.append(shown.created_timestamps[i])
            out.created_utc_timestamps.append(shown.created_utc_timestamps[i])
            out.shards_num.append(shown.shards_num[i])
            out.inMemory_percentages.append(state.progress)
            out.query_service_available.append(state.state == common_pb2.LoadState.LoadStateLoaded)
        return out

    # Aliases (RootCoord invalidates every Proxy's cache entry of the alias before answering)
    @merr.rpc()
    async def CreateAlias(self, req, context=None):
        return await self._dd(_CallTask(lambda: self.rootcoord.CreateAlias(req)))

    @merr.rpc()
    async def AlterAlias(self, req, context=None):
        return await self._dd(_CallTask(lambda: self.rootcoord.AlterAlias(req)))

    @merr.rpc()
    async def DropAlias(self, req, context=None):
        return await self._dd(_CallTask(lambda: self.rootcoord.DropAlias(req)))

    @merr.rpc(milvus_pb2.DescribeAliasResponse)
    async def DescribeAlias(self, req, context=None):
        return await self.rootcoord.DescribeAlias(req)

    @merr.rpc(milvus_pb2.ListAliasesResponse)
    async def ListAliases(self, req, context=None):
        return await self.rootcoord.ListAliases(req)

    # DML ----------------------------------------------------------------------------------
    @merr.rpc(milvus_pb2.MutationResult)
    async def Insert(self, req, context=None):
        """Back-pressure: the inserts a Proxy holds (queued or running) are bounded in bytes;
        past the bound a request is refused with Milvus' rate-limit code, which pymilvus retries
        with back-off — memory is bounded by design, never by an unbounded queue."""
        size = estimate_fields_data_bytes(req.fields_data)
        limit = self.cfg.max_pending_insert_mb * 1024 * 1024
        if self.pending_insert_bytes and self.pending_insert_bytes + size > limit:
            metrics.RATE_LIMITED.inc()
            raise merr.MilvusError(
                merr.RATE_LIMIT,
                f"rate limit exceeded[rate=inserts pending in this proxy exceed {self.cfg.max_pending_insert_mb} MB]",
            )
        self.pending_insert_bytes += size
        try:
            return await self.dm_queue.enqueue(InsertTask(self, req))
        finally:
            self.pending_insert_bytes -= size

    # Flush (docs/architecture/flush.md) ----------------------------------------------------
    @merr.rpc(milvus_pb2.FlushResponse)
    async def Flush(self, req, context=None):
        return await self._dd(FlushTask(self, req))

    @merr.rpc(milvus_pb2.GetFlushStateResponse)
    async def GetFlushState(self, req: milvus_pb2.GetFlushStateRequest, context=None):
        coll_id = 0
        if req.collection_name:
            coll_id = (await self.meta_cache.get(req.db_name, req.collection_name)).id
        return await self.datacoord.GetFlushState(
            data_coord_pb2.GetFlushStateRequest(
                segmentIDs=req.segmentIDs,
                flush_ts=req.flush_ts,
                collectionID=coll_id,
                wait_ms=int(self.cfg.flush_state_wait * 1000),
            )
        )

    @merr.rpc(milvus_pb2.GetPersistentSegmentInfoResponse)
    async def GetPersistentSegmentInfo(self, req, context=None):
        meta = await self.meta_cache.get(req.dbName, req.collectionName)
        st = common_pb2.SegmentState
        resp = await self.datacoord.GetSegmentsByCollection(
            data_coord_pb2.GetSegmentsByCollectionRequest(
                collectionID=meta.id, states=list(req.states) or [st.Flushing, st.Flushed, st.Sealed]
            )
        )
        merr.check(resp.status)
        out = milvus_pb2.GetPersistentSegmentInfoResponse()
        for s in resp.infos:
            out.infos.add(
                segmentID=s.ID,
                collectionID=s.collectionID,
                partitionID=s.partitionID,
                num_rows=s.num_of_rows,
                state=s.state,
                insert_channel=s.insert_channel,
            )
        return out

    @merr.rpc(milvus_pb2.GetCollectionStatisticsResponse)
    async def GetCollectionStatistics(self, req, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        resp = await self.datacoord.GetCollectionStatistics(
            data_coord_pb2.GetCollectionStatisticsRequest(collectionID=meta.id)
        )
        merr.check(resp.status)
        return milvus_pb2.GetCollectionStatisticsResponse(stats=resp.stats)

    # Internal service (called by RootCoord / QueryCoord) -----------------------------------
    @merr.rpc()
    async def InvalidateCollectionMetaCache(self, req, context=None):
        self.meta_cache.remove(req.db_name, req.collection_name, req.collectionID)
        return merr.success()

    @merr.rpc()
    async def ReleaseDQLMessageStream(self, req, context=None):
        """Stop serving queries of the collection (docs/architecture/drop.md; this Proxy holds no DQL streams
        yet, so dropping its cached meta is all there is to release)."""
        self.meta_cache.remove("", coll_id=req.collectionID)
        return merr.success()


def _metadata(context) -> tuple:
    """A gRPC call's invocation metadata (none for an in-process call)."""
    if context is None or not hasattr(context, "invocation_metadata"):
        return ()
    return tuple(context.invocation_metadata() or ())


def hide_dynamic_field(resp: milvus_pb2.DescribeCollectionResponse) -> milvus_pb2.DescribeCollectionResponse:
    """Milvus' describeCollectionTask leaves the `$meta` field out of the schema a client sees
    (`enable_dynamic_field` tells it); clients comparing schemas rely on that."""
    for i in reversed(range(len(resp.schema.fields))):
        if resp.schema.fields[i].is_dynamic:
            del resp.schema.fields[i]
    return resp


class _CallTask(Task):
    """A DDL task whose Execute is one coordinator call answering a bare Status."""

    name = "DdTask"

    def __init__(self, call, pre=None):
        super().__init__()
        self._call, self._pre = call, pre

    async def pre_execute(self) -> None:
        if self._pre:
            self._pre()

    async def execute(self) -> None:
        self.result = await self._call()


class DropCollectionTask(Task):
    """PreExecute checks the name, Execute asks RootCoord, PostExecute drops the
    collection from this Proxy's meta cache (docs/architecture/drop.md)."""

    name = "DropCollectionTask"

    def __init__(self, proxy: Proxy, req: milvus_pb2.DropCollectionRequest):
        super().__init__()
        self.proxy, self.req = proxy, req

    async def pre_execute(self) -> None:
        validate_name(self.req.collection_name, "collection")

    async def execute(self) -> None:
        self.result = await self.proxy.rootcoord.DropCollection(self.req)
        merr.check(self.result)

    async def post_execute(self) -> None:
        self.proxy.meta_cache.remove(self.req.db_name, self.req.collection_name)


class FlushTask(Task):
    """PreExecute and PostExecute do nothing; Execute asks DataCoord to seal (docs/architecture/flush.md)."""

    name = "FlushTask"

    def __init__(self, proxy: Proxy, req: milvus_pb2.FlushRequest):
        super().__init__()
        self.proxy, self.req = proxy, req

    async def execute(self) -> None:
        resp = milvus_pb2.FlushResponse(db_name=self.req.db_name or DEFAULT_DB)
        chans: list[str] = []
        for name in self.req.collection_names:
            meta = await self.proxy.meta_cache.get(self.req.db_name, name)
            r = await self.proxy.datacoord.Flush(data_coord_pb2.FlushRequest(collectionID=meta.id))
            merr.check(r.status)
            resp.coll_segIDs[name].data.extend(r.segmentIDs)
            resp.flush_coll_segIDs[name].data.extend(r.flushSegmentIDs)
            resp.coll_seal_times[name] = r.time_of_seal
            resp.coll_flush_ts[name] = r.flush_ts
            chans += meta.vchannels
        if chans:
            # Tick on demand: this tick is allocated after every flush_ts above, so once RootCoord
            # publishes it the DataNodes can write the sealed segments without waiting for the
            # periodic tick.
            await self.proxy.report_tick_now(chans)
        self.result = resp
