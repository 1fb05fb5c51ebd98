"""Load and release (Milvus' QueryCoord job scheduler, target observer and balancer, small):

- `load` records the collection in etcd with each DML channel assigned to one QueryNode (the
  fewest channels first), then, in the background, asks each node to watch its channels; a node
  loads the channel's flushed segments and consumes the stream from the checkpoint. Progress is
  the share of channels served.
- the segment feed (DataCoord.WatchSegments) says which channel changed; the channel's node is
  then brought to what DataCoord holds now (`_sync_channel`): every Flushed segment loaded
  first, then the ones no longer Flushed (compacted away, dropped) released — never the other
  way round, so reads see the channel's rows whole however far behind the feed is.
- every `CHECK_INTERVAL` the live QueryNode sessions are compared with the assignment; a channel
  of a node whose session expired moves to a live node (with its segments), recorded in one put.
- every `CHANNEL_CHECK_INTERVAL` each node is asked which channels it serves: one it no longer
  serves (its delegator read behind the stream's retention and stopped) is watched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable

from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus.coordinator.client import CoordinatorClient
from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2, query_coord_pb2, query_node_pb2
from kmilvus.querycoord import recovery
from kmilvus.sessionutil.leader import no_leader_lock
from kmilvus.util import merr, typeutil
from kmilvus.util.failpoint import afailpoint
from kmilvus.util.tasks import BackgroundTasks, stopping

log = get_logger(__name__)
CHECK_INTERVAL = 1.0
CHANNEL_CHECK_INTERVAL = 2.0
LOADED_PREFIX = "querycoord-meta/loaded/"
SegmentState = common_pb2.SegmentState


class LoadManager:
    def __init__(self, kv: EtcdKV, registry: roles.Registry):
        self.kv, self.registry = kv, registry
        self.loads: dict[int, query_coord_pb2.LoadInfo] = {}
        self.served: dict[int, set[str]] = {}  # channels a node acknowledged, per collection
        self.indexed: dict[int, set[int]] = {}  # index builds sent to the nodes, per collection
        # Partitions added to a loaded collection whose flushed segments are still being loaded:
        # a counter per collection, bumped by each addition, cleared by the load job once it
        # loaded them all with no addition meanwhile (the collection reports Loading until then).
        self.adding: dict[int, int] = {}
        # Channels whose node is not in step with DataCoord's segments yet (a sync failed: a load
        # failed, storage away; or a target was loaded outside a sync): synced again until done.
        # Each with the mark it got: a sync clears only a mark older than its own start.
        self.unsynced: dict[tuple[int, str], int] = {}
        self._marks = 0
        self._jobs: dict[int, asyncio.Task] = {}
        self._tasks = BackgroundTasks()
        self._feed: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self.leader_check: Callable[[], Awaitable[bool]] = no_leader_lock  # QueryCoord's, set by its process

    async def start(self) -> None:
        for _, raw in await self.kv.get_prefix(LOADED_PREFIX):
            with contextlib.suppress(Exception):  # an older, bare record: not a load
                info = query_coord_pb2.LoadInfo.FromString(raw)
                if info.collectionID:
                    self.loads[info.collectionID] = info
                    self.served[info.collectionID] = set()
        for coll_id in self.loads:  # a new leader: nodes that already serve a channel answer at once
            self._start_job(coll_id)
        self._tasks.every(lambda: CHECK_INTERVAL, self.check_nodes, "querycoord-check-nodes")
        self._tasks.every(lambda: CHANNEL_CHECK_INTERVAL, self.check_channels, "querycoord-check-channels")
        self._tasks.every(lambda: CHECK_INTERVAL, self.check_indexes, "querycoord-check-indexes")
        self._tasks.every(lambda: CHECK_INTERVAL, self.check_unsynced, "querycoord-check-unsynced")
        self._follow()

    async def stop(self) -> None:
        for t in self._jobs.values():
            t.cancel()
        await self._unfollow()
        await self._tasks.stop()

    def _follow(self) -> None:
        """Subscribe to the segment feed while anything is loaded (and only then)."""
        if self.loads and (self._feed is None or self._feed.done()):
            self._feed = asyncio.create_task(self._follow_segments(), name="querycoord-segment-feed")

    async def _unfollow(self) -> None:
        if self._feed is not None:
            self._feed.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._feed
            self._feed = None

    @property
    def datacoord(self):
        return self.registry.client(roles.DATACOORD)

    def node(self, node_id: int):
        return self.registry.client(roles.QUERYNODE, node_id)

    async def _live_nodes(self) -> list[int]:
        return sorted((await self.registry.clients(roles.QUERYNODE)).keys())

    def _pick(self, live: list[int], extra: dict[int, int] | None = None) -> int:
        count = dict.fromkeys(live, 0)
        for info in self.loads.values():
            for n in info.channel_nodes.values():
                if n in count:
                    count[n] += 1
        for n, c in (extra or {}).items():
            count[n] = count.get(n, 0) + c
        return min(live, key=lambda n: (count[n], n))

    async def _save(self, info: query_coord_pb2.LoadInfo) -> None:
        await self.kv.put(keys.loaded_collection_key(info.collectionID), info.SerializeToString())

    # Load / release ----------------------------------------------------------------------------
    async def _check_indexed(self, req: query_coord_pb2.LoadCollectionRequest) -> None:
        """Milvus loads a collection only when every vector field has an index."""
        rsp = await self.datacoord.DescribeIndex(data_coord_pb2.DescribeIndexRequest(collectionID=req.collectionID))
        indexed = {i.index.fieldID for i in rsp.infos} if merr.ok(rsp.status) else set()
        for f in schema_pb2.CollectionSchema.FromString(req.schema).fields:
            if typeutil.is_vector(f.data_type) and f.fieldID not in indexed:
                raise merr.MilvusError(
                    merr.INDEX_NOT_FOUND,
                    f"there is no vector index on field: [{f.name}], please create index firstly: "
                    f"collection={req.collection_name}: index not found",
                )

    async def load(self, req: query_coord_pb2.LoadCollectionRequest) -> None:
        await self._check_indexed(req)
        async with self._lock:
            cur = self.loads.get(req.collectionID)
            if cur is not None:
                if _add_partitions(cur, req.partitionIDs):
                    self.adding[req.collectionID] = self.adding.get(req.collectionID, 0) + 1
                    await self._save(cur)
                    # The partitions' flushed segments (their growing rows are on the nodes).
                    self._start_job(req.collectionID)
                return
            live = await self._live_nodes()
            if not live:
                raise merr.MilvusError(merr.NODE_NOT_FOUND, "no available query node to load collection")
            info = query_coord_pb2.LoadInfo(
                collectionID=req.collectionID,
                schema=req.schema,
                vchannels=list(req.vchannels),
                partitionIDs=list(req.partitionIDs),
                replicaID=req.collectionID,
                collection_name=req.collection_name,
            )
            extra: dict[int, int] = {}
            for ch in req.vchannels:
                n = self._pick(live, extra)
                info.channel_nodes[ch] = n
                extra[n] = extra.get(n, 0) + 1
            await self._save(info)
            self.loads[req.collectionID] = info
            self.served[req.collectionID] = set()
        self._follow()
        self._start_job(req.collectionID)

    def _start_job(self, coll_id: int) -> None:
        old = self._jobs.get(coll_id)
        if old is not None and not old.done():
            return
        self._jobs[coll_id] = asyncio.create_task(self._watch_all(coll_id), name=f"load-{coll_id}")

    async def _watch_all(self, coll_id: int) -> None:
        """Ask each channel's node to serve it; retried until it answers (or the load is gone)."""
        while (info := self.loads.get(coll_id)) is not None:
            pending = [ch for ch in info.vchannels if ch not in self.served.get(coll_id, set())]
            if not pending:
                added = self.adding.get(coll_id, 0)
                if not await self._catch_up(coll_id):
                    await asyncio.sleep(1.0)
                    continue
                if self.adding.get(coll_id, 0) == added:
                    self.adding.pop(coll_id, None)
                    return
                continue
            for ch in pending:
                node_id = info.channel_nodes[ch]
                try:
                    req = await recovery.watch_request(
                        self.kv, self.datacoord, coll_id, info.schema, ch, functools.partial(_loaded, info)
                    )
                    merr.check(await self.node(node_id).WatchDmChannels(req))
                    if self.loads.get(coll_id) is info and info.channel_nodes[ch] == node_id:
                        self.served.setdefault(coll_id, set()).add(ch)
                except (Exception, asyncio.CancelledError) as exc:
                    if stopping(exc):
                        raise
                    log.warning("watch channel failed; retrying", channel=ch, node=node_id, exc_info=True)
                    await asyncio.sleep(0.5)

    async def release(self, coll_id: int, partitions: list[int] | None = None) -> None:
        """ReleaseCollection, or (`partitions`) Milvus 2.5's ReleasePartitionJob: the loaded
        partitions among them are released — the whole collection once none is left loaded."""
        if partitions and coll_id in self.loads:
            every = await self._partitions_of(coll_id)
            async with self._lock:
                info = self.loads.get(coll_id)
                released = _release_partitions(info, partitions, every) if info is not None else None
                if released and info is not None:
                    await self._save(info)
            if released and info is not None:
                await self._release_on_nodes(coll_id, info, released)
            if released is not None:
                return
        async with self._lock:
            info = self.loads.get(coll_id)
            job = self._jobs.pop(coll_id, None)
            if job is not None:
                job.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await job
            self.loads.pop(coll_id, None)
            self.served.pop(coll_id, None)
            self.indexed.pop(coll_id, None)
            self.adding.pop(coll_id, None)
            self.unsynced = {k: m for k, m in self.unsynced.items() if k[0] != coll_id}
            await self.kv.delete(keys.loaded_collection_key(coll_id))
            if not self.loads:
                await self._unfollow()
        nodes = set(info.channel_nodes.values()) if info is not None else set()
        live = await self._live_nodes()
        for n in sorted(nodes | set(live)):
            try:
                await self.node(n).ReleaseCollection(internal_pb2.ReleaseCollectionRequest(collectionID=coll_id))
            except Exception:  # a dead node holds nothing once it is gone
                log.warning("release on query node failed", node=n, collection=coll_id, exc_info=True)

    async def _partitions_of(self, coll_id: int) -> list[int]:
        """The collection's partitions as RootCoord has them now."""
        resp = await self.registry.client(roles.ROOTCOORD).ShowPartitions(
            milvus_pb2.ShowPartitionsRequest(collectionID=coll_id)
        )
        merr.check(resp.status)
        return list(resp.partitionIDs)

    async def _release_on_nodes(self, coll_id: int, info: query_coord_pb2.LoadInfo, parts: list[int]) -> None:
        """The released partitions' sealed segments leave the nodes serving the collection."""
        req = query_node_pb2.ReleasePartitionsRequest(collectionID=coll_id, partitionIDs=parts)
        for n in sorted(set(info.channel_nodes.values())):
            try:
                merr.check(await self.node(n).ReleasePartitions(req))
            except Exception:  # a lost node holds nothing once it is gone; reads skip them anyway
                log.warning("release of partitions on a query node failed", node=n, exc_info=True)

    # State ------------------------------------------------------------------------------------
    def state(self, coll_id: int, partitions: list[int]) -> query_coord_pb2.GetLoadStateResponse:
        info = self.loads.get(coll_id)
        LS = common_pb2.LoadState
        if info is None or not all(_loaded(info, p) for p in partitions):
            return query_coord_pb2.GetLoadStateResponse(state=LS.LoadStateNotLoad)
        total = len(info.vchannels) or 1
        done = len(self.served.get(coll_id, set()))
        progress = 100 * done // total
        state = LS.LoadStateLoaded if done >= len(info.vchannels) else LS.LoadStateLoading
        if coll_id in self.adding:  # added partitions' flushed segments are still loading
            state, progress = LS.LoadStateLoading, min(progress, 99)
        return query_coord_pb2.GetLoadStateResponse(state=state, progress=progress, replicaID=info.replicaID)

    def leaders(self, coll_id: int) -> query_coord_pb2.GetShardLeadersResponse:
        info = self.loads.get(coll_id)
        if info is None:
            raise merr.MilvusError(merr.COLLECTION_NOT_LOADED, f"collection not loaded[collection={coll_id}]")
        resp = query_coord_pb2.GetShardLeadersResponse(
            partitionIDs=list(info.partitionIDs),
            replicaID=info.replicaID,
            released_partitionIDs=list(info.released_partitionIDs),
        )
        served = self.served.get(coll_id, set())
        for ch in info.vchannels:
            if ch not in served:
                raise merr.MilvusError(
                    merr.CHANNEL_NOT_AVAILABLE, f"channel not available[channel={ch}]: the collection is still loading"
                )
            resp.leaders.add(vchannel=ch, nodeID=info.channel_nodes[ch])
        return resp

    # Node failures ----------------------------------------------------------------------------
    async def check_nodes(self) -> None:
        if not self.loads:
            return
        live = await self._live_nodes()
        if not live:
            return
        moved: list[int] = []
        async with self._lock:
            for coll_id, info in self.loads.items():
                changed = False
                for ch, n in list(info.channel_nodes.items()):
                    if n not in live:
                        info.channel_nodes[ch] = self._pick(live)
                        self.served.get(coll_id, set()).discard(ch)
                        self.indexed.pop(coll_id, None)
                        changed = True
                        log.warning(
                            "channel moved from a lost query node", channel=ch, old=n, new=info.channel_nodes[ch]
                        )
                if changed:
                    await self._save(info)
                    moved.append(coll_id)
        for coll_id in moved:
            self._start_job(coll_id)

    async def check_channels(self) -> None:
        """Watch again the channels a node says it does not serve (any more)."""
        again: set[int] = set()
        for coll_id, info in list(self.loads.items()):
            by_node: dict[int, list[str]] = {}
            for ch in self.served.get(coll_id, set()):
                by_node.setdefault(info.channel_nodes[ch], []).append(ch)
            for node_id, chans in by_node.items():
                try:
                    rsp = await self.node(node_id).GetDataDistribution(
                        query_node_pb2.GetDataDistributionRequest(collectionID=coll_id)
                    )
                    merr.check(rsp.status)
                except Exception:  # noqa: BLE001 - a node away: check_nodes moves its channels
                    continue
                serving = {c.vchannel for c in rsp.channels if c.consuming}
                for ch in chans:
                    if ch not in serving and self.loads.get(coll_id) is info and info.channel_nodes[ch] == node_id:
                        log.warning(
                            "query node no longer serves a channel: watching it again", channel=ch, node=node_id
                        )
                        self.served.get(coll_id, set()).discard(ch)
                        again.add(coll_id)
        for coll_id in again:
            self._start_job(coll_id)

    # Indexes ------------------------------------------------------------------------------------
    async def check_indexes(self) -> None:
        """Send index builds that finished after their segment was loaded to its node (the
        segment is searched exactly until then)."""
        for coll_id, info in list(self.loads.items()):
            if len(self.served.get(coll_id, ())) < len(info.vchannels):
                continue
            files = await recovery.index_files(self.datacoord, coll_id)
            sent = self.indexed.setdefault(coll_id, set())
            new = [seg for seg, builds in files.items() if any(b not in sent for _, b, _ in builds)]
            if not new:
                continue
            for s in await recovery.segments_of(self.datacoord, coll_id, (SegmentState.Flushed,)):
                if s.ID in new and _loaded(info, s.partitionID) and s.insert_channel in info.channel_nodes:
                    await self._load(info, info.channel_nodes[s.insert_channel], [s])
                    sent.update(b for _, b, _ in files[s.ID])
                    self._mark(coll_id, s.insert_channel)  # a target in: what it replaced goes

    async def check_unsynced(self) -> None:
        """Sync again the channels whose last sync did not complete."""
        for coll_id, ch in sorted(self.unsynced):
            await self._sync(coll_id, ch)

    # Segment feed -----------------------------------------------------------------------------
    async def _follow_segments(self) -> None:
        client = CoordinatorClient.from_registry(self.registry)
        while True:
            try:
                async for ev in client.watch_segments():
                    await self._on_segment(ev)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.info("segment feed ended; resubscribing", exc_info=True)
            # Events may have been missed: the channels' next watch re-reads everything; served
            # channels are brought to what DataCoord holds now.
            await asyncio.sleep(0.5)
            for coll_id in list(self.loads):
                await self._sync_collection(coll_id)

    async def _catch_up(self, coll_id: int) -> bool:
        """Segments that changed while no feed was followed (a new leader, or between a channel's
        recovery listing and the subscription), and those of partitions added to the load: every
        channel synced with DataCoord's segments now (`_sync_channel`). False when a sync failed
        (the caller retries)."""
        return await self._sync_collection(coll_id)

    async def _on_segment(self, ev) -> None:
        """A segment changed: its channel's node is brought to what DataCoord holds NOW. The
        event only says which channel to look at: by the time it is handled (the feed may be
        seconds behind) the segment may have been compacted again and collected, its binlogs
        gone — acting on the event's own content would load it empty, or release its sources
        with no target left to name (their rows would vanish from reads)."""
        await afailpoint("querycoord.segment_event")  # received, not handled yet (a feed behind)
        await self._sync(ev.info.collectionID, ev.info.insert_channel)

    def _mark(self, coll_id: int, vchannel: str) -> None:
        self._marks += 1
        self.unsynced[(coll_id, vchannel)] = self._marks

    async def _sync(self, coll_id: int, vchannel: str) -> bool:
        """`_sync_channel`; one that fails is remembered and retried by `check_unsynced`."""
        started = self._marks
        try:
            await self._sync_channel(coll_id, vchannel)
        except Exception:
            log.warning("channel not in step with its segments yet; retrying", channel=vchannel, exc_info=True)
            self._mark(coll_id, vchannel)
            return False
        if self.unsynced.get((coll_id, vchannel), started + 1) <= started:
            del self.unsynced[(coll_id, vchannel)]
        return True

    async def _sync_collection(self, coll_id: int) -> bool:
        """Every channel of the collection synced; False when one failed (it is retried)."""
        info = self.loads.get(coll_id)
        synced = [await self._sync(coll_id, ch) for ch in (list(info.vchannels) if info is not None else [])]
        return all(synced)

    async def _sync_channel(self, coll_id: int, vchannel: str) -> None:
        """Milvus' target observer and handoff, for one channel: every segment DataCoord holds
        Flushed on it now (of the loaded partitions) is loaded on the channel's node, and only
        once all are in does the node release the sealed segments of the channel that are not
        Flushed any more (compacted away, dropped). A compaction target installed on the node
        replaces its sources in one step (`QueryNode._install`); a load that fails leaves every
        segment served and fails the sync (the next event, catch-up or resubscription retries).
        So a read sees the channel's rows whole at every moment, through any lag of the feed."""
        info = self.loads.get(coll_id)
        if info is None or vchannel not in info.channel_nodes:
            return
        node_id = info.channel_nodes[vchannel]
        node = self.node(node_id)
        # The node's sealed segments BEFORE the listing: one held then and not Flushed in the
        # listing after is gone for good (a segment never becomes Flushed again).
        dist = await node.GetDataDistribution(query_node_pb2.GetDataDistributionRequest(collectionID=coll_id))
        merr.check(dist.status)
        held = {d.segmentID for d in dist.segments if d.vchannel == vchannel}
        flushed = [
            s
            for s in await recovery.segments_of(self.datacoord, coll_id, (SegmentState.Flushed,))
            if s.insert_channel == vchannel
        ]
        wanted = [s for s in flushed if _loaded(info, s.partitionID)]
        await self._load(info, node_id, [s for s in wanted if s.ID not in held])
        unloaded = [s.ID for s in flushed if not _loaded(info, s.partitionID)]
        gone = sorted(held - {s.ID for s in flushed})
        if (unloaded or gone) and not await self.leader_check():
            # A node retires what it is told to release for good. Decided from the listing of a
            # DataCoord that may share this process's stale memory (paused past the lease), a
            # release is sent only while this QueryCoord still leads.
            raise merr.MilvusError(merr.SERVICE_NOT_READY, "querycoord lost its leader lock")
        if unloaded:  # flushed, of a partition not loaded: their rows are in binlogs, no growing copy kept
            merr.check(
                await node.ReleaseSegments(
                    query_node_pb2.ReleaseSegmentsRequest(
                        collectionID=coll_id, segmentIDs=unloaded, streaming_only=True
                    )
                )
            )
        if gone and self.loads.get(coll_id) is info and info.channel_nodes.get(vchannel) == node_id:
            merr.check(
                await node.ReleaseSegments(query_node_pb2.ReleaseSegmentsRequest(collectionID=coll_id, segmentIDs=gone))
            )

    async def _load(self, info: query_coord_pb2.LoadInfo, node_id: int, segs: list[internal_pb2.SegmentInfo]) -> None:
        """Load Flushed segments on a node (one at a time: each is installed as soon as it is
        read); the node skips the ones it holds, but for index files new to it."""
        for s in segs:
            req = query_node_pb2.LoadSegmentsRequest(collectionID=info.collectionID, schema=info.schema)
            req.segments.append(await recovery.load_info(self.kv, self.datacoord, s))
            merr.check(await self.node(node_id).LoadSegments(req))


# Loaded partitions (Milvus' LoadType): `partitionIDs` lists them (LoadPartitions), or is empty
# for the whole collection (LoadCollection), new partitions included, less `released_partitionIDs`.
def _loaded(info: query_coord_pb2.LoadInfo, part: int) -> bool:
    if info.partitionIDs:
        return part in info.partitionIDs
    return part not in info.released_partitionIDs


def _add_partitions(info: query_coord_pb2.LoadInfo, parts) -> bool:
    """A load on top of a loaded collection: LoadCollection (no `parts`) loads every partition,
    LoadPartitions adds `parts`. Returns whether anything changed."""
    before = (list(info.partitionIDs), list(info.released_partitionIDs))
    if not parts:
        del info.partitionIDs[:]
        del info.released_partitionIDs[:]
    elif info.partitionIDs:
        merged = sorted(set(info.partitionIDs) | set(parts))
        del info.partitionIDs[:]
        info.partitionIDs.extend(merged)
    else:
        left = [p for p in info.released_partitionIDs if p not in set(parts)]
        del info.released_partitionIDs[:]
        info.released_partitionIDs.extend(left)
    return before != (list(info.partitionIDs), list(info.released_partitionIDs))


def _release_partitions(info: query_coord_pb2.LoadInfo, parts, every: list[int]) -> list[int] | None:
    """Release the loaded ones of `parts` (`every`: the collection's partitions). Returns them;
    [] when none was loaded; None when no partition would be left loaded (release the collection)."""
    loaded = list(info.partitionIDs) or [p for p in every if p not in info.released_partitionIDs]
    doomed = [p for p in loaded if p in set(parts)]
    if not doomed:
        return []
    if len(doomed) == len(loaded):
        return None
    if info.partitionIDs:
        del info.partitionIDs[:]
        info.partitionIDs.extend(p for p in loaded if p not in set(doomed))
    else:
        kept = {p for p in info.released_partitionIDs if p in set(every)}  # dropped ones go
        del info.released_partitionIDs[:]
        info.released_partitionIDs.extend(sorted(kept | set(doomed)))
    return doomed
