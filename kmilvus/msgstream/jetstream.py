"""The message stream on NATS JetStream: one file-backed stream per pchannel, one subject per
vchannel, positions = JetStream stream sequences.

Producers publish with pipelined acks. Consumers are ordered push consumers we drive ourselves
(ack none, flow control, idle heartbeats) rather than nats-py's, because nats-py's `next_msg`
creates a task per message; here the subscription callback only appends to a deque and the
iterator drains it. A gap (client-side drop, lost consumer after a server restart) recreates
the consumer from the last stream sequence seen, so delivery is exact.

Nothing is skipped silently. A consumer reads its pchannel's whole stream (a vchannel's consumer
filters on the client), so the stream sequences it gets are contiguous, and a jump is a fault
whatever the delivery counter says: if the messages jumped over are still stored, the server
moved the consumer forward (nats-server 2.9.10 did so on a subject-filtered purge) and it is
recreated from the last sequence processed; if they are gone, they were purged before this
consumer read them, and the reader gets `StreamGapError` — it decides (a DataNode stops, a
QueryNode reloads the channel from storage), never the stream. So kmilvus purges a pchannel only
by sequence, below what every reader still needs (`MsgStream.purge`, DataCoord's
`StreamTrimmer`), and never by subject.

Payloads above `max_message_bytes` are split into parts (`K-Chunk: i/n`, `K-Chunk-Id`); a
consumer reassembles them (one join) and the message's position is its last part's sequence.
Parts i > 0 carry `K-Chunk-Start` (part 0's sequence): if another producer's message landed
between the parts and a consumer resumes after it, the parts before the resume point are read
back from the stream instead of being lost.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from nats.aio.subscription import Subscription
from nats.js import api

from kmilvus.log import get_logger
from kmilvus.msgstream import channels
from kmilvus.msgstream.dispatcher import DispatchClient, Target
from kmilvus.msgstream.errors import MsgStreamError, StreamGapError
from kmilvus.msgstream.message import (
    H_CHUNK,
    H_CHUNK_ID,
    H_CHUNK_START,
    H_TS,
    H_TYPE,
    Msg,
    MsgPosition,
    MsgType,
    from_nats,
    nats_headers,
)
from kmilvus.util.failpoint import afailpoint
from kmilvus.util.retry import Backoff

log = get_logger(__name__)

MiB = 1024 * 1024
DEFAULT_MAX_MESSAGE_BYTES = 4 * MiB
ACK_TIMEOUT = 10.0  # no ack progress for this long → the publish is considered lost
# After a reconnect, publishes written to the dead connection are never acknowledged: give up on
# them once no ack came for this long after the reconnect instead of waiting out ACK_TIMEOUT.
RECONNECT_ACK_GRACE = 2.0
ACK_POLL = 0.5
PUBLISH_ATTEMPTS = 3  # for publishes with a msg_id (safe to repeat: the server dedups)
ACK_WINDOW = 1024  # publish_many awaits acks this many messages behind its sends
HEARTBEAT = 2.0  # consumer idle heartbeat; 3 missed → recreate the consumer
DUPLICATE_WINDOW = 120.0  # Nats-Msg-Id dedup window (seconds)
MAX_OPEN_GROUPS = 256  # split messages being reassembled at once (abandoned ones are dropped)
_TICK = str(int(MsgType.TimeTick))  # a time tick's K-Type header
_H_MSG_ID = api.Header.MSG_ID.value
_H_STATUS = api.Header.STATUS.value
_H_DESCRIPTION = api.Header.DESCRIPTION.value
_H_LAST_CONSUMER = api.Header.LAST_CONSUMER.value
_H_STALLED = api.Header.CONSUMER_STALLED.value
_HDR_SLACK = 512  # bytes kept free under max_payload for the part headers
_SMALL_HDRS = 16 * 1024  # header bytes assumed without measuring them
YIELD_BYTES = 64 * 1024  # after queueing a message this large, let nats-py's flusher write it


class AckTimeoutError(MsgStreamError):
    """No ack arrived: the message may or may not be stored (e.g. written to a dying
    connection). Re-publishing is only safe with a msg_id."""


class MsgStream:
    """A NATS connection bound to one cluster's DML streams (one per pchannel)."""

    def __init__(self, nc: NATS, cluster: str, max_message_bytes: int) -> None:
        self.nc = nc
        # In-flight cap well above publish_many's 2 windows, so only a stuck server blocks it.
        self.js = nc.jetstream(timeout=10.0, publish_async_max_pending=65536)
        self.cluster = cluster
        self.max_message_bytes = max_message_bytes
        self._subjects: dict[str, str] = {}
        self._streams: dict[str, str] = {}  # channel → its pchannel's stream
        self._ensured: set[str] = set()  # streams known to exist
        self._consumers: set[Consumer] = set()
        self._dispatch = DispatchClient(self)  # (pchannel, name) → shared consumer
        # A dispatcher hands an idle vchannel a tick at most this often (0: every tick).
        self.idle_tick_interval = 0.0
        self._closing = False
        self.reconnects = 0  # reconnections so far, and when the last one happened (loop time)
        self.reconnected_at = 0.0

    @classmethod
    async def connect(
        cls,
        nats_url: str,
        cluster: str,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        name: str = "",
        user: str = "",
        password: str = "",
        tls: tuple[str, str, str] | None = None,
    ) -> MsgStream:
        """Connect (reconnecting forever) and make sure the cluster's stream exists. `user` /
        `password`: NATS authentication; `tls`: (client cert, key, CA) PEM paths."""
        label = name or f"kmilvus-{cluster}"
        nc = NATS()
        self = cls(nc, cluster, max_message_bytes)

        async def on_error(e: Exception) -> None:
            log.warning("nats error", conn=label, error=repr(e))

        async def on_disconnect() -> None:
            if not self._closing:
                log.warning("nats disconnected", conn=label)

        async def on_reconnect() -> None:
            self.reconnects += 1
            self.reconnected_at = asyncio.get_running_loop().time()
            log.warning("nats reconnected", conn=label)

        secure: dict[str, Any] = {}
        if user:
            secure.update(user=user, password=password)
        if tls:
            cert, key, ca = tls
            ctx = ssl.create_default_context(cafile=ca or None)
            if cert:
                ctx.load_cert_chain(cert, key)
            secure["tls"] = ctx
        try:
            await nc.connect(
                nats_url,
                **secure,
                name=label,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,  # type: ignore[arg-type]  # seconds for asyncio.sleep: a float works
                connect_timeout=5,
                ping_interval=10,
                max_outstanding_pings=3,
                # Room for one max-size message; larger buffers make writes bursty (measured slower).
                pending_size=8 * MiB,
                error_cb=on_error,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
            )
            await self.js.account_info()  # JetStream is enabled (streams are made on first use)
        except BaseException:  # includes the caller's timeout cancelling an endless first connect
            self._closing = True
            await nc.close()
            raise
        return self

    def stream_of(self, channel: str) -> str:
        """The stream of a vchannel's or pchannel's messages (its pchannel's)."""
        s = self._streams.get(channel)
        if s is None:
            s = self._streams[channel] = channels.stream_name(self.cluster, channels.pchannel_or_self(channel))
        return s

    async def ensure(self, channel: str) -> str:
        """The channel's stream, created if it does not exist yet."""
        name = self.stream_of(channel)
        if name not in self._ensured:
            await self._ensure_stream(name, channels.pchannel_or_self(channel))
            self._ensured.add(name)
        return name

    async def _ensure_stream(self, name: str, pchannel: str) -> None:
        config = api.StreamConfig(
            name=name,
            subjects=channels.stream_subjects(self.cluster, pchannel),
            retention=api.RetentionPolicy.LIMITS,
            discard=api.DiscardPolicy.OLD,
            storage=api.StorageType.FILE,
            max_msg_size=-1,
            duplicate_window=DUPLICATE_WINDOW,
            num_replicas=1,
            allow_direct=True,  # direct get reads back parts of split messages
        )
        try:
            await self.js.stream_info(name)
            return
        except nats.js.errors.NotFoundError:
            pass
        try:
            await self.js.add_stream(config)
        except nats.js.errors.BadRequestError as e:
            try:  # created concurrently by another process?
                await self.js.stream_info(name)
            except nats.js.errors.NotFoundError:
                raise MsgStreamError(
                    f"cannot create stream {name} for {config.subjects}: {e} (an older kmilvus kept the "
                    f"cluster's messages in one stream, KMILVUS_{self.cluster}_DML; positions in it do not "
                    "carry over: such a cluster is not upgraded in place)"
                ) from e

    def subject(self, channel: str) -> str:
        """A vchannel's subject, or a pchannel's ticks' (cached: computed once per channel)."""
        s = self._subjects.get(channel)
        if s is None:
            s = self._subjects[channel] = channels.subject_of(self.cluster, channel)
        return s

    def producer(self) -> Producer:
        return Producer(self)

    async def consume(self, channel: str, *, after_seq: int = 0, name: str | None = None) -> Consumer:
        """A consumer of one channel's messages (a vchannel's, or a pchannel's ticks) from the
        first message with stream seq > `after_seq`; components use `dispatch`.

        `name` prefixes the server-side consumer name (a random suffix keeps it unique)."""
        return await self.consume_pchannel(
            channels.pchannel_or_self(channel),
            after_seq=after_seq,
            name=name,
            label=channel,
            channel_of={self.subject(channel): channel}.get,
        )

    async def consume_pchannel(
        self,
        pchannel: str,
        *,
        after_seq: int = 0,
        name: str | None = None,
        label: str = "",
        channel_of: Callable[[str], str | None],
    ) -> Consumer:
        """A consumer of a pchannel's stream. Each message's position names `channel_of(its
        subject)`, and a message it maps to None is skipped undecoded. `label` names the
        consumer (its description: `consumer_names` finds it by it)."""
        if after_seq < 0:
            raise ValueError("after_seq must be >= 0")
        c = Consumer(self, pchannel, label or pchannel, after_seq, name, channel_of)
        await c._start()
        self._consumers.add(c)
        return c

    async def dispatch(self, vchannel: str, *, after_seq: int = 0, name: str) -> Target:
        """`vchannel`'s messages with seq > `after_seq`, and its pchannel's time ticks, through
        the one consumer of the pchannel that the component `name` shares (msgdispatcher)."""
        return await self._dispatch.dispatch(vchannel, after_seq=after_seq, name=name)

    async def purge(self, pchannel: str, *, before_seq: int) -> None:
        """Remove every message of `pchannel` with seq < `before_seq`.

        By sequence over the pchannel's whole stream, never by subject: whatever a server
        version does with the consumers of a purged subject, a consumer already past
        `before_seq` is not moved, and one behind it sees the jump (`StreamGapError`). The
        caller guarantees that no reader still needs what goes (DataCoord's `StreamTrimmer`)."""
        if before_seq <= 1:
            return  # nothing below seq 1 (and nats-py would drop seq=0, purging everything)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.js.purge_stream(self.stream_of(pchannel), seq=before_seq)

    async def stream_seqs(self, pchannel: str) -> tuple[int, int] | None:
        """(first, last) stream seq stored for `pchannel`; None if its stream does not exist."""
        try:
            info = await self.js.stream_info(self.stream_of(pchannel))
        except nats.js.errors.NotFoundError:
            return None
        return info.state.first_seq, info.state.last_seq

    async def cluster_streams(self) -> list[str]:
        """Every stream of this cluster on the server (made by any process)."""
        prefix = channels.cluster_subjects_prefix(self.cluster)
        names: list[str] = []
        offset = 0
        while True:
            page = await self.js.streams_info(offset=offset)
            for si in page:
                if si.config.name and any(s.startswith(prefix) for s in si.config.subjects or ()):
                    names.append(si.config.name)
            offset += len(page)
            if not page or len(page) < 256:
                return names

    async def consumer_names(self, channel: str | None = None) -> list[str]:
        """Server-side consumers of the cluster's streams; when `channel` is given, only those
        reading for it: a vchannel's own (catching up), or a pchannel's shared ones."""
        streams = await self.cluster_streams() if channel is None else [self.stream_of(channel)]
        label = None if channel is None else _description(channel)
        names: list[str] = []
        for stream in streams:
            offset = 0
            while True:
                try:
                    page = await self.js.consumers_info(stream, offset=offset)
                except nats.js.errors.NotFoundError:
                    break
                names += [ci.name for ci in page if label is None or ci.config.description == label]
                offset += len(page)
                if not page or len(page) < 256:
                    break
        return names

    async def delete_consumers(self, vchannel: str) -> int:
        """Delete every server-side consumer on `vchannel` (e.g. left by a DataNode that died);
        returns how many there were."""
        names = await self.consumer_names(vchannel)
        for name in names:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.js.delete_consumer(self.stream_of(vchannel), name)
        return len(names)

    async def last_seq(self, vchannel: str) -> int:
        """The stream seq of `vchannel`'s last message, 0 if it has none."""
        try:
            raw = await self.js.get_msg(self.stream_of(vchannel), subject=self.subject(vchannel), direct=True)
        except nats.js.errors.NotFoundError:
            return 0
        return raw.seq or 0

    async def publish_core(self, subject: str, data: bytes) -> None:
        """Fire-and-forget core NATS publish (DataNodeTtMsg reports)."""
        await self.nc.publish(subject, data)

    async def subscribe_core(self, subject: str, cb: Callable[[bytes], Awaitable[None]]) -> Subscription:
        """Core NATS subscription calling `await cb(data)` per message; `unsubscribe()` it."""

        async def on_msg(m: NatsMsg) -> None:
            await cb(m.data)

        return await self.nc.subscribe(subject, cb=on_msg)

    async def delete_stream(self) -> None:
        """Delete the cluster's streams and every consumer on them (tests, teardown)."""
        for name in await self.cluster_streams():
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.js.delete_stream(name)
            self._ensured.discard(name)

    async def close(self) -> None:
        """Close open consumers (deleting them server-side), flush and disconnect."""
        self._closing = True
        await self._dispatch.close()
        for c in list(self._consumers):
            await c.close()
        if not self.nc.is_closed:
            await self.nc.close()


class Producer:
    """Publishes onto vchannels; acks are pipelined and awaited in bulk."""

    def __init__(self, stream: MsgStream) -> None:
        self._s = stream

    async def publish(self, vchannel: str, msg: Msg, *, msg_id: str | None = None) -> int:
        """Publish one message; returns its stream seq once JetStream stored it. `msg_id` makes
        a re-publish idempotent (server-side dedup within the duplicate window), so with one a
        lost ack is retried here."""
        attempts = PUBLISH_ATTEMPTS if msg_id else 1
        for attempt in range(1, attempts + 1):
            try:
                futs = await self._send(vchannel, msg, msg_id)
                return (await _wait_acks(self._s, [futs]))[0]
            except AckTimeoutError:
                if attempt == attempts:
                    raise
                log.warning("publish not acknowledged, retrying", vchannel=vchannel, msg_id=msg_id)
        raise AssertionError("unreachable")

    async def publish_many(self, items: Sequence[tuple[str, Msg]]) -> list[int]:
        """Publish all items back to back, then wait for every ack; seqs in input order.
        Raises if any publish failed (the others may still have been stored).

        Acks are awaited a window behind the sends, so the pipeline never drains and never holds
        more than ~2 windows: nats-py's own in-flight cap would otherwise block forever if the
        server stopped acking."""
        pending: list[list[asyncio.Future[api.PubAck]]] = []
        for i, (vchannel, msg) in enumerate(items):
            pending.append(await self._send(vchannel, msg, None))
            if i >= 2 * ACK_WINDOW and i % ACK_WINDOW == 0:
                window = pending[i - 2 * ACK_WINDOW : i - ACK_WINDOW]
                await _await_acks(self._s, [f for futs in window for f in futs])
        return await _wait_acks(self._s, pending)

    async def _send(self, vchannel: str, msg: Msg, msg_id: str | None) -> list[asyncio.Future[api.PubAck]]:
        """Send `msg` (split if needed); returns the ack futures of its NATS messages."""
        # nats-py annotates `payload: bytes` but needs only a buffer: passing memoryviews saves a
        # copy of every payload, hence the `type: ignore[arg-type]` on publish_async below.
        s = self._s
        js = s.js
        if s._streams.get(vchannel) not in s._ensured:
            await s.ensure(vchannel)
        subject = s.subject(vchannel)
        headers = nats_headers(msg)
        if msg_id:
            headers[_H_MSG_ID] = msg_id
        payload = msg.payload
        if isinstance(payload, memoryview) and (payload.ndim != 1 or payload.format != "B"):
            payload = payload.cast("B")
        size = len(payload)
        max_payload = s.nc.max_payload
        if size <= s.max_message_bytes and size + _SMALL_HDRS <= max_payload:  # the common case
            fut = await js.publish_async(subject, payload, headers=headers)  # type: ignore[arg-type]
            if size >= YIELD_BYTES:
                await asyncio.sleep(0)
            return [fut]
        limit = min(s.max_message_bytes, max_payload - _headers_size(headers) - 2 * len(msg_id or "") - _HDR_SLACK)
        if size <= limit:
            fut = await js.publish_async(subject, payload, headers=headers)  # type: ignore[arg-type]
            await asyncio.sleep(0)
            return [fut]
        if limit <= 0:
            raise ValueError(f"headers of a {msg.type.name} message do not fit in max_payload")
        view = memoryview(payload)
        n = -(-size // limit)
        cid = msg_id or uuid.uuid4().hex
        futs: list[asyncio.Future[api.PubAck]] = []
        start = 0
        for i in range(n):
            h = dict(headers)
            h[H_CHUNK] = f"{i}/{n}"
            h[H_CHUNK_ID] = cid
            if msg_id:
                h[_H_MSG_ID] = f"{msg_id}#{i}/{n}"
            if i:
                h[H_CHUNK_START] = str(start)
            fut = await js.publish_async(subject, view[i * limit : (i + 1) * limit], headers=h)  # type: ignore[arg-type]
            await asyncio.sleep(0)
            if i == 0:
                # Later parts record part 0's seq; one round trip per multi-MB message.
                start = (await _wait_acks(s, [[fut]]))[0]
                await afailpoint("producer.split.after_first_part")  # others' messages land here
            futs.append(fut)
        return futs


def _headers_size(headers: dict[str, str]) -> int:
    return 12 + sum(len(k) + len(v) + 4 for k, v in headers.items())


async def _await_acks(stream: MsgStream, futs: list[asyncio.Future[api.PubAck]]) -> None:
    """Wait until every future is done; fail if no ack at all arrives for ACK_TIMEOUT, or for
    RECONNECT_ACK_GRACE after the connection was re-established meanwhile."""
    remaining = {f for f in futs if not f.done()}
    if not remaining:
        return
    loop = asyncio.get_running_loop()
    epoch, progress = stream.reconnects, loop.time()
    while remaining:
        done, remaining = await asyncio.wait(remaining, timeout=ACK_POLL)
        now = loop.time()
        if done:
            progress = now
            continue
        lost = stream.reconnects != epoch
        if now - progress >= ACK_TIMEOUT or (
            lost and now - max(progress, stream.reconnected_at) >= RECONNECT_ACK_GRACE
        ):
            for f in remaining:
                f.cancel()
            raise AckTimeoutError(
                f"{len(remaining)} publishes not acknowledged "
                f"({'connection lost' if lost else f'within {ACK_TIMEOUT}s'})"
            )


async def _wait_acks(stream: MsgStream, pending: list[list[asyncio.Future[api.PubAck]]]) -> list[int]:
    """Seq of each message's last NATS message; fails if an ack fails or acks stop coming."""
    flat = [f for futs in pending for f in futs]
    await _await_acks(stream, flat)
    errors = [f.exception() for f in flat if f.exception() is not None]
    if errors:
        raise MsgStreamError(f"{len(errors)} of {len(flat)} publishes failed: {errors[0]!r}") from errors[0]
    return [futs[-1].result().seq for futs in pending]


class _Group:
    """The parts received so far of one split message, of `channel`, at timestamp `ts`."""

    __slots__ = ("channel", "n", "parts", "ts")

    def __init__(self, n: int, parts: list[bytes], channel: str, ts: int) -> None:
        self.n = n
        self.parts = parts
        self.channel = channel
        self.ts = ts


def _description(channel: str) -> str:
    """A consumer's server-side description: what `consumer_names(channel)` finds it by."""
    return f"kmilvus {channel}"


class Consumer:
    """Ordered consumer of one pchannel's stream; async-iterate it, or `next()` / `next_batch()`.

    Yields `Msg` with `.position` = (channel, stream seq, timestamp); resuming with
    `after_seq=position.seq` continues with exactly the next message. Messages whose subject
    `channel_of` maps to None are read (the sequence check needs every one) but not decoded.
    """

    def __init__(
        self,
        stream: MsgStream,
        pchannel: str,
        label: str,
        after_seq: int,
        name: str | None,
        channel_of: Callable[[str], str | None],
    ) -> None:
        self._s = stream
        self.label = label  # what logs name it by: its vchannel, or a shared consumer's pchannel
        self.pchannel = pchannel
        self._all = channels.pchannel_filter(stream.cluster, pchannel)  # every subject of the stream
        self._channel_of = channel_of
        self._prefix = channels.token(name) if name else "kmc"
        self._sseq = after_seq  # last stream seq processed (NATS message level, parts included)
        self._dseq = 0  # last consumer seq of the current server-side consumer
        self._buf: collections.deque[NatsMsg] = collections.deque()
        self._wake = asyncio.Event()
        self._rx = 0  # NATS messages received (liveness)
        self._seen_rx = 0
        self._seen_at = 0.0
        self._sub: Subscription | None = None
        self.consumer_name: str | None = None
        self._groups: dict[str, _Group] = {}
        self._error: StreamGapError | None = None  # raised by the next read (a batch ended before it)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def processed_seq(self) -> int:
        """Stream seq of the last NATS message processed (the resume point after a restart)."""
        return self._sseq

    def open_channels(self) -> frozenset[str]:
        """Channels with a split message begun and not complete yet."""
        return frozenset(g.channel for g in self._groups.values())

    # -- server side consumer ------------------------------------------------------------------

    async def _start(self) -> None:
        nc = self._s.nc
        stream = await self._s.ensure(self.pchannel)
        last = (await self._s.js.stream_info(stream)).state.last_seq
        if last < self._sseq:
            # The stream ends before a position read from it: it lost messages (made anew, or
            # its server's store lost). Waiting there would skip every new message up to it.
            raise MsgStreamError(
                f"{self.label}: resuming after seq {self._sseq}, but stream {stream} ends at {last}: "
                "messages the position was read from are gone"
            )
        buf: collections.deque[NatsMsg] = collections.deque()
        wake = self._wake

        async def on_msg(m: NatsMsg) -> None:
            buf.append(m)
            self._rx += 1
            wake.set()

        inbox = nc.new_inbox()
        # The server paces us with flow control; these limits only guard against a runaway.
        sub = await nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=1_000_000, pending_bytes_limit=1024 * MiB)
        start = self._sseq + 1
        config = api.ConsumerConfig(
            name=f"{self._prefix}-{uuid.uuid4().hex[:12]}",
            description=_description(self.label),
            deliver_subject=inbox,
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE if start > 1 else api.DeliverPolicy.ALL,
            opt_start_seq=start if start > 1 else None,
            replay_policy=api.ReplayPolicy.INSTANT,
            flow_control=True,
            idle_heartbeat=HEARTBEAT,
            mem_storage=True,
            num_replicas=1,
        )
        try:
            info = await self._s.js.add_consumer(stream, config)
        except BaseException:
            await _quietly(sub.unsubscribe())
            raise
        self._buf, self._sub, self.consumer_name, self._dseq = buf, sub, info.name, 0
        self._seen_rx, self._seen_at = self._rx, asyncio.get_running_loop().time()

    async def _stop(self) -> None:
        sub, name, old = self._sub, self.consumer_name, self._buf
        self._sub = self.consumer_name = None
        self._buf = collections.deque()
        if sub is not None:
            await _quietly(sub.unsubscribe())
        old.clear()  # delivery loops holding the old buffer see it empty and re-read self._buf
        if name is not None and self._s.nc.is_connected:
            await _quietly(self._s.js.delete_consumer(self._s.stream_of(self.pchannel), name))

    async def _restart(self, why: str) -> None:
        """Recreate the server-side consumer from the last stream seq processed."""
        log.warning(
            "recreating consumer", channel=self.label, consumer=self.consumer_name, after_seq=self._sseq, reason=why
        )
        await self._stop()
        while not self._closed:
            try:
                await self._start()
                if self._closed:  # closed while we were recreating it
                    await self._stop()
                return
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
                log.warning("consumer create failed, retrying", channel=self.label, error=repr(e))
                await asyncio.sleep(0.5)

    async def close(self) -> None:
        """Stop consuming and delete the server-side consumer."""
        if self._closed:
            return
        self._closed = True
        self._s._consumers.discard(self)
        await self._stop()
        self._wake.set()

    # -- delivery -------------------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Msg:
        msg = await self.next()
        if msg is None:  # without a timeout, next() only answers None once closed
            raise StopAsyncIteration
        return msg

    async def next(self, timeout: float | None = None) -> Msg | None:
        """The next message, or None if none arrived within `timeout` seconds (or closed).
        Raises `StreamGapError` where messages were purged before they were read."""
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            buf = self._buf
            while buf:
                msg = await self._process(buf.popleft())
                if msg is not None:
                    return msg
            if self._closed:
                return None
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return None
            await self._wait(left)

    async def next_batch(self, max_msgs: int = 4096, timeout: float | None = None) -> list[Msg]:
        """Everything already buffered (at most `max_msgs`), waiting up to `timeout` for the
        first message; [] on timeout or when closed. A gap ends the batch before it (the next
        call raises)."""
        first = await self.next(timeout)
        if first is None:
            return []
        out = [first]
        buf = self._buf
        try:
            while buf and len(out) < max_msgs:
                msg = await self._process(buf.popleft())
                if msg is not None:
                    out.append(msg)
                buf = self._buf  # a restart swaps the buffer
        except StreamGapError as e:
            self._error = e
        return out

    async def _wait(self, timeout: float | None) -> None:
        """Wait for NATS messages; recreate the consumer if even heartbeats stopped."""
        self._wake.clear()
        if self._buf or self._closed:
            return
        loop = asyncio.get_running_loop()
        if self._rx != self._seen_rx:
            self._seen_rx, self._seen_at = self._rx, loop.time()
        limit = 3 * HEARTBEAT if timeout is None else min(timeout, 3 * HEARTBEAT)
        try:
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that lands as the
            # event fires, and the owner's loop would go on consuming after being stopped.
            async with asyncio.timeout(limit):
                await self._wake.wait()
        except TimeoutError:
            now = loop.time()
            if self._rx != self._seen_rx:
                self._seen_rx, self._seen_at = self._rx, now
            elif now - self._seen_at >= 3 * HEARTBEAT and not self._closed:
                self._seen_at = now
                await self._restart("no heartbeat")

    async def _process(self, m: NatsMsg) -> Msg | None:
        """Handle one NATS message: a control message (None) or a data message/part."""
        headers = m.headers
        if headers is not None and _H_STATUS in headers and not m.data:
            await self._control(m, headers)
            return None
        tokens = m.reply.split(".")
        # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>[.<token>] (v1),
        # or with <domain>.<account hash> after ACK (v2).
        if len(tokens) == 9:
            sseq, dseq = int(tokens[5]), int(tokens[6])
        else:
            sseq, dseq = int(tokens[7]), int(tokens[8])
        if dseq != self._dseq + 1:
            await self._restart(f"consumer seq gap {self._dseq} -> {dseq}")
            return None
        self._dseq = dseq
        if sseq <= self._sseq:
            return None  # already delivered (defensive: a restart overlapping)
        if self._sseq and sseq != self._sseq + 1 and not await self._jumped_over_purged(m, sseq, dseq):
            await self._restart(f"stream seq jumped {self._sseq} -> {sseq} over stored messages")
            return None
        self._sseq = sseq
        if headers is not None and self._groups and headers.get(H_TYPE) == _TICK:
            self._drop_abandoned(int(headers[H_TS]))
        channel = self._channel_of(m.subject)
        if channel is None:
            return None  # not a channel this consumer serves
        if headers is None or H_TYPE not in headers:
            log.warning("skipping foreign message", vchannel=channel, seq=sseq)
            return None
        if H_CHUNK not in headers:
            msg = from_nats(headers, m.data)
            msg.position = MsgPosition(channel_name=channel, seq=sseq, timestamp=msg.timestamp)
            if self._groups:
                msg.incomplete = self.open_channels()
            return msg
        return await self._part(headers, m.data, sseq, channel, m.subject)

    async def _jumped_over_purged(self, m: NatsMsg, sseq: int, dseq: int) -> bool:
        """The stream seq jumped from the last one processed to `sseq`: False if a message in
        between is still stored (the server skipped it: re-read from there); else raise
        `StreamGapError`, keeping `m` to be delivered by the next read."""
        try:
            raw = await self._get_next(self._sseq + 1, self._all)
            stored = raw.seq or sseq
        except nats.js.errors.NotFoundError:
            stored = sseq  # purged meanwhile too
        if stored < sseq:
            return False
        log.error("messages purged before they were read", channel=self.label, after_seq=self._sseq, next_seq=sseq)
        self._buf.appendleft(m)
        self._dseq = dseq - 1
        err = StreamGapError(self.label, self._sseq, sseq)
        self._sseq = sseq - 1  # read on from `m`: the reader decides what the gap means
        raise err

    def _drop_abandoned(self, tick_ts: int) -> None:
        """A tick promises every message older than it is in the stream before it: a split
        message older than the tick and still incomplete was abandoned by its producer (whose
        publish failed, so none of its rows were acknowledged)."""
        for cid, g in list(self._groups.items()):
            if g.ts < tick_ts:
                log.warning("dropping abandoned split message", channel=g.channel, chunk_id=cid, parts=len(g.parts))
                del self._groups[cid]

    async def _control(self, m: NatsMsg, headers: dict[str, str]) -> None:
        status = headers[_H_STATUS]
        if status == "100":
            if m.reply:  # flow control request: everything before it has been processed
                await _quietly(self._s.nc.publish(m.reply))  # reconnecting: the server asks again
                return
            stalled = headers.get(_H_STALLED)
            if stalled:
                await _quietly(self._s.nc.publish(stalled))
            last = headers.get(_H_LAST_CONSUMER)
            if last is not None and int(last) != self._dseq:
                await self._restart(f"heartbeat says consumer seq {last}, we have {self._dseq}")
            return
        await self._restart(f"status {status} {headers.get(_H_DESCRIPTION, '')}")

    async def _part(self, headers: dict[str, str], data: bytes, sseq: int, channel: str, subject: str) -> Msg | None:
        i_s, _, n_s = headers[H_CHUNK].partition("/")
        i, n = int(i_s), int(n_s)
        cid = headers[H_CHUNK_ID]
        groups = self._groups
        g: _Group | None
        if i == 0:
            if len(groups) >= MAX_OPEN_GROUPS:
                oldest = next(iter(groups))
                log.warning("dropping incomplete split message", vchannel=channel, chunk_id=oldest)
                del groups[oldest]
            g = groups[cid] = _Group(n, [data], channel, int(headers[H_TS]))
        else:
            g = groups.get(cid)
            if g is None or len(g.parts) != i:
                if g is not None and i < len(g.parts):
                    return None  # a re-published duplicate part
                g = await self._recover(cid, i, n, headers, sseq, subject, channel)
                if g is None:
                    return None
            g.parts.append(data)
        if len(g.parts) < g.n:
            return None
        del groups[cid]
        msg = from_nats(headers, b"".join(g.parts))
        msg.position = MsgPosition(channel_name=channel, seq=sseq, timestamp=msg.timestamp)
        return msg

    async def _get_next(self, seq: int, subject: str) -> Any:
        """The subject's first stored message with seq >= `seq`; retried through a NATS outage
        (giving up would skip messages, and with them acknowledged rows)."""
        backoff = Backoff(0.1, 2.0)
        stream = self._s.stream_of(self.pchannel)
        while True:
            try:
                return await self._s.js.get_msg(stream, seq=seq, subject=subject, next=True, direct=True)
            except nats.js.errors.NotFoundError:
                raise
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
                if self._closed:
                    raise
                log.warning("reading back from the stream failed; retrying", channel=self.label, seq=seq, error=repr(e))
                await backoff.sleep()

    async def _recover(
        self, cid: str, i: int, n: int, headers: dict[str, str], sseq: int, subject: str, channel: str
    ) -> _Group | None:
        """Read back parts 0..i-1 of a split message whose start precedes our resume point."""
        self._groups.pop(cid, None)
        start = int(headers.get(H_CHUNK_START, 0))
        parts: list[bytes] = []
        seq = start
        while start and len(parts) < i and seq < sseq:
            try:
                raw = await self._get_next(seq, subject)
            except nats.js.errors.NotFoundError:
                break
            if raw.seq is None or raw.seq >= sseq:
                break
            h = raw.headers or {}
            if h.get(H_CHUNK_ID) == cid and h.get(H_CHUNK, "").partition("/")[0] == str(len(parts)):
                parts.append(raw.data or b"")
            seq = raw.seq + 1
        if len(parts) != i:
            if start and await self._purged(start):
                # Its first parts were acknowledged with the rest: purged, they are lost here.
                raise StreamGapError(self.label, start - 1, sseq + 1)
            log.warning(
                "skipping orphan part of a split message",
                channel=self.label,
                chunk_id=cid,
                part=f"{i}/{n}",
                seq=sseq,
            )
            return None
        g = self._groups[cid] = _Group(n, parts, channel, int(headers[H_TS]))
        return g

    async def _purged(self, seq: int) -> bool:
        """Whether the message at `seq` was removed from the stream."""
        try:
            raw = await self._get_next(seq, self._all)
        except nats.js.errors.NotFoundError:
            return True
        return bool(raw.seq != seq)


async def _quietly(aw: Awaitable[Any]) -> None:
    """Best-effort cleanup: the connection may be closing or the consumer already gone."""
    try:
        await aw
    except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
        log.info("cleanup step failed", error=repr(e))
