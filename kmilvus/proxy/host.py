"""What the Proxy's mixins use of the Proxy (Milvus keeps all of it on proxy's `Proxy` struct).

The Proxy is one class assembled from mixins (search, query, delete, indexes, RBAC, ...), one
module each. A mixin reads the state `Proxy.__init__` builds and calls helpers that the Proxy or
another mixin defines; `ProxyHost` names all of it with its types. Each mixin derives from it
for the type checker only (`if TYPE_CHECKING`): inside a mixin `self` is typed, and the Proxy
cannot be built unless it provides every member (mypy's abstract-class check). At run time the
mixins derive from `object`, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import pyarrow as pa

from kmilvus.allocator import IDAllocator, TimestampAllocator
from kmilvus.components import Registry
from kmilvus.config import Config
from kmilvus.msgstream import Producer
from kmilvus.proto import query_node_pb2
from kmilvus.proxy.import_visibility import ImportVisibility
from kmilvus.proxy.meta_cache import CollectionMeta, MetaCache
from kmilvus.proxy.privilege import ProxySecurity
from kmilvus.proxy.search import FieldSearch, ReadScope
from kmilvus.proxy.search_iterator import SearchIterators
from kmilvus.proxy.task import DmTaskQueue
from kmilvus.types import DataCoordClient, QueryCoordClient, RootCoordClient
from kmilvus.util.timetick import TickSource


class ProxyHost(Protocol):
    # State (Proxy.__init__).
    role: str
    server_id: int
    cfg: Config
    registry: Registry
    rootcoord: RootCoordClient
    datacoord: DataCoordClient
    meta_cache: MetaCache
    security: ProxySecurity
    tso: TimestampAllocator
    ids: IDAllocator
    ticks: TickSource  # timestamps that DML publishes with
    producer: Producer
    session_valid: Callable[[], Awaitable[bool]]  # whether this Proxy's session still holds
    reported_tick: int  # the last tick RootCoord accepted from this Proxy
    dm_queue: DmTaskQueue
    search_iterators: SearchIterators
    import_visibility: ImportVisibility  # whether a completed import is served yet

    @property
    def querycoord(self) -> QueryCoordClient: ...  # ProxyLoadMixin

    # The Proxy (proxy.py).
    async def report_tick_now(self, flush_channels: Sequence[str] = ()) -> None: ...
    async def _dd_call(self, call: Callable[[], Awaitable[Any]], pre: Callable[[], object] | None = None) -> Any: ...
    def publishing(
        self, meta: CollectionMeta, partitions: Iterable[int] = ()
    ) -> AbstractAsyncContextManager[int]: ...  # a write's timestamp, its meta revalidated

    # Other mixins.
    async def primary_keys_matching(  # ProxyQueryMixin
        self, meta: CollectionMeta, expr: str, partition_names: Sequence[str] = ()
    ) -> pa.Array: ...
    async def check_partition_released(self, req: Any) -> None: ...  # ProxyLoadMixin
    async def prepare_field_search(  # ProxySearchMixin
        self,
        meta: CollectionMeta,
        params: dict[str, str],
        placeholder_group: bytes,
        expr: str,
        templates: Any,
        rank: Any = None,
    ) -> FieldSearch: ...
    async def read_scope(  # ProxySearchMixin
        self, meta: CollectionMeta, req: Any, partition_names: list[str], out_ids: list[int], iterator: bool
    ) -> ReadScope: ...
    async def run_field_search(  # ProxySearchMixin
        self,
        meta: CollectionMeta,
        fs: FieldSearch,
        scope: ReadScope,
        bound: query_node_pb2.IteratorBound | None = None,
    ) -> pa.Table: ...
