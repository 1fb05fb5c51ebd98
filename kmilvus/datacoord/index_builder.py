"""DataCoord's index builder (Milvus 2.3's datacoord indexBuilder): one index build per flushed
segment, run by an IndexNode (kmilvus.indexnode), recorded here. It reads and commits DataCoord's
segment and index meta, so it lives with them; the IndexNode needs neither.

`reconcile()` compares the meta with what should exist and acts, so it is the whole recovery
story: every live FieldIndex × every Flushed segment with rows needs a Finished SegmentIndex
(missing or InProgress-but-not-followed → assigned, with the same build ID); a SegmentIndex whose
segment is gone (compacted away and collected, dropped) or whose index was dropped loses its
files, then its key. It runs when a segment changes, when an index is created or dropped, and on
a timer.

A build is assigned to the IndexNode with the most free slots (GetJobStats), one assignment at a
time, each with a new `index_version` recorded InProgress before CreateJob: the version names the
attempt's file (`index_files/{coll}/{part}/{seg}/{buildID}/{version}/index`), so a job assigned
again after its node went away never shares a file with the new attempt, and the garbage
collector removes what the old one still writes. The builder polls QueryJobs until the job is
Finished or Failed, then commits the SegmentIndex in one transaction guarded on the segment and
the index still existing, and drops the job from the node. A node whose session is gone, or that
no longer knows the job (restarted), gets the build assigned again (docs/architecture/indexes.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from pymilvus.grpc_gen import schema_pb2

from kmilvus import components as roles
from kmilvus.datacoord.index_meta import FieldIndex, IndexMeta, IndexState, SegmentIndex
from kmilvus.datacoord.meta import SegmentMeta, SegmentState
from kmilvus.log import get_logger
from kmilvus.meta import catalog as keys
from kmilvus.proto import index_node_pb2
from kmilvus.storage import paths
from kmilvus.types import IndexNodeClient
from kmilvus.util import merr, typeutil
from kmilvus.util.failpoint import afailpoint
from kmilvus.util.retry import Backoff
from kmilvus.util.tasks import BackgroundTasks

log = get_logger(__name__)
RECONCILE_EVERY = 2.0  # seconds; changes also wake it at once
POLL_FIRST, POLL_MAX = 0.02, 1.0  # QueryJobs backoff while a job runs (small segments build in ms)
SAY_WAITING_EVERY = 60.0  # seconds between warnings while builds wait for an IndexNode to exist
NO_NODE_WAIT = 1.0  # seconds between looks for an IndexNode with a free slot
REASSIGN_FIRST, REASSIGN_MAX = 0.2, 10.0  # back-off between attempts of one build (a node refusing every job)
DROP_JOB_WAIT = 5.0  # seconds a cancelled build waits for its node to drop the job
QUEUED_PER_NODE = 1  # jobs a node holds beyond its slots, so it never idles while DataCoord polls
MAX_ATTEMPTS = 10  # attempts of one build no IndexNode finishes (an OOM every time) before it is Failed


class IndexBuilder:
    def __init__(
        self,
        meta: SegmentMeta,
        index_meta: IndexMeta,
        registry: roles.Registry,
        alloc_id: Callable[[], Awaitable[int]],
        *,
        cluster: str,
        dropping: Callable[[int], bool] = lambda coll: False,
        remove_files: Callable[[list[SegmentIndex]], Awaitable[list[SegmentIndex]]],
        current_schema: Callable[[int], Awaitable[schema_pb2.CollectionSchema | None]] | None = None,
    ):
        """`remove_files`: deletes the files of those builds etcd says are garbage (their
        segment or index gone), returns them — DataCoord's fenced remover, not memory.
        `current_schema`: a collection's schema now (what binlogs written before a field was
        added read as, for an index on that field)."""
        self.remove_files = remove_files
        self.current_schema = current_schema
        self.meta = meta
        self.index_meta = index_meta
        self.registry = registry
        self.cluster = cluster
        self.alloc_id = alloc_id
        self.dropping = dropping
        self._assigning = asyncio.Lock()  # one assignment at a time: each sees the last one's slot taken
        self._running: dict[tuple[int, int], asyncio.Task[None]] = {}  # (segmentID, indexID) → build
        self._wake = asyncio.Event()
        self._tasks = BackgroundTasks()
        self._lock = asyncio.Lock()
        self._told_waiting = 0.0  # monotonic time builds were last said to wait for an IndexNode
        self._stopping = False  # builds cancelled by stop() leave their jobs running (a successor follows them)

    def start(self) -> None:
        self._tasks.spawn(self._loop(), "index-reconcile")
        self._tasks.spawn(self._follow_segments(), "index-segment-feed")

    async def stop(self) -> None:
        self._stopping = True
        await self._tasks.stop()
        await self.cancel(list(self._running))

    def wake(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RECONCILE_EVERY):  # not wait_for: it may swallow a cancel (3.11)
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception:
                log.error("index reconcile failed", exc_info=True)

    async def _follow_segments(self) -> None:
        """Wake on every segment meta change (SegmentMeta.changed, not the operator's feed)."""
        while True:
            async with self.meta.changed:
                await self.meta.changed.wait()
            self.wake()

    async def cancel(self, builds: list[tuple[int, int]]) -> None:
        tasks = [t for b in builds if (t := self._running.pop(b, None)) is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def cancel_indexes(self, index_ids: set[int]) -> None:
        """Stop following every build of these indexes (dropped, or their collection is); their
        IndexNodes drop the jobs."""
        await self.cancel([k for k in list(self._running) if k[1] in index_ids])

    # Reconcile ----------------------------------------------------------------------------
    async def reconcile(self) -> None:
        async with self._lock:
            await self._collect_garbage()
            self._schedule_builds()

    def _schedule_builds(self) -> None:
        for seg_id, index_id in list(self._running):
            seg = self.meta.segments.get(seg_id)
            if seg is None or seg.info.state != SegmentState.Flushed:  # compacted away, dropped
                task = self._running.pop((seg_id, index_id))
                task.cancel()  # its job is dropped; its build, if recorded, goes with the segment
        for ix in list(self.index_meta.indexes.values()):
            if ix.deleted or self.dropping(ix.collectionID):
                continue
            for seg in self.meta.by_collection(ix.collectionID, (SegmentState.Flushed,)):
                if seg.info.num_of_rows <= 0 or (seg.id, ix.indexID) in self._running:
                    continue
                si = self.index_meta.build_of(seg.id, ix.indexID)
                if si is not None and si.state in (IndexState.Finished, IndexState.Failed):
                    continue
                key = (seg.id, ix.indexID)
                self._running[key] = asyncio.create_task(self._build(ix, seg, si), name=f"index-build-{seg.id}")

                def forget(t: asyncio.Task[None], k: tuple[int, int] = key) -> None:
                    self._running.pop(k, None)
                    if not t.cancelled() and (exc := t.exception()) is not None:  # the next pass tries again
                        log.error("index build not followed to its end", segment=k[0], exc_info=exc)

                self._running[key].add_done_callback(forget)

    async def _collect_garbage(self) -> None:
        """Builds of segments that are gone or of dropped indexes: files first, then keys."""
        stale = []
        for (seg_id, index_id), si in list(self.index_meta.segment_indexes.items()):
            ix = self.index_meta.indexes.get(index_id)
            seg = self.meta.segments.get(seg_id)
            if ix is None or ix.deleted or seg is None:
                stale.append(si)
        if stale:
            await self.cancel([(si.segmentID, si.indexID) for si in stale])
            stale = await self.remove_files(stale)  # etcd may still have what memory lost
        gone = {(si.segmentID, si.indexID) for si in stale}
        built = {iid for (sid, iid) in self.index_meta.segment_indexes if (sid, iid) not in gone}
        dropped = [ix for ix in self.index_meta.indexes.values() if ix.deleted and ix.indexID not in built]
        if stale or dropped:
            await self.index_meta.remove_builds(stale, dropped)
            log.info("index files collected", builds=len(stale), indexes=len(dropped))

    # Build --------------------------------------------------------------------------------
    async def _build(self, ix: FieldIndex, seg, previous: SegmentIndex | None) -> None:
        """Follow one build to its outcome: resume the attempt `previous` records if its node
        still runs it, else assign a new attempt, until an IndexNode answers Finished or Failed."""
        i = seg.info
        seg_key = keys.segment_key(i.collectionID, i.partitionID, i.ID)
        si = SegmentIndex()
        if previous is not None:
            si.CopyFrom(previous)
        else:
            si.collectionID, si.partitionID, si.segmentID = i.collectionID, i.partitionID, i.ID
            si.indexID, si.fieldID, si.buildID = ix.indexID, ix.fieldID, await self.alloc_id()
            si.state = IndexState.InProgress
        node: IndexNodeClient | None = None
        again = Backoff(REASSIGN_FIRST, REASSIGN_MAX)
        lost = 0  # attempts no IndexNode finished (its node went, forgot it, or asked for a retry)
        try:
            if previous is not None and si.index_version > 0 and await self._alive(si.nodeID):
                node = self.registry.client(roles.INDEXNODE, si.nodeID)
            while True:
                if node is None:
                    assigned = await self._assign(ix, seg, si, seg_key)
                    if assigned is None:
                        return  # the segment or the index went meanwhile
                    node = assigned
                info = await self._follow(node, si)
                if info is not None and info.state != IndexState.Retry:
                    await self._record(ix, si, info, seg_key)
                    await self._drop_job(node, si.buildID)
                    return
                # The node went away, forgot the job, or failed it for a reason worth another try
                # (storage, memory): a new attempt, not at once, and not forever. Only a node that
                # answered holds anything to drop (a gone one would only be waited for).
                if info is not None:
                    await self._drop_job(node, si.buildID)
                node = None
                lost += 1
                if lost >= MAX_ATTEMPTS:
                    why = info.fail_reason if info is not None else "its IndexNode went away"
                    failed = index_node_pb2.IndexTaskInfo(
                        state=IndexState.Failed, fail_reason=f"{lost} attempts did not finish; the last: {why}"
                    )
                    await self._record(ix, si, failed, seg_key)
                    return
                await again.sleep()
        except asyncio.CancelledError:
            if node is not None and not self._stopping:  # the index or segment went: the node need not finish
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._drop_job(node, si.buildID), DROP_JOB_WAIT)
            raise

    async def _assign(self, ix: FieldIndex, seg, si: SegmentIndex, seg_key: str) -> IndexNodeClient | None:
        """A new attempt of the build on the IndexNode with the most free slots, recorded
        InProgress (with its version and node) before the node hears of it; None when the
        segment or the index is gone."""
        i = seg.info
        async with self._assigning:
            node_id, node = await self._free_node()
            si.index_version += 1
            si.nodeID = node_id
            si.state = IndexState.InProgress
            if not await self.index_meta.save_build(si, seg_key):
                return None
            req = index_node_pb2.CreateJobRequest(
                clusterID=self.cluster,
                buildID=si.buildID,
                index_version=si.index_version,
                collectionID=i.collectionID,
                partitionID=i.partitionID,
                segmentID=i.ID,
                fieldID=ix.fieldID,
                indexID=ix.indexID,
                index_name=ix.index_name,
                data_paths=[b.log_path for b in seg.binlogs.values()],
                index_params=ix.index_params,
                index_file_key=paths.index_file_key(i.collectionID, i.partitionID, i.ID, si.buildID, si.index_version),
            )
            schema = await self.current_schema(i.collectionID) if self.current_schema else None
            if (added := typeutil.added_field(schema, ix.fieldID)) is not None:
                req.added_field.CopyFrom(added)
            try:
                merr.check(await node.CreateJob(req))
            except Exception as exc:  # noqa: BLE001 - the node is away or refused: the next poll assigns again
                log.warning("index job not created", node=node_id, build=si.buildID, error=repr(exc))
            log.debug("index job assigned", node=node_id, build=si.buildID, version=si.index_version)
            return node

    async def _free_node(self) -> tuple[int, IndexNodeClient]:
        """The IndexNode with the most free slots (its slots and `QUEUED_PER_NODE` more, less
        the jobs it runs or queues), waiting until one has a slot."""
        while True:
            best: tuple[int, int, IndexNodeClient] | None = None
            nodes = await self.registry.clients(roles.INDEXNODE)
            for node_id, client in sorted(nodes.items()):
                try:
                    st = await client.GetJobStats(index_node_pb2.GetJobStatsRequest())
                    merr.check(st.status)
                except Exception as exc:  # noqa: BLE001 - this node is away; another may do
                    log.debug("IndexNode did not answer GetJobStats", node=node_id, error=repr(exc))
                    continue
                free = st.task_slots + QUEUED_PER_NODE - st.in_progress_job_num - st.enqueue_job_num
                if free > 0 and (best is None or free > best[0]):
                    best = (free, node_id, client)
            if best is not None:
                return best[1], best[2]
            now = time.monotonic()
            if not nodes and now - self._told_waiting >= SAY_WAITING_EVERY:  # none deployed: said, not hidden
                self._told_waiting = now
                log.warning("index builds wait: no IndexNode is running (kmilvus run indexnode)")
            await asyncio.sleep(NO_NODE_WAIT)

    async def _alive(self, node_id: int) -> bool:
        return bool(await self.registry.address(roles.INDEXNODE, node_id))

    async def _follow(self, node: IndexNodeClient, si: SegmentIndex) -> index_node_pb2.IndexTaskInfo | None:
        """Poll the job until it ends (its info: Finished, Failed or Retry); None when it has to
        be assigned again: the node's session is gone, or the node does not run this attempt
        (it restarted, or never received it). A node that does not answer while its session
        lives is asked again: a long build is not thrown away for a slow answer."""
        backoff = Backoff(POLL_FIRST, POLL_MAX)
        query = index_node_pb2.QueryJobsRequest(clusterID=self.cluster, buildIDs=[si.buildID])
        while True:
            await backoff.sleep()
            try:
                resp = await node.QueryJobs(query)
                merr.check(resp.status)
            except Exception as exc:  # noqa: BLE001 - judged by the node's session
                if not await self._alive(si.nodeID):
                    log.warning("IndexNode gone; assigning its job again", node=si.nodeID, build=si.buildID)
                    return None
                log.info("IndexNode did not answer QueryJobs", node=si.nodeID, build=si.buildID, error=repr(exc))
                continue
            info = resp.index_infos[0] if resp.index_infos else None
            if info is None or info.index_version != si.index_version or info.state == IndexState.IndexStateNone:
                log.warning("IndexNode does not run the job; assigning it again", node=si.nodeID, build=si.buildID)
                return None
            if info.state in (IndexState.Finished, IndexState.Failed, IndexState.Retry):
                if info.state == IndexState.Retry:
                    log.warning("index build to be tried again", build=si.buildID, reason=info.fail_reason)
                return info

    async def _record(self, ix: FieldIndex, si: SegmentIndex, info: index_node_pb2.IndexTaskInfo, seg_key: str) -> None:
        """Commit the outcome; a build whose segment or index went meanwhile has its files removed."""
        await afailpoint("datacoord.index.before_record")  # the node is done; nothing recorded yet
        si.state = info.state
        if info.state == IndexState.Failed:
            si.fail_reason = info.fail_reason
            log.error("index build failed", segment=si.segmentID, index=ix.index_name, reason=info.fail_reason)
        else:
            del si.index_file_keys[:]
            si.index_file_keys.extend(info.index_file_keys)
            si.serialized_size, si.num_rows = info.serialized_size, info.num_rows
        if not await self.index_meta.save_build(si, seg_key):
            # Dropped while building: nothing refers to the files; remove them now.
            await self.remove_files([si])
            return
        if info.state == IndexState.Finished:
            log.info("segment index recorded", segment=si.segmentID, index=ix.index_name, rows=si.num_rows)

    async def _drop_job(self, node: IndexNodeClient, build_id: int) -> None:
        """The node may forget the job (recorded, or no longer wanted); a node that is away has
        forgotten it already, or will when its session is found lost."""
        try:
            await node.DropJobs(index_node_pb2.DropJobsRequest(clusterID=self.cluster, buildIDs=[build_id]))
        except Exception as exc:  # noqa: BLE001 - see above
            log.debug("DropJobs not delivered", build=build_id, error=repr(exc))
