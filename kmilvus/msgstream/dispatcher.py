"""Milvus' msgdispatcher: one server-side consumer per pchannel (and per consuming component),
shared by every vchannel of it that the component consumes.

A consumer per vchannel made a node's idle cost grow with the collections (at 1,000 collections
of 2 shards, 2,000 JetStream consumers sending heartbeats, and a tick message per vchannel). Here
a pchannel is consumed once, with a wildcard; its data goes to the vchannel's `Target`, and a
time tick (published once per pchannel) to every target of it.

Positions stay stream sequences, comparable across the subjects of a pchannel. A target
registered after seq S gets exactly the messages of its vchannel with seq > S, in order. When the
shared consumer has already read past S (to P, skipping what was not yet registered), the target
first catches up on its own: a consumer of its vchannel alone reads (S, P], then it is closed and
the target goes on with what the shared consumer delivered after P. Ticks in (S, P] are not
replayed: the first tick after P covers them (a tick promises everything before it). If P falls
between the parts of one of the vchannel's split messages, the catch-up reads on to its last
part, and what the shared consumer hands out up to there (queued meanwhile or later: the ticks,
the message itself) is dropped (see `Msg.incomplete`).

Messages purged before the shared consumer read them (`StreamGapError`) are reported to every
target that was reading there, at that point of its queue: each reader decides what it means.

A pchannel ticks ten times a second while any of its vchannels is written, and handing every
tick to every vchannel of it would make each tick cost what the collections on it cost. So a
tick goes to a vchannel that got messages in the last `ACTIVE_FOR` seconds (RootCoord's rule for
pchannels), to the vchannels it names (a flush or a read waits there: `TICK_FOR`), and to every
other one at most every `idle_tick_interval` seconds. A tick skipped is a promise superseded by
the next one — which is also why a vchannel in the middle of a split message does not get one.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Callable
from typing import Protocol

from kmilvus.log import get_logger
from kmilvus.msgstream import channels
from kmilvus.msgstream.errors import StreamGapError
from kmilvus.msgstream.message import TICK_FOR, Msg, MsgPosition, MsgType
from kmilvus.util.failpoint import afailpoint

log = get_logger(__name__)

# What a target may have waiting before the pchannel's delivery pauses (until it is half read).
TARGET_QUEUE = 4096  # messages
TARGET_QUEUE_BYTES = 64 * 1024 * 1024  # payload bytes
BATCH = 256  # messages handed out between two looks at the targets' queues
ACTIVE_FOR = 1.0  # seconds a vchannel gets every tick after a message of its own
CATCH_UP_POLL = 1.0  # seconds a catch-up waits for a message before looking at its end again


class Consumer(Protocol):
    """What a dispatcher reads with: a consumer of the stream (jetstream's `Consumer`)."""

    @property
    def closed(self) -> bool: ...

    @property
    def processed_seq(self) -> int: ...

    def open_channels(self) -> frozenset[str]: ...

    async def next(self, timeout: float | None = None) -> Msg | None: ...

    async def next_batch(self, max_msgs: int = 4096, timeout: float | None = None) -> list[Msg]: ...

    async def close(self) -> None: ...


class Source(Protocol):
    """What a dispatcher needs of its stream (jetstream's `MsgStream`): consumers of a pchannel
    and of one vchannel, subjects, a vchannel's last seq, and how often idle vchannels tick."""

    idle_tick_interval: float

    def subject(self, channel: str) -> str: ...

    async def last_seq(self, vchannel: str) -> int: ...

    async def consume(self, channel: str, *, after_seq: int = 0, name: str | None = None) -> Consumer: ...

    async def consume_pchannel(
        self,
        pchannel: str,
        *,
        after_seq: int = 0,
        name: str | None = None,
        label: str = "",
        channel_of: Callable[[str], str | None],
    ) -> Consumer: ...


class Target:
    """One vchannel's share of a dispatcher; reads like a `Consumer`."""

    def __init__(self, dispatcher: Dispatcher, vchannel: str, after_seq: int) -> None:
        self._d = dispatcher
        self.vchannel = vchannel
        self.after = after_seq  # the last seq put here, or read by the catch-up (deduplicates)
        # Messages, and the gap the shared consumer found where it was (raised when reached).
        self._queue: collections.deque[Msg | StreamGapError] = collections.deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()
        self.closed = False
        self.read = after_seq  # the seq of the last message handed to the reader
        self._solo: Consumer | None = None  # catching up on (after_seq, _upto] alone
        self._upto = 0

    def put(self, msg: Msg) -> None:
        seq = msg.position.seq if msg.position is not None else 0
        if seq <= self.after or self.closed:
            return
        self.after = seq
        self._queue.append(msg)
        self._bytes += len(msg.payload)
        self._ready.set()
        if len(self._queue) >= TARGET_QUEUE or self._bytes >= TARGET_QUEUE_BYTES:
            self.drained.clear()

    def put_gap(self, err: StreamGapError) -> None:
        """The shared consumer found messages purged before it read them: if this vchannel
        was reading there, its reader gets the error at that point of its queue."""
        if self.closed or self.after >= err.next_seq - 1:
            return
        self._queue.append(StreamGapError(self.vchannel, max(err.after_seq, self.after), err.next_seq))
        self.after = err.next_seq - 1
        self._ready.set()

    @property
    def processed_seq(self) -> int:
        """The seq of the last message read (as `Consumer.processed_seq`: where to resume)."""
        return self.read

    def _take(self) -> Msg:
        item = self._queue.popleft()
        if isinstance(item, StreamGapError):
            self.read = item.next_seq - 1
            raise item
        self._bytes -= len(item.payload)
        assert item.position is not None
        self.read = item.position.seq
        return item

    def _taken(self) -> None:
        if len(self._queue) < TARGET_QUEUE // 2 and self._bytes < TARGET_QUEUE_BYTES // 2:
            self.drained.set()

    def __aiter__(self) -> Target:
        return self

    async def __anext__(self) -> Msg:
        msg = await self.next()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def next(self, timeout: float | None = None) -> Msg | None:
        """The next message, or None after `timeout` seconds (or once closed). Raises
        `StreamGapError` where messages of the pchannel were purged before they were read."""
        if self._solo is not None:
            msg = await self._catch_up(timeout)
            if msg is not None or self._solo is not None:
                return msg
        while not self._queue:
            if self.closed:
                return None
            self._ready.clear()
            if timeout is None:  # a flowgraph's wait: no timer to set up at each wake-up
                await self._ready.wait()
                continue
            try:
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
            except TimeoutError:
                return None
        try:
            return self._take()
        finally:
            self._taken()

    async def _catch_up(self, timeout: float | None) -> Msg | None:
        """The next message of (after_seq, _upto] from the solo consumer; closes it at the end.

        A split message of this vchannel begun at or before `_upto` is read to its end here
        (the shared consumer started after its first part): the ticks queued meanwhile are
        dropped with the duplicates, so no tick between its parts becomes a resume point."""
        solo = self._solo
        assert solo is not None
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while (solo.processed_seq < self._upto or self.vchannel in solo.open_channels()) and not self.closed:
            # Bounded waits: what the solo consumer reads of other channels (or a tick showing a
            # split message abandoned) can end the catch-up without a message of this vchannel.
            wait = CATCH_UP_POLL if deadline is None else max(0.0, min(CATCH_UP_POLL, deadline - loop.time()))
            msg = await solo.next(wait)  # a gap raises: what this vchannel missed was purged
            if msg is None:
                if deadline is not None and loop.time() >= deadline:
                    return None
                continue
            assert msg.position is not None
            self.read = msg.position.seq
            return msg
        self._solo = None
        await solo.close()
        # What the shared consumer read up to here and has not handed out yet (it read a split
        # message's first parts back from the stream first, or was just slower) was read alone:
        # `put` drops it when it comes, as it drops what is queued already.
        self.after = max(self.after, self.read)
        while self._queue and not isinstance(head := self._queue[0], StreamGapError):
            assert head.position is not None
            if head.position.seq > self.read:
                break
            self._queue.popleft()  # read alone already
            self._bytes -= len(head.payload)
        self._taken()
        log.debug("caught up", vchannel=self.vchannel, seq=self.read)
        return None

    async def next_batch(self, max_msgs: int = 4096, timeout: float | None = None) -> list[Msg]:
        first = await self.next(timeout)
        if first is None:
            return []
        out = [first]
        if self._solo is not None:
            return out
        while self._queue and len(out) < max_msgs and not isinstance(self._queue[0], StreamGapError):
            out.append(self._take())
        self._taken()
        return out

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        self._bytes = 0
        self._ready.set()
        self.drained.set()
        solo, self._solo = self._solo, None
        if solo is not None:
            await solo.close()
        await self._d.remove(self)


class Dispatcher:
    """The shared consumer of one pchannel, for one consuming component (`name`). Once its last
    target is gone it is retired: `on_retired` hears of it (the `DispatchClient` forgets it)."""

    def __init__(self, stream: Source, pchannel: str, name: str, on_retired: Callable[[Dispatcher], None]) -> None:
        self.stream = stream
        self.pchannel = pchannel
        self.name = name
        self._on_retired = on_retired
        self.targets: dict[str, Target] = {}
        self.consumer: Consumer | None = None
        self.retired = False
        self._subjects = {stream.subject(pchannel): pchannel}  # subject → channel served
        self._active: dict[str, float] = {}  # vchannel → when it last got a message (monotonic)
        self._ticked_at: dict[str, float] = {}  # vchannel → its last tick (monotonic), oldest first
        self._lock = asyncio.Lock()
        self._pump: asyncio.Task[None] | None = None

    def _channel_of(self, subject: str) -> str | None:
        """The channel a message belongs to: a vchannel served here, the pchannel (its ticks),
        or None (another node's vchannel: skipped before it is decoded)."""
        return self._subjects.get(subject)

    async def add(self, vchannel: str, after_seq: int) -> Target | None:
        """Serve `vchannel` after `after_seq`; None if this dispatcher was retired meanwhile.

        A step that fails (NATS away) leaves nothing registered: the caller can try again, and
        no target that nobody reads holds the pchannel's delivery back."""
        async with self._lock:
            if self.retired:
                return None
            if vchannel in self.targets:
                raise ValueError(f"vchannel {vchannel} is already consumed by {self.name}")
            target = Target(self, vchannel, after_seq)
            if self.consumer is None:
                self.consumer = await self._consume(after_seq)
            self.targets[vchannel] = target
            self._subjects[self.stream.subject(vchannel)] = vchannel
            self._ticked_at = {vchannel: -math.inf} | self._ticked_at  # the next tick is its
            read = self.consumer.processed_seq
            try:
                await afailpoint("dispatcher.add.catch_up")
                if after_seq < read:
                    # The shared consumer skipped this vchannel up to `read`: catch up alone first.
                    last = await self.stream.last_seq(vchannel)
                    target.after = read
                    if last > after_seq:
                        target._upto = min(read, last)
                        target._solo = await self.stream.consume(vchannel, after_seq=after_seq, name=self.name)
            except BaseException:
                stop = self._forget(target)
                await _stop(*stop)
                raise
            if self._pump is None or self._pump.done():
                self._pump = asyncio.create_task(self._run(), name=f"dispatch-{self.pchannel}-{self.name}")
            return target

    async def _consume(self, after_seq: int) -> Consumer:
        return await self.stream.consume_pchannel(
            self.pchannel, after_seq=after_seq, name=self.name, label=self.pchannel, channel_of=self._channel_of
        )

    def _forget(self, target: Target) -> tuple[Consumer | None, asyncio.Task[None] | None]:
        """Unregister `target` (under the lock); the last one retires the dispatcher, whose
        consumer and pump the caller stops."""
        if self.targets.get(target.vchannel) is target:
            del self.targets[target.vchannel]
            self._subjects.pop(self.stream.subject(target.vchannel), None)
            self._active.pop(target.vchannel, None)
            self._ticked_at.pop(target.vchannel, None)
        if self.targets:
            return None, None
        self.retired = True
        consumer, self.consumer = self.consumer, None
        pump, self._pump = self._pump, None
        self._on_retired(self)
        return consumer, pump

    async def remove(self, target: Target) -> None:
        async with self._lock:
            stop = self._forget(target)
        await _stop(*stop)

    async def _run(self) -> None:
        while self.consumer is not None:
            consumer = self.consumer
            try:
                batch = await consumer.next_batch(BATCH)
            except StreamGapError as gap:
                async with self._lock:
                    if consumer is self.consumer:
                        for t in self.targets.values():
                            t.put_gap(gap)
                continue
            except Exception:  # the consumer recreates itself on NATS trouble; this is a bug
                log.error("dispatcher read failed", pchannel=self.pchannel, exc_info=True)
                await asyncio.sleep(0.5)
                continue
            if not batch and consumer.closed:
                return  # the stream is closing
            await afailpoint("dispatcher.deliver")  # read, not handed out yet
            async with self._lock:
                if consumer is self.consumer:
                    for msg in batch:
                        self._deliver(msg)
            for t in list(self.targets.values()):
                if not t.drained.is_set():
                    await t.drained.wait()

    def _deliver(self, msg: Msg) -> None:
        pos = msg.position
        assert pos is not None
        if pos.channel_name != self.pchannel:
            t = self.targets.get(pos.channel_name)
            if t is not None:
                t.put(msg)
                self._active[t.vchannel] = time.monotonic()
            return
        # A time tick: for the vchannels that need it (see the module's docstring).
        now = time.monotonic()
        if self._active:
            self._active = {v: at for v, at in self._active.items() if now - at < ACTIVE_FOR}
        due = set(self._active)
        named = msg.headers.get(TICK_FOR)
        if named:
            due.update(v for v in named.split(",") if v in self.targets)
        idle = self.stream.idle_tick_interval
        for v, at in self._ticked_at.items():
            if now - at < idle:
                break
            due.add(v)
        due -= msg.incomplete  # mid split message: not a resume point for them (see `Msg`)
        for v in due:
            tick = Msg(MsgType.TimeTick, msg.timestamp)
            tick.position = MsgPosition(channel_name=v, seq=pos.seq, timestamp=pos.timestamp)
            self.targets[v].put(tick)
            del self._ticked_at[v]
            self._ticked_at[v] = now  # to the end: the order stays "the longest without first"


async def _stop(consumer: Consumer | None, pump: asyncio.Task[None] | None) -> None:
    if pump is not None:
        pump.cancel()
    if consumer is not None:
        await consumer.close()


class DispatchClient:
    """The dispatchers of one stream, one per (pchannel, consuming component): Milvus'
    msgdispatcher.Client, which its stream's `dispatch` answers through."""

    def __init__(self, stream: Source) -> None:
        self._stream = stream
        self._dispatchers: dict[tuple[str, str], Dispatcher] = {}

    async def dispatch(self, vchannel: str, *, after_seq: int, name: str) -> Target:
        """A target reading `vchannel` after `after_seq`, through the component's shared consumer."""
        key = (channels.pchannel_of(vchannel), name)
        while True:
            d = self._dispatchers.get(key)
            if d is None:
                d = self._dispatchers[key] = Dispatcher(self._stream, key[0], name, self._retired)
            target = await d.add(vchannel, after_seq)
            if target is not None:
                return target

    def _retired(self, d: Dispatcher) -> None:
        if self._dispatchers.get((d.pchannel, d.name)) is d:
            del self._dispatchers[(d.pchannel, d.name)]

    async def close(self) -> None:
        """Close every target (the stream is closing)."""
        for d in list(self._dispatchers.values()):
            for t in list(d.targets.values()):
                await t.close()
