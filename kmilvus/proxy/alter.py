"""The Proxy's collection-alteration RPCs (AlterCollection, AlterCollectionField,
RenameCollection): DDL tasks forwarded to RootCoord, which invalidates every Proxy's cached meta
of the collection before it answers."""

from __future__ import annotations

from pymilvus.grpc_gen import milvus_pb2

from kmilvus.util import merr


class ProxyAlterMixin:
    """Needs the Proxy's `rootcoord` and `_dd` (run a task on the DDL queue)."""

    @merr.rpc()
    async def AlterCollection(self, req: milvus_pb2.AlterCollectionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AlterCollection(req))

    @merr.rpc()
    async def AlterCollectionField(self, req: milvus_pb2.AlterCollectionFieldRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AlterCollectionField(req))

    @merr.rpc()
    async def RenameCollection(self, req: milvus_pb2.RenameCollectionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.RenameCollection(req))
