"""RootCoord's time-tick sync (Milvus 2.0's `timetickSync`).

Each Proxy reports the tick it can promise (`UpdateChannelTimeTick`); RootCoord is a producer
too (DDL). The tick published on every vchannel is the minimum over all live producers, and only
moves forward, so "tick T on a channel" means every message with ts < T is already in it.

Ticks on demand: a Flush must not wait for the next periodic tick. The Proxy that ran it reports
a fresh tick naming the flushed collection's channels (`demand`); RootCoord publishes the
minimum on those channels at once if it has passed what the Proxy asked for, or as soon as
another producer's report lets it (a lagging Proxy still holds it back: the promise is the same).
Idle traffic is unchanged: nothing is published on demand unless something was flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from kmilvus import metrics
from kmilvus.log import get_logger
from kmilvus.msgstream import Msg, MsgType
from kmilvus.util.timetick import TickSource

log = get_logger(__name__)


class TimeTickSync:
    def __init__(self, producer, own: TickSource, channels: Callable[[], list[str]], interval: float):
        self.producer = producer
        self.own = own
        self.channels = channels
        self.interval = interval
        self.sources: dict[int, int] = {}
        # Producers known to exist (live sessions) that have not reported since we started: a
        # tick must not pass what they may still be publishing. Bounded by `expect_until`.
        self.expected: set[int] = set()
        self.expect_until = 0.0
        self.last = 0
        # Ticks on demand: channel → tick published there ahead of the periodic one, and
        # channel → the tick a flush waits for there (until some publish reaches it).
        self.early: dict[str, int] = {}
        self.demands: dict[str, int] = {}
        self.on_demand = 0  # ticks published on demand (channels × publishes)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None

    def expect(self, source_ids: set[int], wait: float) -> None:
        """After a restart: wait (at most `wait` s) for these live producers' first reports."""
        self.expected = set(source_ids) - set(self.sources)
        self.expect_until = time.monotonic() + wait

    def update(self, source_id: int, ts: int) -> None:
        self.expected.discard(source_id)
        if ts > self.sources.get(source_id, 0):
            self.sources[source_id] = ts

    def remove_source(self, source_id: int) -> None:
        self.expected.discard(source_id)
        self.sources.pop(source_id, None)

    async def _tick(self) -> int | None:
        """The minimum over every producer now; None while waiting for live producers' reports."""
        if self.expected and time.monotonic() < self.expect_until:
            return None
        tick = await self.own.tick()
        if self.sources:
            tick = min(tick, *self.sources.values())
        return tick

    async def publish(self) -> int:
        """Publish the current minimum on every channel if it moved; returns the tick."""
        async with self._lock:
            tick = await self._tick()
            if tick is None or tick <= self.last:
                return self.last
            # A channel ticked on demand already has this tick (or a later one) when nothing moved.
            chans = [ch for ch in self.channels() if self.early.get(ch, 0) < tick]
            if chans:
                await self.producer.publish_many([(ch, Msg(MsgType.TimeTick, tick)) for ch in chans])
            self.last = tick
            self.early = {ch: t for ch, t in self.early.items() if t > tick}
            self.demands = {ch: t for ch, t in self.demands.items() if t > tick}
            metrics.TIME_TICK.set(tick >> 18)
            return tick

    async def demand(self, chans: list[str], ts: int) -> None:
        """A flush on `chans` waits for a tick past `ts` there: publish it now if the minimum over
        the producers allows it, else at the first report that does (or the periodic tick)."""
        for ch in chans:
            self.demands[ch] = max(self.demands.get(ch, 0), ts)
        await self.publish_demanded()

    async def publish_demanded(self) -> None:
        """Publish the current minimum on the channels a flush waits for, where it moved."""
        if not self.demands:
            return
        async with self._lock:
            tick = await self._tick()
            if tick is None:
                return
            live = set(self.channels())
            self.demands = {ch: t for ch, t in self.demands.items() if ch in live}
            chans = [ch for ch in self.demands if tick > max(self.last, self.early.get(ch, 0))]
            if not chans:
                return
            await self.producer.publish_many([(ch, Msg(MsgType.TimeTick, tick)) for ch in chans])
            self.on_demand += len(chans)
            metrics.ON_DEMAND_TICKS.inc(len(chans))
            for ch in chans:
                self.early[ch] = tick
            self.demands = {ch: t for ch, t in self.demands.items() if t > tick}

    async def _loop(self) -> None:
        while True:
            try:
                await self.publish()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep ticking through transient failures
                log.warning("time tick publish failed", error=str(exc))
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="timetick-sync")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
