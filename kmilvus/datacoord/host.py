"""What DataCoord's mixins use of DataCoord (Milvus keeps all of it on datacoord's `Server`).

DataCoord is one class assembled from mixins (indexes, partitions, truncation, jobs), one module
each. A mixin reads the state `DataCoord.__init__` builds and calls DataCoord's helpers;
`DataCoordHost` names all of it with its types. Each mixin derives from it for the type checker
only (`if TYPE_CHECKING`): inside a mixin `self` is typed, and DataCoord cannot be built unless it
provides every member (mypy's abstract-class check). At run time the mixins derive from `object`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from kmilvus.allocator import IDAllocator
from kmilvus.components import Registry
from kmilvus.config import Config
from kmilvus.datacoord.channel_manager import ChannelManager
from kmilvus.datacoord.garbage_collector import GarbageCollector
from kmilvus.datacoord.jobs import JobService
from kmilvus.datacoord.meta import SegmentMeta
from kmilvus.datacoord.remover import FencedRemover
from kmilvus.meta import EtcdKV
from kmilvus.storage import ObjectStore


class DataCoordHost(Protocol):
    # State (DataCoord.__init__).
    cfg: Config
    kv: EtcdKV
    store: ObjectStore
    registry: Registry
    ids: IDAllocator
    meta: SegmentMeta
    channels: ChannelManager
    gc: GarbageCollector
    remover: FencedRemover
    jobs: JobService
    _dropping: set[int]  # collections being dropped
    _assign_lock: asyncio.Lock  # segment assignment and what must not interleave with it

    # DataCoord (data_coord.py).
    def _flush_done(self, segment_ids: Iterable[int], flush_ts: int, coll_id: int) -> bool: ...
    async def _demand_flush_ticks(self, segment_ids: Iterable[int], flush_ts: int, coll_id: int) -> None: ...
