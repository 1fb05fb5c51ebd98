"""Producer-side time-tick bookkeeping (DESIGN.md "The stream").

A producer's tick T promises that every message it will still publish has ts >= T and that all
earlier ones were acknowledged by JetStream. So a publish registers its timestamp *in the same
step* as allocating it (under the allocator's lock: allocations and registrations happen in one
order), and stays registered until its ack; the tick is the minimum of a fresh timestamp and
everything still in flight.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from kmilvus.allocator import TimestampAllocator
from kmilvus.log import get_logger
from kmilvus.proto import internal_pb2
from kmilvus.util import merr

log = get_logger(__name__)


class TickSource:
    def __init__(self, tso: TimestampAllocator):
        self.tso = tso
        self._inflight: dict[int, int] = {}
        self._touched: set[str] = set()

    @contextlib.asynccontextmanager
    async def publishing(self, channels: Iterable[str] = ()) -> AsyncIterator[int]:
        """Allocate the timestamp for one publish on `channels`; the tick cannot pass it until
        the block exits."""
        channels = tuple(channels)
        self._touched.update(channels)
        async with self.tso.lock:
            ts = await self.tso.alloc_locked()
            self._inflight[ts] = self._inflight.get(ts, 0) + 1
        try:
            yield ts
        finally:
            self._touched.update(channels)  # acknowledged now: the next ticks must pass it promptly
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

    def take_touched(self) -> list[str]:
        """The channels published on since the last call (RootCoord ticks them at every tick)."""
        touched, self._touched = self._touched, set()
        return sorted(touched)

    def touch(self, channels: Iterable[str]) -> None:
        """Give back channels a failed report did not deliver."""
        self._touched.update(channels)


async def demand_tick(rootcoord, vchannels: list[str], ts: int) -> None:
    """Ask RootCoord (`DemandTimeTick`) for a tick past `ts` naming `vchannels`: someone waits
    there (a read, a sealed segment's flush), and an idle channel's consumers otherwise get a
    tick only every `time_tick_idle_interval`. Best effort: the periodic tick still comes."""
    try:
        merr.check(await rootcoord.DemandTimeTick(internal_pb2.TimeTickDemand(channels=vchannels, timestamp=ts)))
    except Exception as exc:  # noqa: BLE001 - the waiter only waits longer without it
        log.warning("tick on demand failed", channels=len(vchannels), error=repr(exc))
