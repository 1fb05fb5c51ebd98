"""Compaction: small flushed segments → fewer, larger ones, through a Spark job.

    trigger (Compact RPC or the policy) → plans per (partition, channel): sources packed up to
    the target size → CompactionJob (Executing) in etcd → SparkApplication merges each plan's
    sources into its targets (every row exactly once) and writes a manifest → per plan, ONE etcd
    transaction swaps: targets Flushed (with `compaction_from`), sources Dropped, plan Completed
    → garbage collection deletes the sources' binlog FILES, then the meta that pointed at them.

The swap is guarded on each source's meta being exactly what was planned and on the job key
still existing (a dropped collection has none), so it applies whole or not at all. Sources are
reserved while a plan runs (no second compaction takes them). Dropped segments found at start
(a coordinator that died between swap and collection) are collected then.

Policy (`auto_compaction`): a (partition, channel) with at least `compaction_min_segments`
flushed segments smaller than `compaction_small_proportion` × the target size is compacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.datacoord.import_manager import JobManagerBase, _b64, manifest_key
from kmilvus.datacoord.meta import Segment, SegmentState
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.spark import application
from kmilvus.spark.runner import JobState, JobStatus
from kmilvus.spark.tracking import manifest_error, read_manifest
from kmilvus.storage import paths
from kmilvus.util import merr, typeutil

log = get_logger(__name__)
CS = common_pb2.CompactionState
TS = common_pb2.CompactionTaskState
PLAN_DONE = (TS.CompactionTaskStateCompleted, TS.CompactionTaskStateFailed, TS.CompactionTaskStateTimeout,
             TS.CompactionTaskStateCleaned)
MB = 1024 * 1024


class CompactionManager(JobManagerBase):
    kind = "compact"

    def __init__(self, dc):
        super().__init__(dc)
        self.jobs: dict[int, data_coord_pb2.CompactionJob] = {}
        self.busy: set[int] = set()          # source segments of running plans
        self._gc_lock = asyncio.Lock()

    # ------------------------------------------------------------------------ persistence
    async def load(self) -> None:
        for _, raw in await self.dc.kv.get_prefix(keys.compaction_job_prefix()):
            job = data_coord_pb2.CompactionJob.FromString(raw)
            self.jobs[job.compactionID] = job
            if job.state != CS.Completed:
                for p in job.plans:
                    if p.state not in PLAN_DONE:
                        self.busy.update(p.sources)
                log.info("resuming compaction", compaction=job.compactionID, collection=job.collectionID)
                self.spawn(job.compactionID, self._run(job))

    async def _save(self, job: data_coord_pb2.CompactionJob) -> bool:
        key = keys.compaction_job_key(job.collectionID, job.compactionID)
        return await self.dc.kv.txn([Op.put(key, job.SerializeToString())], [Cmp.exists(key)])

    def of_collection(self, coll: int) -> list[data_coord_pb2.CompactionJob]:
        return [j for j in self.jobs.values() if j.collectionID == coll]

    def forget_collection(self, coll: int) -> None:
        for j in self.of_collection(coll):
            self.jobs.pop(j.compactionID, None)
            for p in j.plans:
                self.busy.difference_update(p.sources)

    def running(self, coll: int) -> bool:
        return any(j.state != CS.Completed for j in self.of_collection(coll))

    # ------------------------------------------------------------------------ planning
    def schema_of(self, coll: int) -> schema_pb2.CollectionSchema | None:
        for info in self.dc.channels.infos.values():
            if info.collectionID == coll and info.schema:
                return schema_pb2.CollectionSchema.FromString(info.schema)
        return None

    def target_rows(self, coll: int, target_size: int = 0) -> int:
        schema = self.schema_of(coll)
        row = typeutil.estimate_row_size(schema) if schema is not None else 1024
        size = target_size or (self.cfg.compaction_target_size_mb or self.cfg.segment_max_size_mb) * MB
        return max(1, int(size // max(1, row)))

    def plan(self, coll: int, *, manual: bool, segment_ids=(), target_size: int = 0) -> tuple[list[dict], int]:
        """Plans for `coll` (sources by ID, target count) and the rows per target."""
        cfg = self.cfg
        target = self.target_rows(coll, target_size)
        small = target if manual else max(1, int(target * cfg.compaction_small_proportion))
        wanted = set(segment_ids)
        cands = [s for s in self.dc.meta.by_collection(coll, (SegmentState.Flushed,))
                 if s.id not in self.busy and s.info.num_of_rows < small and (not wanted or s.id in wanted)]
        groups: dict[tuple[int, str], list[Segment]] = {}
        for s in sorted(cands, key=lambda s: s.id):
            groups.setdefault((s.info.partitionID, s.info.insert_channel), []).append(s)
        plans = []
        budget = max(8, cfg.etcd_max_txn_ops - 8)
        for (part, channel), segs in sorted(groups.items()):
            if not manual and len(segs) < cfg.compaction_min_segments:
                continue
            cur: list[Segment] = []
            rows = ops = 0
            for s in segs:
                s_ops = 1 + len(s.ddl_binlogs) + 1          # Dropped put, moved DDL metas, GC
                if cur and (rows + s.info.num_of_rows > target or len(cur) >= cfg.compaction_max_sources
                            or ops + s_ops > budget // 2):
                    plans.append(self._plan_of(part, channel, cur, rows, target))
                    cur, rows, ops = [], 0, 0
                cur.append(s)
                rows += s.info.num_of_rows
                ops += s_ops
            if cur:
                plans.append(self._plan_of(part, channel, cur, rows, target))
        return [p for p in plans if len(p["sources"]) >= 2], target

    @staticmethod
    def _plan_of(part: int, channel: str, segs: list[Segment], rows: int, target: int) -> dict:
        return {"partition": part, "channel": channel, "sources": [s.id for s in segs], "rows": rows,
                "bytes": sum(s.info.binlog_size for s in segs), "targets": max(1, math.ceil(rows / target))}

    # ------------------------------------------------------------------------ trigger
    async def trigger(self, coll: int, *, manual: bool, segment_ids=(), target_size: int = 0
                      ) -> data_coord_pb2.CompactionJob:
        dc = self.dc
        if coll in dc._dropping or not dc.channels.channels_of(coll):
            raise merr.collection_not_found(coll)
        plans, target = self.plan(coll, manual=manual, segment_ids=segment_ids, target_size=target_size)
        for p in plans:                       # reserve before the first await
            self.busy.update(p["sources"])
        try:
            cid = await dc.ids.alloc(1 + len(plans))
            job = data_coord_pb2.CompactionJob(
                compactionID=cid, collectionID=coll, manual=manual, create_ts=int(time.time()),
                state=CS.Executing if plans else CS.Completed, target_rows=target,
                complete_ts=0 if plans else int(time.time()))
            for i, p in enumerate(plans):
                job.plans.add(planID=cid + 1 + i, partitionID=p["partition"], channel=p["channel"],
                              sources=p["sources"], state=TS.CompactionTaskStateExecuting, rows=p["rows"],
                              bytes=p["bytes"])
            job.rows = sum(p["rows"] for p in plans)
            await dc.kv.put(keys.compaction_job_key(coll, cid), job.SerializeToString())
        except BaseException:
            for p in plans:
                self.busy.difference_update(p["sources"])
            raise
        self.jobs[cid] = job
        log.info("compaction triggered", compaction=cid, collection=coll, manual=manual, plans=len(plans),
                 sources=sum(len(p["sources"]) for p in plans), rows=job.rows)
        if plans:
            self.spawn(cid, self._run(job))
        return job

    # ------------------------------------------------------------------------ run
    async def _run(self, job: data_coord_pb2.CompactionJob) -> None:
        try:
            if job.handle:
                status = await self.follow(json.loads(job.handle), lambda st: self._on_change(job, st))
            else:
                spec = await self._prepare(job)
                app = self.build_app(spec, job.app_name)

                async def on_handle(handle: dict) -> None:
                    job.handle = json.dumps(handle)
                    job.spark_state = JobState.SUBMITTED.value
                    await self._save(job)

                status = await self.run_app(app, on_handle, lambda st: self._on_change(job, st))
            if status.state == JobState.COMPLETED:
                await self._commit(job)
            else:
                manifest = await asyncio.to_thread(read_manifest, self.dc.store, self._manifest_key(job))
                await self._fail(job, manifest_error(manifest) or status.message or
                                 f"the Spark application ended {status.state.value or 'without state'}")
        except asyncio.CancelledError:
            if self.kill_on_cancel:
                await asyncio.shield(self.cancel_handle(job.handle))
            raise
        except merr.MilvusError as exc:
            await self._fail(job, exc.message)
        except Exception as exc:
            log.error("compaction crashed", compaction=job.compactionID, exc_info=True)
            await self._fail(job, f"{type(exc).__name__}: {exc}")
        finally:
            if job.state == CS.Completed:
                for p in job.plans:
                    self.busy.difference_update(p.sources)
                await self.release_handle(job.handle)

    def _manifest_key(self, job) -> str:
        return manifest_key(job.collectionID, "compact", job.compactionID)

    async def _on_change(self, job: data_coord_pb2.CompactionJob, st: JobStatus) -> None:
        changed = st.state.value != job.spark_state
        job.spark_state = st.state.value
        if st.progress:
            job.progress = json.dumps(st.progress, sort_keys=True)
        if changed:
            log.info("compaction progress", compaction=job.compactionID, spark_state=st.state.value,
                     phase=st.progress.get("phase", "-"), rows=st.progress.get("rows", job.rows))
            await self._save(job)

    async def _prepare(self, job: data_coord_pb2.CompactionJob) -> dict:
        dc, coll = self.dc, job.collectionID
        schema = self.schema_of(coll)
        if schema is None:
            raise merr.collection_not_found(coll)
        plans = []
        total = 0
        for p in job.plans:
            sources = []
            for sid in p.sources:
                s = dc.meta.segments.get(sid)
                if s is None or s.info.state != SegmentState.Flushed:
                    raise merr.MilvusError(merr.COMPACTION_FAILED, f"segment {sid} is no longer flushed")
                binlogs = [{"key": b.log_path, "rows": int(b.entries_num), "size": int(b.log_size)}
                           for _, b in sorted(s.binlogs.items())]
                total += sum(b["rows"] for b in binlogs)
                sources.append({"segment_id": sid, "binlogs": binlogs})
            n_targets = max(1, math.ceil(p.rows / max(1, job.target_rows)))
            first = await dc.ids.alloc(n_targets)
            p.targets[:] = list(range(first, first + n_targets))
            plans.append({"plan_id": p.planID, "partition_id": p.partitionID, "channel": p.channel,
                          "target_ids": list(p.targets), "sources": sources})
        storage_uri = dc.store.root_uri if dc.store.local else dc.cfg.storage_uri
        reserve = max(1, total)
        spec = {"kind": "compact", "version": 1, "job_id": job.compactionID, "collection_id": coll,
                "schema": _b64(schema.SerializeToString()), "storage_uri": storage_uri,
                "manifest_key": self._manifest_key(job), "plans": plans,
                "log_id_start": await dc.ids.alloc(reserve), "log_id_count": reserve}
        job.spec = json.dumps(spec, sort_keys=True)
        job.app_name = application.app_name("compact", coll, job.compactionID)
        await self._save(job)
        return spec

    # ------------------------------------------------------------------------ the swap
    async def _commit(self, job: data_coord_pb2.CompactionJob) -> None:
        dc, coll = self.dc, job.collectionID
        manifest = await asyncio.to_thread(read_manifest, dc.store, self._manifest_key(job))
        if not manifest or manifest.get("status") != "completed":
            await self._fail(job, manifest_error(manifest) or "the Spark job left no manifest")
            return
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
            except merr.MilvusError as exc:
                plan.state = TS.CompactionTaskStateFailed
                plan.reason = exc.message
                await self._remove_targets(job, plan)
                log.warning("compaction plan failed", compaction=job.compactionID, plan=plan.planID,
                            reason=exc.message)
        job.state = CS.Completed
        job.complete_ts = int(time.time())
        job.progress = json.dumps({"phase": "completed", "rows": int(manifest.get("rows", 0))})
        await self._save(job)
        with contextlib.suppress(Exception):
            await dc.store.delete(self._manifest_key(job))
        log.info("compaction completed", compaction=job.compactionID, collection=coll,
                 plans=len(job.plans), rows=manifest.get("rows"), spark_seconds=manifest.get("spark_seconds"))
        await self.collect(collected)

    async def _swap(self, job, plan, out: dict) -> list[Segment]:
        """ONE transaction: targets Flushed, sources Dropped, the plan Completed."""
        dc, coll, part = self.dc, job.collectionID, plan.partitionID
        sources = [dc.meta.segments.get(sid) for sid in plan.sources]
        if any(s is None or s.info.state != SegmentState.Flushed for s in sources):
            raise merr.MilvusError(merr.COMPACTION_FAILED, "a source segment changed while the plan ran")
        src_rows = sum(s.info.num_of_rows for s in sources)
        targets = [t for t in out["targets"] if int(t["rows"]) > 0]
        if sum(int(t["rows"]) for t in targets) != src_rows:
            raise merr.MilvusError(merr.COMPACTION_FAILED,
                                   f"targets hold {sum(int(t['rows']) for t in targets)} rows, sources {src_rows}")
        ops: list[Op] = []
        compares = [Cmp.exists(keys.compaction_job_key(coll, job.compactionID))]
        new: list[Segment] = []
        dml = max((s.info.dml_position for s in sources if s.info.HasField("dml_position")),
                  key=lambda p: p.timestamp, default=None)
        start = min((s.info.start_position for s in sources if s.info.HasField("start_position")),
                    key=lambda p: p.timestamp, default=None)
        for t in targets:
            sid = int(t["segment_id"])
            if sid not in plan.targets:
                raise merr.MilvusError(merr.COMPACTION_FAILED, f"the manifest names segment {sid}, not a target")
            prefix = paths.segment_prefix(coll, part, sid)
            binlogs = {}
            for b in t["binlogs"]:
                if not b["key"].startswith(prefix):
                    raise merr.MilvusError(merr.COMPACTION_FAILED, f"binlog {b['key']} is outside {prefix}")
                binlogs[int(b["log_id"])] = internal_pb2.Binlog(
                    logID=int(b["log_id"]), entries_num=int(b["rows"]), timestamp_from=int(b["timestamp_from"]),
                    timestamp_to=int(b["timestamp_to"]), log_path=b["key"], log_size=int(b["size"]))
            info = internal_pb2.SegmentInfo(
                ID=sid, collectionID=coll, partitionID=part, insert_channel=plan.channel,
                num_of_rows=sum(b.entries_num for b in binlogs.values()), state=SegmentState.Flushed,
                max_row_num=int(job.target_rows), binlog_count=len(binlogs),
                binlog_size=sum(b.log_size for b in binlogs.values()), compaction_from=list(plan.sources),
                created_timestamp=min(s.info.created_timestamp for s in sources),
                flushed_timestamp=max(s.info.flushed_timestamp for s in sources),
                seal_timestamp=max(s.info.seal_timestamp for s in sources),
                last_expire_time=max(s.info.last_expire_time for s in sources))
            if dml is not None:
                info.dml_position.CopyFrom(dml)
            if start is not None:
                info.start_position.CopyFrom(start)
            seg_key = keys.segment_key(coll, part, sid)
            ops.append(Op.put(seg_key, info.SerializeToString()))
            compares.append(Cmp.missing(seg_key))
            ops += [Op.put(keys.binlog_key(coll, sid, lid), b.SerializeToString()) for lid, b in binlogs.items()]
            new.append(Segment(info, binlogs=binlogs, created=time.monotonic()))
        # The sources' DDL binlog meta moves to the first target: those files stay referenced.
        ddl = {}
        for s in sources:
            ddl.update(s.ddl_binlogs)
        for idx, d in ddl.items():
            ops.append(Op.put(keys.ddl_binlog_key(coll, new[0].id, idx), d.SerializeToString()))
        new[0].ddl_binlogs = dict(ddl)
        dropped = []
        for s in sources:
            # Guard on the stored value itself: the swap applies only if no source changed since.
            seg_key = keys.segment_key(coll, s.info.partitionID, s.id)
            raw = await dc.kv.get(seg_key)
            info = internal_pb2.SegmentInfo.FromString(raw) if raw is not None else None
            if info is None or info.state != SegmentState.Flushed:
                raise merr.MilvusError(merr.COMPACTION_FAILED, f"source segment {s.id} is no longer flushed")
            info.state = SegmentState.Dropped
            dropped.append(info)
            ops.append(Op.put(seg_key, info.SerializeToString()))
            compares.append(Cmp.value_eq(seg_key, raw))
        plan.state = TS.CompactionTaskStateCompleted
        plan.reason = ""
        plan.targets[:] = [t.id for t in new]
        ops.append(Op.put(keys.compaction_job_key(coll, job.compactionID), job.SerializeToString()))
        if len(ops) > dc.cfg.etcd_max_txn_ops:
            plan.state = TS.CompactionTaskStateExecuting
            raise merr.MilvusError(merr.COMPACTION_FAILED, f"the swap needs {len(ops)} etcd operations, more "
                                                           f"than one transaction takes ({dc.cfg.etcd_max_txn_ops})")
        async with dc.collection_job_lock(coll):
            ok = coll not in dc._dropping and await dc.kv.txn(ops, compares)
            if not ok:
                plan.state = TS.CompactionTaskStateExecuting
                raise merr.MilvusError(merr.COMPACTION_FAILED, "the sources changed (or the collection was "
                                                               "dropped) while the plan ran")
            for seg in new:
                dc.meta.segments[seg.id] = seg
            for s, info in zip(sources, dropped):
                s.info = info
            await dc.meta.notify(*new, *sources)
        log.info("compaction plan swapped", compaction=job.compactionID, plan=plan.planID,
                 sources=len(sources), targets=[t.id for t in new], rows=src_rows)
        return sources

    # ------------------------------------------------------------------------ failure / GC
    async def _remove_targets(self, job, plan) -> None:
        for sid in plan.targets:
            if sid in self.dc.meta.segments:
                continue  # registered: never delete a live segment's files
            await self.dc.store.delete_prefix(paths.segment_prefix(job.collectionID, plan.partitionID, sid))

    async def _fail(self, job: data_coord_pb2.CompactionJob, reason: str) -> None:
        for plan in job.plans:
            if plan.state not in PLAN_DONE:
                await self._remove_targets(job, plan)
                plan.state = TS.CompactionTaskStateFailed
                plan.reason = reason[:2000]
        with contextlib.suppress(Exception):
            await self.dc.store.delete(self._manifest_key(job))
        job.state = CS.Completed
        job.reason = reason[:4000]
        job.complete_ts = int(time.time())
        await self._save(job)
        for p in job.plans:
            self.busy.difference_update(p.sources)
        log.warning("compaction failed", compaction=job.compactionID, collection=job.collectionID, reason=job.reason)

    async def collect(self, segs: list[Segment] | None = None) -> int:
        """Garbage-collect Dropped segments: their binlog files first, then their meta."""
        dc = self.dc
        async with self._gc_lock:
            if segs is None:
                segs = [s for s in dc.meta.segments.values() if s.info.state == SegmentState.Dropped]
            n, gone = 0, []
            for s in segs:
                i = s.info
                if i.state != SegmentState.Dropped or i.collectionID in dc._dropping:
                    continue
                for b in s.binlogs.values():
                    if b.log_path:
                        await dc.store.delete(b.log_path)
                await dc.store.delete_prefix(paths.segment_prefix(i.collectionID, i.partitionID, i.ID))
                async with dc.collection_job_lock(i.collectionID):
                    await dc.kv.txn([Op.delete(keys.segment_key(i.collectionID, i.partitionID, i.ID)),
                                     Op.delete_prefix(keys.binlog_prefix(i.collectionID, i.ID)),
                                     Op.delete_prefix(keys.ddl_binlog_prefix(i.collectionID, i.ID))])
                    dc.meta.segments.pop(i.ID, None)
                n += 1
                gone.append(s)
            if n:
                await dc.meta.notify(*gone, removed=True)
                log.info("compacted segments collected", segments=n)
            return n

    async def apply_policy(self) -> list[data_coord_pb2.CompactionJob]:
        """One policy pass over every collection (automatic compaction)."""
        out = []
        colls = {info.collectionID for info in self.dc.channels.infos.values()}
        for coll in sorted(colls):
            if coll in self.dc._dropping or self.running(coll):
                continue
            plans, _ = self.plan(coll, manual=False)
            if plans:
                out.append(await self.trigger(coll, manual=False))
        return out
