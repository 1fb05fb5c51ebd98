"""Collection alteration in RootCoord (Milvus' AlterCollection, AlterCollectionField,
RenameCollection), with Milvus 2.5's rules and messages.

Each change rewrites the collection's meta record in one etcd transaction that also checks the
record is the one this RootCoord read (its mod revision is not compared; the DDL lock serialises
RootCoord's own writes and the fenced KV refuses a stale leader's), then invalidates every
Proxy's cache entry before it returns, so no Proxy validates against the old schema or routes
the old name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2, query_coord_pb2
from kmilvus.schemautil import refuse, validate_name
from kmilvus.util import merr, typeutil
from kmilvus.util.constants import DEFAULT_DB
from kmilvus.util.merr import MilvusError
from kmilvus.util.ttl import COLLECTION_TTL

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)

MMAP_ENABLED = "mmap.enabled"
MAX_LENGTH = "max_length"
MAX_CAPACITY = "max_capacity"
FIELD_DESCRIPTION = "field.description"
MAX_VARCHAR_LENGTH = 65535
ALTERABLE_FIELD_KEYS = (MAX_LENGTH, MAX_CAPACITY, MMAP_ENABLED, FIELD_DESCRIPTION)
DROPPABLE_FIELD_KEYS = (MMAP_ENABLED,)
_FIELD_KEY_ALIASES = {"mmap_enabled": MMAP_ENABLED}  # Milvus' proxy spells it both ways


def check_collection_property(key: str, value: str) -> None:
    """Milvus validates the values it acts on; any other key is kept as the user's own."""
    if key == COLLECTION_TTL:
        try:
            ttl = int(value)
        except ValueError:
            ttl = -1
        if ttl < 0:
            raise merr.invalid(f"collection TTL is not a valid positive integer: {value}")
    if key == MMAP_ENABLED and value.lower() not in ("true", "false"):
        raise merr.invalid(f"invalid mmap.enabled value: {value}, expected: true, false")


def _merge(
    props: list[common_pb2.KeyValuePair], put: list[common_pb2.KeyValuePair], delete: list[str]
) -> list[common_pb2.KeyValuePair]:
    merged = {kv.key: kv.value for kv in props}
    for kv in put:
        merged[kv.key] = kv.value
    for k in delete:
        merged.pop(k, None)
    return [common_pb2.KeyValuePair(key=k, value=v) for k, v in merged.items()]


class AlterMixin(RootCoordHost):
    """RootCoord's alteration RPCs."""

    @merr.rpc()
    async def AlterCollection(self, req: milvus_pb2.AlterCollectionRequest, context=None):
        if req.properties and req.delete_keys:
            raise merr.invalid("can not provide properties and deletekeys at the same time")
        for kv in req.properties:
            check_collection_property(kv.key, kv.value)
        async with self._ddl_lock:
            info = self._copy(req.db_name, req.collection_name, req.collectionID)
            new_props = _merge(list(info.properties), list(req.properties), list(req.delete_keys))
            del info.properties[:]
            info.properties.extend(new_props)
            await self._rewrite(info, [])
        await self._invalidate_proxies(info)
        log.info("collection altered", collection=info.schema.name, properties=len(new_props))
        return merr.success()

    @merr.rpc()
    async def AlterCollectionField(self, req: milvus_pb2.AlterCollectionFieldRequest, context=None):
        """Milvus 2.6's rules: `max_length` (VarChar, or an Array of VarChar), `max_capacity`
        (Array), `field.description` and `mmap.enabled` (also spelt `mmap_enabled`; only while
        the collection is not loaded: the QueryNodes map a field's data when they load it) —
        every other key refused. The schema's version goes one up and the new schema is
        broadcast as AddCollectionField's is."""
        props = {_FIELD_KEY_ALIASES.get(kv.key, kv.key): kv.value for kv in req.properties}
        drops = [_FIELD_KEY_ALIASES.get(k, k) for k in req.delete_keys]
        for key in props:
            if key not in ALTERABLE_FIELD_KEYS:
                raise refuse(f"{key} does not allow update in collection field param")
        for key in drops:
            if key not in DROPPABLE_FIELD_KEYS:
                raise refuse(f"{key} is not allowed to drop in collection field param")
        async with self._ddl_lock:
            info = self._copy(req.db_name, req.collection_name, 0)
            field = next((f for f in info.schema.fields if f.name == req.field_name), None)
            if field is None:
                raise MilvusError(merr.PARAMETER_INVALID, f"field not found in collection[field={req.field_name}]")
            if MMAP_ENABLED in props or MMAP_ENABLED in drops:
                await self._refuse_if_loaded(
                    info, "alter" if MMAP_ENABLED in props else "drop", "collection field properties"
                )
            for key, value in props.items():
                _check_field_property(field, key, value)
            field_props = {kv.key: kv.value for kv in field.type_params}
            for key, value in props.items():
                if key == FIELD_DESCRIPTION:
                    field.description = value
                else:
                    field_props[key] = value.lower() if key == MMAP_ENABLED else value
            for key in drops:
                field_props.pop(key, None)
            del field.type_params[:]
            field.type_params.extend(common_pb2.KeyValuePair(key=k, value=v) for k, v in field_props.items())
            info.schema.version += 1
            await self._rewrite(info, [])
            await self._broadcast_schema(info)
        await self._invalidate_proxies(info)
        log.info("collection field altered", collection=info.schema.name, field=req.field_name)
        return merr.success()

    async def _refuse_if_loaded(self, info: internal_pb2.CollectionInfo, verb: str, what: str) -> None:
        """Milvus refuses an mmap change while the collection is loaded: its data is mapped (or
        not) when it is loaded."""
        resp = await self.registry.client(roles.QUERYCOORD).GetLoadState(
            query_coord_pb2.GetLoadStateRequest(collectionID=info.ID)
        )
        merr.check(resp.status)
        if resp.state in (common_pb2.LoadState.LoadStateLoaded, common_pb2.LoadState.LoadStateLoading):
            raise MilvusError(
                merr.COLLECTION_LOADED,
                f"can not {verb} {what} if collection loaded: collection already loaded[collection={info.schema.name}]",
            )

    @merr.rpc()
    async def RenameCollection(self, req: milvus_pb2.RenameCollectionRequest, context=None):
        db = req.db_name or DEFAULT_DB
        new_db = req.newDBName or db
        validate_name(req.newName, "collection")
        if new_db != db:
            raise MilvusError(merr.UNEXPECTED, "renaming a collection into another database is not supported yet")
        async with self._ddl_lock:
            coll_id = self.names.get((db, req.oldName))
            if coll_id is None:
                raise merr.collection_not_found(req.oldName)
            if (new_db, req.newName) in self.names:
                raise merr.MilvusError(
                    merr.PARAMETER_INVALID,
                    f"duplicated new collection name {req.newName} in database {new_db} with other collection name",
                )
            if (new_db, req.newName) in self.aliases:
                raise merr.MilvusError(
                    merr.PARAMETER_INVALID,
                    f"duplicated new collection name {req.newName} in database {new_db} with other alias name",
                )
            old = self.collections[coll_id]
            info = internal_pb2.CollectionInfo()
            info.CopyFrom(old)
            info.schema.name = req.newName
            new_name_key = keys.collection_name_key(new_db, req.newName)
            await self._rewrite(
                info,
                [Op.delete(keys.collection_name_key(db, req.oldName)), Op.put(new_name_key, str(coll_id).encode())],
                [Cmp.missing(new_name_key), Cmp.missing(keys.alias_key(new_db, req.newName))],
                old=old,
            )
        await self._invalidate_proxies(old)
        log.info("collection renamed", id=coll_id, old=req.oldName, new=req.newName)
        return merr.success()

    # helpers -----------------------------------------------------------------------------
    def _copy(self, db: str, name: str, coll_id: int) -> internal_pb2.CollectionInfo:
        """A mutable copy of the collection's meta; the cached one changes only after etcd did."""
        info = internal_pb2.CollectionInfo()
        info.CopyFrom(self._get(db, name, coll_id))
        return info

    async def _rewrite(
        self,
        info: internal_pb2.CollectionInfo,
        ops: list,
        cmps: list | None = None,
        old: internal_pb2.CollectionInfo | None = None,
    ) -> None:
        key = keys.collection_key(info.ID)
        ok = await self.kv.txn([Op.put(key, info.SerializeToString()), *ops], [Cmp.exists(key), *(cmps or [])])
        if not ok:
            raise MilvusError(merr.SERVICE_INTERNAL, f"collection {info.schema.name} changed during the alteration")
        if old is not None:
            self._uncache(old)
        self._cache(info)


def _check_field_property(field: schema_pb2.FieldSchema, key: str, value: str) -> None:
    DT = schema_pb2.DataType
    if key == MAX_LENGTH:
        if field.data_type != DT.VarChar and not (field.data_type == DT.Array and field.element_type == DT.VarChar):
            raise merr.invalid(f"can not modify the maxlength for non-string types, field: {field.name}")
        if not value.lstrip("-").isdigit():
            raise refuse(f"{key} should be an integer, but got string")
        if not 0 < int(value) <= MAX_VARCHAR_LENGTH:
            raise merr.invalid(
                f"the maximum length specified for the field({field.name}) should be in (0, {MAX_VARCHAR_LENGTH}]"
            )
    elif key == MAX_CAPACITY:
        if field.data_type != DT.Array:
            raise refuse(f"{field.name} can not modify the maxcapacity for non-array types")
        if not value.lstrip("-").isdigit():
            raise refuse(f"the value for {key} of field {field.name} must be an integer")
        if not 0 < int(value) <= typeutil.MAX_CAPACITY_LIMIT:
            raise refuse(f"the maximum capacity specified for a Array should be in (0, {typeutil.MAX_CAPACITY_LIMIT}]")
    elif key == MMAP_ENABLED:
        if value.lower() not in ("true", "false"):
            raise merr.invalid(f"invalid mmap.enabled value: {value}, expected: true, false")
        if field.is_primary_key:
            raise merr.invalid(f"can not alter mmap of the primary key field {field.name}")
