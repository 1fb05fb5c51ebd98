"""DataCoord's Spark jobs: the `JobService` (bulk imports and compactions, their runner,
concurrency limit, per-collection locks and background loops) and the RPCs that reach it.

The jobs run as SparkApplications through a `kmilvus.spark.JobRunner`: by default
`WarmSparkRunner` (one long-lived local driver; `LocalSparkRunner`, spark-submit per job, with
`spark_warm` off); the operator plugs in its
SparkApplication-CR runner with `DataCoord.set_job_runner()` before start. Either way a job whose
input is at most `inprocess_job_max_mb` runs in this process instead (`RoutingRunner`: no JVM to
start). The service sees DataCoord only through a `JobPort`.
"""

from __future__ import annotations

import asyncio
import os
import tempfile

from kmilvus.datacoord.compaction import CompactionManager
from kmilvus.datacoord.import_manager import ImportManager
from kmilvus.datacoord.job_lifecycle import JobPort
from kmilvus.log import get_logger
from kmilvus.meta import Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2
from kmilvus.spark.inprocess import RoutingRunner
from kmilvus.spark.runner import JobRunner, LocalSparkRunner
from kmilvus.spark.warm import WarmSparkRunner
from kmilvus.util import merr
from kmilvus.util.tasks import BackgroundTasks

log = get_logger(__name__)


def make_runner(cfg) -> JobRunner:
    """The runner `cfg.spark_runner` names ("local": the warm driver, or one spark-submit per job
    with `spark_warm` off; others are plugged in by the operator)."""
    if cfg.spark_runner != "local":
        log.warning(
            "no JobRunner plugged in for spark_runner; running Spark jobs locally", spark_runner=cfg.spark_runner
        )
    work = cfg.spark_work_dir or os.path.join(tempfile.gettempdir(), "kmilvus-spark", cfg.cluster)
    if cfg.spark_warm:
        return WarmSparkRunner(
            master=cfg.spark_master,
            work_dir=work,
            spark_submit=cfg.spark_submit,
            idle_timeout=cfg.spark_warm_idle_timeout,
        )
    return LocalSparkRunner(master=cfg.spark_master, work_dir=work, spark_submit=cfg.spark_submit)


class JobService:
    """Imports and compactions of one DataCoord: started, stopped and cancelled together."""

    def __init__(self, port: JobPort, runner: JobRunner | None = None):
        self.port = port
        self._runner = runner
        self.slots = asyncio.Semaphore(max(1, port.cfg.spark_max_concurrent_jobs))
        self._locks: dict[int, asyncio.Lock] = {}
        self.imports = ImportManager(port, self)
        self.compactions = CompactionManager(port, self)
        self._loops = BackgroundTasks()

    @property
    def runner(self) -> JobRunner:
        """The runner plugged in, else the one the config names (made on first use); small jobs
        are routed in-process unless `inprocess_job_max_mb` is 0."""
        if self._runner is None:
            self.runner = make_runner(self.port.cfg)
        assert self._runner is not None
        return self._runner

    @runner.setter
    def runner(self, runner: JobRunner) -> None:
        limit = self.port.cfg.inprocess_job_max_mb
        self._runner = RoutingRunner(runner, limit * 1024 * 1024) if limit > 0 else runner

    def collection_lock(self, coll: int) -> asyncio.Lock:
        """Held while a job commits to a collection's meta, and while its jobs are cancelled."""
        return self._locks.setdefault(coll, asyncio.Lock())

    async def start(self) -> None:
        await self.imports.load()
        await self.compactions.load()
        self._loops.spawn(self.compactions.collect(), "datacoord-compaction-gc")
        self._loops.every(
            lambda: self.port.cfg.compaction_check_interval, self._policy_step, "datacoord-compaction-policy"
        )

    async def _policy_step(self) -> None:
        if self.port.cfg.auto_compaction:
            await self.compactions.apply_policy()
        await self.compactions.collect()

    async def stop(self) -> None:
        await self._loops.stop()
        # Local applications (spark-submit children, in-process threads) are stopped with this
        # process (their jobs fail and are cleaned up on restart). Applications on a cluster
        # outlive the coordinator and are followed again after a restart.
        for mgr in (self.imports, self.compactions):
            mgr.kill_on_cancel = False
            await mgr.cancel_tasks(list(mgr.tasks))
            mgr.kill_on_cancel = True
        if self._runner is not None:
            await self._runner.close()  # the warm Spark driver, if one runs

    async def cancel_collection(self, coll: int) -> None:
        """DropCollection: stop every job of the collection (their Spark applications included),
        wait until none runs, and delete their etcd keys. Files are the drop's to delete."""
        async with self.collection_lock(coll):
            imports = await self.imports.cancel_collection(coll)
            compactions = await self.compactions.cancel_collection(coll)
            await self.port.kv.txn(
                [Op.delete_prefix(keys.import_job_prefix(coll)), Op.delete_prefix(keys.compaction_job_prefix(coll))]
            )
        self._locks.pop(coll, None)
        if imports or compactions:
            log.info("collection jobs cancelled", collection=coll, imports=imports, compactions=compactions)

    async def cancel_partition(self, coll: int, part: int) -> None:
        """DropPartition: fail every unfinished job writing into the partition (imports into it,
        compactions with a plan in it) and remove its outputs. A commit already under way
        finishes first (the lock), and one after the partition's drop record is refused by it."""
        async with self.collection_lock(coll):
            imports = await self.imports.cancel_partition(coll, part)
            compactions = await self.compactions.cancel_partition(coll, part)
        if imports or compactions:
            log.info(
                "partition jobs cancelled", collection=coll, partition=part, imports=imports, compactions=compactions
            )


class DataCoordJobsRPCs:
    """DataCoord's import and compaction RPCs, answered by its `jobs` service."""

    jobs: JobService

    # ---------------------------------------------------------------------------- RPCs
    @merr.rpc(data_coord_pb2.ImportJobResponse)
    async def Import(self, req: data_coord_pb2.ImportJobRequest, context=None):
        job = await self.jobs.imports.create(req)
        return data_coord_pb2.ImportJobResponse(jobID=job.jobID)

    @merr.rpc(data_coord_pb2.GetImportJobResponse)
    async def GetImportJob(self, req: data_coord_pb2.GetImportJobRequest, context=None):
        job = self.jobs.imports.jobs.get(req.jobID)
        if job is None:
            raise merr.MilvusError(merr.IMPORT_FAILED, f"import task {req.jobID} not found")
        return data_coord_pb2.GetImportJobResponse(job=job)

    @merr.rpc(data_coord_pb2.ListImportJobsResponse)
    async def ListImportJobs(self, req: data_coord_pb2.ListImportJobsRequest, context=None):
        jobs = sorted(
            (j for j in self.jobs.imports.jobs.values() if not req.collectionID or j.collectionID == req.collectionID),
            key=lambda j: (j.create_ts, j.jobID),
        )
        if req.limit > 0:
            jobs = jobs[-req.limit :]
        return data_coord_pb2.ListImportJobsResponse(jobs=jobs)

    @merr.rpc(data_coord_pb2.CompactResponse)
    async def Compact(self, req: data_coord_pb2.CompactRequest, context=None):
        job = await self.jobs.compactions.trigger(
            req.collectionID, manual=True, segment_ids=list(req.segmentIDs), target_size=req.target_size
        )
        return data_coord_pb2.CompactResponse(compactionID=job.compactionID, plan_count=len(job.plans))

    @merr.rpc(data_coord_pb2.GetCompactionJobsResponse)
    async def GetCompactionJobs(self, req: data_coord_pb2.GetCompactionJobsRequest, context=None):
        if req.compactionID:
            # An unknown ID has no tasks: Milvus' summaryCompactionState calls that Completed.
            job = self.jobs.compactions.jobs.get(req.compactionID)
            return data_coord_pb2.GetCompactionJobsResponse(jobs=[job] if job is not None else [])
        jobs = sorted(self.jobs.compactions.of_collection(req.collectionID), key=lambda j: j.compactionID)
        return data_coord_pb2.GetCompactionJobsResponse(jobs=jobs)
