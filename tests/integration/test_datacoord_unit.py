"""DataCoord's decisions, in-process on real etcd and NATS: segment row quotas, the seal policies
(full, idle, lifetime), Flush's SealAllSegments, GetFlushState's readiness rule and channel
checkpoints."""

from __future__ import annotations

import asyncio
import time

import pytest
from pymilvus.grpc_gen import milvus_pb2

from kmilvus import components as roles
from kmilvus.datacoord.meta import SegmentState
from kmilvus.meta import catalog as keys
from kmilvus.msgstream import pchannel_of
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.sessionutil import Session
from kmilvus.util import merr
from tests.coordutil import Coords, WatchingDataNode, watched_by_a_datanode
from tests.harness import make_config
from tests.util import eventually


@pytest.fixture
async def coords(etcd_endpoint, nats_url, root, tmp_path):
    # 1 MiB segments: 1956 rows of (Int64, FloatVector dim 128) each, filled to the limit (the
    # default seal proportion is Milvus' 0.23: see the test of it below).
    cfg = make_config(
        root, etcd_endpoint, nats_url, tmp_path / "storage", segment_max_size_mb=1, segment_seal_proportion=1.0
    )
    c = await Coords.start(cfg)
    yield c
    await c.stop()


NODE = 9  # the DataNode `watched_by_a_datanode` registers


async def _collection(c: Coords, shards: int = 2):
    desc = await c.create_collection("c", shards=shards)
    return desc.collectionID, list(desc.virtual_channel_names)


async def _watched_collection(c: Coords, shards: int = 2):
    """A collection whose channels a DataNode (played by the test) watches: DataCoord accepts
    time ticks and binlogs only from a channel's current watch."""
    coll, chans = await _collection(c, shards)
    await watched_by_a_datanode(c, chans, NODE)
    return coll, chans


async def _stored_state(c: Coords, seg) -> int:
    raw = await c.kv.get(keys.segment_key(seg.info.collectionID, seg.info.partitionID, seg.id))
    return internal_pb2.SegmentInfo.FromString(raw).state


def _segment(c: Coords, sid: int):
    return c.dc.meta.segments[sid]


def _later(c: Coords, seconds: float) -> None:
    """DataCoord's segment policies see time `seconds` ahead from now on."""
    ahead = c.dc.segments.clock() + seconds - time.monotonic()
    c.dc.segments.clock = lambda: time.monotonic() + ahead


async def test_growing_segments_seal_at_milvus_seal_proportion_by_default(etcd_endpoint, nats_url, root, tmp_path):
    """Milvus 2.3.5 seals a growing segment at `dataCoord.segment.sealProportion` (0.23) of
    `segment.maxSize` (its 1M × 128 rows arrive as four segments of ~250k rows, compacted later):
    a growing segment is searched brute force until it is sealed, flushed and indexed, and an
    index over a quarter of the rows is what Milvus users' recall and latency figures are from."""
    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage", segment_max_size_mb=1)
    assert cfg.segment_seal_proportion == 0.23
    c = await Coords.start(cfg)
    try:
        coll, (ch, _) = await _collection(c)
        quota = int(c.dc.segments.max_rows[coll] * 0.23)
        got = await c.assign(coll, ch, 2 * quota + 10)
        merr.check(got.status)
        assert [a.count for a in got.segIDAssignments] == [quota, quota, 10]
    finally:
        await c.stop()


async def test_quota_fills_each_segment_to_its_row_limit_then_opens_the_next(coords):
    c = coords
    coll, (ch, other) = await _collection(c)
    limit = c.dc.segments.max_rows[coll]
    assert limit == 1024 * 1024 // (16 + 8 + 128 * 4)

    first = await c.assign(coll, ch, 2 * limit + 100)
    merr.check(first.status)
    counts = [a.count for a in first.segIDAssignments]
    assert counts == [limit, limit, 100]
    assert len({a.segID for a in first.segIDAssignments}) == 3

    # The open segment's room is handed out first; only the rest opens a new segment.
    more = await c.assign(coll, ch, limit)
    assert [(a.segID, a.count) for a in more.segIDAssignments] == [
        (first.segIDAssignments[2].segID, limit - 100),
        (more.segIDAssignments[1].segID, 100),
    ]
    # Another channel never shares a segment.
    theirs = await c.assign(coll, other, 10)
    assert theirs.segIDAssignments[0].segID not in {a.segID for a in first.segIDAssignments}
    # Every segment handed out is Growing in etcd, on its own channel, within its quota.
    for a in [*first.segIDAssignments, *more.segIDAssignments, *theirs.segIDAssignments]:
        seg = _segment(c, a.segID)
        assert await _stored_state(c, seg) == SegmentState.Growing
        assert seg.info.insert_channel == a.channel_name
        assert seg.info.assigned_rows <= limit


async def test_quota_refused_for_unknown_channel(coords):
    c = coords
    coll, _ = await _collection(c)
    resp = await c.assign(coll, "no-such-channel", 10)
    assert resp.status.code == merr.CHANNEL_NOT_FOUND[0]
    assert "channel not found[channel=no-such-channel]" in resp.status.reason
    assert c.dc.meta.by_collection(coll) == []


async def test_full_segment_is_sealed_and_partly_used_one_is_not(coords):
    c = coords
    coll, (ch, other) = await _collection(c)
    limit = c.dc.segments.max_rows[coll]
    full = (await c.assign(coll, ch, limit)).segIDAssignments[0].segID
    partial = (await c.assign(coll, other, limit - 1)).segIDAssignments[0].segID
    sealed = await c.dc.segments.apply_seal_policies()
    assert [s.id for s in sealed] == [full]
    assert await _stored_state(c, _segment(c, full)) == SegmentState.Sealed
    assert _segment(c, full).info.seal_timestamp > 0
    assert await _stored_state(c, _segment(c, partial)) == SegmentState.Growing


async def test_idle_segment_is_sealed_once_it_had_rows(coords):
    c = coords
    coll, (ch, other) = await _collection(c)
    used = (await c.assign(coll, ch, 5)).segIDAssignments[0].segID
    empty = (await c.assign(coll, other, 5)).segIDAssignments[0].segID
    _segment(c, empty).info.assigned_rows = 0  # one was never written to
    assert await c.dc.segments.apply_seal_policies() == []
    _later(c, c.cfg.segment_max_idle_time + 1)  # no quota asked for longer than the idle time
    sealed = await c.dc.segments.apply_seal_policies()
    assert [s.id for s in sealed] == [used]
    assert await _stored_state(c, _segment(c, empty)) == SegmentState.Growing


async def test_segment_past_its_lifetime_is_sealed_even_if_busy(coords):
    c = coords
    coll, (ch, _) = await _collection(c)
    sid = (await c.assign(coll, ch, 5)).segIDAssignments[0].segID
    _later(c, c.cfg.segment_max_lifetime + 1)
    await c.assign(coll, ch, 5)  # still busy: just got more quota
    assert [s.id for s in await c.dc.segments.apply_seal_policies()] == [sid]
    assert await _stored_state(c, _segment(c, sid)) == SegmentState.Sealed


async def test_flush_seals_every_growing_segment_and_new_quota_opens_new_ones(coords):
    c = coords
    coll, chans = await _collection(c)
    before = [(await c.assign(coll, ch, 7)).segIDAssignments[0].segID for ch in chans]
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    merr.check(resp.status)
    assert sorted(resp.segmentIDs) == sorted(before) and resp.flush_ts > 0
    for sid in before:
        seg = _segment(c, sid)
        assert await _stored_state(c, seg) == SegmentState.Sealed
        assert seg.info.seal_timestamp == resp.flush_ts
    after = (await c.assign(coll, chans[0], 7)).segIDAssignments[0].segID
    assert after not in before


def _flushed(
    sid: int, coll: int, channel: str, seq: int, ts: int, rows: int = 0, version: int = 1
) -> internal_pb2.SaveBinlogPathsRequest:
    """What a DataNode sends once a segment's binlogs are written (meta only: no file is read),
    under the channel's current watch."""
    req = internal_pb2.SaveBinlogPathsRequest(
        segmentID=sid,
        collectionID=coll,
        channel=channel,
        flushed=True,
        checkpoint=internal_pb2.MsgPosition(channel_name=channel, seq=seq, timestamp=ts),
        nodeID=NODE,
        watch_version=version,
    )
    if rows:
        req.binlogs.add(logID=sid + 1, entries_num=rows, log_path=f"insert_log/{coll}/{sid}/1", log_size=100)
    return req


async def _flush_state(c: Coords, coll: int, resp, wait_ms: int = 0) -> bool:
    st = await c.dc.GetFlushState(
        data_coord_pb2.GetFlushStateRequest(
            segmentIDs=resp.segmentIDs, flush_ts=resp.flush_ts, collectionID=coll, wait_ms=wait_ms
        )
    )
    merr.check(st.status)
    return st.flushed


async def test_flush_state_needs_every_segment_flushed_and_every_checkpoint_past_flush_ts(coords):
    c = coords
    coll, (ch, other) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    assert list(resp.segmentIDs) == [sid]
    assert not await _flush_state(c, coll, resp)  # Sealed

    merr.check(await c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 10, resp.flush_ts + 1, rows=3)))
    assert await _stored_state(c, _segment(c, sid)) == SegmentState.Flushed
    assert not await _flush_state(c, coll, resp)  # `other` has no checkpoint

    await c.dc.handle_tt(
        internal_pb2.DataNodeTtMsg(
            channel_name=other,
            timestamp=resp.flush_ts - 1,
            checkpoint=internal_pb2.MsgPosition(channel_name=other, seq=4, timestamp=resp.flush_ts - 1),
            nodeID=NODE,
            watch_version=1,
        )
    )
    assert not await _flush_state(c, coll, resp)  # ... one short of flush_ts

    # A waiting GetFlushState is woken by the checkpoint that completes the flush.
    waiting = asyncio.create_task(_flush_state(c, coll, resp, wait_ms=30_000))
    await asyncio.sleep(0)
    await c.dc.handle_tt(
        internal_pb2.DataNodeTtMsg(
            channel_name=other,
            timestamp=resp.flush_ts + 5,
            checkpoint=internal_pb2.MsgPosition(channel_name=other, seq=5, timestamp=resp.flush_ts + 5),
            nodeID=NODE,
            watch_version=1,
        )
    )
    assert await waiting
    assert await _flush_state(c, coll, resp)


async def test_empty_flushed_segment_leaves_no_meta(coords):
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    merr.check(await c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 10, resp.flush_ts + 1)))
    assert sid not in c.dc.meta.segments
    assert await c.kv.get_prefix(keys.segment_prefix(coll)) == []


def _tt(channel: str, seq: int, ts: int, node: int = NODE, version: int = 1) -> internal_pb2.DataNodeTtMsg:
    return internal_pb2.DataNodeTtMsg(
        channel_name=channel,
        timestamp=ts,
        checkpoint=internal_pb2.MsgPosition(channel_name=channel, seq=seq, timestamp=ts),
        nodeID=node,
        watch_version=version,
    )


async def _stored_checkpoint(c: Coords, channel: str) -> internal_pb2.MsgPosition | None:
    raw = await c.kv.get(keys.channel_checkpoint_key(channel))
    return internal_pb2.MsgPosition.FromString(raw) if raw is not None else None


async def test_channel_checkpoint_only_moves_forward_and_is_persisted(coords):
    c = coords
    _, (ch, _) = await _watched_collection(c)
    await c.dc.handle_tt(_tt(ch, 7, 700))
    await c.dc.handle_tt(_tt(ch, 5, 900))  # an older position (a late report) is ignored
    await c.dc.handle_tt(_tt("unknown-channel", 9, 900))
    assert (c.dc.meta.checkpoints[ch].seq, c.dc.meta.checkpoints[ch].timestamp) == (7, 700)
    assert "unknown-channel" not in c.dc.meta.checkpoints

    async def persisted() -> bool:
        cp = await _stored_checkpoint(c, ch)
        return cp is not None and (cp.seq, cp.timestamp) == (7, 700)

    await eventually(persisted, what="checkpoint persisted by the background step")


async def test_save_binlog_paths_commits_the_checkpoint_with_the_segment(coords):
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    merr.check(await c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 12, resp.flush_ts + 1, rows=3)))
    cp = await _stored_checkpoint(c, ch)  # in the same transaction: no wait
    assert cp is not None and (cp.seq, cp.timestamp) == (12, resp.flush_ts + 1)
    assert c.dc.meta.checkpoints[ch].seq == 12


async def test_time_ticks_and_binlogs_of_a_stale_watch_are_refused(coords):
    """A DataNode acts on a channel only under its current watch (node and
    version); anything else — another node, an older version — is refused and changes nothing."""
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    await c.dc.handle_tt(_tt(ch, 7, 700))  # the current watch: accepted
    await c.dc.handle_tt(_tt(ch, 9, 900, node=NODE + 1))  # another node
    await c.dc.handle_tt(_tt(ch, 9, 900, version=0))  # an older watch of this node
    assert (c.dc.meta.checkpoints[ch].seq, c.dc.meta.checkpoints[ch].timestamp) == (7, 700)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    stale = await c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 12, 1200, rows=3, version=0))
    assert stale.code == merr.CHANNEL_NOT_FOUND[0] and "not watched by node" in stale.reason
    assert await _stored_state(c, _segment(c, sid)) == SegmentState.Sealed
    assert await c.kv.get_prefix(keys.binlog_prefix(coll)) == []


async def test_a_save_checked_before_its_channel_moved_cannot_commit_after(coords):
    """The watch check and the commit are one decision: a SaveBinlogPaths that passed the check
    but reaches etcd after the channel moved to another node is refused by the transaction (the
    new owner replays that data from the checkpoint; committing it too would store it twice)."""
    c = coords
    coll, (ch, other) = await _watched_collection(c)
    first = c.dc.channels.node_of(ch)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    dn = next(iter(c.registry._local[roles.DATANODE].values()))
    record = c.dc.channels.records[ch]
    async with c.dc.meta.write_lock:  # the save passes the watch check, then waits here
        save = asyncio.create_task(c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 12, resp.flush_ts + 1, rows=3)))
        await asyncio.sleep(0)
        await dn.session.stop()  # the DataNode is gone ...
        moved = asyncio.create_task(watched_by_a_datanode(c, [ch, other], NODE + 1))  # ... a new one comes
        # The new watch is persisted at once; it is sent once the meta is quiet (after the save).
        await eventually(lambda: c.dc.channels.records[ch] != record, what="the new watch persisted")
    st = await save
    await moved
    assert c.dc.channels.node_of(ch) == NODE + 1 != first
    assert st.code == merr.CHANNEL_NOT_FOUND[0], st
    assert await _stored_state(c, _segment(c, sid)) == SegmentState.Sealed
    assert await c.kv.get_prefix(keys.binlog_prefix(coll)) == []


class _PausedAfterCommit:
    """The coordinator KV, except that a transaction writing binlog meta pauses once it has
    committed, before its caller can update DataCoord's memory (as a slow reply would)."""

    def __init__(self, kv):
        self._kv = kv
        self.committed = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name):
        return getattr(self._kv, name)

    async def txn(self, ops, compares=()):
        ok = await self._kv.txn(ops, compares)
        if any("/binlog/" in getattr(op, "key", "") for op in ops):
            self.committed.set()
            await self.release.wait()
        return ok


async def test_a_new_owner_sees_every_save_committed_before_the_move(coords):
    """Found as duplicates under chaos: a SaveBinlogPaths committed in etcd just before its
    channel moved, but not yet applied to DataCoord's memory, must still be in the new owner's
    watch (segment flushed, checkpoint past it); a watch built from the stale memory makes the
    new owner replay those rows into a second binlog."""
    c = coords
    coll, (ch, other) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    dn = next(iter(c.registry._local[roles.DATANODE].values()))
    paused = _PausedAfterCommit(c.dc.meta.kv)
    c.dc.meta.kv = paused
    save = asyncio.create_task(c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 12, resp.flush_ts + 1, rows=3)))
    await asyncio.wait_for(paused.committed.wait(), 10)
    version = c.dc.channels.versions[ch]
    await dn.session.stop()  # the DataNode is gone; a new one comes
    moved = asyncio.create_task(watched_by_a_datanode(c, [ch, other], NODE + 1))
    await eventually(lambda: c.dc.channels.versions[ch] > version, what="the channel reassigned")
    await asyncio.sleep(0.3)  # a watch built without waiting for the save goes out now
    paused.release.set()
    merr.check(await save)
    dn2 = await moved
    info = dn2.infos[ch]
    assert sid in info.flushed_segmentIDs, "the new owner must not replay a committed segment"
    assert info.seek_position.seq == 12


async def test_a_dropped_segment_stays_listed_until_the_checkpoint_passed_its_rows(coords):
    """Milvus' GC rule: a Dropped segment (compacted away) is collected only once its channel's
    stored checkpoint is past its rows. Collected earlier, a DataNode replaying from an older
    checkpoint (another segment's rows held it back) no longer knows the segment, buffers its rows
    again and stores them twice; a QueryNode delegator (resumed from the checkpoint in etcd, which
    trails the one in memory) serves them twice."""
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    req = _flushed(sid, coll, ch, 5, resp.flush_ts + 1, rows=3)  # an older segment holds the checkpoint at 5
    req.dml_position.end_position.CopyFrom(internal_pb2.MsgPosition(channel_name=ch, seq=20, timestamp=1))
    merr.check(await c.dc.SaveBinlogPaths(req))
    seg = _segment(c, sid)
    seg.info.state = SegmentState.Dropped  # as compaction's swap leaves a source
    await c.dc.meta.save_infos([seg])
    assert await c.dc.compactions.collect() == 0
    assert sid in c.dc.meta.segments and await _stored_state(c, seg) == SegmentState.Dropped
    c.dc.meta.update_checkpoint(internal_pb2.MsgPosition(channel_name=ch, seq=20, timestamp=resp.flush_ts + 2))
    assert (await _stored_checkpoint(c, ch)).seq == 5  # past it in memory only
    assert await c.dc.compactions.collect() == 1
    assert (await _stored_checkpoint(c, ch)).seq == 20, "collected while a load still resumes before its rows"
    assert sid not in c.dc.meta.segments
    assert await c.kv.get(keys.segment_key(coll, seg.info.partitionID, sid)) is None


async def test_a_datacoord_that_lost_its_lock_grants_no_quota_and_flushes_nothing(coords):
    """Quota and FlushSegments are decided from memory: a DataCoord whose leader lock is gone
    (paused past its lease; its successor may have sealed and flushed the same segments) must
    refuse both, or a DataNode would drop inserts as belonging to a flushed segment."""
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    dn = next(iter(c.registry._local[roles.DATANODE].values()))
    sent: list = []
    dn.FlushSegments = lambda req, context=None: sent.append(req) or _ok()

    async def lost() -> bool:
        return False

    c.dc.leader_check = lost
    refused = await c.assign(coll, ch, 3)
    assert refused.status.code == merr.SERVICE_NOT_READY[0] and "lost its leader lock" in refused.status.reason
    await c.dc.handle_tt(_tt(ch, 20, 2**62))  # a tick past everything: still no FlushSegments
    assert sent == []
    assert _segment(c, sid).info.assigned_rows == 3


async def _ok():
    return merr.success()


async def test_a_new_owner_is_sent_flush_segments_only_after_its_own_tick(coords):
    """Chaos lost acknowledged rows this way: the channel's owner reported a
    tick past a sealed segment and died before FlushSegments reached it; the channel moved, and
    a check that ran while the new assignment was being persisted sent FlushSegments to the new
    owner on the dead owner's tick. The new owner, replaying from the checkpoint, flushed the
    segment with the 33 messages it had read so far; the segment's later rows were dropped as
    rows of a flushed segment. Only a tick reported under the current watch may flush."""
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    old = c.registry._local[roles.DATANODE][NODE]

    async def unreachable(req, context=None):
        raise ConnectionError("the DataNode died")

    old.FlushSegments = unreachable
    await c.dc.handle_tt(_tt(ch, 20, 2**62))  # the old owner's tick passed the seal
    sent: list = []

    async def record(req, context=None):
        sent.append(list(req.segmentIDs))
        return merr.success()

    persist = c.dc.channels._persist

    async def persist_then_check(ch_: str) -> bool:  # the background step runs meanwhile
        ok = await persist(ch_)
        if c.dc.channels.node_of(ch_) == NODE + 1:
            await c.dc._check_flushable()
        return ok

    c.dc.channels._persist = persist_then_check
    await old.session.stop()  # the owner is gone; a new DataNode takes the channel over
    new = WatchingDataNode()
    new.FlushSegments = record
    c.registry.add_local(roles.DATANODE, NODE + 1, new)
    session = Session(c.kv, roles.DATANODE, "127.0.0.1:2", ttl=c.cfg.session_ttl, server_id=NODE + 1)
    await session.register()
    try:
        await eventually(lambda: c.dc.channels.node_of(ch) == NODE + 1, what="the channel moved")
        await c.dc._check_flushable()
        assert sent == [], "FlushSegments sent to the new owner on the previous owner's tick"
        await c.dc.handle_tt(_tt(ch, 21, 2**62, node=NODE + 1, version=new.watches[ch]))
        assert sent == [[sid]]
    finally:
        await session.stop()


# Idle cost: what a quiet channel's ticks make DataCoord do --------------------------------


def _purges_of(c: Coords, monkeypatch, pchannel: str) -> list[int | None]:
    """Record every purge of `pchannel`'s stream (the purge itself still runs)."""
    seen: list[int | None] = []
    purge = c.dc.stream.purge

    async def recording(ch, **kw):
        if ch == pchannel:
            seen.append(kw.get("before_seq"))
        return await purge(ch, **kw)

    monkeypatch.setattr(c.dc.stream, "purge", recording)
    return seen


async def test_an_idle_channels_ticks_neither_purge_its_stream_nor_rewrite_its_checkpoint_every_pass(
    etcd_endpoint, nats_url, root, tmp_path, monkeypatch
):
    """A tick moves an idle channel's checkpoint past nothing but ticks, and storing every
    advance would be a write per channel per tick (thousands a minute at 1,000 collections).
    The first checkpoint is stored at once; later tick-only advances at most once per
    `TICK_CHECKPOINT_STORE_AFTER` (Milvus' updateChanCPInterval), and a SaveBinlogPaths (data now
    in binlogs) stores the newest checkpoint at once. The pchannel's stream is purged below the
    stored checkpoints only (once they held for `stream_retention_seconds`: 0 here, so each
    stored checkpoint is purged below at the next pass), so a tick-only advance that is not
    stored purges nothing either, and a point is purged below once."""
    cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage", stream_retention_seconds=0.0)
    c = await Coords.start(cfg)
    try:
        coll, (ch, other) = await _watched_collection(c)
        assert pchannel_of(other) != pchannel_of(ch)  # `other` holds no purge of ch's pchannel back
        purges = _purges_of(c, monkeypatch, pchannel_of(ch))
        await c.dc.handle_tt(_tt(ch, 7, 700))
        await c.dc._background_step()
        assert (s := await _stored_checkpoint(c, ch)) is not None and (s.seq, s.timestamp) == (7, 700)
        assert purges == [8]
        for seq in (9, 11):
            await c.dc.handle_tt(_tt(ch, seq, seq * 100))
            await c.dc._background_step()
        assert (s := await _stored_checkpoint(c, ch)) is not None and (s.seq, s.timestamp) == (7, 700)
        assert c.dc.meta.checkpoints[ch].seq == 11  # in memory: GetFlushState reads this one
        assert purges == [8]

        sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
        resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
        merr.check(await c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 20, resp.flush_ts + 1, rows=3)))
        await c.dc.handle_tt(_tt(ch, 22, resp.flush_ts + 2))
        await c.dc._background_step()
        assert (s := await _stored_checkpoint(c, ch)) is not None and s.seq == 22
        assert purges == [8, 23]
        await c.dc._background_step()
        assert purges == [8, 23]  # once
    finally:
        await c.stop()


async def test_the_once_a_second_passes_see_exactly_the_unflushed_segments(coords):
    """Seal policies and flush candidates read `SegmentMeta.unflushed`, not every segment: it
    must follow every way a segment leaves Growing or Sealed (seal, flush, drop)."""
    c = coords
    coll, (ch, other) = await _watched_collection(c)

    def check() -> None:
        for states in ((SegmentState.Growing,), (SegmentState.Sealed,), (SegmentState.Growing, SegmentState.Sealed)):
            want = {s.id for s in c.dc.meta.segments.values() if s.info.state in states}
            assert {s.id for s in c.dc.meta.unflushed(states)} == want, states

    a = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    b = (await c.assign(coll, other, 3)).segIDAssignments[0].segID
    check()
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    assert _segment(c, a).info.state == SegmentState.Sealed
    check()
    merr.check(await c.dc.SaveBinlogPaths(_flushed(a, coll, ch, 20, resp.flush_ts + 1, rows=3)))
    check()
    merr.check(await c.dc.SaveBinlogPaths(_flushed(b, coll, other, 20, resp.flush_ts + 1)))  # empty: removed
    check()
    assert b not in c.dc.meta.segments
    c2 = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    assert {s.id for s in c.dc.meta.unflushed((SegmentState.Growing,))} == {c2}
    merr.check(await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c")))
    await eventually(lambda: not c.dc.meta.by_collection(coll), what="DataCoord's part of the drop")
    check()
    assert c.dc.meta.unflushed((SegmentState.Growing, SegmentState.Sealed)) == []


async def test_the_seal_policy_pass_looks_at_segments_only_once_a_policy_may_be_due(coords, monkeypatch):
    """At 1,000 idle collections a pass over their Growing segments every second was DataCoord's
    main idle cost: a pass runs only once a segment may be full, idle or old enough."""
    c = coords
    coll, (ch, other) = await _collection(c)
    scans: list[tuple] = []
    unflushed = c.dc.meta.unflushed

    def counting(states):
        if SegmentState.Growing in states:
            scans.append(tuple(states))
        return unflushed(states)

    monkeypatch.setattr(c.dc.meta, "unflushed", counting)
    limit = c.dc.segments.max_rows[coll]
    idle = (await c.assign(coll, other, 5)).segIDAssignments[0].segID
    await c.dc.segments.apply_seal_policies()  # the first pass since start looks
    scans.clear()
    for _ in range(3):
        assert await c.dc.segments.apply_seal_policies() == []
    assert scans == []  # nothing can be due before the idle time
    full = (await c.assign(coll, ch, limit)).segIDAssignments[0].segID
    assert [s.id for s in await c.dc.segments.apply_seal_policies()] == [full]
    assert len(scans) == 1
    assert await c.dc.segments.apply_seal_policies() == []
    assert len(scans) == 1
    _later(c, c.cfg.segment_max_idle_time + 1)
    assert [s.id for s in await c.dc.segments.apply_seal_policies()] == [idle]
    assert len(scans) == 2


async def test_the_compaction_policy_asks_nothing_about_a_collection_with_nothing_flushed(coords, monkeypatch):
    """The minute's policy pass asked RootCoord for every collection's TTL (and a timestamp):
    1,000 RPCs a minute at 1,000 idle collections. Only one with Flushed segments can need it."""
    import dataclasses

    c = coords
    coll, (ch, _) = await _watched_collection(c)
    await _collection(c)  # another, with nothing at all
    asked: list[int] = []
    port = c.dc.compactions.port

    async def ttl_of(coll_id: int) -> int:
        asked.append(coll_id)
        return await port.ttl_of(coll_id)

    monkeypatch.setattr(c.dc.compactions, "port", dataclasses.replace(port, ttl_of=ttl_of))
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    assert await c.dc.compactions.apply_policy() == []
    assert asked == []  # a Growing segment alone: nothing to compact
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    merr.check(await c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 20, resp.flush_ts + 1, rows=3)))
    assert await c.dc.compactions.apply_policy() == []  # one small segment: no plan either ...
    assert asked == [coll]  # ... but with a TTL its rows could have expired


async def test_flush_asks_for_a_tick_naming_its_channels(coords, monkeypatch):
    """An idle vchannel gets a tick only every `vchannel_idle_tick_interval` (a minute): a Flush
    (the operator calls DataCoord's directly, not through a Proxy) asks for one past its
    timestamp, naming the collection's vchannels, so its checkpoints pass it at once."""
    c = coords
    coll, chans = await _watched_collection(c)
    asked: list[tuple[list[str], int]] = []
    demand = c.rc.DemandTimeTick

    async def recording(req, context=None):
        asked.append((sorted(req.channels), req.timestamp))
        return await demand(req, context)

    monkeypatch.setattr(c.rc, "DemandTimeTick", recording)
    resp = await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    assert (sorted(chans), resp.flush_ts) in asked


async def test_a_deposed_datacoord_refuses_no_binlogs_from_stale_memory(coords):
    """Chaos (seed 91) left 1,799 acknowledged rows in no binlog this way: a DataCoord paused
    past its lease resumed while its successor had handed a channel to a DataNode under a new
    watch version; before stepping down, the old one refused that node's SaveBinlogPaths from
    its memory ("not watched by node … any more"), and the DataNode dropped the channel and its
    buffers. A refusal makes a DataNode give data up, so only a leader may refuse: a deposed
    DataCoord answers "not ready" and the DataNode asks again (its successor)."""
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))

    async def lost() -> bool:
        return False

    c.dc.leader_check = lost
    newer_watch = await c.dc.SaveBinlogPaths(_flushed(sid, coll, ch, 12, 1200, rows=3, version=2))
    assert newer_watch.code == merr.SERVICE_NOT_READY[0], newer_watch
    unknown_collection = await c.dc.SaveBinlogPaths(_flushed(sid, coll + 1000, ch, 12, 1200, rows=3))
    assert unknown_collection.code == merr.SERVICE_NOT_READY[0], unknown_collection
    assert await _stored_state(c, _segment(c, sid)) == SegmentState.Sealed
    assert await c.kv.get_prefix(keys.binlog_prefix(coll)) == []


async def test_a_channel_its_datanode_no_longer_runs_is_watched_again(coords):
    """A DataNode that gave a channel up (a refused commit) answers FlushSegments with "channel
    not found". DataCoord must hand the channel out again under a new watch version (whose
    owner replays it from the checkpoint); resending FlushSegments to the same node every
    second leaves the sealed segments unflushed for ever (the same chaos run's final flush)."""
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    dn = c.registry._local[roles.DATANODE][NODE]
    version = dn.watches[ch]
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID
    await c.dc.Flush(data_coord_pb2.FlushRequest(collectionID=coll))
    del dn.watches[ch]  # the node dropped the channel

    async def flush_segments(req, context=None):
        if req.channel not in dn.watches:
            return merr.MilvusError(merr.CHANNEL_NOT_FOUND, f"channel not found[channel={req.channel}]").status()
        return merr.success()

    dn.FlushSegments = flush_segments
    await c.dc.handle_tt(_tt(ch, 20, 2**62, version=version))  # its tick passed the seal: flush due
    await eventually(lambda: dn.watches.get(ch, 0) > version, 10, "the channel watched again")
    assert c.dc.channels.versions[ch] == dn.watches[ch]
    assert sid in c.dc.meta.segments


async def test_a_deposed_datacoord_refuses_no_segment_it_does_not_know(coords):
    """The same deposed DataCoord, asked to commit the binlogs of a segment its successor
    opened (its memory has no such segment): "segment not found" would make the DataNode delete
    the files and let the checkpoint pass the rows — lost. It answers "not ready"; so does a
    flush state it would answer from the same memory (a flush it knows nothing of is not done)."""
    c = coords
    coll, (ch, _) = await _watched_collection(c)
    sid = (await c.assign(coll, ch, 3)).segIDAssignments[0].segID

    async def lost() -> bool:
        return False

    c.dc.leader_check = lost
    unknown = await c.dc.SaveBinlogPaths(_flushed(sid + 10_000, coll, ch, 12, 1200, rows=3))
    assert unknown.code == merr.SERVICE_NOT_READY[0], unknown
    state = await c.dc.GetFlushState(
        data_coord_pb2.GetFlushStateRequest(segmentIDs=[sid + 10_000], flush_ts=1, collectionID=coll + 1000)
    )
    assert state.status.code == merr.SERVICE_NOT_READY[0] and not state.flushed, state
