"""Collection aliases in RootCoord (Milvus' CreateAlias / AlterAlias / DropAlias / DescribeAlias /
ListAliases), with Milvus 2.4's codes and messages.

An alias is one etcd key `root-coord/aliases/{db}/{alias}` holding the collection ID, written in
one transaction that also checks the name is neither a collection nor (for create) an alias yet
and that the target collection still exists. Every change invalidates the alias' entry in each
Proxy's meta cache before it returns, so no Proxy keeps routing an altered or dropped alias.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.schemautil import validate_name
from kmilvus.util import merr
from kmilvus.util.merr import MilvusError

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)
DEFAULT_DB = "default"


def alias_not_found(db: str, alias: str) -> MilvusError:
    return MilvusError(merr.ALIAS_NOT_FOUND, f"alias not found[database={db}][alias={alias}]")


def alias_name_conflict(db: str, alias: str) -> MilvusError:
    return MilvusError(
        merr.ALIAS_COLLECTION_NAME_CONFLICT, f"alias and collection name conflict[database={db}][alias={alias}]"
    )


class AliasMixin(RootCoordHost):
    """RootCoord's alias RPCs."""

    aliases: dict[tuple[str, str], int]

    async def _load_aliases(self) -> None:
        self.aliases = {}
        for key, raw in await self.kv.get_prefix(keys.ALIAS_PREFIX):
            db, alias = key[len(keys.ALIAS_PREFIX) :].split("/", 1)
            self.aliases[(db, alias)] = int(raw)

    def resolve_alias(self, db: str, name: str) -> int | None:
        """The collection ID `name` is an alias of in `db`, or None."""
        return self.aliases.get((db or DEFAULT_DB, name))

    def aliases_of(self, coll_id: int) -> list[str]:
        return sorted(a for (_, a), cid in self.aliases.items() if cid == coll_id)

    def _target(self, db: str, collection: str) -> int:
        self._database(db)  # an unknown database is Milvus' 800, before any collection lookup
        coll_id = self.names.get((db, collection))
        if coll_id is None:
            raise MilvusError(
                merr.COLLECTION_NOT_FOUND, f"collection not found[database={db}][collection={collection}]"
            )
        return coll_id

    async def _invalidate_alias(self, db: str, alias: str) -> None:
        req = internal_pb2.InvalidateCollMetaCacheRequest(db_name=db, collection_name=alias)
        proxies = await self.registry.clients(roles.PROXY)
        results = await asyncio.gather(
            *(p.InvalidateCollectionMetaCache(req) for p in proxies.values()), return_exceptions=True
        )
        for sid, r in zip(proxies, results, strict=True):
            if isinstance(r, BaseException):
                log.warning("invalidate alias cache failed", proxy=sid, alias=alias, error=str(r))

    @merr.rpc()
    async def CreateAlias(self, req: milvus_pb2.CreateAliasRequest, context=None):
        db = req.db_name or DEFAULT_DB
        validate_name(req.alias, "alias")
        validate_name(req.collection_name, "collection")
        async with self._ddl_lock:
            if (db, req.alias) in self.names:
                raise alias_name_conflict(db, req.alias)
            coll_id = self._target(db, req.collection_name)
            current = self.aliases.get((db, req.alias))
            if current == coll_id:
                return merr.success()  # Milvus: adding the same alias again is fine
            if current is not None:
                other = self.collections[current].schema.name
                raise MilvusError(
                    merr.ALIAS_ALREADY_EXIST,
                    f"alias already exist[database={db}][alias={req.alias} is alias to another collection: {other}]",
                )
            key = keys.alias_key(db, req.alias)
            ok = await self.kv.txn(
                [Op.put(key, str(coll_id).encode())],
                [
                    Cmp.missing(key),
                    Cmp.missing(keys.collection_name_key(db, req.alias)),
                    Cmp.exists(keys.collection_key(coll_id)),
                ],
            )
            if not ok:
                raise MilvusError(merr.SERVICE_INTERNAL, f"alias {req.alias} changed during create")
            self.aliases[(db, req.alias)] = coll_id
        await self._invalidate_alias(db, req.alias)
        return merr.success()

    @merr.rpc()
    async def AlterAlias(self, req: milvus_pb2.AlterAliasRequest, context=None):
        db = req.db_name or DEFAULT_DB
        validate_name(req.alias, "alias")
        validate_name(req.collection_name, "collection")
        async with self._ddl_lock:
            if (db, req.alias) in self.names:
                raise alias_name_conflict(db, req.alias)
            coll_id = self._target(db, req.collection_name)
            if (db, req.alias) not in self.aliases:
                raise alias_not_found(db, req.alias)
            key = keys.alias_key(db, req.alias)
            ok = await self.kv.txn(
                [Op.put(key, str(coll_id).encode())], [Cmp.exists(key), Cmp.exists(keys.collection_key(coll_id))]
            )
            if not ok:
                raise MilvusError(merr.SERVICE_INTERNAL, f"alias {req.alias} changed during alter")
            self.aliases[(db, req.alias)] = coll_id
        await self._invalidate_alias(db, req.alias)
        return merr.success()

    @merr.rpc()
    async def DropAlias(self, req: milvus_pb2.DropAliasRequest, context=None):
        db = req.db_name or DEFAULT_DB
        validate_name(req.alias, "alias")
        async with self._ddl_lock:
            if (db, req.alias) not in self.aliases:
                return merr.success()  # Milvus 2.4: dropping an unknown alias succeeds
            key = keys.alias_key(db, req.alias)
            await self.kv.txn([Op.delete(key)], [Cmp.exists(key)])
            self.aliases.pop((db, req.alias), None)
        await self._invalidate_alias(db, req.alias)
        return merr.success()

    @merr.rpc(milvus_pb2.DescribeAliasResponse)
    async def DescribeAlias(self, req: milvus_pb2.DescribeAliasRequest, context=None):
        db = req.db_name or DEFAULT_DB
        validate_name(req.alias, "alias")
        coll_id = self.aliases.get((db, req.alias))
        if coll_id is None:
            raise alias_not_found(db, req.alias)
        return milvus_pb2.DescribeAliasResponse(
            db_name=db, alias=req.alias, collection=self.collections[coll_id].schema.name
        )

    @merr.rpc(milvus_pb2.ListAliasesResponse)
    async def ListAliases(self, req: milvus_pb2.ListAliasesRequest, context=None):
        db = req.db_name or DEFAULT_DB
        if req.collection_name:
            names = self.aliases_of(self._target(db, req.collection_name))
        else:
            names = sorted(a for (d, a) in self.aliases if d == db)
        return milvus_pb2.ListAliasesResponse(db_name=db, collection_name=req.collection_name, aliases=names)
