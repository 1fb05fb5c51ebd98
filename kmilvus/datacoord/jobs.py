"""DataCoord's Spark jobs: the `JobService` (bulk imports and compactions, their scheduler and
background loops) and the RPCs that reach it.

The jobs run as SparkApplications through the `JobScheduler`'s runner (job_scheduler.py), under
its concurrency limit and per-collection locks. The service sees DataCoord only through a
`JobPort`.
"""

from __future__ import annotations

from kmilvus.datacoord.compaction import CompactionManager
from kmilvus.datacoord.import_manager import ImportManager
from kmilvus.datacoord.job_lifecycle import JobPort
from kmilvus.datacoord.job_scheduler import JobScheduler
from kmilvus.log import get_logger
from kmilvus.meta import Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2
from kmilvus.spark.runner import JobRunner
from kmilvus.util import merr
from kmilvus.util.tasks import BackgroundTasks

log = get_logger(__name__)


class JobService:
    """Imports and compactions of one DataCoord: started, stopped and cancelled together."""

    def __init__(self, port: JobPort, runner: JobRunner | None = None):
        self.port = port
        self.scheduler = JobScheduler(port.cfg, runner)
        self.imports = ImportManager(port, self.scheduler)
        self.compactions = CompactionManager(port, self.scheduler)
        self._loops = BackgroundTasks()

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
        await self.scheduler.close()

    async def cancel_collection(self, coll: int) -> None:
        """DropCollection: stop every job of the collection (their Spark applications included),
        wait until none runs, and delete their etcd keys. Files are the drop's to delete."""
        async with self.scheduler.collection_lock(coll):
            imports = await self.imports.cancel_collection(coll)
            compactions = await self.compactions.cancel_collection(coll)
            await self.port.kv.txn(
                [Op.delete_prefix(keys.import_job_prefix(coll)), Op.delete_prefix(keys.compaction_job_prefix(coll))]
            )
        self.scheduler.forget(coll)
        if imports or compactions:
            log.info("collection jobs cancelled", collection=coll, imports=imports, compactions=compactions)

    async def cancel_partition(self, coll: int, part: int) -> None:
        """DropPartition: fail every unfinished job writing into the partition (imports into it,
        compactions with a plan in it) and remove its outputs. A commit already under way
        finishes first (the lock), and one after the partition's drop record is refused by it."""
        async with self.scheduler.collection_lock(coll):
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
