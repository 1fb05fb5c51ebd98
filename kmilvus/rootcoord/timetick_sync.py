"""RootCoord's time-tick sync (Milvus 2.0's `timetickSync`).

Each Proxy reports the tick it can promise (`UpdateChannelTimeTick`); RootCoord is a producer
too (DDL). The tick published on every vchannel is the minimum over all live producers, and only
moves forward, so "tick T on a channel" means every message with ts < T is already in it.
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

    async def publish(self) -> int:
        """Publish the current minimum on every channel if it moved; returns the tick."""
        async with self._lock:
            if self.expected and time.monotonic() < self.expect_until:
                return self.last
            tick = await self.own.tick()
            if self.sources:
                tick = min(tick, *self.sources.values())
            if tick <= self.last:
                return self.last
            chans = self.channels()
            if chans:
                await self.producer.publish_many([(ch, Msg(MsgType.TimeTick, tick)) for ch in chans])
            self.last = tick
            metrics.TIME_TICK.set(tick >> 18)
            return tick

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
