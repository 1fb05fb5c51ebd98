"""No acknowledged stream message is ever skipped: trimming the stream while a consumer replays,
a server that moves a consumer forward, split messages cut by a purge, a catch-up that fails.

Real nats-server (the one `KMILVUS_NATS_SERVER` names, else Debian's): kmilvus must not depend
on a server version's fixes."""

from __future__ import annotations

import pytest
from nats.js import api

from kmilvus.msgstream import Msg, MsgStreamError, MsgType, StreamGapError, pchannel_of
from kmilvus.msgstream.message import H_CHUNK, H_CHUNK_ID, H_CHUNK_START, nats_headers
from kmilvus.util import failpoint
from tests.integration.test_msgstream import vch

# An insert this large fills a dispatcher's target queue and the server's flow-control window
# with a few dozen messages: the rest is still on the server when the purge comes (as in a replay
# of a long backlog), not already in the consumer's memory.
ROW_BYTES = 1024 * 1024


async def read_until(consumer, last_seq: int, timeout: float = 5.0) -> tuple[list[Msg], list[StreamGapError]]:
    """Messages up to the one at `last_seq` (or until none came for `timeout` seconds), and the
    gaps reported on the way."""
    out: list[Msg] = []
    gaps: list[StreamGapError] = []
    while True:
        try:
            m = await consumer.next(timeout)
        except StreamGapError as e:
            gaps.append(e)
            continue
        if m is None:
            return out, gaps
        out.append(m)
        if m.position.seq >= last_seq:
            return out, gaps


async def test_trimming_ticks_during_a_replay_skips_no_insert(ms, root):
    """Rows lost in a chaos run, traced: a DataNode replays a vchannel through its pchannel's
    shared consumer while RootCoord trims the pchannel's old ticks (a purge of the tick subject
    keeping the newest). nats-server 2.9.10 moves every consumer whose filter matches a
    subject-filtered purge to that subject's first remaining message: the replaying consumer
    jumped to the head and 177 of these 200 inserts never arrived. kmilvus no longer purges by
    subject; done anyway (by hand), every insert still arrives, and each run of ticks removed
    ahead of the reader is reported, never skipped silently — on any server version."""
    v = vch(root, 1)
    p0 = pchannel_of(v)
    items = []
    for i in range(200):
        items.append((v, Msg(MsgType.Insert, 2 * i + 1, b"row %d " % i + bytes(ROW_BYTES), {"segment": "1"})))
        items.append((p0, Msg(MsgType.TimeTick, 2 * i + 2)))
    seqs = await ms.producer().publish_many(items)
    target = await ms.dispatch(v, name="dn")
    got = [await target.next(5) for _ in range(20)]
    await ms.js.purge_stream(ms.stream_of(p0), subject=ms.subject(p0), keep=1)  # the old trim
    rest, gaps = await read_until(target, seqs[-1])
    got += rest
    inserts = [bytes(m.payload[:10]).split(b" ")[1] for m in got if m.type == MsgType.Insert]
    assert inserts == [b"%d" % i for i in range(200)], f"{200 - len(inserts)} of 200 inserts never arrived"
    # Every tick either arrived or was reported missing (where it had been purged before the
    # server sent it), none both.
    ticks = [m.position.seq for m in got if m.type == MsgType.TimeTick]
    reported = [s for g in gaps for s in range(g.after_seq + 1, g.next_seq)]
    assert reported and sorted(ticks + reported) == seqs[1::2]
    await target.close()


async def test_a_consumer_moved_forward_by_the_server_reads_again_what_it_skipped(ms, root):
    """A server-side consumer that jumps over stored messages with its delivery counter intact
    (what nats-server 2.9.10 does to a wildcard consumer on a subject-filtered purge) is seen by
    the stream sequence and re-read from the last message processed. Reproduced on any server:
    the consumer is replaced by one that starts two messages later and counts from 1."""
    v = vch(root, 1)
    p = ms.producer()
    before = await p.publish(v, Msg(MsgType.Insert, 1, b"before"))
    c = await ms.consume(v, after_seq=before)
    stream = ms.stream_of(v)
    inbox = c._sub.subject
    await ms.js.delete_consumer(stream, c.consumer_name)
    seqs = await p.publish_many([(v, Msg(MsgType.Insert, 10 + i, b"%d" % i)) for i in range(5)])
    await ms.js.add_consumer(
        stream,
        api.ConsumerConfig(
            deliver_subject=inbox,
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=before + 3,
            flow_control=True,
            idle_heartbeat=2.0,
        ),
    )
    assert seqs[0] == before + 1
    got = [await c.next(5) for _ in range(5)]
    assert [(m.position.seq, bytes(m.payload)) for m in got] == [(s, b"%d" % i) for i, s in enumerate(seqs)]
    assert await c.next(0.3) is None
    await c.close()
    for name in await ms.consumer_names():
        await ms.js.delete_consumer(stream, name)


async def test_messages_purged_ahead_of_a_reader_are_reported_where_they_were(ms, root):
    """A reader behind a purge is told where messages are missing (StreamGapError), then reads
    on: through a consumer and through a dispatcher's target alike. (A reader the purge
    overtakes while it reads: `test_trimming_ticks_during_a_replay_skips_no_insert`.)"""
    v, w = vch(root, 1), vch(root, 2)
    p0 = pchannel_of(v)
    p = ms.producer()
    seqs = await p.publish_many([(v if i % 2 else w, Msg(MsgType.Insert, i + 1, b"%d" % i)) for i in range(8)])
    await ms.purge(p0, before_seq=seqs[5])
    c = await ms.consume(v, after_seq=seqs[0])  # resuming behind the purge
    target = await ms.dispatch(v, after_seq=seqs[0], name="dn")
    for reader in (c, target):
        with pytest.raises(StreamGapError) as gap:
            await reader.next(5)
        assert (gap.value.after_seq, gap.value.next_seq) == (seqs[0], seqs[5])
        got = [await reader.next(5), await reader.next(5)]
        assert [m.position.seq for m in got] == [seqs[5], seqs[7]]
        assert await reader.next(0.2) is None
    await c.close()
    await target.close()


def split_parts(ms, v: str, ts: int, cid: str, data: list[bytes]) -> list[tuple[str, bytes, dict[str, str]]]:
    """The NATS messages of one split message of `v` (as `Producer` publishes them)."""
    head = {**nats_headers(Msg(MsgType.Insert, ts, b"", {"segment": "1"})), H_CHUNK_ID: cid}
    return [(ms.subject(v), d, {**head, H_CHUNK: f"{i}/{len(data)}"}) for i, d in enumerate(data)]


async def test_a_tick_between_the_parts_of_a_split_message_is_no_resume_point(ms, root):
    """A tick that lands between the parts of a split insert (it does not cover the insert) is
    not handed to the insert's vchannel: there it would become the checkpoint, a purge up to it
    would remove the first part, and a new owner resuming there could not complete the insert.
    The other vchannels of the pchannel get it; a tick past the message's timestamp shows the
    message was abandoned, and is handed out."""
    v, w = vch(root, 1), vch(root, 2)
    p0 = pchannel_of(v)
    await ms.ensure(v)
    tv, tw = await ms.dispatch(v, name="dn"), await ms.dispatch(w, name="dn")
    (s0, d0, h0), (s1, d1, h1) = split_parts(ms, v, 10, "X", [b"aa", b"bb"])
    a0 = await ms.js.publish(s0, d0, headers=h0)
    t5 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 5))
    a1 = await ms.js.publish(s1, d1, headers={**h1, H_CHUNK_START: str(a0.seq)})
    t11 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 11))
    (y0, e0, g0), _ = split_parts(ms, v, 12, "Y", [b"cc", b"dd"])
    await ms.js.publish(y0, e0, headers=g0)  # its producer died: part 1 never comes
    t13 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 13))
    got = [await tv.next(5) for _ in range(3)]
    assert [(m.type, m.position.seq) for m in got] == [
        (MsgType.Insert, a1.seq),
        (MsgType.TimeTick, t11),
        (MsgType.TimeTick, t13),
    ]
    assert bytes(got[0].payload) == b"aabb"
    assert [m.position.seq for m in [await tw.next(5) for _ in range(3)]] == [t5, t11, t13]
    assert await tv.next(0.2) is None
    await tv.close()
    await tw.close()


async def _catching_up_inside_a_split_message(ms, root):
    """Targets of two vchannels of a pchannel, `tv` added while the shared consumer (reading for
    `tw`) is past the first part of a split message of tv's vchannel: tv catches up on
    (0, part 0] alone. `rest()` publishes a tick between the parts, the last part and a tick
    after it, and returns their seqs."""
    v, w = vch(root, 1), vch(root, 2)
    p0 = pchannel_of(v)
    await ms.ensure(v)
    (s0, d0, h0), (s1, d1, h1) = split_parts(ms, v, 10, "X", [b"aa", b"bb"])
    a0 = await ms.js.publish(s0, d0, headers=h0)
    tw = await ms.dispatch(w, after_seq=a0.seq, name="dn")
    t5 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 5))
    assert (await tw.next(5)).position.seq == t5  # the shared consumer is past part 0
    tv = await ms.dispatch(v, name="dn")

    async def rest() -> tuple[int, int, int]:
        t6 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 6))
        a1 = await ms.js.publish(s1, d1, headers={**h1, H_CHUNK_START: str(a0.seq)})
        t11 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 11))
        assert t6 < a1.seq < t11
        return t6, a1.seq, t11

    return tv, tw, rest


async def test_a_catch_up_ending_inside_a_split_message_reads_it_to_its_end(ms, root):
    """A vchannel added behind its pchannel's shared consumer catches up alone up to where the
    shared one was; when that point falls between the parts of one of its split messages, the
    shared consumer never saw the first part, and a tick it hands out before the last part must
    not reach the vchannel (as above): the catch-up reads the message to its end instead."""
    tv, tw, rest = await _catching_up_inside_a_split_message(ms, root)
    _, a1, t11 = await rest()
    got = [await tv.next(5) for _ in range(2)]
    assert [(m.type, m.position.seq) for m in got] == [(MsgType.Insert, a1), (MsgType.TimeTick, t11)]
    assert bytes(got[0].payload) == b"aabb"
    assert await tv.next(0.2) is None
    await tv.close()
    await tw.close()


async def test_a_split_message_the_shared_consumer_hands_out_after_a_catch_up_is_read_once(ms, root, tmp_path):
    """As above, but the shared consumer hands out what it read only after the catch-up ended
    (it reads the split message's first part back from the stream first, so under load it comes
    late): its copies of the message and of the tick between the parts were read alone already
    and are dropped, not read a second time."""
    tv, tw, rest = await _catching_up_inside_a_split_message(ms, root)
    go = tmp_path / "go"
    failpoint.enable("dispatcher.deliver", f"wait({go})")  # the shared consumer reads, holds it
    try:
        t6, a1, t11 = await rest()
        got = await tv.next(5)
        assert (got.type, got.position.seq, bytes(got.payload)) == (MsgType.Insert, a1, b"aabb")
        assert await tv.next(0) is None  # the catch-up is over; nothing handed out yet
    finally:
        failpoint.disable("dispatcher.deliver")
        go.touch()
    later, gaps = await read_until(tv, t11)
    assert [(m.type, m.position.seq) for m in later] == [(MsgType.TimeTick, t11)] and not gaps
    assert await tv.next(0.2) is None
    assert [m.position.seq for m in (await read_until(tw, t11))[0]] == [t6, t11]
    await tv.close()
    await tw.close()


async def test_a_failed_catch_up_leaves_nothing_registered(ms, root):
    """A catch-up whose set-up fails (NATS away) used to leave the vchannel registered: every
    retry failed with "already consumed", and its queue, read by nobody, held the pchannel's
    delivery back. Now the failure undoes the registration and the retry works."""
    a, b = vch(root, 1), vch(root, 2)
    p = ms.producer()
    b1 = await p.publish(b, Msg(MsgType.Insert, 10, b"b1"))
    a1 = await p.publish(a, Msg(MsgType.Insert, 11, b"a1"))
    ta = await ms.dispatch(a, after_seq=b1, name="dn")
    assert (await ta.next(5)).position.seq == a1
    failpoint.enable("dispatcher.add.catch_up", "raise")
    try:
        with pytest.raises(failpoint.FailpointError):
            await ms.dispatch(b, name="dn")
    finally:
        failpoint.disable("dispatcher.add.catch_up")
    tb = await ms.dispatch(b, name="dn")
    assert (await tb.next(5)).position.seq == b1
    a2 = await p.publish(a, Msg(MsgType.Insert, 12, b"a2"))
    assert (await ta.next(5)).position.seq == a2
    await ta.close()
    await tb.close()
    assert await ms.consumer_names() == []


async def test_a_split_message_whose_first_part_was_purged_is_reported_not_skipped(ms, root):
    """A reader resuming between the parts of a split message reads the first parts back; if
    they were purged, the message is lost to it: it is told (it used to be skipped with a
    warning)."""
    v = vch(root, 1)
    p0 = pchannel_of(v)
    await ms.ensure(v)
    (s0, d0, h0), (s1, d1, h1) = split_parts(ms, v, 10, "X", [b"aa", b"bb"])
    a0 = await ms.js.publish(s0, d0, headers=h0)
    t5 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 5))
    a1 = await ms.js.publish(s1, d1, headers={**h1, H_CHUNK_START: str(a0.seq)})
    t11 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 11))
    c = await ms.consume(v, after_seq=t5)
    assert bytes((await c.next(5)).payload) == b"aabb"  # read back
    await c.close()
    await ms.purge(p0, before_seq=t5 + 1)
    c = await ms.consume(v, after_seq=t5)
    with pytest.raises(StreamGapError) as gap:
        await c.next(5)
    assert (gap.value.after_seq, gap.value.next_seq) == (a0.seq - 1, a1.seq + 1)
    assert await c.next(0.2) is None  # the tick is not this vchannel's
    await c.close()
    assert t11 == a1.seq + 1


def test_a_pchannel_is_trimmed_below_a_point_only_once_it_held_for_the_retention_time():
    """DataCoord's trim point: the least safe point of the last `retention` seconds, and none
    before the pchannel was watched that long. A vchannel registered without a checkpoint (safe
    point 1) holds the pchannel back for the retention time after it."""
    from kmilvus.datacoord.stream_trimmer import StreamTrimmer

    t = StreamTrimmer(retention=10.0)
    assert t.observe("p", 50, now=100.0) == 0  # not watched for 10 s yet
    assert t.observe("p", 60, now=105.0) == 0
    assert t.observe("p", 70, now=110.0) == 50  # 50 held from 100 to 110
    assert t.observe("p", 80, now=116.0) == 60  # the sample of 105 stands for the window's start
    assert t.observe("p", 1, now=117.0) == 1  # a new vchannel, no checkpoint yet
    assert t.observe("p", 90, now=120.0) == 1
    assert t.observe("p", 95, now=127.5) == 1
    assert t.observe("p", 99, now=128.0) == 1  # at 118 (the window's start) it was still 1
    assert t.observe("p", 99, now=130.5) == 90  # 120's sample stands for the start now
    assert t.due("p", 90) and not t.due("p", 1)
    t.done("p", 90)
    assert not t.due("p", 90) and not t.due("p", 60) and t.due("p", 91)


async def test_a_catch_up_inside_an_abandoned_split_message_ends_at_the_tick_past_it(ms, root):
    """As above, but the split message's producer died after its first part: the tick past its
    timestamp shows it abandoned, and the catch-up ends there instead of waiting for a part
    that never comes (while the vchannel's queue fills and holds its pchannel back)."""
    v, w = vch(root, 1), vch(root, 2)
    p0 = pchannel_of(v)
    await ms.ensure(v)
    (s0, d0, h0), _ = split_parts(ms, v, 10, "X", [b"aa", b"bb"])
    a0 = await ms.js.publish(s0, d0, headers=h0)
    tw = await ms.dispatch(w, after_seq=a0.seq, name="dn")
    t5 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 5))
    assert (await tw.next(5)).position.seq == t5
    tv = await ms.dispatch(v, name="dn")  # catches up on (0, part 0] alone
    t11 = await ms.producer().publish(p0, Msg(MsgType.TimeTick, 11))  # past the message: abandoned
    got = await tv.next(5)
    assert got is not None and (got.type, got.position.seq) == (MsgType.TimeTick, t11)
    assert len(await ms.consumer_names()) == 1  # the catch-up consumer is gone
    await tv.close()
    await tw.close()


async def test_resuming_past_the_end_of_a_stream_that_lost_its_messages_fails(ms, root):
    """A position beyond the stream's end (the stream made anew, or nats-server's store lost)
    would make a consumer wait there, skipping every new message up to the old position: it is
    refused instead."""
    v = vch(root, 1)
    seqs = await ms.producer().publish_many([(v, Msg(MsgType.Insert, i + 1, b"x")) for i in range(5)])
    c = await ms.consume(v, after_seq=seqs[-1])  # at the end: fine
    await c.close()
    await ms.delete_stream()
    await ms.producer().publish(v, Msg(MsgType.Insert, 9, b"new"))  # a new stream, from seq 1
    with pytest.raises(MsgStreamError, match="are gone"):
        await ms.consume(v, after_seq=seqs[-1])
    assert await ms.consumer_names() == []
