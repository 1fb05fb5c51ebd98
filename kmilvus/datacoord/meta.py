"""DataCoord's segment meta: an in-memory index over etcd, written only in transactions.

`SaveBinlogPaths` commits a segment's new binlogs, stats logs, delta logs, its DDL binlog meta,
positions, row count, state and the channel checkpoint in ONE transaction, guarded on the segment still existing (a
dropped collection's late flush is refused, never half-applied). Row counts are derived from the
set of binlogs, so a retried SaveBinlogPaths changes nothing.

A channel's deletes are committed the same way, but to no segment: as L0 delta logs of the
channel (Milvus' L0 segments, `save_l0`), with the position of the last Delete they cover. A
delete then needs no knowledge of which segments hold its key — segments imported or compacted
after it was consumed included: readers and compaction apply a channel's L0 deletes to every
segment of the channel (and partition) by primary key and timestamp.

Writers of segment state (seal, SaveBinlogPaths) hold `write_lock` across their read, etcd
transaction and in-memory update, and SaveBinlogPaths updates only the fields it owns on the
live SegmentInfo: quota grants (`assigned_rows`, `last_expire_time`) happen in memory while a
transaction is in flight, and a seal must never be undone by a binlog save that started before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymilvus.grpc_gen import common_pb2

from kmilvus.datacoord.segment_feed import SegmentFeed
from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.util import merr
from kmilvus.util.constants import ALL_PARTITIONS

SegmentState = common_pb2.SegmentState
UNFLUSHED = frozenset((SegmentState.Growing, SegmentState.Sealed))


@dataclass
class Segment:
    info: internal_pb2.SegmentInfo
    binlogs: dict[int, internal_pb2.Binlog] = field(default_factory=dict)
    ddl_binlogs: dict[int, internal_pb2.DDLBinlogMeta] = field(default_factory=dict)
    deltalogs: dict[int, internal_pb2.Binlog] = field(default_factory=dict)
    statslogs: dict[int, internal_pb2.Binlog] = field(default_factory=dict)
    last_assign: float = 0.0  # monotonic time of the last quota handed out
    created: float = 0.0  # monotonic time the segment was opened here
    flush_sent_at: float = 0.0  # when FlushSegments was last sent (0: not yet)

    @property
    def id(self) -> int:
        return self.info.ID


class Segments(dict[int, Segment]):
    """Segments by ID, also indexed by insert channel and by collection: DataCoord looks up a
    channel's segments on every tick of every channel, and a collection's on every policy pass
    over every collection, which must not cost a scan of all segments (idle work would grow
    with channels × segments). Compaction and import write the mapping directly, so the indexes
    follow every write; a segment's channel and collection never change in place.

    `unflushed` holds the Growing and the Sealed segments apart: the once-a-second passes (seal
    policies, flush candidates) read those, not every Flushed segment. A seal moves a segment
    between them (`restate`); a segment that leaves both (SaveBinlogPaths, compaction's swap)
    never comes back, so `SegmentMeta.unflushed` drops the ones that left as it reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.of_channel: dict[str, dict[int, Segment]] = {}
        self.of_collection: dict[int, dict[int, Segment]] = {}
        self.unflushed: dict[int, dict[int, Segment]] = {state: {} for state in UNFLUSHED}

    def __setitem__(self, seg_id: int, seg: Segment) -> None:
        old = self.get(seg_id)
        if old is not None:
            self._unindex(seg_id, old)
        super().__setitem__(seg_id, seg)
        self.of_channel.setdefault(seg.info.insert_channel, {})[seg_id] = seg
        self.of_collection.setdefault(seg.info.collectionID, {})[seg_id] = seg
        self.restate(seg)

    def __delitem__(self, seg_id: int) -> None:
        seg = self[seg_id]
        super().__delitem__(seg_id)
        self._unindex(seg_id, seg)

    def pop(self, seg_id: int, *default):
        if seg_id not in self:
            if default:
                return default[0]
            raise KeyError(seg_id)
        seg = self[seg_id]
        del self[seg_id]
        return seg

    def restate(self, seg: Segment) -> None:
        """File `seg` under its state now (after a change in place, e.g. a seal)."""
        self._unfile(seg.id)
        if seg.info.state in UNFLUSHED:
            self.unflushed[seg.info.state][seg.id] = seg

    def _unfile(self, seg_id: int) -> None:
        for group in self.unflushed.values():
            group.pop(seg_id, None)

    def _unindex(self, seg_id: int, seg: Segment) -> None:
        self._unfile(seg_id)
        # By channel (str) and by collection (int).
        indexes: tuple[tuple[dict[Any, dict[int, Segment]], str | int], ...] = (
            (self.of_channel, seg.info.insert_channel),
            (self.of_collection, seg.info.collectionID),
        )
        for index, key in indexes:
            group = index.get(key)
            if group is not None:
                group.pop(seg_id, None)
                if not group:
                    del index[key]

    def _unsupported(self, *_a, **_k):
        raise TypeError("Segments: write segments one at a time (the channel index follows them)")

    update = setdefault = popitem = clear = __ior__ = _unsupported


class SegmentMeta:
    def __init__(self, kv: EtcdKV):
        self.kv = kv
        self.segments = Segments()
        self.checkpoints: dict[str, internal_pb2.MsgPosition] = {}
        self.l0: dict[int, dict[int, internal_pb2.L0Deltalog]] = {}  # collection → log ID → L0 delta log
        self.l0_positions: dict[str, internal_pb2.MsgPosition] = {}  # vchannel → last Delete in its L0 logs
        # channel → seq of its checkpoint as stored in etcd (where a new owner resumes): never
        # moves back, and the stream is trimmed below it (datacoord.stream_trimmer)
        self.stored_checkpoints: dict[str, int] = {}
        self.changed = asyncio.Condition()
        self.write_lock = asyncio.Lock()
        self.feed = SegmentFeed()  # segment changes pushed to the operator

    async def load(self) -> None:
        for _, raw in await self.kv.get_prefix(keys.segment_prefix()):
            info = internal_pb2.SegmentInfo.FromString(raw)
            self.segments[info.ID] = Segment(info)
        for key, raw in await self.kv.get_prefix("datacoord-meta/binlog/"):
            _, _, _coll, seg, log_id = key.split("/")
            if (s := self.segments.get(int(seg))) is not None:
                s.binlogs[int(log_id)] = internal_pb2.Binlog.FromString(raw)
        for prefix, attr in (("datacoord-meta/deltalog/", "deltalogs"), ("datacoord-meta/statslog/", "statslogs")):
            for key, raw in await self.kv.get_prefix(prefix):
                _, _, _coll, seg, log_id = key.split("/")
                if (s := self.segments.get(int(seg))) is not None:
                    getattr(s, attr)[int(log_id)] = internal_pb2.Binlog.FromString(raw)
        for key, raw in await self.kv.get_prefix("datacoord-meta/ddl-binlog/"):
            _, _, _coll, seg, idx = key.split("/")
            if (s := self.segments.get(int(seg))) is not None:
                s.ddl_binlogs[int(idx)] = internal_pb2.DDLBinlogMeta.FromString(raw)
        for key, raw in await self.kv.get_prefix("datacoord-meta/channel-cp/"):
            ch = key.rsplit("/", 1)[1]
            self.checkpoints[ch] = internal_pb2.MsgPosition.FromString(raw)
            self.stored_checkpoints[ch] = self.checkpoints[ch].seq
        for key, raw in await self.kv.get_prefix(keys.l0_deltalog_prefix()):
            _, _, coll, log_id = key.split("/")
            self.l0.setdefault(int(coll), {})[int(log_id)] = internal_pb2.L0Deltalog.FromString(raw)
        for key, raw in await self.kv.get_prefix(keys.L0_POSITION_PREFIX):
            self.l0_positions[key[len(keys.L0_POSITION_PREFIX) :]] = internal_pb2.MsgPosition.FromString(raw)

    async def notify(self, *changed: Segment, removed: bool = False) -> None:
        """Wake waiters on the meta; `changed` segments also go to the change feed."""
        self.feed.publish((s.info for s in changed), removed=removed)
        async with self.changed:
            self.changed.notify_all()

    def by_collection(self, coll_id: int, states=None) -> list[Segment]:
        segs = self.segments.of_collection.get(coll_id, {}).values()
        return [s for s in segs if states is None or s.info.state in states]

    def unflushed(self, states) -> list[Segment]:
        """Segments now in `states` (Growing, Sealed or both), without a pass over every segment."""
        out: list[Segment] = []
        for state in states:
            group = self.segments.unflushed[state]
            for sid in [sid for sid, s in group.items() if s.info.state != state]:
                self.segments.restate(group[sid])
            out += group.values()
        return out

    def by_channel(self, channel: str, states=None) -> list[Segment]:
        segs = self.segments.of_channel.get(channel, {}).values()
        return [s for s in segs if states is None or s.info.state in states]

    async def add(self, info: internal_pb2.SegmentInfo, now: float) -> Segment:
        await self.kv.put(keys.segment_key(info.collectionID, info.partitionID, info.ID), info.SerializeToString())
        seg = Segment(info, created=now, last_assign=now)
        self.segments[info.ID] = seg
        self.feed.publish([info])
        return seg

    async def save_infos(self, segs: list[Segment]) -> None:
        """Persist several segments' info in one transaction (e.g. SealAllSegments); the caller
        holds `write_lock` from its change in memory to here."""
        if segs:
            await self.kv.txn(
                [
                    Op.put(keys.segment_key(s.info.collectionID, s.info.partitionID, s.id), s.info.SerializeToString())
                    for s in segs
                ]
            )
            await self.notify(*segs)

    async def save_binlog_paths(self, req: internal_pb2.SaveBinlogPathsRequest, guard: Cmp | None = None) -> Segment:
        """`guard`: a compare the commit also needs (the sender's channel watch still current)."""
        async with self.write_lock:
            return await self._save_binlog_paths(req, guard)

    def l0_of(self, coll_id: int, channel: str, partition: int | None = None) -> list[internal_pb2.L0Deltalog]:
        """The channel's L0 delta logs (log-ID order); with `partition`, those applying to it
        (its own and the every-partition ones)."""
        logs = self.l0.get(coll_id, {})
        return [
            d
            for _, d in sorted(logs.items())
            if d.channel == channel and (partition is None or d.partitionID in (partition, ALL_PARTITIONS))
        ]

    async def save_l0(
        self,
        req: internal_pb2.SaveBinlogPathsRequest,
        guard: Cmp | None = None,
        keep: Callable[[internal_pb2.L0Deltalog], bool] = lambda d: True,
    ) -> list[internal_pb2.L0Deltalog]:
        """Commit a channel's L0 delta logs, the position of the last Delete they cover and the
        channel checkpoint in one transaction (guarded like a segment's save). Logs `keep`
        refuses (checked under the lock `drop_partition_meta` takes too) are not committed:
        they are returned, for their files to be deleted."""
        async with self.write_lock:
            coll, ch = req.collectionID, req.channel
            refused = [d for d in req.l0_deltalogs if not keep(d)]
            logs = [d for d in req.l0_deltalogs if keep(d)]
            ops = [Op.put(keys.l0_deltalog_key(coll, d.binlog.logID), d.SerializeToString()) for d in logs]
            cur = self.l0_positions.get(ch)
            advance = req.HasField("l0_position") and (cur is None or req.l0_position.seq > cur.seq)
            if advance:
                ops.append(Op.put(keys.l0_position_key(ch), req.l0_position.SerializeToString()))
            cp = self._checkpoint_to_store(req)
            if cp is not None:
                ops.append(Op.put(keys.channel_checkpoint_key(cp.channel_name), cp.SerializeToString()))
            if not await self.kv.txn(ops, [guard] if guard is not None else []):
                raise merr.MilvusError(merr.CHANNEL_NOT_FOUND, f"channel {ch} moved while its deletes were being saved")
            for d in logs:
                self.l0.setdefault(coll, {})[d.binlog.logID] = d
            if advance:
                self.l0_positions[ch] = req.l0_position
            if cp is not None:
                self._advance_checkpoint(cp)
                self._stored(cp)
            await self.notify()
            return refused

    def compacted_into(self, seg_id: int) -> Segment | None:
        """The live segment a compaction moved `seg_id`'s rows to (following chained compactions)."""
        seen = set()
        while seg_id not in seen:
            seen.add(seg_id)
            nxt = next((s for s in self.segments.values() if seg_id in s.info.compaction_from), None)
            if nxt is None:
                return None
            if nxt.info.state not in (SegmentState.Dropped, SegmentState.NotExist):
                return nxt
            seg_id = nxt.id
        return None

    async def _save_binlog_paths(self, req: internal_pb2.SaveBinlogPathsRequest, guard: Cmp | None) -> Segment:
        seg = self.segments.get(req.segmentID)
        if seg is None or seg.info.state in (SegmentState.Dropped, SegmentState.NotExist):
            # Deletes for a segment compacted meanwhile apply to the segment that now holds its rows.
            target = self.compacted_into(req.segmentID) if req.deltalogs and not req.binlogs else None
            if target is None:
                raise merr.MilvusError(merr.SEGMENT_NOT_FOUND, f"segment not found[segment={req.segmentID}]")
            seg = target
        info = internal_pb2.SegmentInfo()
        info.CopyFrom(seg.info)
        binlogs = dict(seg.binlogs)
        for b in req.binlogs:
            binlogs[b.logID] = b
        ddl = dict(seg.ddl_binlogs)
        ops: list[Op] = []
        for b in req.binlogs:
            ops.append(Op.put(keys.binlog_key(info.collectionID, info.ID, b.logID), b.SerializeToString()))
        deltalogs, statslogs = dict(seg.deltalogs), dict(seg.statslogs)
        for b in req.deltalogs:
            deltalogs[b.logID] = b
            ops.append(Op.put(keys.deltalog_key(info.collectionID, info.ID, b.logID), b.SerializeToString()))
        for b in req.statslogs:
            statslogs[b.logID] = b
            ops.append(Op.put(keys.statslog_key(info.collectionID, info.ID, b.logID), b.SerializeToString()))
        info.deltalog_count = len(deltalogs)
        if req.HasField("delta_position") and req.delta_position.seq > info.delta_position.seq:
            info.delta_position.CopyFrom(req.delta_position)
        for i, d in enumerate(req.ddl_binlog_metas):
            idx = _idx(d.ddl_binlog_path) or i
            ddl[idx] = d
            ops.append(Op.put(keys.ddl_binlog_key(info.collectionID, info.ID, idx), d.SerializeToString()))
        info.num_of_rows = sum(b.entries_num for b in binlogs.values())
        info.binlog_count = len(binlogs)
        info.binlog_size = sum(b.log_size for b in binlogs.values())
        if req.dml_position.HasField("end_position"):
            info.dml_position.CopyFrom(req.dml_position.end_position)
        if req.dml_position.HasField("start_position") and not info.HasField("start_position"):
            info.start_position.CopyFrom(req.dml_position.start_position)
        if req.flushed:
            info.state = SegmentState.Flushed
            info.flushed_timestamp = max(info.seal_timestamp, info.dml_position.timestamp)
        seg_key = keys.segment_key(info.collectionID, info.partitionID, info.ID)
        ops.append(Op.put(seg_key, info.SerializeToString()))
        cp = self._checkpoint_to_store(req)
        if cp is not None:
            ops.append(Op.put(keys.channel_checkpoint_key(cp.channel_name), cp.SerializeToString()))
        if not await self.kv.txn(ops, [Cmp.exists(seg_key)] + ([guard] if guard is not None else [])):
            if guard is not None and await self.kv.get(seg_key) is not None:
                raise merr.MilvusError(
                    merr.CHANNEL_NOT_FOUND, f"channel {req.channel} moved while segment {req.segmentID} was being saved"
                )
            raise merr.MilvusError(merr.SEGMENT_NOT_FOUND, f"segment not found[segment={req.segmentID}]")
        live = seg.info  # may have been granted quota meanwhile: keep that, set what this save owns
        live.num_of_rows, live.binlog_count, live.binlog_size = info.num_of_rows, info.binlog_count, info.binlog_size
        live.deltalog_count = info.deltalog_count
        if info.HasField("delta_position"):
            live.delta_position.CopyFrom(info.delta_position)
        seg.deltalogs, seg.statslogs = deltalogs, statslogs
        if info.HasField("dml_position"):
            live.dml_position.CopyFrom(info.dml_position)
        if info.HasField("start_position"):
            live.start_position.CopyFrom(info.start_position)
        if req.flushed:
            live.state, live.flushed_timestamp = info.state, info.flushed_timestamp
        seg.binlogs, seg.ddl_binlogs = binlogs, ddl
        if cp is not None:
            self._advance_checkpoint(cp)
            self._stored(cp)
        await self.notify(seg)
        return seg

    def _checkpoint_to_store(self, req: internal_pb2.SaveBinlogPathsRequest) -> internal_pb2.MsgPosition | None:
        """The checkpoint a save commits: the request's, never behind the one in memory (a tick
        may have moved it, and stored it, after the DataNode took this one: the stream may be
        trimmed up to it)."""
        if not (req.HasField("checkpoint") and req.checkpoint.seq):
            return None
        cur = self.checkpoints.get(req.checkpoint.channel_name)
        return cur if cur is not None and cur.seq > req.checkpoint.seq else req.checkpoint

    def _advance_checkpoint(self, cp: internal_pb2.MsgPosition) -> bool:
        cur = self.checkpoints.get(cp.channel_name)
        if cur is None or cp.seq > cur.seq or (cp.seq == cur.seq and cp.timestamp > cur.timestamp):
            self.checkpoints[cp.channel_name] = cp
            return True
        return False

    def update_checkpoint(self, cp: internal_pb2.MsgPosition) -> bool:
        """In memory; `persist_checkpoints` writes them out at a bounded rate."""
        return self._advance_checkpoint(cp)

    async def persist_checkpoints(self, channels: list[str]) -> None:
        """Store the channels' checkpoints, each only while its channel's watch record exists:
        a store racing DropCollection must not write a dropped channel's checkpoint back after
        the drop removed it (one transaction; per channel when one of them is gone)."""
        cps = [self.checkpoints[ch] for ch in channels if ch in self.checkpoints]
        if not cps:
            return

        def put(cp: internal_pb2.MsgPosition) -> Op:
            return Op.put(keys.channel_checkpoint_key(cp.channel_name), cp.SerializeToString())

        def watched(cp: internal_pb2.MsgPosition) -> Cmp:
            return Cmp.exists(keys.channel_watch_key(cp.channel_name))

        if await self.kv.txn([put(cp) for cp in cps], [watched(cp) for cp in cps]):
            stored = cps
        else:
            stored = [cp for cp in cps if await self.kv.txn([put(cp)], [watched(cp)])]
        for cp in stored:
            self._stored(cp)

    def _stored(self, cp: internal_pb2.MsgPosition) -> None:
        self.stored_checkpoints[cp.channel_name] = max(cp.seq, self.stored_checkpoints.get(cp.channel_name, 0))

    async def drop_collection_meta(self, coll_id: int, vchannels: list[str]) -> None:
        """Every key DataCoord holds for the collection, in one transaction — under `write_lock`,
        as every writer of segment state: a seal in flight then lands before it (and goes with
        it), never after it (its key back in etcd, the segment gone from memory)."""
        async with self.write_lock:
            await self._drop_collection_meta(coll_id, vchannels)

    async def _drop_collection_meta(self, coll_id: int, vchannels: list[str]) -> None:
        ops = [
            Op.delete_prefix(keys.segment_prefix(coll_id)),
            Op.delete_prefix(keys.field_index_prefix(coll_id)),
            Op.delete_prefix(keys.segment_index_prefix(coll_id)),
        ]
        ops += [Op.delete_prefix(p) for p in keys.segment_log_prefixes(coll_id)]
        ops.append(Op.delete_prefix(keys.l0_deltalog_prefix(coll_id)))
        ops.append(Op.delete_prefix(keys.dropped_partition_prefix(coll_id)))
        for ch in vchannels:
            ops += [
                Op.delete(keys.channel_checkpoint_key(ch)),
                Op.delete(keys.channel_watch_key(ch)),
                Op.delete(keys.l0_position_key(ch)),
            ]
        await self.kv.txn(ops)
        gone = self.by_collection(coll_id)
        for s in gone:
            del self.segments[s.id]
        self.l0.pop(coll_id, None)
        for ch in vchannels:
            self.checkpoints.pop(ch, None)
            self.l0_positions.pop(ch, None)
            self.stored_checkpoints.pop(ch, None)
        await self.notify(*gone, removed=True)

    async def drop_partition_meta(self, coll_id: int, part_id: int, max_ops: int = 128) -> list[Segment]:
        """Every segment key of one partition, its insert, delta and stats log keys — the
        segments as etcd lists them (memory may miss one) — and its L0 delta logs. In one
        transaction when it fits in `max_ops` (etcd's --max-txn-ops); else the log keys go in
        several and the segment keys last, so an interrupted drop is found again and finished by
        its retry. Under the write lock: an L0 save checks the dropped partitions under it."""
        async with self.write_lock:
            prefix = keys.partition_segment_prefix(coll_id, part_id)
            seg_ids = {int(k.rsplit("/", 1)[1]) for k, _ in await self.kv.get_prefix(prefix, keys_only=True)}
            gone = [s for s in self.by_collection(coll_id) if s.info.partitionID == part_id]
            seg_ids.update(s.id for s in gone)
            l0 = [
                k
                for k, raw in await self.kv.get_prefix(keys.l0_deltalog_prefix(coll_id))
                if internal_pb2.L0Deltalog.FromString(raw).partitionID == part_id
            ]
            await self._delete_logs_then(coll_id, seg_ids, l0, [Op.delete_prefix(prefix)], max_ops)
            for s in gone:
                self.segments.pop(s.id, None)
            mem = self.l0.get(coll_id, {})
            for i in [i for i, d in mem.items() if d.partitionID == part_id]:
                del mem[i]
        await self.notify(*gone, removed=True)
        return gone

    async def drop_segments_meta(
        self, coll_id: int, segs: list[Segment], l0_ids: list[int], max_ops: int = 128
    ) -> None:
        """Every key of these segments (their insert, delta and stats log keys, then the segment
        keys) and of these L0 delta logs: TruncateCollection's removal of the rows before its
        timestamp. In as few transactions as `max_ops` allows, segment keys last: an interrupted
        drop leaves segments that are found and dropped again by its retry."""
        async with self.write_lock:
            l0 = [keys.l0_deltalog_key(coll_id, i) for i in l0_ids]
            last = [Op.delete(keys.segment_key(coll_id, s.info.partitionID, s.id)) for s in segs]
            await self._delete_logs_then(coll_id, {s.id for s in segs}, l0, last, max_ops)
            for s in segs:
                self.segments.pop(s.id, None)
            mem = self.l0.get(coll_id, {})
            for i in l0_ids:
                mem.pop(i, None)
        await self.notify(*segs, removed=True)

    async def _delete_logs_then(
        self, coll_id: int, seg_ids: set[int], l0_keys: list[str], last: list[Op], max_ops: int
    ) -> None:
        """Delete the segments' insert, delta and stats log keys and the L0 delta log keys, then
        `last`, in order, `max_ops` (etcd's --max-txn-ops) at most per transaction. The DDL
        binlog meta stays: DDL belongs to the collection, not to the segment that carried it."""
        ops = [
            Op.delete_prefix(p)
            for sid in sorted(seg_ids)
            for p in (
                keys.binlog_prefix(coll_id, sid),
                keys.deltalog_prefix(coll_id, sid),
                keys.statslog_prefix(coll_id, sid),
            )
        ]
        ops += [Op.delete(k) for k in l0_keys]
        ops += last
        step = max(1, max_ops)
        while len(ops) > step:
            await self.kv.txn(ops[:step])
            ops = ops[step:]
        await self.kv.txn(ops)

    async def remove_segment(self, seg: Segment) -> None:
        i = seg.info
        await self.kv.txn(
            [Op.delete(keys.segment_key(i.collectionID, i.partitionID, i.ID))]
            + [Op.delete_prefix(p) for p in keys.segment_log_prefixes(i.collectionID, i.ID)]
        )
        self.segments.pop(i.ID, None)
        await self.notify(seg, removed=True)


def _idx(path: str) -> int:
    tail = path.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 0
