"""The Proxy's bulk-import and compaction RPCs (MilvusService), as pymilvus 3.0 sends them:

    utility.do_bulk_insert(name, files=[...])     → Import                → [job ID]
    utility.get_bulk_insert_state(task_id)         → GetImportState
    utility.list_bulk_insert_tasks(limit, name)    → ListImportTasks
    bulk_writer.bulk_import / get_import_progress / list_import_jobs (the RESTful API's
    jobs/import routes)                            → ImportV2 / GetImportProgress / ListImports
    Collection.compact() / MilvusClient.compact()  → ManualCompaction       → compaction ID
    get_compaction_state / wait_for_compaction_completed → GetCompactionState
    get_compaction_plans / get_compaction_tasks    → GetCompactionStateWithPlans

DataCoord runs the jobs (Spark); the Proxy resolves names and translates its job records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus.log import get_logger
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.proxy import partition_key
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_PARTITION

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

log = get_logger(__name__)
MB = 1024 * 1024
MAX_TARGET_SIZE_MB = (2**63 - 1) // MB
TS = common_pb2.CompactionTaskState


IS = common_pb2.ImportState
JS = internal_pb2.ImportJobState
# A job's state as Milvus 2.4+ names it (ImportJobState) for the RESTful API.
JOB_STATES = {
    IS.ImportPending: JS.Pending,
    IS.ImportStarted: JS.Importing,
    IS.ImportPersisted: JS.Importing,
    IS.ImportFlushed: JS.Importing,
    IS.ImportCompleted: JS.Completed,
    IS.ImportFailed: JS.Failed,
    IS.ImportFailedAndCleaned: JS.Failed,
}


def progress_percent(job: data_coord_pb2.ImportJob) -> int:
    """How far a job is, in percent, from the phase its last progress event names."""
    if job.state == common_pb2.ImportCompleted:
        return 100
    try:
        progress = json.loads(job.progress) if job.progress else {}
    except ValueError:
        progress = {}
    # "completed": stored, not yet served by the QueryNodes (kmilvus/proxy/import_visibility.py).
    phases = {"inspected": 10, "counted": 30, "validated": 50, "written": 90, "completed": 99}
    return phases.get(progress.get("phase", ""), 0)


def job_phase(job: data_coord_pb2.ImportJob) -> str:
    try:
        return str((json.loads(job.progress) if job.progress else {}).get("phase", ""))
    except ValueError:
        return ""


def _time_text(unix_seconds: int) -> str:
    """Milvus' import times: RFC 3339 in UTC, empty until they happen."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_seconds)) if unix_seconds else ""


def job_id_of(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise merr.MilvusError(
            merr.IMPORT_FAILED, f"parse job id failed, err=strconv.ParseInt: parsing {raw!r}: invalid syntax"
        ) from None


def import_state(job: data_coord_pb2.ImportJob) -> milvus_pb2.GetImportStateResponse:
    """An ImportJob as pymilvus' BulkInsertState reads it (state, row_count, infos, ...)."""
    resp = milvus_pb2.GetImportStateResponse(
        state=job.state,
        row_count=job.row_count,
        id_list=list(job.id_ranges),
        id=job.jobID,
        collection_id=job.collectionID,
        segment_ids=list(job.segmentIDs),
        create_ts=job.create_ts,
    )
    infos = {
        "files": ",".join(job.files),
        "collection": job.collection_name,
        "partition": job.partition_name,
        "failed_reason": job.reason,
        "progress_percent": str(progress_percent(job)),
        "spark_state": job.spark_state,
        "spark_application": job.app_name,
        "expected_rows": str(job.expected_rows),
        "input_bytes": str(job.input_bytes),
        "phase": job_phase(job),
    }
    if job.complete_ts:
        infos["persist_cost"] = str(max(0, job.complete_ts - job.create_ts))
    for k, v in infos.items():
        resp.infos.add(key=k, value=v)
    return resp


def compaction_counts(job: data_coord_pb2.CompactionJob) -> dict[str, int]:
    states = [p.state for p in job.plans]
    return {
        "executing": sum(
            s in (TS.CompactionTaskStateExecuting, TS.CompactionTaskStatePipelining, TS.CompactionTaskStateMetaSaved)
            for s in states
        ),
        "completed": sum(s == TS.CompactionTaskStateCompleted for s in states),
        "failed": sum(s == TS.CompactionTaskStateFailed for s in states),
        "timeout": sum(s == TS.CompactionTaskStateTimeout for s in states),
    }


def merge_infos(job: data_coord_pb2.CompactionJob) -> list[milvus_pb2.CompactionMergeInfo]:
    return [
        milvus_pb2.CompactionMergeInfo(
            sources=list(p.sources),
            target=p.targets[0] if p.targets else -1,
            targets=list(p.targets),
            plan_id=p.planID,
            trigger_id=job.compactionID,
            collection_id=job.collectionID,
            partition_id=p.partitionID,
            channel=p.channel,
            type=common_pb2.CompactionTypeMix,
            state=p.state,
            failure_reason=p.reason,
        )
        for p in job.plans
    ]


class ProxyJobsMixin(ProxyHost):
    """MilvusService RPCs for bulk import and compaction (a base class of Proxy)."""

    # ---------------------------------------------------------------------------- import
    async def _import(self, db: str, collection: str, partition: str, files: list[str], options) -> int:
        meta = await self.meta_cache.get(db, collection)
        if partition_key.key_field(meta.schema) is not None:
            # Milvus routes imported rows by key hash; the import job writes one partition's
            # segments, so refuse rather than place rows where Milvus would not.
            why = (
                "not allow to set partition name for collection with partition key"
                if partition
                else "bulk import into a partition key collection is not supported by kmilvus yet"
            )
            raise merr.MilvusError(merr.IMPORT_FAILED, f"{why}: importing data failed")
        part_id = meta.partition(partition)
        if not files:
            raise merr.invalid("import requires at least one file")
        resp = await self.datacoord.Import(
            data_coord_pb2.ImportJobRequest(
                collectionID=meta.id,
                partitionID=part_id,
                collection_name=meta.name,
                partition_name=partition or DEFAULT_PARTITION,
                schema=meta.schema.SerializeToString(),
                vchannels=meta.vchannels,
                files=files,
                options=list(options),
            )
        )
        merr.check(resp.status)
        log.info("bulk import accepted", collection=meta.name, job=resp.jobID, files=len(files))
        return resp.jobID

    @merr.rpc(milvus_pb2.ImportResponse)
    async def Import(self, req: milvus_pb2.ImportRequest, context=None):
        job = await self._import(req.db_name, req.collection_name, req.partition_name, list(req.files), req.options)
        return milvus_pb2.ImportResponse(tasks=[job])

    @merr.rpc(internal_pb2.ImportResponse)
    async def ImportV2(self, req: internal_pb2.ImportRequest, context=None):
        """Milvus 2.4+'s import: each ImportFile is one file here (Milvus' numpy imports, one file
        per field, are not supported: kmilvus reads Parquet, JSON and CSV)."""
        if not req.files:
            raise merr.MilvusError(merr.IMPORT_FAILED, "import request is empty")
        files = []
        for f in req.files:
            if len(f.paths) != 1:
                raise merr.MilvusError(
                    merr.IMPORT_FAILED,
                    f"import failed: each file entry must name exactly one Parquet, JSON or CSV file, "
                    f"got {len(f.paths)} paths {list(f.paths)[:4]} (numpy imports are not supported)",
                )
            files.append(f.paths[0])
        job = await self._import(req.db_name, req.collection_name, req.partition_name, files, req.options)
        return internal_pb2.ImportResponse(jobID=str(job))

    async def _import_job(self, job_id: int) -> data_coord_pb2.ImportJob:
        resp = await self.datacoord.GetImportJob(data_coord_pb2.GetImportJobRequest(jobID=job_id))
        merr.check(resp.status)
        return (await self._as_reported([resp.job]))[0]

    async def _as_reported(self, jobs: Sequence[data_coord_pb2.ImportJob]) -> list[data_coord_pb2.ImportJob]:
        """DataCoord's jobs as users see them: Completed once a Strong read shows their rows."""
        out = []
        for job, state in zip(jobs, await self.import_visibility.states(jobs), strict=True):
            if state != job.state:
                shown = data_coord_pb2.ImportJob()
                shown.CopyFrom(job)
                shown.state = state
                job = shown
            out.append(job)
        return out

    @merr.rpc(internal_pb2.GetImportProgressResponse)
    async def GetImportProgress(self, req: internal_pb2.GetImportProgressRequest, context=None):
        job = await self._import_job(job_id_of(req.jobID))
        state = JOB_STATES.get(job.state, JS.Pending)
        done = _time_text(job.complete_ts) if state in (JS.Completed, JS.Failed) else ""
        imported = job.row_count if state == JS.Completed else 0
        total = job.expected_rows or job.row_count
        resp = internal_pb2.GetImportProgressResponse(
            state=state,
            reason=job.reason,
            progress=progress_percent(job),
            collection_name=job.collection_name,
            complete_time=done,
            imported_rows=imported,
            total_rows=total,
            start_time=_time_text(job.create_ts),
        )
        state_name = internal_pb2.ImportJobState.Name(state)
        for f in job.files:
            resp.task_progresses.add(
                file_name=f, progress=resp.progress, state=state_name, complete_time=done, reason=job.reason
            )
        return resp

    @merr.rpc(internal_pb2.ListImportsResponse)
    async def ListImports(self, req: internal_pb2.ListImportsRequest, context=None):
        """The jobs of one collection, or of every collection of the request's database."""
        if req.collection_name:
            colls = {(await self.meta_cache.get(req.db_name, req.collection_name)).id}
        else:
            shown = await self.rootcoord.ShowCollections(milvus_pb2.ShowCollectionsRequest(db_name=req.db_name))
            merr.check(shown.status)
            colls = set(shown.collection_ids)
        resp = await self.datacoord.ListImportJobs(
            data_coord_pb2.ListImportJobsRequest(collectionID=next(iter(colls)) if len(colls) == 1 else 0)
        )
        merr.check(resp.status)
        out = internal_pb2.ListImportsResponse()
        for j in await self._as_reported([j for j in resp.jobs if j.collectionID in colls]):
            out.jobIDs.append(str(j.jobID))
            out.states.append(JOB_STATES.get(j.state, JS.Pending))
            out.reasons.append(j.reason)
            out.progresses.append(progress_percent(j))
            out.collection_names.append(j.collection_name)
        return out

    @merr.rpc(milvus_pb2.GetImportStateResponse)
    async def GetImportState(self, req: milvus_pb2.GetImportStateRequest, context=None):
        return import_state(await self._import_job(req.task))

    @merr.rpc(milvus_pb2.ListImportTasksResponse)
    async def ListImportTasks(self, req: milvus_pb2.ListImportTasksRequest, context=None):
        coll = 0
        if req.collection_name:
            coll = (await self.meta_cache.get(req.db_name, req.collection_name)).id
        resp = await self.datacoord.ListImportJobs(
            data_coord_pb2.ListImportJobsRequest(collectionID=coll, limit=req.limit)
        )
        merr.check(resp.status)
        return milvus_pb2.ListImportTasksResponse(tasks=[import_state(j) for j in await self._as_reported(resp.jobs)])

    # ---------------------------------------------------------------------------- compaction
    async def _compaction_collection(self, db: str, name: str, coll_id: int) -> int:
        if name:
            return (await self.meta_cache.get(db, name)).id
        if coll_id:
            return coll_id
        raise merr.invalid("compaction needs a collection name or ID")

    @merr.rpc(milvus_pb2.ManualCompactionResponse)
    async def ManualCompaction(self, req: milvus_pb2.ManualCompactionRequest, context=None):
        if req.majorCompaction or req.l0Compaction:
            raise merr.invalid("only mix compaction (merging small segments) is supported")
        if req.target_size > MAX_TARGET_SIZE_MB:  # in bytes it must still fit the internal int64
            raise merr.invalid(f"target_size must be at most {MAX_TARGET_SIZE_MB} (MB), got {req.target_size}")
        coll = await self._compaction_collection(req.db_name, req.collection_name, req.collectionID)
        resp = await self.datacoord.Compact(
            data_coord_pb2.CompactRequest(
                collectionID=coll, segmentIDs=list(req.segment_ids), target_size=max(0, req.target_size) * MB
            )
        )
        merr.check(resp.status)
        log.info("manual compaction", collection=coll, compaction=resp.compactionID, plans=resp.plan_count)
        return milvus_pb2.ManualCompactionResponse(compactionID=resp.compactionID, compactionPlanCount=resp.plan_count)

    async def _compaction_jobs(self, compaction_id: int, coll: int = 0) -> list[data_coord_pb2.CompactionJob]:
        resp = await self.datacoord.GetCompactionJobs(
            data_coord_pb2.GetCompactionJobsRequest(compactionID=compaction_id, collectionID=coll)
        )
        merr.check(resp.status)
        return list(resp.jobs)

    @merr.rpc(milvus_pb2.GetCompactionStateResponse)
    async def GetCompactionState(self, req: milvus_pb2.GetCompactionStateRequest, context=None):
        jobs = await self._compaction_jobs(req.compactionID) if req.compactionID else []
        if not jobs:  # Milvus: an unknown compaction has no executing plan, so it is Completed
            return milvus_pb2.GetCompactionStateResponse(state=common_pb2.Completed)
        job = jobs[0]
        n = compaction_counts(job)
        return milvus_pb2.GetCompactionStateResponse(
            state=job.state,
            executingPlanNo=n["executing"],
            completedPlanNo=n["completed"],
            failedPlanNo=n["failed"],
            timeoutPlanNo=n["timeout"],
        )

    @merr.rpc(milvus_pb2.GetCompactionPlansResponse)
    async def GetCompactionStateWithPlans(self, req: milvus_pb2.GetCompactionPlansRequest, context=None):
        if req.compactionID:
            jobs = await self._compaction_jobs(req.compactionID)
        else:
            coll = await self._compaction_collection(req.db_name, req.collection_name, req.collection_id)
            jobs = await self._compaction_jobs(0, coll)
        resp = milvus_pb2.GetCompactionPlansResponse(
            state=common_pb2.Completed if all(j.state == common_pb2.Completed for j in jobs) else common_pb2.Executing
        )
        for j in jobs:
            resp.mergeInfos.extend(merge_infos(j))
        return resp
