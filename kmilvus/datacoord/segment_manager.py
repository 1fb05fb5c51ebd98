"""Segment allocation and sealing (Milvus' datacoord SegmentManager).

A Proxy asks for row quota per (channel, insert); Growing segments hand it out until they are
full, then new ones open. A sealed segment gets no more quota. Each segment remembers the
largest insert timestamp it handed quota to (`last_expire_time`): DataCoord flushes it only once
the channel's tick has passed both that and its seal time, so every row it was promised has
been consumed by the DataNode.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from pymilvus.grpc_gen import schema_pb2

from kmilvus.config import Config
from kmilvus.datacoord.meta import Segment, SegmentMeta, SegmentState
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.util import typeutil


class SegmentManager:
    def __init__(self, cfg: Config, meta: SegmentMeta, ids, tso):
        self.cfg = cfg
        self.meta = meta
        self.ids = ids  # IDAllocator
        self.tso = tso  # TimestampAllocator
        self.max_rows: dict[int, int] = {}  # collection → rows per segment
        self.clock: Callable[[], float] = time.monotonic
        # No policy can seal anything before this (monotonic): at 1,000 idle collections a pass
        # over their Growing segments every second was DataCoord's main idle cost. Only a grant
        # brings a deadline closer (a full segment: now; else its idle time or its lifetime).
        self._next_pass = 0.0

    def set_schema(self, coll_id: int, schema: schema_pb2.CollectionSchema) -> None:
        row = max(1, typeutil.estimate_row_size(schema))
        self.max_rows[coll_id] = max(1, int(self.cfg.segment_max_size_mb * 1024 * 1024 // row))

    def rows_per_segment(self, coll_id: int, schema: schema_pb2.CollectionSchema) -> int:
        """The collection's row quota per segment (from `schema` if it is not known yet)."""
        if coll_id not in self.max_rows:
            self.set_schema(coll_id, schema)
        return self.max_rows[coll_id]

    async def assign(self, r: data_coord_pb2.SegmentIDRequest) -> list[data_coord_pb2.SegmentIDAssignment]:
        now = self.clock()
        max_rows = self.max_rows.get(r.collectionID, 1_000_000)
        limit = int(max_rows * self.cfg.segment_seal_proportion)
        open_segs = [
            s
            for s in self.meta.by_channel(r.channel_name, (SegmentState.Growing,))
            if s.info.collectionID == r.collectionID and s.info.partitionID == r.partitionID
        ]
        need = r.count
        out: list[data_coord_pb2.SegmentIDAssignment] = []
        for s in sorted(open_segs, key=lambda s: s.id):
            room = limit - s.info.assigned_rows
            if need == 0 or room <= 0:
                continue
            take = min(room, need)
            out.append(self._grant(s, take, r, now))
            need -= take
        while need > 0:
            seg = await self._open(r, max_rows, now)
            take = min(limit, need)
            out.append(self._grant(seg, take, r, now))
            need -= take
        return out

    def _grant(self, s: Segment, n: int, r, now: float) -> data_coord_pb2.SegmentIDAssignment:
        s.info.assigned_rows += n
        s.info.last_expire_time = max(s.info.last_expire_time, r.timestamp)
        s.last_assign = now
        full = s.info.assigned_rows >= self._seal_limit(s)
        due = now if full else min(now + self.cfg.segment_max_idle_time, s.created + self.cfg.segment_max_lifetime)
        self._next_pass = min(self._next_pass, due)
        return data_coord_pb2.SegmentIDAssignment(
            segID=s.id,
            channel_name=r.channel_name,
            count=n,
            collectionID=r.collectionID,
            partitionID=r.partitionID,
            expire_time=r.timestamp,
        )

    async def _open(self, r, max_rows: int, now: float) -> Segment:
        info = internal_pb2.SegmentInfo(
            ID=await self.ids.alloc(),
            collectionID=r.collectionID,
            partitionID=r.partitionID,
            insert_channel=r.channel_name,
            state=SegmentState.Growing,
            max_row_num=max_rows,
            created_timestamp=r.timestamp,
        )
        return await self.meta.add(info, now)

    async def seal(self, segs: list[Segment], ts: int | None = None) -> list[Segment]:
        """Seal Growing segments at `ts` (one transaction); returns those it sealed."""
        async with self.meta.write_lock:
            segs = [s for s in segs if s.info.state == SegmentState.Growing]
            if not segs:
                return []
            ts = ts or await self.tso.alloc()
            for s in segs:
                s.info.state = SegmentState.Sealed
                s.info.seal_timestamp = ts
                self.meta.segments.restate(s)
            await self.meta.save_infos(segs)
            return segs

    async def seal_all_segments(self, coll_id: int, ts: int) -> list[Segment]:
        """SealAllSegments: every Growing segment of the collection (docs/architecture/flush.md)."""
        return await self.seal(self.meta.by_collection(coll_id, (SegmentState.Growing,)), ts)

    async def apply_seal_policies(self) -> list[Segment]:
        """Full, idle and lifetime policies (a pass only once one of them may be due)."""
        now = self.clock()
        if now < self._next_pass:
            return []
        self._next_pass = math.inf  # grants during the pass bring it closer again
        due, nxt = [], math.inf
        idle, lifetime = self.cfg.segment_max_idle_time, self.cfg.segment_max_lifetime
        for s in self.meta.unflushed((SegmentState.Growing,)):
            idle_at = s.last_assign + idle if s.info.assigned_rows else math.inf
            if s.info.assigned_rows >= self._seal_limit(s) or now > idle_at or now > s.created + lifetime:
                due.append(s)
            else:
                nxt = min(nxt, idle_at, s.created + lifetime)
        try:
            sealed = await self.seal(due)
        except BaseException:
            self._next_pass = 0.0
            raise
        self._next_pass = min(self._next_pass, nxt)
        return sealed

    def _seal_limit(self, s: Segment) -> int:
        """Rows after which the full policy seals `s`."""
        return int(s.info.max_row_num * self.cfg.segment_seal_proportion)

    async def seal_recovered(self) -> None:
        """After a restart the quota handed out by the previous instance is unknown: seal what
        was Growing so no segment can be over-filled."""
        await self.seal(self.meta.unflushed((SegmentState.Growing,)))
