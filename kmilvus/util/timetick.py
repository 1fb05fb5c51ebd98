"""Producer-side time-tick bookkeeping (DESIGN.md "The stream").

A producer's tick T promises that every message it will still publish has ts >= T and that all
earlier ones were acknowledged by JetStream. So a publish registers its timestamp *in the same
step* as allocating it (under the allocator's lock: allocations and registrations happen in one
order), and stays registered until its ack; the tick is the minimum of a fresh timestamp and
everything still in flight.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from kmilvus.allocator import TimestampAllocator


class TickSource:
    def __init__(self, tso: TimestampAllocator):
        self.tso = tso
        self._inflight: dict[int, int] = {}

    @contextlib.asynccontextmanager
    async def publishing(self) -> AsyncIterator[int]:
        """Allocate the timestamp for one publish; the tick cannot pass it until the block exits."""
        async with self.tso.lock:
            ts = await self.tso.alloc_locked()
            self._inflight[ts] = self._inflight.get(ts, 0) + 1
        try:
            yield ts
        finally:
            n = self._inflight[ts] - 1
            if n:
                self._inflight[ts] = n
            else:
                del self._inflight[ts]

    async def tick(self) -> int:
        """The timestamp this producer can promise now."""
        async with self.tso.lock:
            fresh = await self.tso.alloc_locked()
        return min(fresh, *self._inflight) if self._inflight else fresh
