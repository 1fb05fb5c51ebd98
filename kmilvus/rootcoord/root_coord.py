"""RootCoord (Milvus' internal/rootcoord).

Owns the TSO, global IDs and collection meta; runs DDL: CreateCollection and the
DropCollection flow (`DropCollectionReqTask`, docs/architecture/drop.md), each meta change one
etcd transaction. DDL messages go onto the collection's own vchannels so every flowgraph sees
them in order with its DML. The drop's remaining steps are recorded in etcd and driven to their end by the running
RootCoord (`drop_tasks`), or by the next one after a crash.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus import metrics, schemautil
from kmilvus.allocator import TimestampAllocator
from kmilvus.config import Config
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.meta import catalog as keys
from kmilvus.msgstream import Msg, MsgType, Producer, channels
from kmilvus.proto import data_coord_pb2, internal_pb2, root_coord_pb2, root_coord_pb2_grpc, security_pb2_grpc
from kmilvus.rootcoord.aliases import AliasMixin
from kmilvus.rootcoord.alter import AlterMixin, check_collection_property
from kmilvus.rootcoord.credentials import CredentialMixin
from kmilvus.rootcoord.databases import DatabaseMixin
from kmilvus.rootcoord.drop_tasks import TAIL_DEFER, DropTask, DropTasks
from kmilvus.rootcoord.partitions import PartitionMixin
from kmilvus.rootcoord.privilege_groups import PrivilegeGroupMixin
from kmilvus.rootcoord.rbac import RbacMixin
from kmilvus.rootcoord.schema_changes import SchemaChangeMixin
from kmilvus.rootcoord.timetick_sync import TimeTickSync
from kmilvus.rootcoord.truncate import TruncateMixin
from kmilvus.sessionutil import list_sessions, watch_sessions
from kmilvus.sessionutil.leader import no_leader_lock
from kmilvus.tso import GlobalTSOAllocator
from kmilvus.util import merr, metricsinfo
from kmilvus.util.constants import DEFAULT_DB, DEFAULT_PARTITION
from kmilvus.util.failpoint import afailpoint, failpoint
from kmilvus.util.retry import supervise
from kmilvus.util.tasks import BackgroundTasks
from kmilvus.util.timetick import TickSource
from kmilvus.util.tsoutil import physical_ms

log = get_logger(__name__)
_T = TypeVar("_T")


class RootCoord(
    AliasMixin,
    AlterMixin,
    SchemaChangeMixin,
    TruncateMixin,
    CredentialMixin,
    RbacMixin,
    PrivilegeGroupMixin,
    DatabaseMixin,
    PartitionMixin,
    root_coord_pb2_grpc.RootCoordServicer,
    security_pb2_grpc.RootCoordSecurityServicer,
):
    role = roles.ROOTCOORD

    def __init__(self, cfg: Config, kv: EtcdKV, stream, registry: roles.Registry, server_id: int = 0):
        self.cfg = cfg
        self.kv = kv
        self.stream = stream
        self.registry = registry
        self.server_id = server_id
        self.tso = GlobalTSOAllocator(kv, keys.TSO_KEY)
        self.ids = GlobalTSOAllocator(kv, keys.ID_KEY)
        self.collections: dict[int, internal_pb2.CollectionInfo] = {}
        self.names: dict[tuple[str, str], int] = {}
        self.aliases: dict[tuple[str, str], int] = {}
        self._pchannels_used: list[str] | None = None
        self.pchannels = channels.pchannel_names(cfg.cluster, cfg.dml_channel_num)
        # Built by start(): until then an RPC that needs them answers "not ready" (see `_started`).
        self._producer: Producer | None = None
        self._ticks: TickSource | None = None
        self._tt_sync: TimeTickSync | None = None
        self._ddl_lock = asyncio.Lock()
        self._tasks = BackgroundTasks()
        self.drops = DropTasks(self._spawn)
        # Grows (to the drop's timestamp) when a drop commits, and at start: every allocation
        # answers with it, so a Proxy whose cached meta predates a drop finds out before it
        # publishes, without RootCoord waiting on every Proxy (docs/architecture/drop.md).
        self.meta_epoch = 0
        self.leader_check: Callable[[], Awaitable[bool]] = no_leader_lock  # Node sets its lock's check

    # Lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.tso.initialize()
        self.meta_epoch = await self.tso.alloc()  # above every drop of a predecessor
        await self.ids.initialize()
        await self._load_databases()
        metrics.ROOTCOORD_COLLECTION_NUM.source = self._collection_counts
        for _, raw in await self.kv.get_prefix(keys.COLLECTION_PREFIX):
            info = internal_pb2.CollectionInfo.FromString(raw)
            self._cache(info)
        await self._load_aliases()
        await self._init_credentials()
        self._producer = self.stream.producer()
        self._ticks = TickSource(TimestampAllocator(self))
        self._tt_sync = TimeTickSync(
            self._producer,
            self._ticks,
            self._live_pchannels,
            self.cfg.time_tick_interval,
            idle_interval=self.cfg.time_tick_idle_interval,
        )
        # Proxies alive from before a restart may have inserts in flight: hear from them first.
        self.tt_sync.expect(set(await list_sessions(self.kv, roles.PROXY)), wait=2 * self.cfg.session_ttl)
        self.tt_sync.start()
        self._spawn(supervise("watch-proxies", self._watch_proxies), "watch-proxies")
        # Re-announce every collection's channels (idempotent) and finish interrupted drops.
        self._spawn(supervise("rootcoord-recover", self._recover), "rootcoord-recover")

    async def _recover(self) -> None:
        datacoord = self.registry.client(roles.DATACOORD)
        for info in list(self.collections.values()):
            if info.ID not in self.collections:
                continue  # dropped meanwhile
            try:
                await self._watch_channels(datacoord, info)
            except merr.MilvusError as exc:
                if exc.code != merr.COLLECTION_NOT_FOUND[0]:
                    raise  # DataCoord watches nothing of a dropped collection: done with it
        for _, raw in await self.kv.get_prefix(keys.DROP_TASK_PREFIX):
            info = internal_pb2.CollectionInfo.FromString(raw)
            log.warning("resuming interrupted drop", collection=info.schema.name, id=info.ID)
            self._start_drop(info)
        await self._resume_partition_drops()
        await self._resume_truncates()

    async def stop(self) -> None:
        if metrics.ROOTCOORD_COLLECTION_NUM.source == self._collection_counts:
            metrics.ROOTCOORD_COLLECTION_NUM.source = None
        if self._tt_sync:
            await self._tt_sync.stop()
        await self._tasks.stop()

    @property
    def producer(self) -> Producer:
        return _started(self._producer)

    @property
    def ticks(self) -> TickSource:
        """Timestamps that DDL publishes with."""
        return _started(self._ticks)

    @property
    def tt_sync(self) -> TimeTickSync:
        return _started(self._tt_sync)

    def _collection_counts(self) -> dict[str, int]:
        """Collections by database, for a scrape (metrics thread: `list` copies in one step)."""
        counts = dict.fromkeys(list(self.databases), 0) if hasattr(self, "databases") else {}
        for c in list(self.collections.values()):
            db = c.db_name or DEFAULT_DB
            counts[db] = counts.get(db, 0) + 1
        return counts

    def _spawn(self, coro, name: str) -> asyncio.Task:
        return self._tasks.spawn(coro, name)

    async def _watch_proxies(self) -> None:
        async for kind, sid, _ in watch_sessions(self.kv, roles.PROXY):
            if kind == "del":
                self.tt_sync.remove_source(sid)

    def _cache(self, info: internal_pb2.CollectionInfo) -> None:
        self.collections[info.ID] = info
        self.names[(info.db_name or DEFAULT_DB, info.schema.name)] = info.ID
        self._pchannels_used = None

    def _uncache(self, info: internal_pb2.CollectionInfo) -> None:
        self.collections.pop(info.ID, None)
        self.names.pop((info.db_name or DEFAULT_DB, info.schema.name), None)
        self._pchannels_used = None

    def _live_pchannels(self) -> list[str]:
        """The pchannels some collection uses: the same list object until a collection changes
        (the time-tick loop asks ten times a second and skips its bookkeeping when nothing did)."""
        if self._pchannels_used is None:
            used = {p: None for info in self.collections.values() for p in info.physical_channel_names}
            self._pchannels_used = list(used)
        return self._pchannels_used

    def _get(self, db: str, name: str = "", coll_id: int = 0) -> internal_pb2.CollectionInfo:
        if coll_id:
            info = self.collections.get(coll_id)
        else:
            self._database(db)
            key = (db or DEFAULT_DB, name)
            info = self.collections.get(self.names.get(key, self.aliases.get(key, -1)))
        if info is None:
            raise merr.collection_not_found(name or coll_id)
        return info

    # TSO / IDs -----------------------------------------------------------------------------
    @merr.rpc(internal_pb2.AllocTimestampResponse)
    async def AllocTimestamp(self, req, context=None):
        n = req.count or 1
        await self._check_leader()
        if req.producerID and self._tt_sync is not None:
            self.tt_sync.allocating(req.producerID)  # before: no tick from now on passes it
        return internal_pb2.AllocTimestampResponse(
            timestamp=await self.tso.alloc(n), count=n, meta_epoch=self.meta_epoch
        )

    @merr.rpc(internal_pb2.AllocIDResponse)
    async def AllocID(self, req, context=None):
        n = req.count or 1
        await self._check_leader()
        return internal_pb2.AllocIDResponse(ID=await self.ids.alloc(n), count=n)

    async def _check_leader(self) -> None:
        """Timestamps and IDs come from a window in memory, without etcd: a leader paused past
        its lease must not hand them out when it resumes (its successor's are larger)."""
        if not await self.leader_check():
            raise merr.MilvusError(merr.SERVICE_NOT_READY, "rootcoord lost its leader lock")

    @merr.rpc()
    async def UpdateChannelTimeTick(self, req, context=None):
        self.tt_sync.update(req.sourceID, req.timestamp, idle=req.idle)
        if req.active_channels:
            self.tt_sync.mark_active(req.active_channels)
        if req.flush_channels:
            await self.tt_sync.demand(list(req.flush_channels), req.timestamp)
        elif self.tt_sync.demands:
            await self.tt_sync.publish_demanded()  # this report may be what a flush waits for
        return merr.success()

    @merr.rpc()
    async def DemandTimeTick(self, req: internal_pb2.TimeTickDemand, context=None):
        """A QueryNode's read waits for these channels' serviceable time (an idle channel is
        ticked only every `time_tick_idle_interval`)."""
        await self.tt_sync.demand(list(req.channels), req.timestamp)
        return merr.success()

    @merr.rpc(milvus_pb2.GetMetricsResponse)
    async def GetMetrics(self, req, context=None):
        config = {"max_database_num": self.cfg.max_database_num, "max_partition_num": self.cfg.max_partition_num}
        return await metricsinfo.coordinator_metrics(
            self, req, config, None, (roles.QUERYCOORD, roles.DATACOORD), cluster_key="self"
        )

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    # DDL -----------------------------------------------------------------------------------
    @merr.rpc()
    async def CreateCollection(self, req: milvus_pb2.CreateCollectionRequest, context=None):
        schemautil.validate_name(req.collection_name, "collection")
        try:
            schema = schema_pb2.CollectionSchema.FromString(req.schema)
        except Exception:  # noqa: BLE001 - any parse failure is the caller's bad schema: re-raised as such
            raise merr.invalid("the collection schema cannot be parsed") from None
        if not schema.name:
            schema.name = req.collection_name
        if schema.name != req.collection_name:
            raise merr.invalid(f"collection name [{req.collection_name}] not matches schema name [{schema.name}]")
        schemautil.validate_schema(schema, max_dim=self.cfg.max_dim, max_varchar=self.cfg.max_varchar_length)
        num_partitions = schemautil.check_partition_key(schema, req.num_partitions, self.cfg.max_partition_num)
        for kv in req.properties:
            check_collection_property(kv.key, kv.value)
        schema = schemautil.normalize(schema)
        shards = req.shards_num or self.cfg.default_shards_num
        if not 1 <= shards <= 16:
            raise merr.invalid(f"shard num ({shards}) should be in range [1, 16]")
        db = req.db_name or DEFAULT_DB
        async with self._ddl_lock:
            self._database(db)
            if (db, schema.name) in self.aliases:
                raise merr.MilvusError(
                    merr.UNEXPECTED,
                    f"collection name [{schema.name}] conflicts with an existing alias, please choose a unique name",
                )
            existing = self.collections.get(self.names.get((db, schema.name), -1))
            if existing is not None:
                if schemautil.same_schema(existing.schema, schema) and existing.shards_num == shards:
                    return merr.success()  # Milvus: creating the same collection again succeeds
                raise MilvusError_dup(schema.name)
            info = await self._new_collection_info(db, schema, shards, req, num_partitions)
            await self._create(info)
        await self._watch_channels(self.registry.client(roles.DATACOORD), info)
        log.info("collection created", collection=schema.name, id=info.ID, vchannels=list(info.virtual_channel_names))
        return merr.success()

    async def _new_collection_info(
        self, db, schema, shards, req, num_partitions: int = 0
    ) -> internal_pb2.CollectionInfo:
        """`num_partitions` > 0: a partition key's collection, with Milvus' partitions `_default_0`
        … `_default_{n-1}` (rows hash to them: kmilvus/proxy/partition_key.py) instead of `_default`."""
        coll_id = await self.ids.alloc()
        # Partition IDs are allocated like any ID: no component derives them.
        names = [f"{DEFAULT_PARTITION}_{i}" for i in range(num_partitions)] or [DEFAULT_PARTITION]
        first = await self.ids.alloc(len(names))
        part_ids = range(first, first + len(names))
        used = dict.fromkeys(self.pchannels, 0)
        for c in self.collections.values():
            for p in c.physical_channel_names:
                used[p] = used.get(p, 0) + 1
        pchans = sorted(self.pchannels, key=lambda p: (used[p], self.pchannels.index(p)))[:shards]
        return internal_pb2.CollectionInfo(
            ID=coll_id,
            schema=schema,
            shards_num=shards,
            db_name=db,
            dbID=self._database(db).ID,
            consistency_level=req.consistency_level,
            physical_channel_names=pchans,
            virtual_channel_names=[channels.vchannel_name(p, coll_id, i) for i, p in enumerate(pchans)],
            partitions=[
                internal_pb2.PartitionInfo(partitionID=p, partitionName=n) for p, n in zip(part_ids, names, strict=True)
            ],
            properties=list(req.properties),
        )

    async def _create(self, info: internal_pb2.CollectionInfo) -> None:
        async with self.ticks.publishing() as ts:
            info.create_time = ts
            for part in info.partitions:
                part.created_timestamp = ts
            await self._publish_ddl(
                info,
                ts,
                MsgType.CreateCollection,
                internal_pb2.CreateCollectionMsg(
                    db_name=info.db_name,
                    collection_name=info.schema.name,
                    collectionID=info.ID,
                    schema=info.schema.SerializeToString(),
                    virtual_channel_names=info.virtual_channel_names,
                ),
            )
            name_key = keys.collection_name_key(info.db_name, info.schema.name)
            ok = await self.kv.txn(
                [
                    Op.put(keys.collection_key(info.ID), info.SerializeToString()),
                    Op.put(name_key, str(info.ID).encode()),
                ],
                [
                    Cmp.missing(name_key),
                    Cmp.missing(keys.alias_key(info.db_name or DEFAULT_DB, info.schema.name)),
                    Cmp.exists(keys.database_key(info.db_name or DEFAULT_DB)),
                ],
            )
            if not ok:  # the DDL published stays until its pchannel is trimmed past it
                raise MilvusError_dup(info.schema.name)
            self._cache(info)

    async def _publish_ddl(self, info: internal_pb2.CollectionInfo, ts: int, msg_type: MsgType, msg) -> None:
        """DDL goes onto the collection's own vchannels, in order with its DML (docs/architecture/ddl-flush.md)."""
        msg.base.msg_type = int(msg_type)
        msg.base.timestamp = ts
        payload = msg.SerializeToString()
        self.tt_sync.mark_active(info.virtual_channel_names)
        await self.producer.publish_many(
            [(v, Msg(msg_type, ts, payload, {"collection": str(info.ID)})) for v in info.virtual_channel_names]
        )

    async def _watch_channels(self, datacoord, info: internal_pb2.CollectionInfo) -> None:
        status = await datacoord.WatchChannels(
            data_coord_pb2.WatchChannelsRequest(
                collectionID=info.ID,
                channelNames=info.virtual_channel_names,
                schema=info.schema.SerializeToString(),
                partitionID=info.partitions[0].partitionID,
            )
        )
        merr.check(status)

    @merr.rpc(milvus_pb2.DescribeCollectionResponse)
    async def DescribeCollection(self, req: milvus_pb2.DescribeCollectionRequest, context=None):
        info = self._get(req.db_name, req.collection_name, req.collectionID)
        resp = describe_response(info)
        resp.aliases.extend(self.aliases_of(info.ID))
        return resp

    @merr.rpc(milvus_pb2.BoolResponse)
    async def HasCollection(self, req, context=None):
        key = (req.db_name or DEFAULT_DB, req.collection_name)
        self._database(key[0])
        return milvus_pb2.BoolResponse(value=key in self.names or key in self.aliases)

    @merr.rpc(milvus_pb2.ShowCollectionsResponse)
    async def ShowCollections(self, req, context=None):
        db = req.db_name or DEFAULT_DB
        self._database(db)
        infos = sorted(
            (c for c in self.collections.values() if (c.db_name or DEFAULT_DB) == db), key=lambda c: c.create_time
        )
        if req.collection_names:
            wanted = set(req.collection_names)
            infos = [c for c in infos if c.schema.name in wanted]
        return milvus_pb2.ShowCollectionsResponse(
            collection_names=[c.schema.name for c in infos],
            collection_ids=[c.ID for c in infos],
            created_timestamps=[c.create_time for c in infos],
            created_utc_timestamps=[physical_ms(c.create_time) for c in infos],
            inMemory_percentages=[0 for _ in infos],
            query_service_available=[False for _ in infos],
            shards_num=[c.shards_num for c in infos],
        )

    @merr.rpc(root_coord_pb2.ListCollectionsResponse)
    async def ListCollections(self, req, context=None):
        return root_coord_pb2.ListCollectionsResponse(
            collections=[describe_response(c) for c in sorted(self.collections.values(), key=lambda c: c.ID)]
        )

    @merr.rpc(root_coord_pb2.GetDropStateResponse)
    async def GetDropState(self, req: root_coord_pb2.GetDropStateRequest, context=None):
        """`dropping` until the drop's resumable tail (its etcd task record) is finished."""
        dropping = await self.kv.get(keys.drop_task_key(req.collectionID)) is not None
        return root_coord_pb2.GetDropStateResponse(exists=req.collectionID in self.collections, dropping=dropping)

    # DropCollection (docs/architecture/drop.md) --------------------------------------------
    @merr.rpc()
    async def DropCollection(self, req: milvus_pb2.DropCollectionRequest, context=None):
        """DropCollectionReqTask: TSO first, ONE meta transaction, then the broadcast steps."""
        db = req.db_name or DEFAULT_DB
        async with self._ddl_lock:
            self._database(db)
            coll_id = self.names.get((db, req.collection_name))
            if coll_id is None and (db, req.collection_name) in self.aliases:
                raise merr.MilvusError(merr.UNEXPECTED, f"cannot drop the collection via alias = {req.collection_name}")
            name = ("collection", db, req.collection_name)
            if coll_id is None:
                pending = self.drops.pending(name)
                if pending is None:
                    return merr.success()  # dropping an unknown name succeeds, as in Milvus
            else:
                pending = await self._drop_meta(db, req.collection_name, coll_id)
                await pending.broadcast()  # in the lock, as the DDL it is
        # A retry whose first call failed after the meta change: done once the broadcast is.
        await pending.broadcast()
        return merr.success()

    async def _drop_meta(self, db: str, name: str, coll_id: int) -> DropTask:
        """The drop's ONE meta transaction (under the DDL lock); returns its tail, which the
        running RootCoord drives from now on."""
        if aliases := self.aliases_of(coll_id):
            raise merr.MilvusError(
                merr.UNEXPECTED,
                f"unable to drop the collection [{name}] because "
                f"it has associated aliases [{' '.join(aliases)}], please remove "
                f"all aliases before dropping the collection",
            )
        info = internal_pb2.CollectionInfo()
        info.CopyFrom(self.collections[coll_id])
        info.drop_time = await self.tso.alloc()
        info.state = internal_pb2.CollectionInfo.Dropping
        # One transaction: schema/partitions gone, the drop's remaining steps recorded.
        ok = await self.kv.txn(
            [
                Op.delete(keys.collection_key(coll_id)),
                Op.delete(keys.collection_name_key(db, name)),
                Op.put(keys.drop_task_key(coll_id), info.SerializeToString()),
            ],
            [Cmp.exists(keys.collection_key(coll_id))],
        )
        if not ok:
            raise merr.MilvusError(merr.SERVICE_INTERNAL, f"collection {name} changed during drop")
        failpoint("rootcoord.drop.after_meta_txn")
        self._uncache(info)
        self.dropped(info.drop_time)
        return self._start_drop(info)

    def dropped(self, drop_time: int) -> None:
        """A drop committed: meta read before it may name what is gone (`meta_epoch`)."""
        self.meta_epoch = max(self.meta_epoch, drop_time)

    def _start_drop(self, info: internal_pb2.CollectionInfo) -> DropTask:
        task = DropTask(
            self.kv,
            keys.drop_task_key(info.ID),
            "collection",
            f"{info.db_name or DEFAULT_DB}.{info.schema.name} ({info.ID})",
            lambda: self._broadcast_drop(info),
            lambda: self._drop_data(info),
            defer=TAIL_DEFER,
        )
        return self.drops.start(("collection", info.db_name or DEFAULT_DB, info.schema.name), task)

    async def _broadcast_drop(self, info: internal_pb2.CollectionInfo) -> None:
        """DropCollection onto the msgstream (durable once JetStream acknowledged it): the last
        step the caller waits for (docs/architecture/drop.md)."""
        await afailpoint("rootcoord.drop.broadcast")
        async with self.ticks.publishing() as ts:
            await self._publish_ddl(
                info,
                ts,
                MsgType.DropCollection,
                internal_pb2.DropCollectionMsg(
                    db_name=info.db_name, collectionName=info.schema.name, collectionID=info.ID
                ),
            )

    async def _release_or_raise(self, info: internal_pb2.CollectionInfo) -> None:
        qc = self.registry.client(roles.QUERYCOORD)
        merr.check(await qc.ReleaseCollection(internal_pb2.ReleaseCollectionRequest(collectionID=info.ID)))

    async def _invalidate_proxies(self, info: internal_pb2.CollectionInfo) -> None:
        req = internal_pb2.InvalidateCollMetaCacheRequest(
            db_name=info.db_name, collection_name=info.schema.name, collectionID=info.ID
        )
        proxies = await self.registry.clients(roles.PROXY)
        results = await asyncio.gather(
            *(p.InvalidateCollectionMetaCache(req) for p in proxies.values()), return_exceptions=True
        )
        for sid, r in zip(proxies, results, strict=True):
            if isinstance(r, BaseException):
                log.warning("invalidate meta cache failed", proxy=sid, error=str(r))

    async def _drop_data(self, info: internal_pb2.CollectionInfo) -> None:
        """After the answer: every Proxy forgets the collection (a Proxy that does not hear of it
        still publishes nothing into it: `meta_epoch`), QueryCoord releases, DataCoord removes
        the data (each idempotent). ReleaseCollection on QueryCoord does not block the caller
        (as in Milvus)."""
        await afailpoint("rootcoord.drop.tail")
        await self._invalidate_proxies(info)
        await self._release_or_raise(info)
        datacoord = self.registry.client(roles.DATACOORD)
        merr.check(
            await datacoord.DropCollection(
                data_coord_pb2.DropCollectionRequest(collectionID=info.ID, channelNames=info.virtual_channel_names)
            )
        )

    @merr.rpc()
    async def ReleaseDQLMessageStream(self, req, context=None):
        """QueryCoord asks RootCoord to redirect this to every Proxy (docs/architecture/drop.md)."""
        proxies = await self.registry.clients(roles.PROXY)
        results = await asyncio.gather(
            *(p.ReleaseDQLMessageStream(req) for p in proxies.values()), return_exceptions=True
        )
        for sid, r in zip(proxies, results, strict=True):
            if isinstance(r, BaseException):  # a Proxy that is gone holds no stream to release
                log.warning("release DQL stream failed", proxy=sid, error=str(r))
        return merr.success()


def _started(part: _T | None) -> _T:
    """A part of RootCoord that `start()` builds. The internal server answers before that (every
    servicer is registered first): such a call gets Milvus' "not ready", which callers retry."""
    if part is None:
        raise merr.MilvusError(merr.SERVICE_NOT_READY, "service not ready[role=rootcoord][state=Initializing]")
    return part


def MilvusError_dup(name: str) -> merr.MilvusError:  # reads like the error it builds
    return merr.MilvusError(
        merr.PARAMETER_INVALID, f"create duplicate collection with different parameters, collection: {name}"
    )


def describe_response(info: internal_pb2.CollectionInfo) -> milvus_pb2.DescribeCollectionResponse:
    resp = milvus_pb2.DescribeCollectionResponse(
        collectionID=info.ID,
        virtual_channel_names=info.virtual_channel_names,
        physical_channel_names=info.physical_channel_names,
        created_timestamp=info.create_time,
        created_utc_timestamp=physical_ms(info.create_time),
        shards_num=info.shards_num,
        consistency_level=info.consistency_level,
        collection_name=info.schema.name,
        db_name=info.db_name or DEFAULT_DB,
        num_partitions=len(info.partitions),
        properties=info.properties,
    )
    resp.schema.CopyFrom(info.schema)
    return resp
