"""What RootCoord's mixins use of RootCoord (Milvus keeps all of it on rootcoord's `Core`).

RootCoord is one class assembled from mixins (aliases, databases, partitions, RBAC, ...), one
module each. A mixin reads the shared state RootCoord builds and calls helpers that RootCoord
or another mixin defines; `RootCoordHost` names all of it with its types. Each mixin derives
from it for the type checker only (`if TYPE_CHECKING`): inside a mixin `self` is typed, and
RootCoord itself cannot be built unless it provides every member (mypy's abstract-class check).
At run time the mixins derive from `object`, as before.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from pymilvus.grpc_gen import milvus_pb2

from kmilvus.components import Registry
from kmilvus.config import Config
from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.msgstream import MsgType
from kmilvus.proto import internal_pb2
from kmilvus.rootcoord.drop_tasks import DropTasks
from kmilvus.tso import GlobalTSOAllocator
from kmilvus.util.timetick import TickSource


class RootCoordHost(Protocol):
    # State (RootCoord.__init__ and start()).
    cfg: Config
    kv: EtcdKV
    registry: Registry
    tso: GlobalTSOAllocator
    ids: GlobalTSOAllocator
    collections: dict[int, internal_pb2.CollectionInfo]  # by ID
    names: dict[tuple[str, str], int]  # (database, name) → ID
    aliases: dict[tuple[str, str], int]  # (database, alias) → ID (AliasMixin)
    databases: dict[str, internal_pb2.DatabaseInfo]  # by name (DatabaseMixin)
    drops: DropTasks
    _ddl_lock: asyncio.Lock  # every DDL holds it from its checks to its meta transaction

    @property
    def ticks(self) -> TickSource: ...

    # RootCoord (root_coord.py).
    def _cache(self, info: internal_pb2.CollectionInfo) -> None: ...
    def dropped(self, drop_time: int) -> None: ...  # a drop committed: raise the meta epoch
    def _uncache(self, info: internal_pb2.CollectionInfo) -> None: ...
    def _get(self, db: str, name: str = "", coll_id: int = 0) -> internal_pb2.CollectionInfo: ...
    async def _publish_ddl(self, info: internal_pb2.CollectionInfo, ts: int, msg_type: MsgType, msg: Any) -> None: ...
    async def _invalidate_proxies(self, info: internal_pb2.CollectionInfo) -> None: ...

    # Other mixins.
    def _database(self, name: str) -> internal_pb2.DatabaseInfo: ...  # DatabaseMixin
    def _copy(self, db: str, name: str, coll_id: int) -> internal_pb2.CollectionInfo: ...  # AlterMixin
    async def _rewrite(  # AlterMixin
        self,
        info: internal_pb2.CollectionInfo,
        ops: list[Op],
        cmps: list[Cmp] | None = None,
        old: internal_pb2.CollectionInfo | None = None,
    ) -> None: ...
    async def _broadcast_schema(self, info: internal_pb2.CollectionInfo) -> None: ...  # SchemaChangeMixin
    async def _notify_policy(self, op: str) -> None: ...  # RbacMixin
    async def resolve_v2_grant(self, e: milvus_pb2.GrantEntity) -> tuple[str, str]: ...  # PrivilegeGroupMixin
    async def expand_groups(  # PrivilegeGroupMixin
        self, grants: list[tuple[str, str, str, str, str, str]]
    ) -> list[tuple[str, str, str, str, str, str]]: ...
