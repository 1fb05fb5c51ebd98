"""Time ticks (docs/architecture/time-ticks.md): a tick T on a channel promises every message with ts < T
is already in it; with several producers it is the minimum over them."""

from __future__ import annotations

import asyncio
import time

from kmilvus.allocator import TimestampAllocator
from kmilvus.meta import EtcdKV
from kmilvus.msgstream import MsgStream, MsgType
from kmilvus.proto import internal_pb2
from kmilvus.rootcoord.timetick_sync import TimeTickSync
from kmilvus.tso import GlobalTSOAllocator
from kmilvus.util.timetick import TickSource
from tests.util import eventually, wait_until


class LocalTSO:
    """RootCoord's AllocTimestamp over a real etcd-backed TSO."""

    def __init__(self, tso: GlobalTSOAllocator):
        self.tso = tso

    async def AllocTimestamp(self, req, context=None):  # the RPC's name
        return internal_pb2.AllocTimestampResponse(timestamp=await self.tso.alloc(req.count or 1), count=1)


async def make_source(etcd_endpoint, root):
    kv = await EtcdKV.connect([etcd_endpoint], root)
    tso = GlobalTSOAllocator(kv, "tso")
    await tso.initialize()
    return kv, TickSource(TimestampAllocator(LocalTSO(tso)))


async def test_tick_never_passes_an_unacknowledged_publish(etcd_endpoint, root):
    kv, src = await make_source(etcd_endpoint, root)
    release = asyncio.Event()
    held = []

    async def slow_publish():
        async with src.publishing() as ts:
            held.append(ts)
            await release.wait()  # the "ack" has not come back yet

    tasks = [asyncio.create_task(slow_publish()) for _ in range(20)]
    await eventually(lambda: len(held) == 20, 10, "20 publishes holding their timestamps")
    ticks = [await src.tick() for _ in range(5)]
    assert all(t == min(held) for t in ticks)
    release.set()
    await asyncio.gather(*tasks)
    assert await src.tick() > max(held)  # acknowledged: the tick moves past them
    await kv.close()


async def test_published_tick_is_the_minimum_over_producers(etcd_endpoint, nats_url, root):
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    vch = f"{root}-dml_0"
    sync = TimeTickSync(stream.producer(), own, lambda: [vch], interval=0.05)
    first = await own.tick()
    sync.update(7, first - 5)  # a Proxy lagging behind holds the tick back
    sync.update(8, first + 10**12)  # one far ahead cannot push it past RootCoord's promise
    tick = await sync.publish()
    assert tick == first - 5
    sync.update(7, first - 9)  # a source never moves backwards, and no progress ...
    assert await sync.publish() == tick  # ... publishes nothing new
    sync.remove_source(8)
    sync.remove_source(7)  # its session expired: it no longer holds ticks back
    later = await sync.publish()
    assert later > tick
    consumer = await stream.consume(vch)
    got = [await consumer.next(timeout=2), await consumer.next(timeout=2)]
    await consumer.close()
    assert [m.type for m in got] == [MsgType.TimeTick, MsgType.TimeTick]
    assert [m.timestamp for m in got] == [tick, later]
    assert got[0].position.seq < got[1].position.seq
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def test_after_restart_ticks_wait_for_live_proxies_to_report(etcd_endpoint, nats_url, root):
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    sync = TimeTickSync(stream.producer(), own, lambda: [f"{root}-dml_0"], interval=0.05)
    sync.expect({41, 42}, wait=30)
    assert await sync.publish() == 0  # proxy 41 and 42 may still be publishing
    lagging = await own.tick()
    sync.update(41, lagging)
    sync.remove_source(42)  # its session expired
    assert await sync.publish() == lagging
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def _ticks_on(stream, vch: str, n: int) -> list[int]:
    consumer = await stream.consume(vch)
    try:
        return [(await consumer.next(timeout=2)).timestamp for _ in range(n)]
    finally:
        await consumer.close()


async def test_a_flush_demands_a_tick_on_its_channels_at_once(etcd_endpoint, nats_url, root):
    """Tick on demand: only the flushed collection's channels get it, before the periodic tick;
    the periodic tick then skips them until it passes what they already have."""
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    flushed, other = f"{root}-dml_0", f"{root}-dml_1"
    sync = TimeTickSync(stream.producer(), own, lambda: [flushed, other], interval=3600)
    first = await sync.publish()  # the periodic tick, on both
    proxy_ts = await own.tick()
    sync.update(7, proxy_ts)
    assert sync.on_demand == 0  # nothing is published on demand unless a flush asks
    await sync.demand([flushed, f"{root}-dml_9_9v0"], proxy_ts)  # a channel no collection has: ignored
    assert sync.on_demand == 1 and not sync.demands  # published at once, and satisfied
    early = sync.sent[flushed]
    assert early >= proxy_ts > first
    sync.update(7, await own.tick())
    later = await sync.publish()  # the next periodic tick
    assert later > early
    assert await _ticks_on(stream, flushed, 3) == [first, early, later]
    assert await _ticks_on(stream, other, 2) == [first, later]
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def test_a_lagging_producer_holds_a_demanded_tick_until_it_reports(etcd_endpoint, nats_url, root):
    """The promise is the same on demand: a Proxy that has not reported past the flush holds the
    tick back; its next report publishes the demanded tick at once, not the periodic tick."""
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    vch = f"{root}-dml_0"
    sync = TimeTickSync(stream.producer(), own, lambda: [vch], interval=3600)
    lagging = await own.tick()
    sync.update(8, lagging)  # the other Proxy's last report, older than the flush
    flush_proxy = await own.tick()
    sync.update(7, flush_proxy)
    await sync.demand([vch], flush_proxy)
    assert sync.sent[vch] == lagging  # as far as the minimum allows: not past the lagging Proxy
    assert sync.demands == {vch: flush_proxy}  # still waited for
    caught_up = await own.tick()
    sync.update(8, caught_up)  # its periodic report (RootCoord's UpdateChannelTimeTick) ...
    await sync.publish_demanded()  # ... publishes the demanded tick there and then
    assert sync.sent[vch] == flush_proxy and not sync.demands
    assert await _ticks_on(stream, vch, 2) == [lagging, flush_proxy]
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def test_idle_channels_tick_at_the_idle_interval_active_ones_at_every_tick(etcd_endpoint, nats_url, root):
    """Many collections: a channel nothing was published on lately is ticked only every
    `idle_interval` (or when a read or a flush demands it), so idle tick traffic does not grow
    by ten messages a second per vchannel; a channel a producer wrote to gets every tick."""
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    busy, idle = f"{root}-dml_0", f"{root}-dml_1"
    sync = TimeTickSync(stream.producer(), own, lambda: [busy, idle], interval=3600, idle_interval=3600)
    first = await sync.publish()  # a channel never ticked gets the first tick at once
    sync.mark_active([busy])  # a Proxy reported publishing there
    second = await sync.publish()
    third = await sync.publish()
    assert first < second < third
    assert sync.sent == {busy: third, idle: first}
    demanded = await own.tick()
    await sync.demand([idle], demanded)  # a read that must wait asks for the idle channel's tick
    assert sync.sent[idle] >= demanded and not sync.demands
    assert await _ticks_on(stream, busy, 3) == [first, second, third]
    assert await _ticks_on(stream, idle, 2) == [first, sync.sent[idle]]
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def test_an_idle_channel_is_ticked_again_once_its_idle_interval_has_passed(etcd_endpoint, nats_url, root):
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    vch = f"{root}-dml_0"
    sync = TimeTickSync(stream.producer(), own, lambda: [vch], interval=3600, idle_interval=0.3)
    first = await sync.publish()
    assert await sync.publish() > first and sync.sent[vch] == first  # not yet due
    await asyncio.sleep(0.35)  # the idle interval passes
    later = await sync.publish()
    assert sync.sent[vch] == later > first
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def test_channels_of_new_collections_tick_at_once_and_dropped_ones_are_forgotten(etcd_endpoint, nats_url, root):
    """RootCoord answers `channels()` with the same list object until a collection changes; the
    sync follows a new answer: new channels are ticked at once, dropped ones never again."""
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    old, new = f"{root}-dml_0", f"{root}-dml_1"
    live = [old]
    sync = TimeTickSync(stream.producer(), own, lambda: live, interval=3600, idle_interval=3600)
    first = await sync.publish()
    assert await sync.publish() > first and sync.sent == {old: first}  # idle, and no new channel
    live = [old, new]  # a collection was created
    second = await sync.publish()
    assert sync.sent == {old: first, new: second}
    live = [new]  # the first one was dropped
    sync.mark_active([old, new])
    third = await sync.publish()
    assert sync.sent == {new: third} and list(sync.sent_at) == [new]
    await sync.demand([old], third)  # a demand on a dropped channel is ignored
    assert not sync.demands
    assert await _ticks_on(stream, old, 1) == [first]
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def test_ticks_go_once_per_pchannel_and_a_vchannel_stands_for_its_pchannel(etcd_endpoint, nats_url, root):
    """Many collections: ticks go on the pchannels in use (one message per pchannel however
    many collections share it); a Proxy's active vchannels, a flush's and a read's name their
    pchannel."""
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    p0, p1 = f"{root}-dml_0", f"{root}-dml_1"
    sync = TimeTickSync(
        stream.producer(),
        own,
        lambda: [p0, p1],
        interval=3600,
        idle_interval=3600,
    )
    first = await sync.publish()
    sync.mark_active([f"{p0}_1v0", f"{p0}_2v0"])  # two collections' vchannels on p0
    second = await sync.publish()
    assert sync.sent == {p0: second, p1: first}
    demanded = await own.tick()
    await sync.demand([f"{p1}_3v1"], demanded)
    assert sync.sent[p1] >= demanded and not sync.demands
    assert await _ticks_on(stream, p0, 2) == [first, second]
    assert await _ticks_on(stream, p1, 2) == [first, sync.sent[p1]]
    await stream.delete_stream()
    await stream.close()
    await kv.close()


async def test_a_demand_names_its_vchannels_even_when_the_pchannel_has_the_tick(etcd_endpoint, nats_url, root):
    """A node's dispatcher may have skipped an idle vchannel when its pchannel was ticked: a read
    or a flush waiting there gets a tick naming it, even if the pchannel has passed `ts`."""
    from kmilvus.msgstream.message import TICK_FOR

    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    p0 = f"{root}-dml_0"
    v = f"{p0}_5v0"
    sync = TimeTickSync(stream.producer(), own, lambda: [p0], interval=3600, idle_interval=3600)
    first = await sync.publish()
    await sync.demand([v], first - 1)  # the pchannel has that tick already
    assert not sync.demands and not sync.named
    consumer = await stream.consume(p0)
    got = [await consumer.next(timeout=2), await consumer.next(timeout=2)]
    await consumer.close()
    assert [m.timestamp for m in got] == [first, sync.sent[p0]]
    assert TICK_FOR not in got[0].headers and got[1].headers[TICK_FOR] == v
    await stream.delete_stream()
    await stream.close()
    await kv.close()


# Idle producers ----------------------------------------------------------------------------


async def test_an_idle_producer_is_left_out_until_it_allocates_to_publish_again(etcd_endpoint, nats_url, root):
    """An idle Proxy reports once and then stays quiet: the tick must neither wait on it (a busy
    Proxy's ticks would stall behind its last report) nor pass what it publishes next."""
    kv, own = await make_source(etcd_endpoint, root)
    stream = await MsgStream.connect(nats_url, root)
    sync = TimeTickSync(stream.producer(), own, lambda: [f"{root}-dml_0"], interval=0.05)
    said_idle = await own.tick()
    sync.update(7, said_idle, idle=True)
    assert await sync.publish() > said_idle  # not held at its report
    sync.allocating(7)  # it asks for a timestamp to publish with: held from now on ...
    assert await sync._tick() == said_idle  # ... at what it last promised
    assert 7 not in sync.idle
    busy = await own.tick()
    sync.update(7, busy)  # its next report moves it on
    sync.update(7, said_idle, idle=True)  # a late idle report changes nothing
    assert 7 not in sync.idle
    sync.allocating(8)  # unknown (RootCoord restarted while it was quiet): held at the last tick
    assert sync.sources[8] == sync.last
    await stream.delete_stream()
    await stream.close()
    await kv.close()


class RecordingTSO(LocalTSO):
    def __init__(self, tso: GlobalTSOAllocator):
        super().__init__(tso)
        self.producers: list[tuple[int, int]] = []  # (producerID, timestamp) per allocation

    async def AllocTimestamp(self, req, context=None):
        resp = await super().AllocTimestamp(req, context)
        self.producers.append((req.producerID, resp.timestamp))
        return resp


async def test_an_idle_report_reaches_rootcoord_before_any_later_allocation(etcd_endpoint, root):
    """The idle report is sent holding the allocator's lock: a publish that starts meanwhile gets
    its timestamp only after RootCoord has the report, and asks for it as a producer."""
    kv = await EtcdKV.connect([etcd_endpoint], root)
    gtso = GlobalTSOAllocator(kv, "tso")
    await gtso.initialize()
    rec = RecordingTSO(gtso)
    src = TickSource(TimestampAllocator(rec), producer_id=7)
    events: list[str] = []
    published: list[int] = []

    async def publish():
        async with src.publishing(["ch"]) as ts:
            events.append("allocated")
            published.append(ts)

    async def send(ts: int, active: list[str], idle: bool) -> None:
        events.append(f"report idle={idle}")
        pub.append(asyncio.create_task(publish()))
        await asyncio.sleep(0.05)  # the publish waits, however long RootCoord takes
        events.append("report answered")

    pub: list[asyncio.Task] = []
    reported = await src.report(send)
    await asyncio.gather(*pub)
    assert events == ["report idle=True", "report answered", "allocated"]
    assert src.idle_reported is False and published[0] > reported
    assert rec.producers[-1] == (7, published[0])  # the publish's timestamp names its producer
    assert [p for p, _ in rec.producers[:-1]] == [0]  # the report's own timestamp does not
    # Something unreported (the publish's channel): the next report is not idle, and not locked.
    sent: list[tuple[int, list[str], bool]] = []

    async def record(ts, active, idle):
        sent.append((ts, active, idle))

    await src.report(record)
    assert sent[0][1:] == (["ch"], False)
    await src.report(record)
    assert sent[1][1:] == ([], True) and src.idle_reported
    await kv.close()


def _reports_seen() -> float:
    from prometheus_client import REGISTRY

    labels = {"role": "rootcoord", "method": "UpdateChannelTimeTick"}
    return REGISTRY.get_sample_value("kmilvus_rpc_latency_seconds_count", labels) or 0.0


def test_an_idle_proxy_stays_quiet_and_does_not_hold_back_a_busy_one(node_factory):
    """Two Proxies: while both are idle they report about once a second, not every tick
    interval; a write through one of them is flushed and read (Strong) without waiting on the
    other's last report."""
    from pymilvus import MilvusClient

    from kmilvus.proxy import proxy as proxy_mod
    from tests.flushutil import batch, bench_schema

    a = node_factory(time_tick_interval=0.05)
    b = node_factory(["proxy"], time_tick_interval=0.05)
    rc = a.component("rootcoord")
    ids = {a.component("proxy").server_id, b.component("proxy").server_id}
    wait_until(lambda: ids <= a.call(_idle_of(rc)), what="both proxies said idle")
    before = _reports_seen()
    time.sleep(1.5)  # idle for a while: how often they report meanwhile is what is checked
    assert _reports_seen() - before <= 2 * (1.5 / proxy_mod.IDLE_REPORT_EVERY + 1)  # not 60
    c = MilvusClient(uri=b.uri)
    c.create_collection("idle_peer", schema=bench_schema())
    rows, vecs, tags = batch(0, 100)
    c.insert("idle_peer", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(rows, vecs, tags, strict=True)])
    c.flush("idle_peer")
    c.create_index("idle_peer", _flat_index(c))
    c.load_collection("idle_peer")
    got = c.query("idle_peer", filter="id >= 0", output_fields=["id"], consistency_level="Strong")
    assert sorted(r["id"] for r in got) == rows
    c.close()


async def _idle_of(rc) -> set[int]:
    return set(rc.tt_sync.idle)


def _flat_index(c):
    params = c.prepare_index_params()
    params.add_index(field_name="vec", index_type="FLAT", metric_type="L2")
    return params
