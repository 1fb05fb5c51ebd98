"""vchannel → DataNode assignment (Milvus' datacoord ChannelManager).

The assignment lives in etcd (`channel-watch/{vchannel}` → node ID, watch version and the
channel's info); when a DataNode's session disappears its channels go to the remaining nodes,
which resume them from the channel checkpoint. Every assignment bumps the channel's watch
version: DataCoord accepts time ticks and binlogs for a channel only from its current watch
(node and version), so a DataNode that was paused or cut off while its channel moved is fenced.

A watch record is committed only while its collection exists (one transaction comparing
RootCoord's collection key): a watch or reassignment racing DropCollection (RootCoord's start-up
re-watch of the collections it knew, a retry of a failed watch) cannot write a dropped
collection's channel back after DataCoord's part of the drop removed it, and no node is asked
to watch it (docs/architecture/drop.md).
"""

from __future__ import annotations

import asyncio
import json

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus.datacoord.meta import SegmentMeta, SegmentState
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_node_pb2, internal_pb2
from kmilvus.sessionutil import list_sessions, watch_sessions
from kmilvus.util import merr
from kmilvus.util.retry import Backoff, supervise
from kmilvus.util.tasks import BackgroundTasks

log = get_logger(__name__)


class ChannelManager:
    def __init__(self, kv: EtcdKV, meta: SegmentMeta, registry: roles.Registry, on_assigned=None):
        self.on_assigned = on_assigned  # called with a vchannel once a (new) node runs it
        self.kv = kv
        self.meta = meta
        self.registry = registry
        self.assign: dict[str, int] = {}  # vchannel → node (0: none)
        self.records: dict[str, bytes] = {}  # vchannel → its watch record as persisted
        self.versions: dict[str, int] = {}  # vchannel → current watch version
        self.infos: dict[str, internal_pb2.ChannelWatchInfo] = {}
        self._schemas: dict[int, schema_pb2.CollectionSchema | None] = {}  # schema_of, parsed once
        self._of_collection: dict[int, dict[str, None]] = {}  # collection → its vchannels, in order
        self.nodes: set[int] = set()
        self._lock = asyncio.Lock()
        self._tasks = BackgroundTasks()
        self._retrying = False
        self.ready = asyncio.Event()

    async def load(self) -> None:
        for key, raw in await self.kv.get_prefix(keys.CHANNEL_WATCH_PREFIX):
            rec = json.loads(raw)
            ch = key.rsplit("/", 1)[1]
            self.assign[ch] = rec["node"]
            self.versions[ch] = rec.get("version", 0)
            self.records[ch] = raw
            self.infos[ch] = internal_pb2.ChannelWatchInfo.FromString(bytes.fromhex(rec["info"]))
        self._schemas.clear()
        self._of_collection.clear()
        for ch, info in self.infos.items():
            self._of_collection.setdefault(info.collectionID, {})[ch] = None

    def start(self) -> None:
        self._tasks.spawn(supervise("datacoord-watch-datanodes", self._watch_nodes), "datacoord-watch-datanodes")

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _persist(self, ch: str) -> bool:
        """Commit the channel's watch record while its collection exists; False (nothing
        written) once RootCoord dropped it."""
        info = self.infos[ch]
        rec = {"node": self.assign[ch], "version": self.versions.get(ch, 0), "info": info.SerializeToString().hex()}
        raw = json.dumps(rec).encode()
        if not await self.kv.txn(
            [Op.put(keys.channel_watch_key(ch), raw)], [Cmp.exists(keys.collection_key(info.collectionID))]
        ):
            log.info("channel of a dropped collection: not watched", channel=ch, collection=info.collectionID)
            return False
        self.records[ch] = raw
        return True

    async def _watch_nodes(self) -> None:
        first = True
        async for kind, sid, _ in watch_sessions(self.kv, roles.DATANODE):
            async with self._lock:
                if kind == "add":
                    self.nodes.add(sid)
                else:
                    self.nodes.discard(sid)
                    log.warning("datanode gone; reassigning its channels", node=sid)
            backoff = Backoff(0.1, 2.0)
            while True:  # etcd away: keep the event (the watch must not restart and lose it)
                try:
                    await self.rebalance()
                    break
                except Exception as exc:  # noqa: BLE001
                    log.warning("rebalance failed; retrying", error=repr(exc))
                    await backoff.sleep()
            if first:
                self.ready.set()
                first = False

    def channels_of(self, coll_id: int) -> list[str]:
        return list(self._of_collection.get(coll_id, ()))

    def collections(self) -> set[int]:
        """Every collection with a watched channel."""
        return set(self._of_collection)

    async def current_schema(self, coll_id: int) -> schema_pb2.CollectionSchema | None:
        """The collection's schema as RootCoord has it now (a field may have been added since
        its channels were watched: what a DataNode is handed and a job or an index build reads
        by must have it); None once RootCoord no longer has the collection. Also kept for
        `schema_of`."""
        resp = await self.registry.client(roles.ROOTCOORD).DescribeCollection(
            milvus_pb2.DescribeCollectionRequest(collectionID=coll_id)
        )
        if resp.status.code == merr.COLLECTION_NOT_FOUND[0]:
            return None
        merr.check(resp.status)
        known = self.schema_of(coll_id)
        if known is not None and resp.schema.version > known.version:
            self._schemas[coll_id] = resp.schema
        return resp.schema

    def schema_of(self, coll_id: int) -> schema_pb2.CollectionSchema | None:
        """The collection's schema as its channels were watched with, or a newer one seen by
        `current_schema` (None: not watched). Parsed once: policy passes ask for every
        collection's."""
        if coll_id not in self._schemas:
            self._schemas[coll_id] = next(
                (
                    schema_pb2.CollectionSchema.FromString(self.infos[ch].schema)
                    for ch in self._of_collection.get(coll_id, ())
                    if self.infos[ch].schema
                ),
                None,
            )
        return self._schemas[coll_id]

    async def watch(self, info: internal_pb2.ChannelWatchInfo) -> None:
        """Register a new vchannel (idempotent) and hand it to a DataNode if one is alive;
        `collection_not_found` once RootCoord dropped its collection."""
        async with self._lock:
            if info.vchannel not in self.infos:
                self.infos[info.vchannel] = info
                self.assign[info.vchannel] = 0
                if not await self._persist(info.vchannel):
                    del self.infos[info.vchannel], self.assign[info.vchannel]
                    raise merr.collection_not_found(info.collectionID)
                self._of_collection.setdefault(info.collectionID, {})[info.vchannel] = None
                self._schemas.pop(info.collectionID, None)
            if not self.nodes:  # the session watch may not have caught up yet
                self.nodes.update(await list_sessions(self.kv, roles.DATANODE))
        await self.rebalance()

    async def rebalance(self) -> None:
        """Give every channel without a live node to the least-loaded live node. A watch that
        fails is retried in the background until it succeeds."""
        if await self._assign_orphans():
            self._retry_later()

    def _retry_later(self) -> None:
        if not self._retrying:
            self._retrying = True
            self._tasks.spawn(self._retry_orphans(), "datacoord-rewatch")

    async def rewatch(self, ch: str, node: int) -> None:
        """`node` reports it no longer runs `ch`, which it holds under the current watch (it
        gave the channel up after a commit was refused): hand the channel out again under a
        new watch version, to whichever node is least loaded."""
        async with self._lock:
            if self.assign.get(ch) != node:
                return  # moved meanwhile
            self.assign[ch] = 0
        log.warning("datanode no longer runs its channel; watching it again", channel=ch, node=node)
        try:
            await self.rebalance()
        except Exception as exc:  # noqa: BLE001 - etcd away: the background retry hands it out
            log.warning("rebalance failed; retrying", error=repr(exc))
            self._retry_later()

    async def _retry_orphans(self) -> None:
        """Retry failed watches (a busy node, a file collected while the node read it): waiting
        for the next DataNode session event instead would leave the channel without a node in a
        quiet cluster, and every later flush of its collection waiting forever."""
        backoff = Backoff(0.2, 5.0)
        try:
            while True:
                await backoff.sleep()
                try:
                    if not await self._assign_orphans():
                        return
                except Exception as exc:  # noqa: BLE001 - etcd away: try again later
                    log.warning("rebalance failed; retrying", error=repr(exc))
        finally:
            self._retrying = False

    async def _assign_orphans(self) -> int:
        """One pass of `rebalance`; returns how many watches failed."""
        failed = 0
        async with self._lock:
            orphans = [ch for ch, n in self.assign.items() if n not in self.nodes]
            for ch in orphans:
                if not self.nodes:
                    self.assign[ch] = 0
                    continue
                load = dict.fromkeys(self.nodes, 0)
                for n in self.assign.values():
                    if n in load:
                        load[n] += 1
                node = min(load, key=lambda n: (load[n], n))
                # The new version is persisted before any node acts under it: a restarted
                # DataCoord never hands out a version twice.
                self.versions[ch] = self.versions.get(ch, 0) + 1
                self.assign[ch] = 0
                if not await self._persist(ch):
                    continue  # dropped: DataCoord's part of the drop forgets the channel
                try:
                    await self._send_watch(node, ch)
                except Exception as exc:  # noqa: BLE001 - retried by `_retry_orphans`
                    log.warning("watch channel failed", channel=ch, node=node, error=str(exc))
                    failed += 1
                    continue
                self.assign[ch] = node
                if not await self._persist(ch):
                    continue  # dropped meanwhile: the node's flowgraph ends at DropCollection
                if self.on_assigned is not None:
                    self.on_assigned(ch)
        return failed

    async def _send_watch(self, node: int, ch: str) -> None:
        """WatchDmChannels with the channel's checkpoint and the state of its segments.

        Built under the meta's write lock, after the new watch version is persisted: a
        SaveBinlogPaths of the previous owner has then either committed and updated the memory
        read here, or will be refused by its watch compare. Read without the lock, a save
        committed in etcd but not yet applied in memory is missing from the watch, and the new
        owner replays its rows into a second binlog (duplicates found by bench/chaos.py)."""
        schema = await self.current_schema(self.infos[ch].collectionID)
        async with self.meta.write_lock:
            info = self._watch_info(ch)
        if schema is not None:
            info.schema = schema.SerializeToString()
        client = self.registry.client(roles.DATANODE, node)
        merr.check(await client.WatchDmChannels(data_node_pb2.WatchDmChannelsRequest(channels=[info])))
        log.info("channel assigned", channel=ch, node=node)

    def _watch_info(self, ch: str) -> internal_pb2.ChannelWatchInfo:
        info = internal_pb2.ChannelWatchInfo()
        info.CopyFrom(self.infos[ch])
        info.watch_version = self.versions.get(ch, 0)
        cp = self.meta.checkpoints.get(ch)
        if cp is not None:
            info.seek_position.CopyFrom(cp)
        del info.unflushed_segments[:]
        del info.flushed_segmentIDs[:]
        l0 = self.meta.l0_positions.get(ch)
        if l0 is not None:
            info.l0_position.CopyFrom(l0)
        for s in self.meta.by_channel(ch):
            if s.info.state in (SegmentState.Flushed,):
                info.flushed_segmentIDs.append(s.id)
            elif s.info.state == SegmentState.Dropped:
                info.dropped_segmentIDs.append(s.id)
            else:
                info.unflushed_segments.append(s.info)
        return info

    async def unwatch(self, channels: list[str], drop: bool) -> None:
        """Stop the flowgraphs (drop: discard their buffers) and forget the channels."""
        by_node: dict[int, list[str]] = {}
        async with self._lock:
            for ch in channels:
                node = self.assign.pop(ch, None)
                gone = self.infos.pop(ch, None)
                if gone is not None:
                    self._schemas.pop(gone.collectionID, None)
                    left = self._of_collection.get(gone.collectionID, {})
                    left.pop(ch, None)
                    if not left:
                        self._of_collection.pop(gone.collectionID, None)
                self.versions.pop(ch, None)
                self.records.pop(ch, None)
                if node:
                    by_node.setdefault(node, []).append(ch)
        for node, chans in by_node.items():
            if node not in self.nodes:
                continue
            try:
                client = self.registry.client(roles.DATANODE, node)
                merr.check(
                    await client.UnwatchDmChannels(data_node_pb2.UnwatchDmChannelsRequest(vchannels=chans, drop=drop))
                )
            except Exception as exc:  # noqa: BLE001 - a dead node has nothing left to stop
                log.warning("unwatch failed", node=node, channels=chans, error=str(exc))

    def node_of(self, ch: str) -> int:
        return self.assign.get(ch, 0)

    def watch_guard(self, ch: str) -> Cmp:
        """A transaction compare that holds only while `ch`'s watch is the one seen now: a
        commit checked against the current watch cannot land after the channel moved."""
        return Cmp.value_eq(keys.channel_watch_key(ch), self.records.get(ch, b""))

    def is_current_watch(self, ch: str, node: int, version: int) -> bool:
        """Whether `node` acts on `ch` under its current watch (not a stale one)."""
        n = self.assign.get(ch, 0)
        return n != 0 and n == node and self.versions.get(ch, 0) == version
