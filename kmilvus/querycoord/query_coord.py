"""QueryCoord. kmilvus has no QueryNodes yet, so its job in the data path is seed 001's
ReleaseCollectionTask: tell every Proxy to stop serving the collection (through RootCoord's
ReleaseDQLMessageStream) and remove the collection's loaded-state meta."""

from __future__ import annotations

from pymilvus.grpc_gen import milvus_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2, query_coord_pb2_grpc
from kmilvus.util import merr

log = get_logger(__name__)


class QueryCoord(query_coord_pb2_grpc.QueryCoordServicer):
    role = roles.QUERYCOORD

    def __init__(self, kv: EtcdKV, registry: roles.Registry, server_id: int = 0):
        self.kv = kv
        self.registry = registry
        self.server_id = server_id

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    @merr.rpc()
    async def ReleaseCollection(self, req: internal_pb2.ReleaseCollectionRequest, context=None):
        """ReleaseCollectionTask.Execute: ReleaseDQLMessageStream via RootCoord, then each
        QueryNode (none run in kmilvus yet), then the loaded-state meta."""
        log.debug("ReleaseCollectionTask", collection=req.collectionID)
        rootcoord = self.registry.client(roles.ROOTCOORD)
        merr.check(
            await rootcoord.ReleaseDQLMessageStream(
                internal_pb2.ReleaseDQLMessageStreamRequest(dbID=req.dbID, collectionID=req.collectionID)
            )
        )
        await self.kv.delete(keys.loaded_collection_key(req.collectionID))
        return merr.success()
