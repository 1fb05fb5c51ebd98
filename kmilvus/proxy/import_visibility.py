"""When the Proxy reports an import Completed: once a Strong read sees every imported row
(docs/operations/guarantees.md).

DataCoord completes a job once its segments are registered; QueryCoord then hands them to the
QueryNodes serving the collection, a moment later — or much later when a QueryNode is down. Milvus
reports Completed at registration, so a query right after can miss the rows. kmilvus reports the
job as persisted (`ImportPersisted`; `Importing` in the RESTful API's job states) until the serving
QueryNodes hold each of its segments, or the segment a compaction moved its rows into. A collection
that is not loaded has nothing to wait for, nor does a segment of a partition not loaded.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pymilvus.grpc_gen import common_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.proto import data_coord_pb2, internal_pb2, query_coord_pb2, query_node_pb2
from kmilvus.util import merr, segmentutil
from kmilvus.util.constants import SegmentState

log = get_logger(__name__)
IS = common_pb2.ImportState
# Jobs already seen visible are not checked again (a client polls until Completed, then lists).
REMEMBERED_JOBS = 4096


@dataclass(frozen=True)
class _ReadPath:
    """One collection as the read path serves it at one moment."""

    loaded: bool  # loaded at all; when not, the fields below are empty
    segments: frozenset[int] = frozenset()  # sealed segments the serving QueryNodes hold
    partitions: frozenset[int] = frozenset()  # loaded partitions; empty: all but `released`
    released: frozenset[int] = frozenset()
    every: Mapping[int, internal_pb2.SegmentInfo] = field(default_factory=dict)  # Flushed, Dropped
    into: Mapping[int, internal_pb2.SegmentInfo] = field(default_factory=dict)  # source → target

    def partition_loaded(self, part: int) -> bool:
        return part in self.partitions if self.partitions else part not in self.released

    def shows(self, job: data_coord_pb2.ImportJob) -> bool:
        """Whether a Strong read sees every row of `job` now."""
        if not self.loaded:
            return True
        for sid in job.segmentIDs:
            seg = self.every.get(sid)
            holder = seg if seg is not None and seg.state == SegmentState.Flushed else None
            holder = holder or segmentutil.compacted_into(sid, self.into)
            if holder is None or not self.partition_loaded(holder.partitionID):
                continue  # dropped with its partition (or a failed job's): nothing to read
            if holder.ID not in self.segments:
                return False
        return True


class ImportVisibility:
    """The import state a Proxy reports; remembers the jobs it found visible."""

    def __init__(self, registry: roles.Registry):
        self.registry = registry
        self._visible: OrderedDict[int, None] = OrderedDict()

    async def states(self, jobs: Sequence[data_coord_pb2.ImportJob]) -> list[int]:
        """Each job's state to report, asking each collection's read path once."""
        paths: dict[int, _ReadPath | None] = {}
        out = []
        for job in jobs:
            if job.state != IS.ImportCompleted or job.jobID in self._visible:
                out.append(job.state)
                continue
            if job.collectionID not in paths:
                paths[job.collectionID] = await self._read_path(job.collectionID)
            path = paths[job.collectionID]
            if path is None or not path.shows(job):
                out.append(IS.ImportPersisted)
                continue
            self._visible[job.jobID] = None
            if len(self._visible) > REMEMBERED_JOBS:
                self._visible.popitem(last=False)
            out.append(job.state)
        return out

    async def state(self, job: data_coord_pb2.ImportJob) -> int:
        return (await self.states([job]))[0]

    async def _read_path(self, coll_id: int) -> _ReadPath | None:
        """None while the collection is loading or the read path cannot answer: its rows are
        not known to be visible."""
        qc = self.registry.client(roles.QUERYCOORD)
        try:
            leaders = await qc.GetShardLeaders(query_coord_pb2.GetShardLeadersRequest(collectionID=coll_id))
            if leaders.status.code == merr.COLLECTION_NOT_LOADED[0]:
                return _ReadPath(loaded=False)
            merr.check(leaders.status)
            dists = await asyncio.gather(
                *(
                    self.registry.client(roles.QUERYNODE, n).GetDataDistribution(
                        query_node_pb2.GetDataDistributionRequest(collectionID=coll_id)
                    )
                    for n in {leader.nodeID for leader in leaders.leaders}
                )
            )
            for d in dists:
                merr.check(d.status)
            segs = await self.registry.client(roles.DATACOORD).GetSegmentsByCollection(
                data_coord_pb2.GetSegmentsByCollectionRequest(
                    collectionID=coll_id, states=[SegmentState.Flushed, SegmentState.Dropped]
                )
            )
            merr.check(segs.status)
        except Exception as e:  # noqa: BLE001 - a read path that cannot answer has not shown the rows
            log.debug("import visibility unknown", collection=coll_id, error=str(e))
            return None
        return _ReadPath(
            loaded=True,
            segments=frozenset(s.segmentID for d in dists for s in d.segments),
            partitions=frozenset(leaders.partitionIDs),
            released=frozenset(leaders.released_partitionIDs),
            every={s.ID: s for s in segs.infos},
            into=segmentutil.targets_by_source(segs.infos),
        )
