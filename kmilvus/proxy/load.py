"""The Proxy's load RPCs (MilvusService), as pymilvus sends them:

    Collection.load() / MilvusClient.load_collection()   → LoadCollection, then GetLoadingProgress
    load_partitions                                       → LoadPartitions
    release / release_partitions                          → ReleaseCollection / ReleasePartitions
    utility.load_state / MilvusClient.get_load_state     → GetLoadState
    utility.loading_progress                             → GetLoadingProgress
    Collection.get_replicas()                            → GetReplicas
    MilvusClient.list_loaded_segments / utility.get_query_segment_info → GetQuerySegmentInfo

QueryCoord does the work; the Proxy resolves names to IDs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import components as roles
from kmilvus.proto import internal_pb2, query_coord_pb2, query_node_pb2
from kmilvus.proxy import partition_key, read_path
from kmilvus.proxy.system import DEFAULT_RESOURCE_GROUP
from kmilvus.types import QueryCoordClient
from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object


class ProxyLoadMixin(ProxyHost):
    @property
    def querycoord(self) -> QueryCoordClient:
        return self.registry.client(roles.QUERYCOORD)

    async def _load(self, req, partition_names) -> common_pb2.Status:
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        parts = [meta.partition(n) for n in partition_names]
        if req.replica_number > 1:
            raise merr.invalid(
                f"replica number {req.replica_number} exceeds the number of query nodes (kmilvus serves 1)"
            )
        return await self.querycoord.LoadCollection(
            query_coord_pb2.LoadCollectionRequest(
                collectionID=meta.id,
                schema=meta.schema.SerializeToString(),
                vchannels=meta.vchannels,
                partitionIDs=parts,
                replica_number=1,
                collection_name=meta.name,
            )
        )

    @merr.rpc()
    async def LoadCollection(self, req, context=None):
        return await self._load(req, [])

    @merr.rpc()
    async def LoadPartitions(self, req, context=None):
        partition_key.refuse_ddl(await self.meta_cache.get(req.db_name, req.collection_name), "load partitions")
        return await self._load(req, list(req.partition_names))

    @merr.rpc()
    async def ReleaseCollection(self, req, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        return await self.querycoord.ReleaseCollection(internal_pb2.ReleaseCollectionRequest(collectionID=meta.id))

    @merr.rpc()
    async def ReleasePartitions(self, req, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        partition_key.refuse_ddl(meta, "release partitions")
        parts = [meta.partition(n) for n in req.partition_names]
        return await self.querycoord.ReleasePartitions(
            query_coord_pb2.ReleasePartitionsRequest(collectionID=meta.id, partitionIDs=parts)
        )

    async def _state(self, req) -> query_coord_pb2.GetLoadStateResponse:
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        parts = [meta.partition(n) for n in req.partition_names]
        resp = await self.querycoord.GetLoadState(
            query_coord_pb2.GetLoadStateRequest(collectionID=meta.id, partitionIDs=parts)
        )
        merr.check(resp.status)
        return resp

    async def check_partition_released(self, req) -> None:
        """DropPartition's PreExecute in Milvus: a loaded partition cannot be dropped."""
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        part = meta.partitions.get(req.partition_name)
        if part is None:
            return  # RootCoord answers for a partition that does not exist
        resp = await self.querycoord.GetLoadState(
            query_coord_pb2.GetLoadStateRequest(collectionID=meta.id, partitionIDs=[part])
        )
        merr.check(resp.status)
        if resp.state != common_pb2.LoadState.LoadStateNotLoad:
            raise merr.MilvusError(
                merr.UNEXPECTED, "partition cannot be dropped, partition is loaded, please release it first"
            )

    @merr.rpc(milvus_pb2.GetLoadStateResponse)
    async def GetLoadState(self, req, context=None):
        return milvus_pb2.GetLoadStateResponse(state=(await self._state(req)).state)

    @merr.rpc(milvus_pb2.GetLoadingProgressResponse)
    async def GetLoadingProgress(self, req, context=None):
        st = await self._state(req)
        if st.state == common_pb2.LoadState.LoadStateNotLoad:
            raise merr.MilvusError(
                merr.COLLECTION_NOT_LOADED, f"collection not loaded[collection={req.collection_name}]"
            )
        return milvus_pb2.GetLoadingProgressResponse(progress=st.progress, refresh_progress=st.progress)

    @merr.rpc(milvus_pb2.GetReplicasResponse)
    async def GetReplicas(self, req, context=None):
        if req.collection_name:
            meta = await self.meta_cache.get(req.db_name, req.collection_name)
            coll_id = meta.id
        else:
            coll_id = req.collectionID
        resp = await self.querycoord.GetShardLeaders(query_coord_pb2.GetShardLeadersRequest(collectionID=coll_id))
        merr.check(resp.status)
        out = milvus_pb2.GetReplicasResponse()
        replica = out.replicas.add(
            replicaID=resp.replicaID,
            collectionID=coll_id,
            partition_ids=resp.partitionIDs,
            resource_group_name=DEFAULT_RESOURCE_GROUP,  # the one group kmilvus has (kmilvus.proxy.system)
        )
        nodes = sorted({leader.nodeID for leader in resp.leaders})
        replica.node_ids.extend(nodes)
        for leader in resp.leaders:
            replica.shard_replicas.add(
                leaderID=leader.nodeID, dm_channel_name=leader.vchannel, node_ids=[leader.nodeID]
            )
        return out

    @merr.rpc(milvus_pb2.GetQuerySegmentInfoResponse)
    async def GetQuerySegmentInfo(self, req: milvus_pb2.GetQuerySegmentInfoRequest, context=None):
        """The sealed segments the QueryNodes serve (Milvus' QueryCoord GetSegmentInfo over its
        distribution: growing data is not listed), with their index and memory."""
        meta = await self.meta_cache.get(req.dbName, req.collectionName)
        nodes, _ = await read_path.serving_nodes(self, meta)
        indexes = {
            i.index.fieldID: (i.index.index_name, i.index.indexID) for i in await read_path.index_infos(self, meta)
        }
        out = milvus_pb2.GetQuerySegmentInfoResponse()
        for node_id in sorted(nodes):
            dist = await self.registry.client(roles.QUERYNODE, node_id).GetDataDistribution(
                query_node_pb2.GetDataDistributionRequest(collectionID=meta.id)
            )
            merr.check(dist.status)
            for s in dist.segments:
                name, index_id = next((indexes[f] for f in s.indexed_fieldIDs if f in indexes), ("", 0))
                out.infos.add(
                    segmentID=s.segmentID,
                    collectionID=s.collectionID,
                    partitionID=s.partitionID,
                    mem_size=s.memory_bytes,
                    num_rows=s.num_rows,
                    index_name=name,
                    indexID=index_id,
                    nodeID=node_id,
                    nodeIds=[node_id],
                    state=common_pb2.SegmentState.Sealed,
                    level=common_pb2.SegmentLevel.L1,
                )
        return out
