"""The Proxy's database RPCs, and the one place that resolves which database a request is for.

pymilvus 3.0 names the database of a client (`MilvusClient(db_name=...)`, `use_database`, the
ORM's `db.using_database`) as the gRPC metadata `dbname` on every call, and only some requests
carry it in their own `db_name` field. `DatabaseInterceptor` (Milvus' DatabaseInterceptor)
copies the metadata into an empty `db_name`/`dbName` field before the RPC body runs, so every
body reads the database from its request, and RootCoord answers an unknown one with 800.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
from pymilvus.grpc_gen import milvus_pb2

from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

DB_METADATA_KEY = "dbname"
_DB_FIELDS = ("db_name", "dbName")


def fill_db_name(request, metadata) -> None:
    """Set the request's database field from the `dbname` metadata when the field is empty."""
    fields = request.DESCRIPTOR.fields_by_name
    field = next((f for f in _DB_FIELDS if f in fields), None)
    if field is None or getattr(request, field):
        return
    for key, value in metadata or ():
        if key == DB_METADATA_KEY and value:
            setattr(request, field, value)
            return


class DatabaseInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every unary MilvusService handler with `fill_db_name`."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        metadata = tuple(handler_call_details.invocation_metadata or ())
        inner = handler.unary_unary

        async def with_db(request, context):
            fill_db_name(request, metadata)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            with_db,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class ProxyDatabasesMixin(ProxyHost):
    """CreateDatabase, DropDatabase, ListDatabases, DescribeDatabase, AlterDatabase: RootCoord
    owns database meta; DDL goes through the DdTaskQueue like every other DDL."""

    @merr.rpc()
    async def CreateDatabase(self, req: milvus_pb2.CreateDatabaseRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.CreateDatabase(req))

    @merr.rpc()
    async def DropDatabase(self, req: milvus_pb2.DropDatabaseRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.DropDatabase(req))

    @merr.rpc()
    async def AlterDatabase(self, req: milvus_pb2.AlterDatabaseRequest, context=None):
        return await self._dd_call(lambda: self.rootcoord.AlterDatabase(req))

    @merr.rpc(milvus_pb2.ListDatabasesResponse)
    async def ListDatabases(self, req, context=None):
        return await self.rootcoord.ListDatabases(req)

    @merr.rpc(milvus_pb2.DescribeDatabaseResponse)
    async def DescribeDatabase(self, req: milvus_pb2.DescribeDatabaseRequest, context=None):
        return await self.rootcoord.DescribeDatabase(req)
