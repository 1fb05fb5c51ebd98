"""Compaction: small flushed segments → fewer, larger ones, through a Spark job.

    trigger (Compact RPC or the policy) → plans per (partition, channel): sources packed up to
    the target size → CompactionJob (Executing) in etcd → SparkApplication merges each plan's
    sources into its targets (every row not deleted by the sources' delta logs or the channel's
    L0 delta logs exactly once) and writes a manifest → per plan, ONE etcd
    transaction swaps: targets Flushed (with `compaction_from`), sources Dropped, plan Completed
    → garbage collection deletes the sources' binlog FILES, then the meta that pointed at them.

Deletes committed while the job runs are not lost: a channel's new L0 delta logs apply to the
targets as to any segment of the channel (they keep their rows' timestamps), and a source's
delta logs the job was not planned with are carried over to the targets in the swap (as
Milvus does; the files stay where they are, referenced by the targets). The swap reads the
sources under the meta's write lock, which every SaveBinlogPaths holds, and is guarded on each
source's stored meta being exactly what it read and on the job key still existing (a dropped
collection has none), so it applies whole or not at all. Sources are reserved while a plan runs
(no second compaction takes them). Dropped segments found at start (a coordinator that died
between swap and collection) are collected then.

Policy (`auto_compaction`): a (partition, channel) with at least `compaction_min_segments`
flushed segments smaller than `compaction_small_proportion` × the target size is compacted.
With a collection TTL (`collection.ttl.seconds`), a segment holding expired rows is compacted
whatever its size and count, and the job drops those rows (Milvus' expiry compaction).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.datacoord.job_lifecycle import JobLifecycle, JobPort, b64, manifest_binlogs
from kmilvus.datacoord.job_scheduler import JobScheduler
from kmilvus.datacoord.meta import Segment, SegmentMeta, SegmentState
from kmilvus.datacoord.remover import Decide
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, FencedError, Op, Snapshot
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.spark import application
from kmilvus.storage import paths
from kmilvus.util import merr, typeutil
from kmilvus.util import ttl as collection_ttl
from kmilvus.util.failpoint import afailpoint

log = get_logger(__name__)
CS = common_pb2.CompactionState
TS = common_pb2.CompactionTaskState
PLAN_DONE = (
    TS.CompactionTaskStateCompleted,
    TS.CompactionTaskStateFailed,
    TS.CompactionTaskStateTimeout,
    TS.CompactionTaskStateCleaned,
)
MB = 1024 * 1024


def has_expired(s: Segment, expire_before: int) -> bool:
    """Whether the segment holds a row inserted before the TTL's cut-off (its oldest binlog)."""
    return bool(expire_before) and any(0 < b.timestamp_from < expire_before for b in s.binlogs.values())


class CompactionManager(JobLifecycle[data_coord_pb2.CompactionJob]):
    kind = "compact"
    message = data_coord_pb2.CompactionJob
    id_field = "compactionID"
    key_of = staticmethod(keys.compaction_job_key)
    prefix_of = staticmethod(keys.compaction_job_prefix)

    def __init__(self, port: JobPort, scheduler: JobScheduler):
        super().__init__(port, scheduler)
        self.busy: set[int] = set()  # source segments of running plans
        self._gc_lock = asyncio.Lock()

    def finished(self, job: data_coord_pb2.CompactionJob) -> bool:
        return bool(job.state == CS.Completed)

    def on_resumed(self, job: data_coord_pb2.CompactionJob) -> None:
        for p in job.plans:
            if p.state not in PLAN_DONE:
                self.busy.update(p.sources)

    def on_finished(self, job: data_coord_pb2.CompactionJob) -> None:
        for p in job.plans:
            self.busy.difference_update(p.sources)

    def running(self, coll: int) -> bool:
        return any(j.state != CS.Completed for j in self.of_collection(coll))

    # ------------------------------------------------------------------------ planning
    def schema_of(self, coll: int) -> schema_pb2.CollectionSchema | None:
        return self.port.schema_of(coll)

    def target_rows(self, coll: int, target_size: int = 0) -> int:
        schema = self.schema_of(coll)
        row = typeutil.estimate_row_size(schema) if schema is not None else 1024
        size = target_size or (self.cfg.compaction_target_size_mb or self.cfg.segment_max_size_mb) * MB
        return max(1, int(size // max(1, row)))

    def plan(
        self, coll: int, *, manual: bool, segment_ids=(), target_size: int = 0, expire_before: int = 0
    ) -> tuple[list[dict], int]:
        """Plans for `coll` (sources by ID, target count) and the rows per target. With a TTL,
        a segment holding expired rows is compacted whatever its size, alone if need be."""
        cfg = self.cfg
        target = self.target_rows(coll, target_size)
        small = target if manual else max(1, int(target * cfg.compaction_small_proportion))
        wanted = set(segment_ids)
        flushed = self.port.meta.by_collection(coll, (SegmentState.Flushed,))
        expired = {s.id for s in flushed if has_expired(s, expire_before)}
        cands = [
            s
            for s in flushed
            if s.id not in self.busy
            and (s.info.num_of_rows < small or s.id in expired)
            and (not wanted or s.id in wanted)
        ]
        groups: dict[tuple[int, str], list[Segment]] = {}
        for s in sorted(cands, key=lambda s: s.id):
            groups.setdefault((s.info.partitionID, s.info.insert_channel), []).append(s)
        plans = []
        budget = max(8, cfg.etcd_max_txn_ops - 8)
        for (part, channel), segs in sorted(groups.items()):
            if not manual and len(segs) < cfg.compaction_min_segments and not expired.intersection(x.id for x in segs):
                continue
            cur: list[Segment] = []
            rows = ops = 0
            for s in segs:
                s_ops = 1 + len(s.ddl_binlogs) + 1  # Dropped put, moved DDL metas, GC
                if cur and (
                    rows + s.info.num_of_rows > target
                    or len(cur) >= cfg.compaction_max_sources
                    or ops + s_ops > budget // 2
                ):
                    plans.append(self._plan_of(part, channel, cur, rows, target))
                    cur, rows, ops = [], 0, 0
                cur.append(s)
                rows += s.info.num_of_rows
                ops += s_ops
            if cur:
                plans.append(self._plan_of(part, channel, cur, rows, target))
        return [p for p in plans if len(p["sources"]) >= 2 or expired.intersection(p["sources"])], target

    async def expire_before(self, coll: int) -> int:
        """Rows inserted before this hybrid timestamp have expired (0: the collection has no TTL)."""
        ttl = await self.port.ttl_of(coll)
        return collection_ttl.expire_before(await self.port.alloc_ts(), ttl) if ttl else 0

    @staticmethod
    def _plan_of(part: int, channel: str, segs: list[Segment], rows: int, target: int) -> dict:
        return {
            "partition": part,
            "channel": channel,
            "sources": [s.id for s in segs],
            "rows": rows,
            "bytes": sum(s.info.binlog_size for s in segs),
            "targets": max(1, math.ceil(rows / target)),
        }

    # ------------------------------------------------------------------------ trigger
    async def trigger(
        self, coll: int, *, manual: bool, segment_ids=(), target_size: int = 0
    ) -> data_coord_pb2.CompactionJob:
        port = self.port
        if port.dropping(coll) or not port.channels_of(coll):
            raise merr.collection_not_found(coll)
        cutoff = await self.expire_before(coll)
        if port.dropping(coll):
            raise merr.collection_not_found(coll)
        plans, target = self.plan(
            coll, manual=manual, segment_ids=segment_ids, target_size=target_size, expire_before=cutoff
        )
        for p in plans:  # reserve before the first await
            self.busy.update(p["sources"])
        try:
            cid = await port.alloc_ids(1 + len(plans))
            job = data_coord_pb2.CompactionJob(
                compactionID=cid,
                collectionID=coll,
                manual=manual,
                create_ts=int(time.time()),
                state=CS.Executing if plans else CS.Completed,
                target_rows=target,
                complete_ts=0 if plans else int(time.time()),
            )
            for i, p in enumerate(plans):
                job.plans.add(
                    planID=cid + 1 + i,
                    partitionID=p["partition"],
                    channel=p["channel"],
                    sources=p["sources"],
                    state=TS.CompactionTaskStateExecuting,
                    rows=p["rows"],
                    bytes=p["bytes"],
                )
            job.rows = sum(p["rows"] for p in plans)
            await self.submit(job)
        except BaseException:
            for p in plans:
                self.busy.difference_update(p["sources"])
            raise
        log.info(
            "compaction triggered",
            compaction=cid,
            collection=coll,
            manual=manual,
            plans=len(plans),
            sources=sum(len(p["sources"]) for p in plans),
            rows=job.rows,
        )
        return job

    # ------------------------------------------------------------------------ prepare
    async def prepare(self, job: data_coord_pb2.CompactionJob) -> dict:
        port, coll = self.port, job.collectionID
        schema = await port.current_schema(coll)  # with every field added since the watch
        if schema is None:
            raise merr.collection_not_found(coll)
        plans = []
        total = 0
        for p in job.plans:
            sources = []
            for sid in p.sources:
                s = port.meta.segments.get(sid)
                if s is None or s.info.state != SegmentState.Flushed:
                    raise merr.MilvusError(merr.COMPACTION_FAILED, f"segment {sid} is no longer flushed")
                binlogs: list[dict[str, Any]] = [
                    {"key": b.log_path, "rows": int(b.entries_num), "size": int(b.log_size)}
                    for _, b in sorted(s.binlogs.items())
                ]
                total += sum(b["rows"] for b in binlogs)
                deltalogs = [{"key": b.log_path, "rows": int(b.entries_num)} for _, b in sorted(s.deltalogs.items())]
                sources.append({"segment_id": sid, "binlogs": binlogs, "deltalogs": deltalogs})
            n_targets = max(1, math.ceil(p.rows / max(1, job.target_rows)))
            first = await port.alloc_ids(n_targets)
            p.targets[:] = list(range(first, first + n_targets))
            l0 = port.meta.l0_of(coll, p.channel, p.partitionID)
            plans.append(
                {
                    "plan_id": p.planID,
                    "partition_id": p.partitionID,
                    "channel": p.channel,
                    "target_ids": list(p.targets),
                    "sources": sources,
                    "l0_deltalogs": [{"key": d.binlog.log_path, "rows": int(d.binlog.entries_num)} for d in l0],
                }
            )
        reserve = max(1, total)
        spec = {
            "kind": "compact",
            "version": 1,
            "job_id": job.compactionID,
            "collection_id": coll,
            "schema": b64(schema.SerializeToString()),
            "storage_uri": self.storage_uri(),
            "manifest_key": self.manifest_key(job),
            "plans": plans,
            "log_id_start": await port.alloc_ids(reserve),
            "log_id_count": reserve,
            "expire_before": await self.expire_before(coll),
        }
        job.spec = json.dumps(spec, sort_keys=True)
        job.app_name = application.app_name("compact", coll, job.compactionID)
        await self.save(job)
        return spec

    # ------------------------------------------------------------------------ the swap
    async def commit(self, job: data_coord_pb2.CompactionJob, manifest: dict) -> None:
        """Swap each plan (a failed plan leaves its sources as they were), then collect."""
        await afailpoint("datacoord.compaction.before_swap")  # the job's files are written
        coll = job.collectionID
        by_plan = {int(p["plan_id"]): p for p in manifest["plans"]}
        collected: list[Segment] = []
        for plan in job.plans:
            if plan.state in PLAN_DONE:
                continue
            out = by_plan.get(plan.planID)
            try:
                if out is None:
                    raise merr.MilvusError(merr.COMPACTION_FAILED, f"plan {plan.planID} is missing from the manifest")
                sources = await self._swap(job, plan, out)
                collected += sources
            except FencedError:
                raise  # not the leader: the plan stays as etcd has it, for the successor
            except merr.MilvusError as exc:
                plan.state = TS.CompactionTaskStateFailed
                plan.reason = exc.message
                await self._remove_targets(job, plan)
                log.warning("compaction plan failed", compaction=job.compactionID, plan=plan.planID, reason=exc.message)
        job.state = CS.Completed
        job.complete_ts = int(time.time())
        job.progress = json.dumps({"phase": "completed", "rows": int(manifest.get("rows", 0))})
        await self.save(job)
        log.info(
            "compaction completed",
            compaction=job.compactionID,
            collection=coll,
            plans=len(job.plans),
            rows=manifest.get("rows"),
            spark_seconds=manifest.get("spark_seconds"),
        )
        await self.collect(collected)

    async def _swap(self, job, plan, out: dict) -> list[Segment]:
        """ONE transaction: targets Flushed (with the sources' delta logs the job was not
        planned with), sources Dropped, the plan Completed. Under the meta's write lock: no
        delta log of a source commits between reading the sources and the swap."""
        async with self.port.meta.write_lock:
            return await self._swap_locked(job, plan, out)

    @staticmethod
    def _planned_deltalogs(job, plan_id: int) -> set[str]:
        """The delta-log files of the plan's sources the job applied (its spec)."""
        spec = json.loads(job.spec) if job.spec else {}
        return {
            d["key"]
            for p in spec.get("plans", [])
            if int(p["plan_id"]) == plan_id
            for src in p["sources"]
            for d in src.get("deltalogs", [])
        }

    async def _swap_locked(self, job, plan, out: dict) -> list[Segment]:
        port, coll, part = self.port, job.collectionID, plan.partitionID
        found = [port.meta.segments.get(sid) for sid in plan.sources]
        sources = [s for s in found if s is not None and s.info.state == SegmentState.Flushed]
        if len(sources) != len(found):
            raise merr.MilvusError(merr.COMPACTION_FAILED, "a source segment changed while the plan ran")
        src_rows = sum(s.info.num_of_rows for s in sources)
        deleted = int(out.get("deleted", 0))
        targets = [t for t in out["targets"] if int(t["rows"]) > 0]
        if not targets and out["targets"] and any(s.ddl_binlogs for s in sources):
            targets = out["targets"][:1]  # every row deleted or expired: an empty target keeps the DDL binlogs
        if sum(int(t["rows"]) for t in targets) + deleted != src_rows:
            raise merr.MilvusError(
                merr.COMPACTION_FAILED,
                f"targets hold {sum(int(t['rows']) for t in targets)} rows and {deleted} were deleted, "
                f"sources {src_rows}",
            )
        ops: list[Op] = []
        compares = [
            Cmp.exists(keys.compaction_job_key(coll, job.compactionID)),
            Cmp.missing(keys.dropped_partition_key(coll, part)),  # DropPartition writes it first
        ]
        new: list[Segment] = []
        dml = max(
            (s.info.dml_position for s in sources if s.info.HasField("dml_position")),
            key=lambda p: p.timestamp,
            default=None,
        )
        start = min(
            (s.info.start_position for s in sources if s.info.HasField("start_position")),
            key=lambda p: p.timestamp,
            default=None,
        )
        # Delta logs committed to a source after the job was planned (it did not apply them):
        # every target carries them (a delete of a key a target does not hold changes nothing).
        planned = self._planned_deltalogs(job, plan.planID)
        carried = {lid: b for s in sources for lid, b in s.deltalogs.items() if b.log_path not in planned}
        for t in targets:
            sid = int(t["segment_id"])
            if sid not in plan.targets:
                raise merr.MilvusError(merr.COMPACTION_FAILED, f"the manifest names segment {sid}, not a target")
            binlogs = manifest_binlogs(t["binlogs"], paths.segment_prefix(coll, part, sid), merr.COMPACTION_FAILED)
            info = internal_pb2.SegmentInfo(
                ID=sid,
                collectionID=coll,
                partitionID=part,
                insert_channel=plan.channel,
                num_of_rows=sum(b.entries_num for b in binlogs.values()),
                state=SegmentState.Flushed,
                max_row_num=int(job.target_rows),
                binlog_count=len(binlogs),
                binlog_size=sum(b.log_size for b in binlogs.values()),
                compaction_from=list(plan.sources),
                created_timestamp=min(s.info.created_timestamp for s in sources),
                flushed_timestamp=max(s.info.flushed_timestamp for s in sources),
                seal_timestamp=max(s.info.seal_timestamp for s in sources),
                last_expire_time=max(s.info.last_expire_time for s in sources),
            )
            if dml is not None:
                info.dml_position.CopyFrom(dml)
            if start is not None:
                info.start_position.CopyFrom(start)
            seg_key = keys.segment_key(coll, part, sid)
            info.deltalog_count = len(carried)
            ops.append(Op.put(seg_key, info.SerializeToString()))
            compares.append(Cmp.missing(seg_key))
            ops += [Op.put(keys.binlog_key(coll, sid, lid), b.SerializeToString()) for lid, b in binlogs.items()]
            ops += [Op.put(keys.deltalog_key(coll, sid, lid), b.SerializeToString()) for lid, b in carried.items()]
            new.append(Segment(info, binlogs=binlogs, deltalogs=dict(carried), created=time.monotonic()))
        # The sources' DDL binlog meta moves to the first target: those files stay referenced.
        ddl: dict[int, internal_pb2.DDLBinlogMeta] = {}
        for s in sources:
            ddl.update(s.ddl_binlogs)
        if new:
            for idx, d in ddl.items():
                ops.append(Op.put(keys.ddl_binlog_key(coll, new[0].id, idx), d.SerializeToString()))
            new[0].ddl_binlogs = dict(ddl)
        dropped = []
        for s in sources:
            # Guard on the stored value itself: the swap applies only if no source changed since.
            seg_key = keys.segment_key(coll, s.info.partitionID, s.id)
            raw = await port.kv.get(seg_key)
            stored = internal_pb2.SegmentInfo.FromString(raw) if raw is not None else None
            if raw is None or stored is None or stored.state != SegmentState.Flushed:
                raise merr.MilvusError(merr.COMPACTION_FAILED, f"source segment {s.id} is no longer flushed")
            stored.state = SegmentState.Dropped
            dropped.append(stored)
            ops.append(Op.put(seg_key, stored.SerializeToString()))
            compares.append(Cmp.value_eq(seg_key, raw))
        plan.state = TS.CompactionTaskStateCompleted
        plan.reason = ""
        plan.targets[:] = [t.id for t in new]
        ops.append(Op.put(keys.compaction_job_key(coll, job.compactionID), job.SerializeToString()))
        if len(ops) > self.cfg.etcd_max_txn_ops:
            plan.state = TS.CompactionTaskStateExecuting
            raise merr.MilvusError(
                merr.COMPACTION_FAILED,
                f"the swap needs {len(ops)} etcd operations, more "
                f"than one transaction takes ({self.cfg.etcd_max_txn_ops})",
            )
        async with self.scheduler.collection_lock(coll):
            job_key = keys.compaction_job_key(coll, job.compactionID)
            ok = not port.dropping(coll) and await port.kv.commit(
                ops, compares, proof=job_key, name="datacoord.compaction.swap"
            )
            if not ok:
                plan.state = TS.CompactionTaskStateExecuting
                raise merr.MilvusError(
                    merr.COMPACTION_FAILED, "the sources changed (or the collection was dropped) while the plan ran"
                )
            for seg in new:
                port.meta.segments[seg.id] = seg
            for s, info in zip(sources, dropped, strict=True):
                s.info = info
            await port.meta.notify(*new, *sources)
        log.info(
            "compaction plan swapped",
            compaction=job.compactionID,
            plan=plan.planID,
            sources=len(sources),
            targets=[t.id for t in new],
            rows=src_rows,
            carried_deltalogs=len(carried),
        )
        return sources

    # ------------------------------------------------------------------------ failure / GC
    async def _remove_targets(self, job, plan) -> None:
        """A failed plan's targets — only those etcd does not know (a live segment keeps its files)."""
        await self.port.remover.remove_segments(
            [(job.collectionID, plan.partitionID, sid) for sid in plan.targets], why="compaction plan failed"
        )

    def outputs(self, job: data_coord_pb2.CompactionJob) -> list[tuple[int, int, int]]:
        """The targets of every plan not done (a swapped plan's targets are live segments)."""
        return [(job.collectionID, p.partitionID, t) for p in job.plans if p.state not in PLAN_DONE for t in p.targets]

    def writes_into(self, job: data_coord_pb2.CompactionJob, part: int) -> bool:
        return any(p.partitionID == part and p.state not in PLAN_DONE for p in job.plans)

    def record_failure(self, job: data_coord_pb2.CompactionJob, reason: str) -> None:
        for plan in job.plans:
            if plan.state not in PLAN_DONE:
                plan.state = TS.CompactionTaskStateFailed
                plan.reason = reason[:2000]
        job.state = CS.Completed
        job.reason = reason

    async def collect(self, segs: list[Segment] | None = None) -> int:
        """Garbage-collect Dropped segments: their binlog files first, then their meta — once
        their channel's stored checkpoint is past their rows (Milvus' GC rule): until then a
        DataNode or a QueryNode delegator replaying from that checkpoint must still find them
        listed as dropped, or it would take their rows again (stored twice, served twice). The
        stored one: QueryCoord resumes delegators from etcd's, which trails the one in memory
        (tick-only advances are stored once a minute) — a checkpoint past the segment in memory
        only is stored first. Later policy passes collect the rest."""
        port = self.port
        async with self._gc_lock:
            if segs is None:
                segs = [s for s in port.meta.segments.values() if s.info.state == SegmentState.Dropped]
            behind = {s.info.insert_channel for s in segs if _past_in_memory_only(port.meta, s.info)}
            if behind:
                await port.meta.persist_checkpoints(sorted(behind))
            n, gone = 0, []
            for s in segs:
                i = s.info
                if i.state != SegmentState.Dropped or port.dropping(i.collectionID):
                    continue
                stored = port.meta.stored_checkpoints.get(i.insert_channel)
                if i.HasField("dml_position") and (stored is None or stored < i.dml_position.seq):
                    continue
                seg_key = keys.segment_key(i.collectionID, i.partitionID, i.ID)
                files = [b.log_path for b in [*s.binlogs.values(), *s.deltalogs.values(), *s.statslogs.values()]]
                files += [
                    paths.segment_prefix(i.collectionID, i.partitionID, i.ID),
                    paths.segment_stats_prefix(i.collectionID, i.partitionID, i.ID),
                ]
                if not await port.remover.remove(
                    filter(None, files),
                    keys=[seg_key],
                    prefixes=[keys.deltalog_prefix(i.collectionID)],
                    decide=_dropped_in_etcd(seg_key, i.ID, keys.deltalog_prefix(i.collectionID)),
                    why="compacted segment",
                ):
                    continue  # etcd does not hold it Dropped: memory was wrong, nothing collected
                async with self.scheduler.collection_lock(i.collectionID):
                    await port.kv.txn(
                        [Op.delete(keys.segment_key(i.collectionID, i.partitionID, i.ID))]
                        + [Op.delete_prefix(p) for p in keys.segment_log_prefixes(i.collectionID, i.ID)]
                    )
                    port.meta.segments.pop(i.ID, None)
                n += 1
                gone.append(s)
            if n:
                await port.meta.notify(*gone, removed=True)
                log.info("compacted segments collected", segments=n)
            return n

    async def apply_policy(self) -> list[data_coord_pb2.CompactionJob]:
        """One policy pass over every collection (automatic compaction)."""
        out = []
        for coll in sorted(self.port.collections()):
            if self.port.dropping(coll) or self.running(coll):
                continue
            if not self.port.meta.by_collection(coll, (SegmentState.Flushed,)):
                continue  # nothing to compact: no need to ask RootCoord for its TTL
            try:
                cutoff = await self.expire_before(coll)
            except merr.MilvusError:
                continue  # dropped meanwhile
            plans, _ = self.plan(coll, manual=False, expire_before=cutoff)
            if plans:
                out.append(await self.trigger(coll, manual=False))
        return out


def _past_in_memory_only(meta: SegmentMeta, info: internal_pb2.SegmentInfo) -> bool:
    """Whether the channel's checkpoint in memory is past the segment's rows, the stored one not."""
    if info.state != SegmentState.Dropped or not info.HasField("dml_position"):
        return False
    cur = meta.checkpoints.get(info.insert_channel)
    stored = meta.stored_checkpoints.get(info.insert_channel, 0)
    return cur is not None and cur.seq >= info.dml_position.seq > stored


def _dropped_in_etcd(seg_key: str, seg_id: int, deltalog_prefix: str) -> Decide:
    """Files of a segment etcd holds as Dropped (or no longer holds at all), but for delta logs
    another segment refers to (a source's delta logs carried over to a compaction target stay
    where they are)."""

    def decide(snap: Snapshot, targets: list[str]) -> list[str]:
        raw = snap.get(seg_key)
        if raw is not None and internal_pb2.SegmentInfo.FromString(raw).state != SegmentState.Dropped:
            return []
        kept = {
            internal_pb2.Binlog.FromString(v).log_path
            for k, v in snap.under(deltalog_prefix)
            if int(k.rsplit("/", 2)[1]) != seg_id
        }
        return [t for t in targets if t not in kept]

    return decide
