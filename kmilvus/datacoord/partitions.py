"""DataCoord's partition RPCs: remove a dropped partition's data (the DataCoord step of
RootCoord's DropPartition flow) and count a partition's flushed rows.

The partition is first recorded as dropped in etcd (`catalog.dropped_partition_key`): an import
or a compaction that commits into it afterwards is refused by that key's compare, in the same
transaction as its commit; its jobs are then cancelled (their outputs removed), and its files go
before the meta that points at them. Each step is idempotent, so RootCoord's drop task may
repeat the call after a crash. A DataNode still flushing a segment of the partition is refused
by SaveBinlogPaths (segment not found) and deletes what it wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kmilvus.datacoord.meta import SegmentState
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2
from kmilvus.storage import paths
from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.datacoord.host import DataCoordHost
else:
    DataCoordHost = object

log = get_logger(__name__)


class DataCoordPartitionsMixin(DataCoordHost):
    """DataCoord's DropPartition and partition statistics."""

    dropped_partitions: set[tuple[int, int]]

    def check_partition_live(self, coll_id: int, part_id: int) -> None:
        """Quota is never granted in a partition being dropped (a Proxy's insert in flight)."""
        if (coll_id, part_id) in self.dropped_partitions:
            raise merr.MilvusError(merr.PARTITION_NOT_FOUND, f"partition not found[partition={part_id}]")

    async def _load_dropped_partitions(self) -> None:
        for key, _ in await self.kv.get_prefix(keys.DROPPED_PARTITION_PREFIX, keys_only=True):
            coll, part = key.rsplit("/", 2)[-2:]
            self.dropped_partitions.add((int(coll), int(part)))

    @merr.rpc()
    async def DropPartition(self, req: data_coord_pb2.DropPartitionRequest, context=None):
        coll, part = req.collectionID, req.partitionID
        if not await self.remover.is_dropped(coll, part):
            raise merr.MilvusError(
                merr.UNEXPECTED, f"partition {part} still exists: DataCoord removes only what RootCoord dropped"
            )
        async with self._assign_lock:
            self.dropped_partitions.add((coll, part))
        # Kept until the collection goes (its drop removes the key; none is written once
        # RootCoord dropped the whole collection, whose drop cancels every job anyway).
        await self.kv.txn(
            [Op.put(keys.dropped_partition_key(coll, part), b"")], [Cmp.exists(keys.collection_key(coll))]
        )
        await self.jobs.cancel_partition(coll, part)
        await self.remover.remove_dropped(paths.partition_prefixes(coll, part), coll, part)
        gone = await self.meta.drop_partition_meta(coll, part, self.cfg.etcd_max_txn_ops)
        log.info("partition data dropped", collection=coll, partition=part, segments=len(gone))
        return merr.success()

    @merr.rpc(data_coord_pb2.GetCollectionStatisticsResponse)
    async def GetPartitionStatistics(self, req: data_coord_pb2.GetPartitionStatisticsRequest, context=None):
        wanted = set(req.partitionIDs)
        rows = sum(
            s.info.num_of_rows
            for s in self.meta.by_collection(req.collectionID, (SegmentState.Flushed,))
            if s.info.partitionID in wanted
        )
        resp = data_coord_pb2.GetCollectionStatisticsResponse()
        resp.stats.add(key="row_count", value=str(rows))
        return resp
