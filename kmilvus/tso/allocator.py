"""The global TSO, owned by RootCoord.

A window of physical time is persisted ahead in etcd (`save_window_ms`), so after a restart the
allocator starts past anything it could have handed out: timestamps never repeat or go back,
even across crashes, without an etcd write per allocation.
"""

from __future__ import annotations

import asyncio
import struct
import time

from kmilvus.meta import EtcdKV
from kmilvus.util.tsoutil import compose, physical_ms


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class GlobalTSOAllocator:
    """Allocates consecutive ranges of hybrid values; `alloc(n)` returns the first of n."""

    def __init__(self, kv: EtcdKV, key: str, *, save_window_ms: int = 3000):
        self.kv = kv
        self.key = key
        self.window = save_window_ms
        self._next = 0  # next value to hand out
        self._saved_until = 0  # physical ms persisted in etcd; we never pass it
        self._lock = asyncio.Lock()

    async def initialize(self) -> None:
        raw = await self.kv.get(self.key)
        saved = struct.unpack(">Q", raw)[0] if raw else 0
        start = max(now_ms(), saved + 1)
        await self._persist(start + self.window)
        self._next = compose(start)

    async def _persist(self, until_ms: int) -> None:
        await self.kv.put(self.key, struct.pack(">Q", until_ms))
        self._saved_until = until_ms

    async def alloc(self, count: int = 1) -> int:
        if count < 1:
            raise ValueError("count must be positive")
        async with self._lock:
            first = max(self._next, compose(now_ms()))
            end = first + count
            if physical_ms(end) >= self._saved_until:
                await self._persist(physical_ms(end) + self.window)
            self._next = end
            return first

    def last(self) -> int:
        """The largest value handed out so far (0 before any)."""
        return self._next - 1
