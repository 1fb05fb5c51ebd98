"""Databases in RootCoord (Milvus' CreateDatabase / DropDatabase / ListDatabases /
DescribeDatabase / AlterDatabase), with Milvus' codes and messages.

A database is one etcd key `root-coord/database/{name}` holding its DatabaseInfo; its ID is
allocated like any ID. `default` always exists: RootCoord writes it on its first start. A
collection's name key lives under its database, and CreateCollection's transaction compares the
database key, so a collection can never be created into a database being dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2

from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.schemautil import validate_name
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB
from kmilvus.util.merr import MilvusError
from kmilvus.util.tsoutil import physical_ms

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)


def database_not_found(name: str) -> MilvusError:
    return MilvusError(merr.DATABASE_NOT_FOUND, f"database not found[database={name}]")


class DatabaseMixin(RootCoordHost):
    """RootCoord's database RPCs."""

    databases: dict[str, internal_pb2.DatabaseInfo]

    async def _load_databases(self) -> None:
        self.databases = {}
        for _, raw in await self.kv.get_prefix(keys.DATABASE_PREFIX):
            info = internal_pb2.DatabaseInfo.FromString(raw)
            self.databases[info.name] = info
        if DEFAULT_DB not in self.databases:
            info = internal_pb2.DatabaseInfo(
                ID=await self.ids.alloc(), name=DEFAULT_DB, created_time=await self.tso.alloc()
            )
            key = keys.database_key(DEFAULT_DB)
            if not await self.kv.txn([Op.put(key, info.SerializeToString())], [Cmp.missing(key)]):
                stored = await self.kv.get(key)
                assert stored is not None  # the transaction failed on it; the default database is never dropped
                info = internal_pb2.DatabaseInfo.FromString(stored)
            self.databases[DEFAULT_DB] = info

    def _database(self, name: str) -> internal_pb2.DatabaseInfo:
        """The database `name` ('' = default), or Milvus' 800 "database not found"."""
        info = self.databases.get(name or DEFAULT_DB)
        if info is None:
            raise database_not_found(name)
        return info

    def _collections_in(self, db: str) -> list[internal_pb2.CollectionInfo]:
        return [c for c in self.collections.values() if (c.db_name or DEFAULT_DB) == db]

    @merr.rpc()
    async def CreateDatabase(self, req: milvus_pb2.CreateDatabaseRequest, context=None):
        validate_name(req.db_name, "database")
        async with self._ddl_lock:
            if req.db_name in self.databases:
                raise MilvusError(merr.UNEXPECTED, f"database already exist: {req.db_name}")
            if len(self.databases) >= self.cfg.max_database_num:
                raise MilvusError(
                    merr.DATABASE_NUM_LIMIT_EXCEEDED,
                    f"exceeded the limit number of database[limit={self.cfg.max_database_num}]",
                )
            info = internal_pb2.DatabaseInfo(
                ID=await self.ids.alloc(),
                name=req.db_name,
                created_time=await self.tso.alloc(),
                properties=list(req.properties),
            )
            key = keys.database_key(req.db_name)
            if not await self.kv.txn([Op.put(key, info.SerializeToString())], [Cmp.missing(key)]):
                raise MilvusError(merr.UNEXPECTED, f"database already exist: {req.db_name}")
            self.databases[req.db_name] = info
        log.info("database created", db=req.db_name, id=info.ID)
        return merr.success()

    @merr.rpc()
    async def DropDatabase(self, req: milvus_pb2.DropDatabaseRequest, context=None):
        if req.db_name == DEFAULT_DB:
            raise MilvusError(merr.UNEXPECTED, "can not drop default database")
        async with self._ddl_lock:
            if req.db_name not in self.databases:
                return merr.success()  # Milvus: dropping an unknown database succeeds
            if self._collections_in(req.db_name):
                raise MilvusError(
                    merr.UNEXPECTED,
                    f"database:{req.db_name} not empty, must drop all collections before drop database",
                )
            key = keys.database_key(req.db_name)
            await self.kv.txn([Op.delete(key)], [Cmp.exists(key)])
            self.databases.pop(req.db_name, None)
            for alias in [k for k in self.aliases if k[0] == req.db_name]:
                self.aliases.pop(alias, None)  # none can exist without a collection; kept tidy
        log.info("database dropped", db=req.db_name)
        return merr.success()

    @merr.rpc(milvus_pb2.ListDatabasesResponse)
    async def ListDatabases(self, req, context=None):
        infos = sorted(self.databases.values(), key=lambda d: d.created_time)
        return milvus_pb2.ListDatabasesResponse(
            db_names=[d.name for d in infos],
            created_timestamp=[d.created_time for d in infos],
            db_ids=[d.ID for d in infos],
        )

    @merr.rpc(milvus_pb2.DescribeDatabaseResponse)
    async def DescribeDatabase(self, req: milvus_pb2.DescribeDatabaseRequest, context=None):
        info = self._database(req.db_name)
        return milvus_pb2.DescribeDatabaseResponse(
            db_name=info.name,
            dbID=info.ID,
            created_timestamp=physical_ms(info.created_time),
            properties=info.properties,
        )

    @merr.rpc()
    async def AlterDatabase(self, req: milvus_pb2.AlterDatabaseRequest, context=None):
        """Set `properties` and remove `delete_keys` (pymilvus' drop_database_properties)."""
        async with self._ddl_lock:
            info = internal_pb2.DatabaseInfo()
            info.CopyFrom(self._database(req.db_name))
            props = {kv.key: kv.value for kv in info.properties}
            props.update({kv.key: kv.value for kv in req.properties})
            for k in req.delete_keys:
                props.pop(k, None)
            del info.properties[:]
            for k, v in props.items():
                info.properties.add(key=k, value=v)
            key = keys.database_key(info.name)
            if not await self.kv.txn([Op.put(key, info.SerializeToString())], [Cmp.exists(key)]):
                raise database_not_found(req.db_name)
            self.databases[info.name] = info
        return merr.success()
