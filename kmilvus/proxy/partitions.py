"""The Proxy's partition RPCs (Milvus' CreatePartition / DropPartition / HasPartition /
ShowPartitions / GetPartitionStatistics).

RootCoord owns partition meta and invalidates every Proxy's cache entry of the collection before
a partition DDL returns, so inserts never route to a dropped partition from a stale cache.
Statistics count the rows of flushed segments, as Milvus' `num_entities` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2

from kmilvus.proto import data_coord_pb2
from kmilvus.proxy import partition_key
from kmilvus.schemautil import validate_name
from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object


def _check(req) -> None:
    validate_name(req.collection_name, "collection")
    validate_name(req.partition_name, "partition")


class ProxyPartitionsMixin(ProxyHost):
    @merr.rpc()
    async def CreatePartition(self, req: milvus_pb2.CreatePartitionRequest, context=None):
        _check(req)
        partition_key.refuse_ddl(await self.meta_cache.get(req.db_name, req.collection_name), "create partition")
        return await self._dd_call(lambda: self.rootcoord.CreatePartition(req), pre=lambda: _check(req))

    @merr.rpc()
    async def DropPartition(self, req: milvus_pb2.DropPartitionRequest, context=None):
        _check(req)
        partition_key.refuse_ddl(await self.meta_cache.get(req.db_name, req.collection_name), "drop partition")
        await self.check_partition_released(req)  # kmilvus.proxy.load: Milvus refuses a loaded one
        status = await self._dd_call(lambda: self.rootcoord.DropPartition(req), pre=lambda: _check(req))
        self.meta_cache.remove(req.db_name, req.collection_name)
        return status

    @merr.rpc(milvus_pb2.BoolResponse)
    async def HasPartition(self, req: milvus_pb2.HasPartitionRequest, context=None):
        _check(req)
        return await self.rootcoord.HasPartition(req)

    @merr.rpc(milvus_pb2.ShowPartitionsResponse)
    async def ShowPartitions(self, req: milvus_pb2.ShowPartitionsRequest, context=None):
        if req.collection_name:
            validate_name(req.collection_name, "collection")
        return await self.rootcoord.ShowPartitions(req)

    @merr.rpc(milvus_pb2.GetPartitionStatisticsResponse)
    async def GetPartitionStatistics(self, req: milvus_pb2.GetPartitionStatisticsRequest, context=None):
        _check(req)
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        part_id = meta.partition(req.partition_name)
        resp = await self.datacoord.GetPartitionStatistics(
            data_coord_pb2.GetPartitionStatisticsRequest(collectionID=meta.id, partitionIDs=[part_id])
        )
        merr.check(resp.status)
        return milvus_pb2.GetPartitionStatisticsResponse(stats=resp.stats)
