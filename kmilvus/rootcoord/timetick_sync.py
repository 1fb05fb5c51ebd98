"""RootCoord's time-tick sync (Milvus 2.0's `timetickSync`).

Each Proxy reports the tick it can promise (`UpdateChannelTimeTick`); RootCoord is a producer
too (DDL). The tick is the minimum over all live producers, and only moves forward, so "tick T
on a channel" means every message with ts < T is already in it. Ticks go on the physical
channels (as in Milvus), once per pchannel for all the vchannels on it: what ticking costs grows
with the pchannels in use, not with the collections. Callers may name vchannels (a Proxy's
active channels, a flush's or a read's): they stand for their pchannel.

Ticks on demand: a Flush must not wait for the next periodic tick. The Proxy that ran it reports
a fresh tick naming the flushed collection's channels (`demand`); RootCoord publishes the
minimum on those channels at once if it has passed what the Proxy asked for, or as soon as
another producer's report lets it (a lagging Proxy still holds it back: the promise is the same).
Nothing is published on demand unless something was flushed or a read must wait.

Idle channels tick slowly: a tick on a vchannel nothing was published on lately carries no news
for its consumers, and with many collections publishing every tick on every vchannel saturates
the machine (docs/architecture/time-ticks.md). A channel a producer reported publishing on (`mark_active`, from the
Proxies' reports and RootCoord's own DDL) gets every tick for `active_for` seconds; any other
channel at most every `idle_interval` seconds. Whoever needs a tick on an idle channel sooner
asks for it (`demand`): a flush (through the Proxy that ran it) and a QueryNode whose read waits
for a channel's serviceable time. The promise of a tick is unchanged; only its cadence differs.

Old ticks are not trimmed here: a purge of the tick subject moved the consumers that also read
the pchannel's data on some nats-server versions. A pchannel's stream is purged as a whole, by
sequence, below what its readers still need (DataCoord's `StreamTrimmer`), ticks with the rest.

Idle producers: a Proxy with nothing in flight reports `idle` and then stays quiet; it is left
out of the minimum until it asks for a timestamp to publish with (`allocating`, called before
that timestamp is allocated, so no tick computed afterwards can pass it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterable

from kmilvus import metrics
from kmilvus.log import get_logger
from kmilvus.msgstream import Msg, MsgType, channels
from kmilvus.msgstream.message import TICK_FOR
from kmilvus.util.tasks import stopping
from kmilvus.util.timetick import TickSource

log = get_logger(__name__)


class TimeTickSync:
    def __init__(
        self,
        producer,
        own: TickSource,
        channels: Callable[[], list[str]],
        interval: float,
        *,
        idle_interval: float = 0.0,
        active_for: float = 1.0,
    ):
        self.producer = producer
        self.own = own
        self.channels = channels
        self.interval = interval
        self.idle_interval = idle_interval  # 0: every channel at every tick
        self.active_for = active_for
        self.sources: dict[int, int] = {}
        self.idle: set[int] = set()  # sources whose newest report said idle (see `allocating`)
        # Producers known to exist (live sessions) that have not reported since we started: a
        # tick must not pass what they may still be publishing. Bounded by `expect_until`.
        self.expected: set[int] = set()
        self.expect_until = 0.0
        self.last = 0  # the last periodic tick computed (not every channel got it)
        # Channel → the last tick published there, and when (monotonic); channel → when a
        # producer last reported publishing there; channel → the tick a flush or a read waits
        # for there (until some publish reaches it).
        self.sent: dict[str, int] = {}
        self.sent_at: dict[str, float] = {}  # in the order of that time: the most overdue first
        self._live: list[str] | None = None  # `channels()`' last answer (the same object: no change)
        self._live_set: set[str] = set()
        self.active: dict[str, float] = {}
        self.demands: dict[str, int] = {}
        # pchannel → the vchannels a pending demand named: the tick carries their names, so a
        # node's dispatcher hands it to them even if they are idle (it skips idle vchannels).
        self.named: dict[str, set[str]] = {}
        self.on_demand = 0  # ticks published on demand (channels × publishes)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None

    def expect(self, source_ids: set[int], wait: float) -> None:
        """After a restart: wait (at most `wait` s) for these live producers' first reports."""
        self.expected = set(source_ids) - set(self.sources)
        self.expect_until = time.monotonic() + wait

    def update(self, source_id: int, ts: int, *, idle: bool = False) -> None:
        self.expected.discard(source_id)
        last = self.sources.get(source_id, 0)
        if ts > last:
            self.sources[source_id] = ts
        if ts >= last:  # a late report (an older timestamp) says nothing about idleness now
            if idle:
                self.idle.add(source_id)
            else:
                self.idle.discard(source_id)

    def allocating(self, source_id: int) -> None:
        """`source_id` is about to get a timestamp to publish with: if it was idle (or unknown:
        RootCoord restarted while it was quiet), the tick waits on it again, at what it last
        promised (or the last tick), until its next report. Only ever lowers the minimum."""
        if source_id in self.idle or source_id not in self.sources:
            self.idle.discard(source_id)
            self.sources.setdefault(source_id, self.last)

    def remove_source(self, source_id: int) -> None:
        self.expected.discard(source_id)
        self.sources.pop(source_id, None)
        self.idle.discard(source_id)

    async def _tick(self) -> int | None:
        """The minimum over every producer now; None while waiting for live producers' reports."""
        if self.expected and time.monotonic() < self.expect_until:
            return None
        tick = await self.own.tick()
        busy = [ts for source, ts in self.sources.items() if source not in self.idle]
        return min(tick, *busy) if busy else tick

    def mark_active(self, chans) -> None:
        """A producer published on `chans`: tick them at every tick for `active_for` seconds."""
        now = time.monotonic()
        for ch in _pchannels(chans):
            self.active[ch] = now

    def _refresh(self) -> None:
        """Follow `channels()`: forget dropped channels, queue new ones first (due at once).
        RootCoord answers with the same list while no collection changed, so a tick costs what
        the active and due channels cost, not what every channel does."""
        live = self.channels()
        if live is self._live:
            return
        self._live, self._live_set = live, set(live)
        for ch in [c for c in self.sent_at if c not in self._live_set]:
            del self.sent_at[ch]
            self.sent.pop(ch, None)
        fresh = [c for c in live if c not in self.sent_at]
        if fresh:
            self.sent_at = dict.fromkeys(fresh, -math.inf) | self.sent_at

    async def publish(self) -> int:
        """Publish the current minimum on every channel that is active or due; returns the tick."""
        async with self._lock:
            tick = await self._tick()
            if tick is None:
                return self.last
            now = time.monotonic()
            self._refresh()
            due = []
            for ch, at in self.sent_at.items():
                if now - at < self.idle_interval:
                    break
                due.append(ch)
            self.active = {ch: t for ch, t in self.active.items() if now - t < self.active_for}
            due += [ch for ch in self.active if ch in self._live_set]
            chans = [ch for ch in dict.fromkeys(due) if self.sent.get(ch, 0) < tick]
            await self._send(chans, tick, now)
            self.last = max(self.last, tick)
            metrics.TIME_TICK.set(tick >> 18)
            return self.last

    async def _send(self, chans: list[str], tick: int, now: float) -> None:
        if chans:
            await self.producer.publish_many([(ch, self._tick_msg(ch, tick)) for ch in chans])
        for ch in chans:
            self.sent[ch] = tick
            self.sent_at.pop(ch, None)
            self.sent_at[ch] = now  # to the end: the order stays "most overdue first"
            if self.demands.get(ch, tick + 1) <= tick:
                del self.demands[ch]
                self.named.pop(ch, None)

    def _tick_msg(self, ch: str, tick: int) -> Msg:
        named = self.named.get(ch)
        return Msg(MsgType.TimeTick, tick, headers={TICK_FOR: ",".join(sorted(named))} if named else {})

    async def demand(self, chans: list[str], ts: int) -> None:
        """A flush or a read on `chans` waits for a tick past `ts` there: publish it now if the
        minimum over the producers allows it, else at the first report that does (or the
        periodic tick)."""
        for c in chans:
            if channels.is_vchannel(c):
                # Even if the pchannel has that tick already: a node may not have handed it to
                # this (idle) vchannel. The next tick names it.
                ch = channels.pchannel_of(c)
                self.named.setdefault(ch, set()).add(c)
            elif ts > self.sent.get(c, 0):  # else the channel has that tick already
                ch = c
            else:
                continue
            self.demands[ch] = max(self.demands.get(ch, 0), ts)
        await self.publish_demanded()

    async def publish_demanded(self) -> None:
        """Publish the current minimum on the channels a flush or a read waits for, where it moved."""
        if not self.demands:
            return
        async with self._lock:
            tick = await self._tick()
            if tick is None:
                return
            self._refresh()
            self.demands = {ch: t for ch, t in self.demands.items() if ch in self._live_set}
            self.named = {ch: v for ch, v in self.named.items() if ch in self.demands}
            chans = [ch for ch, t in self.demands.items() if tick > self.sent.get(ch, 0) or tick >= t]
            if not chans:
                return
            await self._send(chans, tick, time.monotonic())
            self.on_demand += len(chans)
            metrics.ON_DEMAND_TICKS.inc(len(chans))

    async def _loop(self) -> None:
        while True:
            try:
                await self.publish()
            except (Exception, asyncio.CancelledError) as exc:  # keep ticking through transient failures
                if stopping(exc):
                    raise
                log.warning("time tick publish failed", error=str(exc))
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="timetick-sync")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _pchannels(chans: Iterable[str]) -> list[str]:
    """The channels ticks go on: a vchannel stands for its pchannel."""
    return list(dict.fromkeys(channels.pchannel_of(c) if channels.is_vchannel(c) else c for c in chans))
