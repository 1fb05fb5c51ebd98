"""QueryCoord: which collections are loaded and which QueryNode serves each of their DML channels
(`load.LoadManager`), and Milvus' ReleaseCollectionTask (docs/architecture/drop.md): tell every
Proxy to stop serving the collection (through RootCoord's ReleaseDQLMessageStream), free it on
the QueryNodes and remove its loaded-state meta."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pymilvus.grpc_gen import milvus_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV
from kmilvus.proto import internal_pb2, query_coord_pb2, query_coord_pb2_grpc
from kmilvus.querycoord.load import LoadManager
from kmilvus.util import merr, metricsinfo

log = get_logger(__name__)


class QueryCoord(query_coord_pb2_grpc.QueryCoordServicer):
    role = roles.QUERYCOORD

    def __init__(self, kv: EtcdKV, registry: roles.Registry, server_id: int = 0):
        self.kv = kv
        self.registry = registry
        self.server_id = server_id
        self.loads = LoadManager(kv, registry)

    @property
    def leader_check(self) -> Callable[[], Awaitable[bool]]:
        """Whether this QueryCoord still leads (its process's leader lock)."""
        return self.loads.leader_check

    @leader_check.setter
    def leader_check(self, check: Callable[[], Awaitable[bool]]) -> None:
        self.loads.leader_check = check

    async def start(self) -> None:
        await self.loads.start()

    async def stop(self) -> None:
        await self.loads.stop()

    @merr.rpc(milvus_pb2.GetMetricsResponse)
    async def GetMetrics(self, req, context=None):
        return await metricsinfo.coordinator_metrics(
            self, req, {}, roles.QUERYNODE, (roles.ROOTCOORD, roles.DATACOORD), cluster_key="connected_nodes"
        )

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    @merr.rpc()
    async def ReleaseCollection(self, req: internal_pb2.ReleaseCollectionRequest, context=None):
        """ReleaseCollectionTask.Execute: ReleaseDQLMessageStream via RootCoord, then each
        QueryNode, then the loaded-state meta."""
        log.debug("ReleaseCollectionTask", collection=req.collectionID)
        rootcoord = self.registry.client(roles.ROOTCOORD)
        merr.check(
            await rootcoord.ReleaseDQLMessageStream(
                internal_pb2.ReleaseDQLMessageStreamRequest(dbID=req.dbID, collectionID=req.collectionID)
            )
        )
        await self.loads.release(req.collectionID)
        return merr.success()

    @merr.rpc()
    async def LoadCollection(self, req: query_coord_pb2.LoadCollectionRequest, context=None):
        await self.loads.load(req)
        return merr.success()

    @merr.rpc()
    async def ReleasePartitions(self, req: query_coord_pb2.ReleasePartitionsRequest, context=None):
        await self.loads.release(req.collectionID, list(req.partitionIDs))
        return merr.success()

    @merr.rpc(query_coord_pb2.GetLoadStateResponse)
    async def GetLoadState(self, req: query_coord_pb2.GetLoadStateRequest, context=None):
        return self.loads.state(req.collectionID, list(req.partitionIDs))

    @merr.rpc(query_coord_pb2.GetShardLeadersResponse)
    async def GetShardLeaders(self, req: query_coord_pb2.GetShardLeadersRequest, context=None):
        return self.loads.leaders(req.collectionID)
