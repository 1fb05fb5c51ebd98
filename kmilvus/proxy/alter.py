"""The Proxy's collection-alteration RPCs (AlterCollection, AlterCollectionField,
RenameCollection, AddCollectionField, the collection-function RPCs, TruncateCollection): DDL
tasks forwarded to RootCoord, which checks them and invalidates every Proxy's cached meta of the
collection before it answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2

from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object


class ProxyAlterMixin(ProxyHost):
    """The Proxy's collection alteration RPCs (run as tasks on the DDL queue)."""

    @merr.rpc()
    async def AlterCollection(self, req: milvus_pb2.AlterCollectionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AlterCollection(req))

    @merr.rpc()
    async def AlterCollectionField(self, req: milvus_pb2.AlterCollectionFieldRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AlterCollectionField(req))

    @merr.rpc()
    async def RenameCollection(self, req: milvus_pb2.RenameCollectionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.RenameCollection(req))

    @merr.rpc()
    async def AddCollectionField(self, req: milvus_pb2.AddCollectionFieldRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AddCollectionField(req))

    @merr.rpc()
    async def AddCollectionFunction(self, req: milvus_pb2.AddCollectionFunctionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AddCollectionFunction(req))

    @merr.rpc()
    async def AlterCollectionFunction(self, req: milvus_pb2.AlterCollectionFunctionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AlterCollectionFunction(req))

    @merr.rpc()
    async def DropCollectionFunction(self, req: milvus_pb2.DropCollectionFunctionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.DropCollectionFunction(req))

    @merr.rpc(milvus_pb2.TruncateCollectionResponse)
    async def TruncateCollection(self, req: milvus_pb2.TruncateCollectionRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.TruncateCollection(req))
