"""kmilvus.msgstream against a real nats-server (JetStream)."""

from __future__ import annotations

import asyncio
import itertools
import os

import pytest

from kmilvus.msgstream import (
    Msg,
    MsgStream,
    MsgStreamError,
    MsgType,
    channels,
    collection_of,
    datanode_tt_subject,
    jetstream,
    pchannel_names,
    pchannel_of,
    stream_name,
    stream_subjects,
    subject_of,
    vchannel_name,
)
from kmilvus.msgstream.message import H_CHUNK, H_CHUNK_ID, H_CHUNK_START, nats_headers
from tests.util import eventually

MiB = 1024 * 1024


def vch(root: str, collection: int, shard: int = 0) -> str:
    return vchannel_name(pchannel_names(root, 2)[shard % 2], collection, shard)


async def drain(consumer, n: int, timeout: float = 5.0) -> list[Msg]:
    out = []
    for _ in range(n):
        m = await consumer.next(timeout)
        assert m is not None, f"only {len(out)} of {n} messages arrived"
        out.append(m)
    return out


def test_channel_names():
    assert pchannel_names("c", 3) == ["c-dml_0", "c-dml_1", "c-dml_2"]
    v = vchannel_name("c-dml_1", 4471, 2)
    assert v == "c-dml_1_4471v2"
    assert pchannel_of(v) == "c-dml_1" and collection_of(v) == 4471 and channels.shard_of(v) == 2
    with pytest.raises(ValueError):
        pchannel_of("c-dml_1")
    assert stream_name("a.b c", "a.b c-dml_0") == "KMILVUS_a_b_c_DML_a_b_c-dml_0"  # one per pchannel
    assert subject_of("c", "x.y*z>w v_1v0") == "c.dml.x_y_z_w_v.x_y_z_w_v_1v0"  # under its pchannel
    assert subject_of("c", "c-dml_1") == "c.dml.c-dml_1.tt"  # a pchannel's subject: its time ticks
    assert channels.pchannel_filter("c", "c-dml_1") == "c.dml.c-dml_1.>"
    assert stream_subjects("c", "c-dml_1") == ["c.dml.c-dml_1.>"]
    assert channels.pchannel_or_self(v) == channels.pchannel_or_self("c-dml_1") == "c-dml_1"
    assert datanode_tt_subject("c") == "c.datanode-tt"


def test_msgtype_values_are_milvus():
    from pymilvus.grpc_gen import common_pb2

    for t in MsgType:
        assert common_pb2.MsgType.Value(t.name) == t.value


def test_msg_headers():
    m = Msg(MsgType.Insert, 7, b"", {"segment": "12", "rows": "3"})
    assert m.get_int("segment") == 12 and m.get_int("missing") is None and m.get_int("missing", 5) == 5
    with pytest.raises(ValueError):
        nats_headers(Msg(MsgType.Insert, 1, b"", {"Chunk": "0/1"}))


async def test_roundtrip_positions_and_isolation(ms, root):
    a, b = vch(root, 1), vch(root, 2)
    p = ms.producer()
    sent = []
    for i in range(6):
        payload = os.urandom(100 + i)
        msg = Msg(
            MsgType.Insert, 1000 + i, memoryview(payload) if i % 2 else payload, {"segment": str(i), "collection": "1"}
        )
        seq = await p.publish(a, msg)
        sent.append((seq, payload, msg))
        await p.publish(b, Msg(MsgType.Delete, 2000 + i, b"other"))  # must not reach `a`'s consumer
    c = await ms.consume(a)
    got = await drain(c, 6)
    for (seq, payload, msg), m in zip(sent, got, strict=True):
        assert m.type == MsgType.Insert and m.timestamp == msg.timestamp
        assert bytes(m.payload) == payload and m.headers == msg.headers
        assert m.position.channel_name == a and m.position.seq == seq and m.position.timestamp == msg.timestamp
    seqs = [m.position.seq for m in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == 6
    assert await c.next(0.3) is None  # b's messages were filtered out
    assert await ms.last_seq(a) == sent[-1][0]
    assert await ms.last_seq(vch(root, 3)) == 0
    await c.close()


async def test_resume_exactly(ms, root):
    v = vch(root, 1)
    p = ms.producer()
    seqs = await p.publish_many([(v, Msg(MsgType.Insert, i + 1, str(i).encode())) for i in range(10)])
    c = await ms.consume(v)
    first = await drain(c, 4)
    await c.close()
    c = await ms.consume(v, after_seq=first[-1].position.seq)
    rest = await drain(c, 6)
    assert await c.next(0.3) is None
    assert [m.payload for m in first + rest] == [str(i).encode() for i in range(10)]
    assert [m.position.seq for m in first + rest] == seqs
    await c.close()
    # Resuming at the end waits for new messages; iteration works too.
    c = await ms.consume(v, after_seq=seqs[-1])
    assert await c.next(0.2) is None
    new_seq = await p.publish(v, Msg(MsgType.TimeTick, 99))
    async for m in c:
        assert m.type == MsgType.TimeTick and m.position.seq == new_seq
        break
    await c.close()


async def test_publish_many_order_with_time_ticks(ms, root):
    vs = [vch(root, 1, 0), vch(root, 1, 1)]
    items = []
    ts = 0
    for i in range(300):
        for v in vs:
            ts += 1
            items.append((v, Msg(MsgType.Insert, ts, os.urandom(64), {"n": str(i)})))
        if i % 10 == 9:
            ts += 1
            items += [(v, Msg(MsgType.TimeTick, ts)) for v in vs]
    seqs = await ms.producer().publish_many(items)
    assert len(seqs) == len(items)
    for v in vs:  # one stream per pchannel: increasing per pchannel
        mine = [s for s, (ch, _) in zip(seqs, items, strict=True) if ch == v]
        assert all(x < y for x, y in itertools.pairwise(mine))
    for v in vs:
        expected = [(s, m) for s, (ch, m) in zip(seqs, items, strict=True) if ch == v]
        c = await ms.consume(v)
        got = []
        while len(got) < len(expected):
            batch = await c.next_batch(timeout=5)
            assert batch
            got += batch
        assert [(m.position.seq, m.type, m.timestamp) for m in got] == [(s, m.type, m.timestamp) for s, m in expected]
        assert got[-1].payload == b"" and got[0].payload == expected[0][1].payload
        await c.close()


async def test_large_payload_split_and_resume(ms, root):
    v = vch(root, 1)
    p = ms.producer()
    big = os.urandom(20 * MiB)  # over max_message_bytes (4 MiB) and the server's max_payload (8 MiB)
    before = await p.publish(v, Msg(MsgType.TimeTick, 1))
    big_seq = await p.publish(v, Msg(MsgType.Insert, 2, big, {"segment": "9"}))
    after = await p.publish(v, Msg(MsgType.TimeTick, 3))
    assert big_seq - before == 5 and after == big_seq + 1  # 5 parts of 4 MiB
    c = await ms.consume(v)
    got = await drain(c, 3)
    assert [m.position.seq for m in got] == [before, big_seq, after]
    assert got[1].payload == big and got[1].headers == {"segment": "9"} and got[1].timestamp == 2
    await c.close()
    c = await ms.consume(v, after_seq=big_seq)
    m = await c.next(5)
    assert m.position.seq == after and m.type == MsgType.TimeTick
    await c.close()
    c = await ms.consume(v, after_seq=before)
    m = await c.next(5)
    assert m.position.seq == big_seq and m.payload == big
    await c.close()


async def test_split_message_interleaved_with_another_producer(ms, root):
    """Parts of a split message with another producer's message in between: resuming after that
    message reads back the earlier parts; an orphan part nobody can complete is skipped."""
    v = vch(root, 1)
    subj = ms.subject(v)
    await ms.ensure(v)
    head = {**nats_headers(Msg(MsgType.Insert, 5, b"")), H_CHUNK_ID: "X"}
    a0 = await ms.js.publish(subj, b"aaa", headers={**head, H_CHUNK: "0/2"})
    tick = await ms.producer().publish(v, Msg(MsgType.TimeTick, 4))
    a1 = await ms.js.publish(subj, b"bbb", headers={**head, H_CHUNK: "1/2", H_CHUNK_START: str(a0.seq)})
    orphan = {**head, H_CHUNK_ID: "Y", H_CHUNK: "1/2"}
    await ms.js.publish(subj, b"zzz", headers=orphan)  # part 0 never published
    last = await ms.producer().publish(v, Msg(MsgType.TimeTick, 6))

    c = await ms.consume(v)
    got = await drain(c, 3)
    assert [(m.position.seq, m.payload) for m in got] == [(tick, b""), (a1.seq, b"aaabbb"), (last, b"")]
    await c.close()
    c = await ms.consume(v, after_seq=tick)
    got = await drain(c, 2)
    assert [(m.position.seq, m.payload) for m in got] == [(a1.seq, b"aaabbb"), (last, b"")]
    await c.close()


async def test_msg_id_dedup(ms, root):
    v = vch(root, 1)
    p = ms.producer()
    s1 = await p.publish(v, Msg(MsgType.Insert, 1, b"once"), msg_id="seg-1-batch-1")
    s2 = await p.publish(v, Msg(MsgType.Insert, 1, b"once"), msg_id="seg-1-batch-1")
    big = os.urandom(9 * MiB)
    b1 = await p.publish(v, Msg(MsgType.Insert, 2, big), msg_id="seg-1-batch-2")
    b2 = await p.publish(v, Msg(MsgType.Insert, 2, big), msg_id="seg-1-batch-2")
    assert s1 == s2 and b1 == b2 and await ms.last_seq(v) == b1
    c = await ms.consume(v)
    got = await drain(c, 2)
    assert [m.position.seq for m in got] == [s1, b1] and got[1].payload == big
    assert await c.next(0.3) is None
    await c.close()


async def test_purge(ms, root):
    """A purge is by sequence, over one pchannel's stream: its vchannels and ticks below the
    point go, other pchannels keep everything."""
    a, b, other = vch(root, 1), vch(root, 2), vch(root, 3, shard=1)
    p0 = pchannel_of(a)
    p = ms.producer()
    seqs = await p.publish_many([(a, Msg(MsgType.Insert, i + 1, b"%d" % i)) for i in range(6)])
    bseqs = await p.publish_many([(b, Msg(MsgType.Insert, 10 + i, b"b")) for i in range(2)])
    oseqs = await p.publish_many([(other, Msg(MsgType.Insert, 20 + i, b"o")) for i in range(2)])
    await ms.purge(p0, before_seq=seqs[3])
    assert await ms.stream_seqs(p0) == (seqs[3], bseqs[-1])
    c = await ms.consume(a)
    assert [m.position.seq for m in await drain(c, 3)] == seqs[3:]
    assert await c.next(0.2) is None
    await c.close()
    await ms.purge(p0, before_seq=bseqs[-1] + 1)
    assert await ms.last_seq(a) == 0 and await ms.last_seq(b) == 0
    assert await ms.last_seq(other) == oseqs[-1]
    # Sequences are not reused after a purge.
    assert await p.publish(a, Msg(MsgType.TimeTick, 99)) > bseqs[-1]
    assert await ms.stream_seqs(pchannel_names(root, 3)[2]) is None  # never used: no stream


async def test_close_deletes_server_side_consumer(ms, nats_url, root):
    v = vch(root, 1)
    c = await ms.consume(v, name="datanode-7")
    names = await ms.consumer_names(v)
    assert names == [c.consumer_name] and names[0].startswith("datanode-7-")
    assert await ms.consumer_names(vch(root, 2)) == []
    await c.close()
    assert await ms.consumer_names(v) == [] and await ms.consumer_names() == []
    # Closing the stream closes (and deletes) whatever is still open.
    other = await MsgStream.connect(nats_url, root)
    await other.consume(v)
    await other.consume(vch(root, 2))
    assert len(await ms.consumer_names()) == 2
    await other.close()
    assert await ms.consumer_names() == []


async def test_consumer_recovers_when_server_side_consumer_vanishes(ms, root, monkeypatch):
    monkeypatch.setattr(jetstream, "HEARTBEAT", 0.25)
    v = vch(root, 1)
    p = ms.producer()
    seqs = await p.publish_many([(v, Msg(MsgType.Insert, i + 1, b"%d" % i)) for i in range(5)])
    c = await ms.consume(v)
    got = await drain(c, 2)
    old = c.consumer_name
    await ms.js.delete_consumer(ms.stream_of(v), old)
    seqs += await p.publish_many([(v, Msg(MsgType.Insert, 10 + i, b"%d" % (5 + i))) for i in range(3)])
    got += await drain(c, 6)
    assert [m.position.seq for m in got] == seqs
    assert c.consumer_name != old and await ms.consumer_names(v) == [c.consumer_name]
    await c.close()


async def test_core_publish_subscribe(ms, root):
    got: asyncio.Queue[bytes] = asyncio.Queue()

    async def cb(data: bytes) -> None:
        await got.put(data)

    sub = await ms.subscribe_core(datanode_tt_subject(root), cb)
    await ms.nc.flush()
    await ms.publish_core(datanode_tt_subject(root), b"tt-1")
    await ms.publish_core(datanode_tt_subject(root), b"tt-2")
    assert [await asyncio.wait_for(got.get(), 5) for _ in range(2)] == [b"tt-1", b"tt-2"]
    await sub.unsubscribe()


async def test_connect_is_idempotent(ms, nats_url, root):
    seq = await ms.producer().publish(vch(root, 1), Msg(MsgType.CreateCollection, 1, b"schema"))
    again = await MsgStream.connect(nats_url, root)
    assert await again.last_seq(vch(root, 1)) == seq
    await again.close()


async def test_small_max_message_bytes_and_memoryview_parts(nats_url, root):
    s = await MsgStream.connect(nats_url, root, max_message_bytes=1000)
    v = vch(root, 1)
    data = os.urandom(4500)
    seq = await s.producer().publish(v, Msg(MsgType.Insert, 3, memoryview(data), {"rows": "45"}))
    c = await s.consume(v)
    m = await c.next(5)
    assert m.position.seq == seq and m.payload == data and m.get_int("rows") == 45
    assert (await s.js.stream_info(s.stream_of(v))).state.messages == 5
    await s.delete_stream()
    await s.close()


async def test_publish_many_raises_when_not_stored(ms, root):
    await ms.producer().publish(vch(root, 1), Msg(MsgType.TimeTick, 1))
    await ms.js.delete_stream(ms.stream_of(vch(root, 1)))  # behind the MsgStream's back
    with pytest.raises(MsgStreamError):
        await ms.producer().publish_many([(vch(root, 1), Msg(MsgType.TimeTick, 1))] * 3)


async def test_a_consumer_waiting_for_messages_is_cancelled_even_as_one_arrives(ms, root):
    """A flowgraph stops by cancelling its consumer loop. Python 3.11's `asyncio.wait_for`
    swallows a cancellation that lands just as the awaited event fires (a message arriving): the
    loop then went on consuming, and the DataNode that lost its session never dropped its
    channels nor came back (found by bench/chaos.py: no DataNode left, flush never finished)."""
    c = await ms.consume(vch(root, 1))
    try:
        task = asyncio.create_task(c.next())
        await eventually(lambda: c._wake._waiters, 5, "the consumer blocked in its wait for messages")
        c._wake.set()  # a message arrives ...
        await asyncio.sleep(0)  # ... the wait completes ...
        task.cancel()  # ... and the owner cancels before the loop resumes
        done, _ = await asyncio.wait([task], timeout=2)
        assert done and task.cancelled(), "the cancellation was swallowed: the consumer loop went on"
    finally:
        await c.close()


# -- the dispatcher: one consumer per pchannel -------------------------------------------------


async def test_vchannels_of_a_pchannel_share_one_consumer_and_its_ticks(ms, root):
    """Many collections: a component consumes each pchannel once; data goes to its vchannel's
    target, a tick (published once, on the pchannel) to every target of the pchannel."""
    a, b, other = vch(root, 1), vch(root, 2), vch(root, 3, shard=1)
    p0 = pchannel_of(a)
    assert pchannel_of(b) == p0 != pchannel_of(other)
    p = ms.producer()
    sa = await p.publish(a, Msg(MsgType.Insert, 10, b"a"))
    sb = await p.publish(b, Msg(MsgType.Insert, 11, b"b"))
    await p.publish(other, Msg(MsgType.Insert, 12, b"other"))
    st = await p.publish(p0, Msg(MsgType.TimeTick, 20))
    ta = await ms.dispatch(a, name="dn1")
    tb = await ms.dispatch(b, name="dn1")
    assert len(await ms.consumer_names(p0)) == 1 and len(await ms.consumer_names()) == 1
    got_a, got_b = await drain(ta, 2), await drain(tb, 2)
    assert [(m.type, m.position.channel_name, m.position.seq) for m in got_a] == [
        (MsgType.Insert, a, sa),
        (MsgType.TimeTick, a, st),
    ]
    assert [(m.type, m.position.channel_name, m.position.seq) for m in got_b] == [
        (MsgType.Insert, b, sb),
        (MsgType.TimeTick, b, st),
    ]
    assert got_a[1].timestamp == got_b[1].timestamp == 20
    assert await ta.next(0.3) is None and await tb.next(0.1) is None  # `other` is not theirs
    other_node = await ms.dispatch(a, name="dn2")  # another component: its own consumer
    assert [m.position.seq for m in await drain(other_node, 2)] == [sa, st]
    assert len(await ms.consumer_names(p0)) == 2
    await other_node.close()
    await ta.close()
    assert len(await ms.consumer_names(p0)) == 1  # b still reads through it
    await tb.close()
    assert await ms.consumer_names() == []  # the last target took the consumer with it


async def test_a_vchannel_added_behind_the_shared_consumer_catches_up_alone(ms, root):
    """The shared consumer skips vchannels nobody asked for yet. One registered later, from a
    position the consumer has passed, first reads what it missed from its own subject, then goes
    on with the shared consumer: every message exactly once and in order, nothing replayed to
    the others."""
    a, b = vch(root, 1), vch(root, 2)
    p0 = pchannel_of(a)
    p = ms.producer()
    a1 = await p.publish(a, Msg(MsgType.Insert, 10, b"a1"))
    b1 = await p.publish(b, Msg(MsgType.Insert, 11, b"b1"))
    t1 = await p.publish(p0, Msg(MsgType.TimeTick, 12))
    b2 = await p.publish(b, Msg(MsgType.Insert, 13, b"b2"))
    t2 = await p.publish(p0, Msg(MsgType.TimeTick, 14))
    ta = await ms.dispatch(a, name="dn")
    assert [m.position.seq for m in await drain(ta, 3)] == [a1, t1, t2]  # the consumer is past b1, b2
    tb = await ms.dispatch(b, after_seq=b1, name="dn")
    assert len(await ms.consumer_names()) == 2  # the shared one, and b's catching up
    b3 = await p.publish(b, Msg(MsgType.Insert, 15, b"b3"))
    t3 = await p.publish(p0, Msg(MsgType.TimeTick, 16))
    got = await drain(tb, 3)
    assert [(m.position.seq, bytes(m.payload)) for m in got] == [(b2, b"b2"), (b3, b"b3"), (t3, b"")]
    assert all(m.position.channel_name == b for m in got)
    assert [m.position.seq for m in await drain(ta, 1)] == [t3]  # a got nothing again
    assert await ta.next(0.2) is None and await tb.next(0.1) is None
    assert len(await ms.consumer_names()) == 1  # caught up: the solo consumer is gone
    await ta.close()
    await tb.close()


async def test_a_target_closed_while_catching_up_leaves_no_consumer(ms, root):
    a, b = vch(root, 1), vch(root, 2)
    p = ms.producer()
    await p.publish(b, Msg(MsgType.Insert, 10, b"b1"))
    await p.publish(a, Msg(MsgType.Insert, 11, b"a1"))
    ta = await ms.dispatch(a, name="dn")
    await drain(ta, 1)
    tb = await ms.dispatch(b, name="dn")
    assert len(await ms.consumer_names()) == 2
    await tb.close()
    await ta.close()
    assert await ms.consumer_names() == []
    assert await tb.next(0.1) is None


async def test_a_target_not_read_pauses_its_pchannel_at_its_bound(ms, root, monkeypatch):
    """Back-pressure: what waits for a slow vchannel is bounded; delivery resumes once it reads."""
    from kmilvus.msgstream import dispatcher

    monkeypatch.setattr(dispatcher, "TARGET_QUEUE", 8)
    monkeypatch.setattr(dispatcher, "BATCH", 4)
    a, b = vch(root, 1), vch(root, 2)
    p = ms.producer()
    await p.publish_many([(a, Msg(MsgType.Insert, i + 1, b"x")) for i in range(40)])
    last_b = await p.publish(b, Msg(MsgType.Insert, 100, b"b"))
    ta = await ms.dispatch(a, name="dn")
    tb = await ms.dispatch(b, after_seq=last_b - 1, name="dn")
    await eventually(lambda: len(ta._queue) >= 8, 10, "a's queue filled to its bound")
    assert await tb.next(0.2) is None  # b's message is behind a's: it waits with them
    assert 8 <= len(ta._queue) <= 8 + 4  # meanwhile paused at the bound (plus at most one batch)
    got = await drain(ta, 40)
    assert [m.timestamp for m in got] == list(range(1, 41))
    assert (await tb.next(2)).position.seq == last_b
    await ta.close()
    await tb.close()


async def test_a_pchannel_tick_goes_to_busy_and_named_vchannels_and_now_and_then_to_idle_ones(ms, root, monkeypatch):
    """Many collections: a tick reaches the vchannels that got messages in the last second and
    those it names (a flush or a read waits there); an idle one gets a tick only every
    `idle_tick_interval` — the first one at once."""
    from kmilvus.msgstream import dispatcher
    from kmilvus.msgstream.message import TICK_FOR

    monkeypatch.setattr(dispatcher, "ACTIVE_FOR", 0.3)
    ms.idle_tick_interval = 1.5
    busy, named, idle = vch(root, 1), vch(root, 2), vch(root, 3)
    p0 = pchannel_of(busy)
    p = ms.producer()
    targets = {v: await ms.dispatch(v, name="dn") for v in (busy, named, idle)}
    first = await p.publish(p0, Msg(MsgType.TimeTick, 10))  # the first tick: to every vchannel
    started = asyncio.get_running_loop().time()
    for t in targets.values():
        assert [m.position.seq for m in await drain(t, 1)] == [first]
    data = await p.publish(busy, Msg(MsgType.Insert, 11, b"rows"))
    second = await p.publish(p0, Msg(MsgType.TimeTick, 12, headers={TICK_FOR: f"{named},{vch(root, 9)}"}))
    third = await p.publish(p0, Msg(MsgType.TimeTick, 13))
    assert [m.position.seq for m in await drain(targets[busy], 3)] == [data, second, third]  # active
    assert [m.position.seq for m in await drain(targets[named], 1)] == [second]  # named once
    assert await targets[idle].next(0.1) is None  # skipped: the next one it gets promises as much
    await asyncio.sleep(0.3)  # ACTIVE_FOR passes: busy is idle again
    await p.publish(p0, Msg(MsgType.TimeTick, 14))
    assert await targets[busy].next(0.2) is None  # nothing of its own for ACTIVE_FOR
    assert await targets[named].next(0.01) is None and await targets[idle].next(0.01) is None
    await asyncio.sleep(started + 1.6 - asyncio.get_running_loop().time())  # idle_tick_interval passes
    last = await p.publish(p0, Msg(MsgType.TimeTick, 15))  # the idle interval has passed
    for t in targets.values():
        got = await drain(t, 1)
        assert [(m.type, m.position.seq, m.timestamp) for m in got] == [(MsgType.TimeTick, last, 15)]
    for t in targets.values():
        await t.close()


async def test_a_target_catching_up_on_a_purged_range_is_told(ms, root, monkeypatch):
    """What the catch-up was to read can be purged before its consumer gets it: the reader is
    told (StreamGapError), then goes on with the shared consumer's messages."""
    from kmilvus.msgstream import StreamGapError

    a, b = vch(root, 1), vch(root, 2)
    p0 = pchannel_of(a)
    p = ms.producer()
    b0 = await p.publish(b, Msg(MsgType.Insert, 9, b"b0"))
    b1 = await p.publish(b, Msg(MsgType.Insert, 10, b"b1"))
    a1 = await p.publish(a, Msg(MsgType.Insert, 11, b"a1"))
    ta = await ms.dispatch(a, after_seq=b1, name="dn")
    await drain(ta, 1)
    last_seq = ms.last_seq

    async def last_seq_then_purged(channel: str) -> int:
        seq = await last_seq(channel)
        await ms.purge(p0, before_seq=a1 + 1)  # between the catch-up's plan and its reading
        return seq

    monkeypatch.setattr(ms, "last_seq", last_seq_then_purged)
    tb = await ms.dispatch(b, after_seq=b0, name="dn")  # behind the shared consumer: b1 alone
    tick = await p.publish(p0, Msg(MsgType.TimeTick, 12))
    with pytest.raises(StreamGapError) as gap:
        await tb.next(5)
    assert (gap.value.after_seq, gap.value.next_seq) == (b0, tick)
    got = await tb.next(5)
    assert got is not None and (got.type, got.position.seq) == (MsgType.TimeTick, tick)
    assert len(await ms.consumer_names()) == 1  # the catch-up consumer is gone
    await ta.close()
    await tb.close()
