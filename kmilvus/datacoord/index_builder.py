"""DataCoord's index builder (Milvus 2.3's datacoord indexBuilder, with the IndexNode's work):
one index build per flushed segment, run inside DataCoord's process with bounded concurrency.
It reads and commits DataCoord's segment and index meta, so it lives with them.

`reconcile()` compares the meta with what should exist and acts, so it is the whole recovery
story: every live FieldIndex × every Flushed segment with rows needs a Finished SegmentIndex
(missing or InProgress-but-not-running → (re)built with the same build ID, its files
overwritten); a SegmentIndex whose segment is gone (compacted away and collected, dropped) or
whose index was dropped loses its files, then its key. It runs when a segment changes, when an
index is created or dropped, and on a timer.

A build reads only the indexed column (vector or scalar) of the segment's insert binlogs (log-ID
order = the row offsets a QueryNode loads), converts a vector column as its type says
(kmilvus.index.vectors: dense vectors as float32, binary as packed bits, sparse as rows of pairs),
builds it (or a kmilvus.index.scalar_index) in a thread, writes
`index_files/{coll}/{part}/{seg}/{buildID}/index`, then commits the SegmentIndex Finished in one
transaction guarded on the segment and the index still existing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from pymilvus.grpc_gen import schema_pb2

from kmilvus import index as kindex
from kmilvus.datacoord.index_meta import FieldIndex, IndexMeta, IndexState, SegmentIndex, params_of
from kmilvus.datacoord.meta import SegmentMeta, SegmentState
from kmilvus.index import params as P
from kmilvus.index import scalar_index, scalar_params
from kmilvus.index import vectors as kvectors
from kmilvus.log import get_logger
from kmilvus.meta import catalog as keys
from kmilvus.storage import binlog, paths
from kmilvus.util import memory, typeutil
from kmilvus.util.failpoint import afailpoint
from kmilvus.util.tasks import BackgroundTasks

log = get_logger(__name__)
RECONCILE_EVERY = 2.0  # seconds; changes also wake it at once
MIN_PASS_INTERVAL = 0.2


def vectors_of(column, params: dict[str, str]):
    """The column as the index takes it, by the field's type kept with the index's params."""
    data_type = schema_pb2.DataType.Value(params.get(P.DATA_TYPE, "FloatVector"))
    return kvectors.from_arrow(column, data_type, int(params.get(P.DIM, 0)))


class IndexBuilder:
    def __init__(
        self,
        meta: SegmentMeta,
        index_meta: IndexMeta,
        store,
        alloc_id: Callable[[], Awaitable[int]],
        *,
        parallel: int = 1,
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
        self.store = store
        self.alloc_id = alloc_id
        self.dropping = dropping
        self._slots = asyncio.Semaphore(parallel)
        self._running: dict[tuple[int, int], asyncio.Task[None]] = {}  # (segmentID, indexID) → build
        self._wake = asyncio.Event()
        self._tasks = BackgroundTasks()
        self._lock = asyncio.Lock()

    def start(self) -> None:
        self._tasks.spawn(self._loop(), "indexnode-reconcile")
        self._tasks.spawn(self._follow_segments(), "indexnode-segment-feed")

    async def stop(self) -> None:
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
        """Stop every running build of these indexes (dropped, or their collection is)."""
        await self.cancel([k for k in list(self._running) if k[1] in index_ids])

    # Reconcile ----------------------------------------------------------------------------
    async def reconcile(self) -> None:
        async with self._lock:
            await self._collect_garbage()
            self._schedule_builds()

    def _schedule_builds(self) -> None:
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

                def forget(_t: asyncio.Task[None], k: tuple[int, int] = key) -> None:
                    self._running.pop(k, None)

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
    def _read_column(self, schema: schema_pb2.CollectionSchema | None, logs: list[str], field_id: int):
        """The indexed column; rows written before the field was added read as the QueryNode
        reads them (its default, else null)."""
        field = typeutil.added_field(schema, field_id)
        if field is None:
            return binlog.read_column(self.store, logs, str(field_id))
        kind = typeutil.arrow_type(field)
        missing = lambda rows: typeutil.missing_column(field, kind, rows)  # noqa: E731
        return typeutil.conform_column(field, binlog.read_column(self.store, logs, str(field_id), missing))

    async def _build(self, ix: FieldIndex, seg, previous: SegmentIndex | None) -> None:
        i = seg.info
        seg_key = keys.segment_key(i.collectionID, i.partitionID, i.ID)
        build_id = previous.buildID if previous is not None else await self.alloc_id()
        si = SegmentIndex(
            collectionID=i.collectionID,
            partitionID=i.partitionID,
            segmentID=i.ID,
            indexID=ix.indexID,
            fieldID=ix.fieldID,
            buildID=build_id,
            state=IndexState.InProgress,
        )
        async with self._slots:
            if previous is None and not await self.index_meta.save_build(si, seg_key):
                return  # the segment or the index went meanwhile
            try:
                params = params_of(ix.index_params)
                logs = [b.log_path for b in seg.binlogs.values()]
                schema = await self.current_schema(i.collectionID) if self.current_schema else None
                column = await asyncio.to_thread(self._read_column, schema, logs, ix.fieldID)
                vectors = None
                if scalar_params.is_scalar_build(params):  # kmilvus/index/scalar_index.py
                    built = await scalar_index.abuild(column, params)
                else:
                    vectors = vectors_of(column, params)
                    built = await kindex.abuild(vectors, params[P.INDEX_TYPE], params[P.METRIC_TYPE], params)
                key = paths.index_file_key(i.collectionID, i.partitionID, i.ID, build_id)
                await self.store.write(key, built.data)
                await afailpoint("indexnode.build.after_write")  # files written, Finished not committed
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("index build failed", segment=i.ID, index=ix.index_name, exc_info=True)
                si.state, si.fail_reason = IndexState.Failed, f"{type(exc).__name__}: {exc}"
                await self.index_meta.save_build(si, seg_key)
                return
            si.state = IndexState.Finished
            si.index_file_keys.append(key)
            si.serialized_size, si.num_rows = built.serialized_size, built.num_rows
            size = len(built.data)
            del built, vectors, column
            if si.num_rows >= memory.RELEASE_AFTER_ROWS:
                # faiss' build memory is free now, but malloc keeps it: give it back (util.memory).
                await asyncio.to_thread(memory.release)
            if not await self.index_meta.save_build(si, seg_key):
                # Dropped while building: nothing refers to the files; remove them now.
                await self.remove_files([si])
                return
            log.info("segment index built", segment=i.ID, index=ix.index_name, rows=si.num_rows, bytes=size)
