"""Bulk import (Milvus' `do_bulk_insert`) through a Spark job.

    Import RPC → ImportJob (Pending) in etcd → files inspected, IDs reserved, SparkApplication
    submitted (Started) → the job writes binlogs + a manifest → DataCoord registers every
    segment (Flushed), its binlog meta and the job's Completed state in ONE etcd transaction.

A job that fails (bad row, bad file, Spark error, timeout) or is cancelled registers nothing;
its files (every reserved segment directory) and manifest are removed, and its state says why:
the file, the row and the reason. Job state lives under `catalog.import_job_key(coll, job)`, so
DropCollection removes it with the collection; a restarted DataCoord picks unfinished jobs up
where they were (following the same Spark application when it has a handle).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.datacoord.meta import Segment, SegmentState
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.spark import application
from kmilvus.spark import files as infiles
from kmilvus.spark.runner import JobState, JobStatus
from kmilvus.spark.tracking import follow, manifest_error, read_manifest
from kmilvus.storage import paths
from kmilvus.util import merr, typeutil

log = get_logger(__name__)
IS = common_pb2.ImportState
TERMINAL = (IS.ImportCompleted, IS.ImportFailed, IS.ImportFailedAndCleaned)
MAX_REASON = 4000


def manifest_key(coll: int, kind: str, job_id: int) -> str:
    """Where a job's manifest goes: a collection-owned prefix (removed by DropCollection)."""
    return f"{paths.stats_log_prefix(coll)}_jobs/{kind}-{int(job_id)}/manifest.json"


class JobManagerBase:
    """What the import and compaction managers share: the DataCoord, Spark, monitor tasks."""

    kind = ""

    def __init__(self, dc):
        self.dc = dc
        self.tasks: dict[int, asyncio.Task] = {}
        self.kill_on_cancel = True     # cancelling a monitor also stops its Spark application

    @property
    def cfg(self):
        return self.dc.cfg

    def spawn(self, job_id: int, coro) -> None:
        task = asyncio.create_task(coro, name=f"{self.kind}-{job_id}")
        self.tasks[job_id] = task
        task.add_done_callback(lambda t, j=job_id: self.tasks.pop(j, None) if self.tasks.get(j) is t else None)

    def build_app(self, spec: dict, name: str) -> dict:
        return application.from_config(self.kind, spec, name, self.cfg)

    async def run_app(self, app: dict, on_handle, on_change) -> JobStatus:
        """Submit (under the concurrency limit) and follow to the end."""
        async with self.dc.job_slots():
            handle = await self.dc.job_runner.submit(app)
            await on_handle(handle)
            return await self.follow(handle, on_change)

    async def follow(self, handle: dict, on_change) -> JobStatus:
        return await follow(self.dc.job_runner, handle, poll=self.cfg.spark_poll_interval,
                            timeout=self.cfg.spark_job_timeout, on_change=on_change)

    async def cancel_handle(self, handle_json: str) -> None:
        if handle_json:
            with contextlib.suppress(Exception):
                await self.dc.job_runner.cancel(json.loads(handle_json))

    async def release_handle(self, handle_json: str) -> None:
        if handle_json:
            with contextlib.suppress(Exception):
                await self.dc.job_runner.release(json.loads(handle_json))

    async def cancel_tasks(self, job_ids) -> None:
        """Cancel these jobs' monitors (and so their applications) and wait until they stopped."""
        tasks = [self.tasks[j] for j in job_ids if j in self.tasks]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


class ImportManager(JobManagerBase):
    kind = "import"

    def __init__(self, dc):
        super().__init__(dc)
        self.jobs: dict[int, data_coord_pb2.ImportJob] = {}

    # ------------------------------------------------------------------------ persistence
    async def load(self) -> None:
        for _, raw in await self.dc.kv.get_prefix(keys.import_job_prefix()):
            job = data_coord_pb2.ImportJob.FromString(raw)
            self.jobs[job.jobID] = job
            if job.state not in TERMINAL:
                log.info("resuming import", job=job.jobID, collection=job.collectionID,
                         spark_state=job.spark_state or "-")
                self.spawn(job.jobID, self._run(job))

    async def _save(self, job: data_coord_pb2.ImportJob) -> bool:
        """Persist unless the job's key is gone (its collection was dropped)."""
        key = keys.import_job_key(job.collectionID, job.jobID)
        return await self.dc.kv.txn([Op.put(key, job.SerializeToString())], [Cmp.exists(key)])

    def of_collection(self, coll: int) -> list[data_coord_pb2.ImportJob]:
        return [j for j in self.jobs.values() if j.collectionID == coll]

    def forget_collection(self, coll: int) -> None:
        for j in self.of_collection(coll):
            self.jobs.pop(j.jobID, None)

    # ------------------------------------------------------------------------ create
    async def create(self, req: data_coord_pb2.ImportJobRequest) -> data_coord_pb2.ImportJob:
        dc = self.dc
        coll = req.collectionID
        if coll in dc._dropping or not dc.channels.channels_of(coll):
            raise merr.collection_not_found(req.collection_name or coll)
        if not req.files:
            raise merr.invalid("import requires at least one file")
        options = {kv.key: kv.value for kv in req.options}
        try:
            for f in req.files:
                infiles.format_of(f, options)
        except infiles.ImportError_ as exc:
            raise merr.MilvusError(merr.IMPORT_FAILED, str(exc)) from None
        job_id = await dc.ids.alloc()
        job = data_coord_pb2.ImportJob(
            jobID=job_id, collectionID=coll, partitionID=req.partitionID,
            collection_name=req.collection_name, partition_name=req.partition_name or "_default",
            files=list(req.files), options=list(req.options), state=IS.ImportPending,
            create_ts=int(time.time()), schema=req.schema, vchannels=list(req.vchannels))
        await dc.kv.put(keys.import_job_key(coll, job_id), job.SerializeToString())
        self.jobs[job_id] = job
        log.info("import job created", job=job_id, collection=coll, files=len(req.files))
        self.spawn(job_id, self._run(job))
        return job

    # ------------------------------------------------------------------------ run
    async def _run(self, job: data_coord_pb2.ImportJob) -> None:
        try:
            if job.handle:
                status = await self.follow(json.loads(job.handle), lambda st: self._on_change(job, st))
            else:
                spec = await self._prepare(job)
                app = self.build_app(spec, job.app_name)

                async def on_handle(handle: dict) -> None:
                    job.handle = json.dumps(handle)
                    job.state = IS.ImportStarted
                    job.spark_state = JobState.SUBMITTED.value
                    await self._save(job)

                status = await self.run_app(app, on_handle, lambda st: self._on_change(job, st))
            if status.state == JobState.COMPLETED:
                await self._complete(job)
            else:
                manifest = await asyncio.to_thread(read_manifest, self.dc.store, self._manifest_key(job))
                await self._fail(job, manifest_error(manifest) or status.message or
                                 f"the Spark application ended {status.state.value or 'without state'}")
        except asyncio.CancelledError:
            if self.kill_on_cancel:
                await asyncio.shield(self.cancel_handle(job.handle))
            raise
        except infiles.ImportError_ as exc:
            await self._fail(job, "; ".join(p.message() for p in exc.problems[:5]))
        except merr.MilvusError as exc:
            await self._fail(job, exc.message)
        except Exception as exc:
            log.error("import job crashed", job=job.jobID, exc_info=True)
            await self._fail(job, f"{type(exc).__name__}: {exc}")
        finally:
            if job.state in TERMINAL:
                await self.release_handle(job.handle)

    def _manifest_key(self, job) -> str:
        return manifest_key(job.collectionID, "import", job.jobID)

    async def _on_change(self, job: data_coord_pb2.ImportJob, st: JobStatus) -> None:
        changed = st.state.value != job.spark_state
        job.spark_state = st.state.value
        if st.progress:
            job.progress = json.dumps(st.progress, sort_keys=True)
            if st.progress.get("rows"):
                job.row_count = int(st.progress["rows"])
        if changed:
            log.info("import progress", job=job.jobID, spark_state=st.state.value,
                     phase=st.progress.get("phase", "-"), rows=job.row_count)
            await self._save(job)

    async def _prepare(self, job: data_coord_pb2.ImportJob) -> dict:
        """Inspect the files, reserve IDs and a timestamp, and write the job spec."""
        dc, coll = self.dc, job.collectionID
        schema = schema_pb2.CollectionSchema.FromString(job.schema)
        options = {kv.key: kv.value for kv in job.options}
        storage_uri = dc.store.root_uri if dc.store.local else dc.cfg.storage_uri
        inputs = [infiles.resolve(f, dc.cfg.storage_uri, options) for f in job.files]

        def inspect_all():
            problems = []
            for f in inputs:
                problems += infiles.inspect(f, schema, options)
            return problems

        problems = await asyncio.to_thread(inspect_all)
        if problems:
            raise infiles.ImportError_(problems)
        bound = sum(infiles.row_bound(f, schema) for f in inputs)
        seg_rows = dc.segments.max_rows.get(coll)
        if not seg_rows:
            dc.segments.set_schema(coll, schema)
            seg_rows = dc.segments.max_rows[coll]
        n_seg = max(1, math.ceil(bound / seg_rows))
        reserve = max(1, bound)
        spec = {
            "kind": "import", "version": 1, "job_id": job.jobID, "collection_id": coll,
            "partition_id": job.partitionID, "collection_name": job.collection_name,
            "schema": _b64(job.schema), "storage_uri": storage_uri,
            "files": [f.to_dict() for f in inputs], "options": options,
            "timestamp": await dc.tso.alloc(),
            "row_id_start": await dc.ids.alloc(reserve), "row_id_count": reserve,
            "log_id_start": await dc.ids.alloc(reserve), "log_id_count": reserve,
            "segment_id_start": await dc.ids.alloc(n_seg), "segment_count": n_seg,
            "segment_max_rows": seg_rows, "manifest_key": self._manifest_key(job),
        }
        job.spec = json.dumps(spec, sort_keys=True)
        job.app_name = application.app_name("import", coll, job.jobID)
        job.expected_rows = sum(f.rows for f in inputs) if all(f.rows >= 0 for f in inputs) else 0
        job.input_bytes = sum(f.size for f in inputs)
        await self._save(job)
        log.info("import prepared", job=job.jobID, files=len(inputs), bytes=job.input_bytes,
                 expected_rows=job.expected_rows, segments_reserved=n_seg)
        return spec

    # ------------------------------------------------------------------------ outcomes
    async def _complete(self, job: data_coord_pb2.ImportJob) -> None:
        dc, coll = self.dc, job.collectionID
        spec = json.loads(job.spec)
        manifest = await asyncio.to_thread(read_manifest, dc.store, spec["manifest_key"])
        if not manifest or manifest.get("status") != "completed":
            await self._fail(job, manifest_error(manifest) or "the Spark job left no manifest")
            return
        start, count = int(spec["segment_id_start"]), int(spec["segment_count"])
        part = int(spec["partition_id"])
        vchans = list(job.vchannels) or dc.channels.channels_of(coll)
        seg_rows = int(spec["segment_max_rows"])
        ops: list[Op] = []
        compares = [Cmp.exists(keys.import_job_key(coll, job.jobID))]
        segs: list[Segment] = []
        total = 0
        for k, m in enumerate(manifest["segments"]):
            sid = int(m["segment_id"])
            if not start <= sid < start + count or int(m["partition_id"]) != part:
                raise merr.MilvusError(merr.IMPORT_FAILED, f"the manifest names segment {sid}, not reserved")
            prefix = paths.segment_prefix(coll, part, sid)
            binlogs = {}
            for b in m["binlogs"]:
                if not b["key"].startswith(prefix):
                    raise merr.MilvusError(merr.IMPORT_FAILED, f"binlog {b['key']} is outside {prefix}")
                binlogs[int(b["log_id"])] = internal_pb2.Binlog(
                    logID=int(b["log_id"]), entries_num=int(b["rows"]), timestamp_from=int(b["timestamp_from"]),
                    timestamp_to=int(b["timestamp_to"]), log_path=b["key"], log_size=int(b["size"]))
            info = internal_pb2.SegmentInfo(
                ID=sid, collectionID=coll, partitionID=part, insert_channel=vchans[k % len(vchans)] if vchans else "",
                num_of_rows=sum(b.entries_num for b in binlogs.values()), state=SegmentState.Flushed,
                max_row_num=seg_rows, binlog_count=len(binlogs), binlog_size=sum(b.log_size for b in binlogs.values()),
                created_timestamp=int(manifest["timestamp"]), flushed_timestamp=int(manifest["timestamp"]),
                last_expire_time=int(manifest["timestamp"]), seal_timestamp=int(manifest["timestamp"]))
            total += info.num_of_rows
            seg_key = keys.segment_key(coll, part, sid)
            ops.append(Op.put(seg_key, info.SerializeToString()))
            compares.append(Cmp.missing(seg_key))
            ops += [Op.put(keys.binlog_key(coll, sid, lid), b.SerializeToString()) for lid, b in binlogs.items()]
            segs.append(Segment(info, binlogs=binlogs, created=time.monotonic()))
        if total != int(manifest["rows"]):
            raise merr.MilvusError(merr.IMPORT_FAILED, f"the manifest's segments hold {total} rows, "
                                                       f"it says {manifest['rows']}")
        job.state = IS.ImportCompleted
        job.row_count = total
        job.segmentIDs[:] = [s.id for s in segs]
        job.complete_ts = int(time.time())
        job.reason = ""
        job.progress = json.dumps({"phase": "completed", "rows": total})
        pk = typeutil.primary_field(schema_pb2.CollectionSchema.FromString(job.schema))
        if pk.autoID:
            job.id_ranges[:] = [x for m in manifest["segments"] for x in (int(m["row_id_from"]), int(m["row_id_to"]) + 1)]
        ops.append(Op.put(keys.import_job_key(coll, job.jobID), job.SerializeToString()))
        if len(ops) > dc.cfg.etcd_max_txn_ops:
            raise merr.MilvusError(merr.IMPORT_FAILED,
                                   f"the import made {len(ops) - 1} segment and binlog entries, more than one "
                                   f"etcd transaction takes ({dc.cfg.etcd_max_txn_ops} operations): split the files "
                                   f"into several imports")
        async with dc.collection_job_lock(coll):
            if coll in dc._dropping or not await dc.kv.txn(ops, compares):
                raise merr.MilvusError(merr.IMPORT_FAILED, "the collection was dropped or its segments changed "
                                                           "while the import ran")
            for s in segs:
                dc.meta.segments[s.id] = s
            await dc.meta.notify()
        with contextlib.suppress(Exception):
            await dc.store.delete(spec["manifest_key"])
        log.info("import completed", job=job.jobID, collection=coll, rows=total, segments=len(segs),
                 spark_seconds=manifest.get("spark_seconds"), job_seconds=manifest.get("seconds"))

    async def _fail(self, job: data_coord_pb2.ImportJob, reason: str) -> None:
        """Remove every file the job may have written, then record why it failed."""
        await self.cleanup_files(job)
        job.state = IS.ImportFailed
        job.reason = reason[:MAX_REASON]
        job.complete_ts = int(time.time())
        job.segmentIDs[:] = []
        job.row_count = 0
        await self._save(job)
        log.warning("import failed", job=job.jobID, collection=job.collectionID, reason=job.reason)

    async def cleanup_files(self, job: data_coord_pb2.ImportJob) -> None:
        store = self.dc.store
        if job.spec:
            spec = json.loads(job.spec)
            coll, part = int(spec["collection_id"]), int(spec["partition_id"])
            for k in range(int(spec["segment_count"])):
                await store.delete_prefix(paths.segment_prefix(coll, part, int(spec["segment_id_start"]) + k))
        with contextlib.suppress(Exception):
            await store.delete(self._manifest_key(job))


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(raw).decode()
