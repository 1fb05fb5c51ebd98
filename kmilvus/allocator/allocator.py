"""Allocators that components use to get timestamps and IDs from RootCoord.

IDs are fetched in windows and handed out locally (row IDs for a 10,000-row insert cost no RPC
most of the time). Timestamps are fetched per call — a cached timestamp would go stale — but
concurrent callers are served in order, so a caller that registered its timestamp right after
`alloc()` returned can rely on every later allocation being larger (time ticks depend on it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Protocol

import numpy as np

from kmilvus.proto import internal_pb2
from kmilvus.util import merr


class RootCoordAlloc(Protocol):
    """What the allocators call: RootCoord's gRPC stub, or RootCoord itself in-process."""

    def AllocTimestamp(
        self, request: internal_pb2.AllocTimestampRequest, /
    ) -> Awaitable[internal_pb2.AllocTimestampResponse]: ...

    def AllocID(self, request: internal_pb2.AllocIDRequest, /) -> Awaitable[internal_pb2.AllocIDResponse]: ...


class TimestampAllocator:
    def __init__(self, rootcoord: RootCoordAlloc, source_id: int = 0):
        self.rootcoord = rootcoord
        self.source_id = source_id
        self._lock = asyncio.Lock()
        # The largest meta epoch RootCoord answered with: a Proxy's cached collection meta read
        # under a smaller one may predate a drop (kmilvus.proxy.meta_cache).
        self.meta_epoch = 0

    async def alloc(self, count: int = 1) -> int:
        async with self._lock:
            return await self._alloc(count)

    async def _alloc(self, count: int, producer: int = 0) -> int:
        req = internal_pb2.AllocTimestampRequest(count=count, producerID=producer)
        resp = await self.rootcoord.AllocTimestamp(req)
        merr.check(resp.status)
        self.meta_epoch = max(self.meta_epoch, resp.meta_epoch)
        return resp.timestamp

    @property
    def lock(self) -> asyncio.Lock:
        """Held while allocating; hold it to make allocate-then-register atomic."""
        return self._lock

    async def alloc_locked(self, count: int = 1, *, producer: int = 0) -> int:
        """Allocate while the caller already holds `lock`; `producer`: the ID of the producer
        that publishes with it (see `TickSource`)."""
        return await self._alloc(count, producer)


class IDAllocator:
    """Globally unique int64 IDs, fetched `batch` at a time."""

    def __init__(self, rootcoord: RootCoordAlloc, batch: int = 100_000):
        self.rootcoord = rootcoord
        self.batch = batch
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def alloc(self, count: int = 1) -> int:
        """The first of `count` consecutive IDs."""
        async with self._lock:
            if self._end - self._next < count:
                n = max(count, self.batch)
                resp = await self.rootcoord.AllocID(internal_pb2.AllocIDRequest(count=n))
                merr.check(resp.status)
                self._next, self._end = resp.ID, resp.ID + resp.count
            first = self._next
            self._next += count
            return first

    async def alloc_array(self, count: int) -> np.ndarray:
        first = await self.alloc(count)
        return np.arange(first, first + count, dtype=np.int64)
