"""DataCoord's part of TruncateCollection (Milvus' DropSegmentsByTime): drop every segment that
holds rows from before the truncate timestamp, and the L0 delta logs that end before it
(the flow: kmilvus/rootcoord/truncate.py).

RootCoord's truncate first asks `Flush`, whose timestamp becomes the truncate timestamp: every
segment that may hold an older row is sealed then (a Growing one by the flush, one an insert
older than the flush reaches later by `AssignSegmentID`). Here DataCoord waits until those rows
are in flushed segments — every channel checkpoint past the timestamp, then every segment sealed
at that moment Flushed — and drops each Flushed segment whose oldest row is older than the
timestamp (its binlogs' `timestamp_from`): the meta in as few transactions as etcd takes, then
the files through the fenced remover. QueryCoord releases the segments from the change feed;
their index files go with the index builder's next pass. The call is idempotent, and answers
"not flushed yet" (retried by RootCoord's task) when the wait runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from kmilvus.datacoord.meta import Segment, SegmentState
from kmilvus.log import get_logger
from kmilvus.meta import Snapshot
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2
from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.datacoord.host import DataCoordHost
else:
    DataCoordHost = object

log = get_logger(__name__)
FLUSH_WAIT_SECONDS = 30.0  # per call; RootCoord's truncate task calls again until it is done


class DataCoordTruncateMixin(DataCoordHost):
    """DataCoord's DropSegmentsByTime (the data half of TruncateCollection)."""

    @merr.rpc()
    async def DropSegmentsByTime(self, req: data_coord_pb2.DropSegmentsByTimeRequest, context=None):
        coll, ts = req.collectionID, req.timestamp
        if await self.remover.is_dropped(coll):
            return merr.success()  # the collection went: its drop removes everything
        await self._flushed_before(coll, ts)
        async with self.jobs.scheduler.collection_lock(coll):  # no compaction or import commits meanwhile
            doomed = [s for s in self.meta.by_collection(coll, (SegmentState.Flushed,)) if _oldest_row(s) < ts]
            l0 = [d for d in self.meta.l0.get(coll, {}).values() if d.binlog.timestamp_to < ts]
            await self.meta.drop_segments_meta(coll, doomed, [d.binlog.logID for d in l0], self.cfg.etcd_max_txn_ops)
        await self.remover.remove_segments(
            [(coll, s.info.partitionID, s.id) for s in doomed], "truncate collection: segments"
        )
        owner = {d.binlog.log_path: keys.l0_deltalog_key(coll, d.binlog.logID) for d in l0}

        def unknown(snap: Snapshot, targets: list[str]) -> list[str]:
            return [t for t in targets if snap.get(owner[t]) is None]

        await self.remover.remove(owner, keys=list(owner.values()), decide=unknown, why="truncate collection: L0")
        log.info(
            "segments dropped by time",
            collection=coll,
            timestamp=ts,
            segments=len(doomed),
            rows=sum(s.info.num_of_rows for s in doomed),
            l0=len(l0),
        )
        return merr.success()

    async def _flushed_before(self, coll: int, ts: int) -> None:
        """Until every row older than `ts` is in a Flushed segment; SERVICE_UNAVAILABLE when
        that takes longer than FLUSH_WAIT_SECONDS (the caller asks again)."""
        await self._wait_flushed(coll, ts, [])  # every checkpoint past ts: every such row written
        sealed = [s.id for s in self.meta.by_collection(coll, (SegmentState.Sealed, SegmentState.Flushing))]
        await self._wait_flushed(coll, ts, sealed)  # ...and the segments sealed then, flushed

    async def _wait_flushed(self, coll: int, ts: int, segments: list[int]) -> None:
        def done() -> bool:
            return self._flush_done(segments, ts, coll)

        if done():
            return
        await self._demand_flush_ticks(segments, ts, coll)
        with contextlib.suppress(TimeoutError):
            async with self.meta.changed:
                async with asyncio.timeout(FLUSH_WAIT_SECONDS):  # not wait_for: may swallow a cancel (3.11)
                    await self.meta.changed.wait_for(done)
        if not done():
            raise merr.MilvusError(
                merr.SERVICE_UNAVAILABLE, f"collection {coll}: rows before the truncate timestamp are not flushed yet"
            )


def _oldest_row(seg: Segment) -> int:
    """The timestamp of the segment's oldest row (a segment without binlogs holds none)."""
    return min((b.timestamp_from for b in seg.binlogs.values()), default=2**64)
