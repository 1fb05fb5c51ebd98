"""Producer-side time-tick bookkeeping (docs/architecture/time-ticks.md).

A producer's tick T promises that every message it will still publish has ts >= T and that all
earlier ones were acknowledged by JetStream. So a publish registers its timestamp *in the same
step* as allocating it (under the allocator's lock: allocations and registrations happen in one
order), and stays registered until its ack; the tick is the minimum of a fresh timestamp and
everything still in flight.

An idle producer (nothing in flight, nothing unreported) says so once and then stays quiet:
RootCoord leaves it out of the minimum until it allocates a timestamp to publish with again
(`AllocTimestampRequest.producerID`), so idle Proxies cost no report every tick interval, and
an idle Proxy never holds back the ticks of a busy one. The idle report is sent holding the
allocator's lock: no timestamp of this producer can be allocated before RootCoord has it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Protocol

from pymilvus.grpc_gen import common_pb2

from kmilvus.log import get_logger
from kmilvus.proto import internal_pb2
from kmilvus.util import merr

log = get_logger(__name__)


class TimestampSource(Protocol):
    """What a producer allocates its timestamps with (kmilvus.allocator.TimestampAllocator): a
    lock held while allocating, and an allocation made under it for a given producer."""

    @property
    def lock(self) -> asyncio.Lock: ...

    async def alloc_locked(self, count: int = 1, *, producer: int = 0) -> int: ...


class TickSource:
    def __init__(self, tso: TimestampSource, producer_id: int = 0):
        self.tso = tso
        self.producer_id = producer_id  # 0: RootCoord's own (it never reports idle)
        self._inflight: dict[int, int] = {}
        self._touched: set[str] = set()
        self.idle_reported = False  # the last report said idle and nothing was allocated since

    @contextlib.asynccontextmanager
    async def publishing(self, channels: Iterable[str] = ()) -> AsyncIterator[int]:
        """Allocate the timestamp for one publish on `channels`; the tick cannot pass it until
        the block exits."""
        channels = tuple(channels)
        self._touched.update(channels)
        async with self.tso.lock:
            self.idle_reported = False  # first: a failed allocation may still have reached RootCoord
            ts = await self.tso.alloc_locked(producer=self.producer_id)
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

    def quiet(self) -> bool:
        """Nothing in flight and nothing published since the last report."""
        return not self._inflight and not self._touched

    async def report(self, send: Callable[[int, list[str], bool], Awaitable[object]]) -> int:
        """Report this producer's tick through `send(ts, active_channels, idle)`; returns it."""
        async with self.tso.lock:
            fresh = await self.tso.alloc_locked()
            if self.quiet():
                await send(fresh, [], True)  # under the lock: see the module docstring
                self.idle_reported = True
                return fresh
        ts = min(fresh, *self._inflight) if self._inflight else fresh
        active = self.take_touched()
        try:
            await send(ts, active, False)
        except BaseException:
            self.touch(active)
            raise
        return ts

    def take_touched(self) -> list[str]:
        """The channels published on since the last call (RootCoord ticks them at every tick)."""
        touched, self._touched = self._touched, set()
        return sorted(touched)

    def touch(self, channels: Iterable[str]) -> None:
        """Give back channels a failed report did not deliver."""
        self._touched.update(channels)


class TickDemander(Protocol):
    """What `demand_tick` calls: RootCoord's gRPC stub, or RootCoord itself in-process."""

    def DemandTimeTick(self, request: internal_pb2.TimeTickDemand, /) -> Awaitable[common_pb2.Status]: ...


async def demand_tick(rootcoord: TickDemander, vchannels: list[str], ts: int) -> None:
    """Ask RootCoord (`DemandTimeTick`) for a tick past `ts` naming `vchannels`: someone waits
    there (a read, a sealed segment's flush), and an idle channel's consumers otherwise get a
    tick only every `time_tick_idle_interval`. Best effort: the periodic tick still comes."""
    try:
        merr.check(await rootcoord.DemandTimeTick(internal_pb2.TimeTickDemand(channels=vchannels, timestamp=ts)))
    except Exception as exc:  # noqa: BLE001 - the waiter only waits longer without it
        log.warning("tick on demand failed", channels=len(vchannels), error=repr(exc))
