"""DataCoord's Spark jobs: bulk import and compaction RPCs, their lifecycle, and the hooks
DataCoord calls (`start_jobs`, `stop_jobs`, `cancel_collection_jobs`).

`DataCoordJobsMixin` is a base class of DataCoord. The jobs run as SparkApplications through a
`kmilvus.spark.JobRunner`: by default `LocalSparkRunner` (spark-submit --master local[N]); the
operator plugs in its SparkApplication-CR runner with `set_job_runner()` before start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile

from kmilvus.datacoord.compaction import CompactionManager
from kmilvus.datacoord.import_manager import ImportManager
from kmilvus.log import get_logger
from kmilvus.meta import Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2
from kmilvus.spark.runner import JobRunner, LocalSparkRunner
from kmilvus.util import merr

log = get_logger(__name__)


def make_runner(cfg) -> JobRunner:
    """The runner `cfg.spark_runner` names ("local"; others are plugged in by the operator)."""
    if cfg.spark_runner != "local":
        log.warning("no JobRunner plugged in for spark_runner; running Spark jobs locally",
                    spark_runner=cfg.spark_runner)
    work = cfg.spark_work_dir or os.path.join(tempfile.gettempdir(), "kmilvus-spark", cfg.cluster)
    return LocalSparkRunner(master=cfg.spark_master, work_dir=work, spark_submit=cfg.spark_submit)


class DataCoordJobsMixin:
    """Import / compaction RPCs and job lifecycle for DataCoord (state lives on first use)."""

    # ---------------------------------------------------------------------------- plumbing
    def _jobs_state(self) -> None:
        if getattr(self, "_jobs_ready", False):
            return
        self._jobs_ready = True
        if getattr(self, "job_runner", None) is None:
            self.job_runner = make_runner(self.cfg)
        self._job_sem = asyncio.Semaphore(max(1, self.cfg.spark_max_concurrent_jobs))
        self._job_locks: dict[int, asyncio.Lock] = {}
        self.imports = ImportManager(self)
        self.compactions = CompactionManager(self)
        self._policy_task: asyncio.Task | None = None
        self._gc_task: asyncio.Task | None = None

    def set_job_runner(self, runner: JobRunner) -> None:
        """Use `runner` for SparkApplications (call before start)."""
        self.job_runner = runner

    def job_slots(self) -> asyncio.Semaphore:
        self._jobs_state()
        return self._job_sem

    def collection_job_lock(self, coll: int) -> asyncio.Lock:
        self._jobs_state()
        return self._job_locks.setdefault(coll, asyncio.Lock())

    # ---------------------------------------------------------------------------- lifecycle
    async def start_jobs(self) -> None:
        self._jobs_state()
        await self.imports.load()
        await self.compactions.load()
        self._gc_task = asyncio.create_task(self._collect_leftovers(), name="datacoord-compaction-gc")
        self._policy_task = asyncio.create_task(self._compaction_policy(), name="datacoord-compaction-policy")

    async def stop_jobs(self) -> None:
        self._jobs_state()
        for t in (self._policy_task, self._gc_task):
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        # Local applications are this process' children: stop them with it (their jobs fail and
        # are cleaned up on restart). Applications on a cluster outlive the coordinator and are
        # followed again after a restart.
        kill = isinstance(self.job_runner, LocalSparkRunner)
        for mgr in (self.imports, self.compactions):
            mgr.kill_on_cancel = kill
            await mgr.cancel_tasks(list(mgr.tasks))
            mgr.kill_on_cancel = True

    async def _collect_leftovers(self) -> None:
        try:
            await self.compactions.collect()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried by the policy loop
            log.warning("compaction garbage collection failed", error=str(exc))

    async def _compaction_policy(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.compaction_check_interval)
            try:
                if self.cfg.auto_compaction:
                    await self.compactions.apply_policy()
                await self.compactions.collect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                log.warning("compaction policy step failed", error=str(exc))

    async def cancel_collection_jobs(self, collection_id: int) -> None:
        """DropCollection: stop every job of the collection (their Spark applications included),
        wait until none runs, and delete their etcd keys. Files are the drop's to delete."""
        self._jobs_state()
        coll = collection_id
        async with self.collection_job_lock(coll):
            imports = [j.jobID for j in self.imports.of_collection(coll)]
            compactions = [j.compactionID for j in self.compactions.of_collection(coll)]
            await self.imports.cancel_tasks(imports)
            await self.compactions.cancel_tasks(compactions)
            # A job whose monitor had already ended may still have a handle to release.
            for j in self.imports.of_collection(coll):
                await self.imports.cancel_handle(j.handle)
                await self.imports.release_handle(j.handle)
            for j in self.compactions.of_collection(coll):
                await self.compactions.cancel_handle(j.handle)
                await self.compactions.release_handle(j.handle)
            await self.kv.txn([Op.delete_prefix(keys.import_job_prefix(coll)),
                               Op.delete_prefix(keys.compaction_job_prefix(coll))])
            self.imports.forget_collection(coll)
            self.compactions.forget_collection(coll)
        self._job_locks.pop(coll, None)
        if imports or compactions:
            log.info("collection jobs cancelled", collection=coll, imports=len(imports),
                     compactions=len(compactions))

    # ---------------------------------------------------------------------------- RPCs
    @merr.rpc(data_coord_pb2.ImportJobResponse)
    async def Import(self, req: data_coord_pb2.ImportJobRequest, context=None):
        self._jobs_state()
        job = await self.imports.create(req)
        return data_coord_pb2.ImportJobResponse(jobID=job.jobID)

    @merr.rpc(data_coord_pb2.GetImportJobResponse)
    async def GetImportJob(self, req: data_coord_pb2.GetImportJobRequest, context=None):
        self._jobs_state()
        job = self.imports.jobs.get(req.jobID)
        if job is None:
            raise merr.MilvusError(merr.IMPORT_FAILED, f"import task {req.jobID} not found")
        return data_coord_pb2.GetImportJobResponse(job=job)

    @merr.rpc(data_coord_pb2.ListImportJobsResponse)
    async def ListImportJobs(self, req: data_coord_pb2.ListImportJobsRequest, context=None):
        self._jobs_state()
        jobs = sorted((j for j in self.imports.jobs.values()
                       if not req.collectionID or j.collectionID == req.collectionID),
                      key=lambda j: (j.create_ts, j.jobID))
        if req.limit > 0:
            jobs = jobs[-req.limit:]
        return data_coord_pb2.ListImportJobsResponse(jobs=jobs)

    @merr.rpc(data_coord_pb2.CompactResponse)
    async def Compact(self, req: data_coord_pb2.CompactRequest, context=None):
        self._jobs_state()
        job = await self.compactions.trigger(req.collectionID, manual=True, segment_ids=list(req.segmentIDs),
                                             target_size=req.target_size)
        return data_coord_pb2.CompactResponse(compactionID=job.compactionID, plan_count=len(job.plans))

    @merr.rpc(data_coord_pb2.GetCompactionJobsResponse)
    async def GetCompactionJobs(self, req: data_coord_pb2.GetCompactionJobsRequest, context=None):
        self._jobs_state()
        if req.compactionID:
            job = self.compactions.jobs.get(req.compactionID)
            if job is None:
                raise merr.MilvusError(merr.COMPACTION_FAILED, f"compaction {req.compactionID} not found")
            return data_coord_pb2.GetCompactionJobsResponse(jobs=[job])
        jobs = sorted(self.compactions.of_collection(req.collectionID), key=lambda j: j.compactionID)
        return data_coord_pb2.GetCompactionJobsResponse(jobs=jobs)
