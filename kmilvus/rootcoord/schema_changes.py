"""Schema changes in RootCoord: Milvus 2.6's AddCollectionField and its collection-function RPCs
(AddCollectionFunction, AlterCollectionFunction, DropCollectionFunction), with Milvus' rules and
messages.

AddCollectionField rewrites the collection's meta in ONE etcd transaction — the schema with the
new field under the next field ID and its `version` one higher — then broadcasts the new schema
on the collection's vchannels (an `AlterCollection` message, in order with its DML: the
DataNodes' flowgraphs and the QueryNodes' delegators adopt it there) and invalidates every
Proxy's cache before it answers. Rows written before the field read as its default value, else
null, wherever they are read (`typeutil.conform`). A reader never depends on the broadcast
arriving: a Proxy names the schema version it planned a read with, and a QueryNode still behind
it asks RootCoord (`QueryNode._schema_at`); DataCoord asks RootCoord for the schema when it
hands a channel to a DataNode, plans a compaction or builds an index. So a broadcast lost after
the commit delays no one, and the call still succeeds (the change is durable).

Functions: BM25 is the only function kmilvus runs, and Milvus 2.6 refuses to add, alter or drop
one on an existing collection (its output field would lack the rows written before); any other
function type is refused as the create path refuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus import schemautil
from kmilvus.function import schema as functions
from kmilvus.log import get_logger
from kmilvus.msgstream import MsgType
from kmilvus.proto import internal_pb2
from kmilvus.schemautil import refuse as _refuse
from kmilvus.util import merr
from kmilvus.util.failpoint import afailpoint

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)
FT = schema_pb2.FunctionType


class SchemaChangeMixin(RootCoordHost):
    """RootCoord's schema change RPCs (fields and functions)."""

    @merr.rpc()
    async def AddCollectionField(self, req: milvus_pb2.AddCollectionFieldRequest, context=None):
        try:
            field = schema_pb2.FieldSchema.FromString(req.schema)
        except Exception:  # noqa: BLE001 - any parse failure is the caller's bad field: re-raised as such
            raise merr.invalid("failed to unmarshal field schema") from None
        async with self._ddl_lock:
            info = self._copy(req.db_name, req.collection_name, req.collectionID)
            schemautil.validate_added_field(
                info.schema, field, max_dim=self.cfg.max_dim, max_varchar=self.cfg.max_varchar_length
            )
            info.schema.CopyFrom(schemautil.add_field(info.schema, field))
            await self._rewrite(info, [])
            await self._broadcast_schema(info)
        await self._invalidate_proxies(info)
        added = info.schema.fields[-1]
        log.info(
            "collection field added",
            collection=info.schema.name,
            field=added.name,
            field_id=added.fieldID,
            version=info.schema.version,
        )
        return merr.success()

    async def _broadcast_schema(self, info: internal_pb2.CollectionInfo) -> None:
        """The committed schema onto the collection's vchannels. Best effort: a consumer that
        misses it catches up from RootCoord (see the module's docstring)."""
        msg = internal_pb2.AlterCollectionMsg(
            db_name=info.db_name,
            collection_name=info.schema.name,
            dbID=info.dbID,
            collectionID=info.ID,
            schema=info.schema.SerializeToString(),
        )
        try:
            await afailpoint("rootcoord.add_field.broadcast")
            async with self.ticks.publishing() as ts:
                await self._publish_ddl(info, ts, MsgType.AlterCollection, msg)
        except Exception as exc:  # noqa: BLE001 - readers and watches ask RootCoord instead
            log.warning("schema broadcast failed", collection=info.schema.name, error=repr(exc))

    # Collection functions ------------------------------------------------------------------
    @merr.rpc()
    async def AddCollectionFunction(self, req: milvus_pb2.AddCollectionFunctionRequest, context=None):
        if not req.HasField("functionSchema"):
            raise _refuse("function schema is empty")
        if req.functionSchema.type == FT.BM25:
            raise _refuse("currently does not support adding BM25 function")
        info = self._get(req.db_name, req.collection_name, req.collectionID)
        _check_function(info.schema, req.functionSchema)
        raise _unreachable(req.functionSchema)

    @merr.rpc()
    async def AlterCollectionFunction(self, req: milvus_pb2.AlterCollectionFunctionRequest, context=None):
        if not req.HasField("functionSchema"):
            raise _refuse("function schema is empty")
        if req.functionSchema.type == FT.BM25:
            raise _refuse("currently does not support alter BM25 function")
        if req.function_name != req.functionSchema.name:
            raise _refuse("invalid function config, name not match")
        info = self._get(req.db_name, req.collection_name, req.collectionID)
        old = next((fn for fn in info.schema.functions if fn.name == req.function_name), None)
        if old is None:
            raise _refuse(f"function {req.function_name} not found")
        if old.type == FT.BM25:
            raise _refuse("currently does not support alter BM25 function")
        _check_function(info.schema, req.functionSchema)
        raise _unreachable(req.functionSchema)

    @merr.rpc()
    async def DropCollectionFunction(self, req: milvus_pb2.DropCollectionFunctionRequest, context=None):
        info = self._get(req.db_name, req.collection_name, req.collectionID)
        fn = next((f for f in info.schema.functions if f.name == req.function_name), None)
        if fn is None:
            return merr.success()  # Milvus: dropping a function the collection has not is a no-op
        if fn.type == FT.BM25:
            raise _refuse("currently does not support dropping BM25 function")
        raise _unreachable(fn)


def _check_function(schema: schema_pb2.CollectionSchema, fn: schema_pb2.FunctionSchema) -> None:
    """Milvus' validateFunction on the schema with `fn` in: a function type kmilvus does not run
    is refused here, as at create time."""
    merged = schema_pb2.CollectionSchema()
    merged.CopyFrom(schema)
    merged.functions.append(fn)
    functions.validate_functions(merged)


def _unreachable(fn: schema_pb2.FunctionSchema) -> merr.MilvusError:
    """Every function a collection can hold is BM25 (refused above); validation refuses every
    other type. Kept so a function type added to kmilvus later cannot slip through unhandled."""
    name = FT.Name(fn.type) if fn.type in FT.values() else str(fn.type)
    return merr.MilvusError(merr.PARAMETER_INVALID, f"function type {name} is not supported by this server")
