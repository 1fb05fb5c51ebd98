"""The IndexNode service (Milvus 2.3's internal/indexnode): runs the index builds DataCoord
assigns it (CreateJob), at most `index_build_slots` at once, the rest queued; keeps each job's
outcome until DataCoord has recorded it and drops it (QueryJobs, DropJobs).

It holds no meta and writes nothing to etcd: a job is its request (kmilvus.indexnode.task), and a
node that restarts forgets its jobs, which DataCoord sees (QueryJobs answers IndexStateNone) and
assigns again. Each assignment carries a new `index_version`, part of the file's path, so an old
attempt still running somewhere never overwrites what a newer one wrote
(docs/architecture/indexes.md).

A build runs in a thread, which cannot be interrupted: a cancelled job is forgotten at once, but
keeps its slot until its thread returns and writes no file (`Job.cancelled`), so the node never
runs more builds than its slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import components as roles
from kmilvus import metrics
from kmilvus.config import Config
from kmilvus.indexnode import task
from kmilvus.log import get_logger
from kmilvus.proto import index_node_pb2, index_node_pb2_grpc
from kmilvus.sessionutil import always_valid
from kmilvus.util import merr, metricsinfo

log = get_logger(__name__)
IndexState = common_pb2.IndexState
KEEP_ENDED = 600.0  # seconds an ended job's outcome waits for DataCoord (it drops it once recorded)
# Failures of the infrastructure, not of the build, and a build given up because this node's
# session lapsed: DataCoord assigns the build again (Milvus' IndexState.Retry). Anything else
# (bad params, a corrupt binlog) fails the build for good.
RETRIABLE = (OSError, MemoryError, TimeoutError, task.BuildCancelled)


@dataclass
class Job:
    """One build this node was given; `info` is what QueryJobs answers for it."""

    req: index_node_pb2.CreateJobRequest
    info: index_node_pb2.IndexTaskInfo
    runner: asyncio.Task[None] | None = field(default=None, repr=False)
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    ended_at: float = 0.0  # monotonic; 0 while queued or running


class IndexNode(index_node_pb2_grpc.IndexNodeServicer):
    role = roles.INDEXNODE

    def __init__(self, cfg: Config, store, registry: roles.Registry, server_id: int):
        self.cfg = cfg
        self.store = store
        self.registry = registry
        self.server_id = server_id
        self.jobs: dict[int, Job] = {}  # buildID → its newest attempt here
        self._slots = asyncio.Semaphore(cfg.index_build_slots)
        self._building = 0
        self._runners: set[asyncio.Task[None]] = set()  # every build task, cancelled ones until their thread returns
        self._stopped = False
        self.session_valid: Callable[[], Awaitable[bool]] = always_valid  # the Node sets its session's check

    async def start(self) -> None:
        self._stopped = False

    async def stop(self) -> None:
        """Refuse new jobs, drop the others, and wait for their threads."""
        self._stopped = True
        self._cancel(list(self.jobs))
        if self._runners:
            await asyncio.gather(*self._runners, return_exceptions=True)

    async def drop_all(self) -> None:
        """Cancel and forget every job: after its session was lost, DataCoord has assigned them
        again (to this node under its new ID, or another)."""
        self._cancel(list(self.jobs))

    # RPCs ---------------------------------------------------------------------------------
    @merr.rpc(milvus_pb2.GetMetricsResponse)
    async def GetMetrics(self, req, context=None):
        return await metricsinfo.self_metrics(self, req, {"index_build_slots": self.cfg.index_build_slots})

    @merr.rpc(milvus_pb2.ComponentStates)
    async def GetComponentStates(self, req, context=None):
        return roles.healthy(self.server_id, self.role)

    @merr.rpc()
    async def CreateJob(self, req: index_node_pb2.CreateJobRequest, context=None):
        """Start the build unless this attempt (or a newer one) is already here: DataCoord
        retries a CreateJob whose answer it lost. An older attempt of the build is cancelled.
        No await between the look and the change: two CreateJobs cannot both start one."""
        self._check_cluster(req.clusterID)
        if self._stopped:
            raise merr.MilvusError(merr.SERVICE_UNAVAILABLE, "the IndexNode is stopping")
        self._forget_ended()
        old = self.jobs.get(req.buildID)
        if old is not None and old.req.index_version >= req.index_version:
            return merr.success()
        if old is not None:
            self._cancel([req.buildID])
        info = index_node_pb2.IndexTaskInfo(
            buildID=req.buildID, index_version=req.index_version, state=IndexState.Unissued
        )
        job = Job(req, info)
        job.runner = asyncio.create_task(self._run(job), name=f"index-build-{req.segmentID}")
        self._runners.add(job.runner)
        job.runner.add_done_callback(self._runners.discard)
        self.jobs[req.buildID] = job
        return merr.success()

    @merr.rpc(index_node_pb2.QueryJobsResponse)
    async def QueryJobs(self, req: index_node_pb2.QueryJobsRequest, context=None):
        """Each asked build's state; IndexStateNone for one this node does not have."""
        self._check_cluster(req.clusterID)
        resp = index_node_pb2.QueryJobsResponse(status=merr.success(), clusterID=req.clusterID)
        for build_id in req.buildIDs:
            job = self.jobs.get(build_id)
            if job is None:
                resp.index_infos.add(buildID=build_id, state=IndexState.IndexStateNone)
            else:
                resp.index_infos.append(job.info)
        return resp

    @merr.rpc()
    async def DropJobs(self, req: index_node_pb2.DropJobsRequest, context=None):
        """Forget these builds, cancelling any still running (recorded, or no longer wanted)."""
        self._check_cluster(req.clusterID)
        self._cancel(list(req.buildIDs))
        return merr.success()

    @merr.rpc(index_node_pb2.GetJobStatsResponse)
    async def GetJobStats(self, req, context=None):
        """Slots and load; a stopping node offers no slot. A cancelled build whose thread still
        runs counts as in progress: it still holds its core."""
        self._forget_ended()
        queued = sum(1 for j in self.jobs.values() if j.info.state == IndexState.Unissued)
        return index_node_pb2.GetJobStatsResponse(
            status=merr.success(),
            total_job_num=len(self.jobs),
            in_progress_job_num=self._building,
            enqueue_job_num=queued,
            task_slots=0 if self._stopped else self.cfg.index_build_slots,
        )

    # Jobs ---------------------------------------------------------------------------------
    def _check_cluster(self, cluster: str) -> None:
        if cluster and cluster != self.cfg.cluster:
            raise merr.invalid(f"index job of cluster {cluster!r} sent to an IndexNode of {self.cfg.cluster!r}")

    async def _run(self, job: Job) -> None:
        req, info = job.req, job.info
        async with self._slots:
            info.state = IndexState.InProgress
            self._building += 1
            work = asyncio.ensure_future(task.build(self.store, req, job.cancelled, self.session_valid))
            try:
                # Shielded: a cancelled job keeps its slot until the build's thread returns.
                result = await asyncio.shield(work)
            except asyncio.CancelledError:
                job.cancelled.set()
                with contextlib.suppress(BaseException):
                    await work
                log.info("index build given up", segment=req.segmentID, build=req.buildID, version=req.index_version)
                raise
            except Exception as exc:
                retriable = isinstance(exc, RETRIABLE)
                log.error(
                    "index build failed", segment=req.segmentID, index=req.index_name, retry=retriable, exc_info=True
                )
                info.state = IndexState.Retry if retriable else IndexState.Failed
                info.fail_reason = f"{type(exc).__name__}: {exc}"
                metrics.INDEX_BUILDS.labels("retry" if retriable else "failed").inc()
                return
            finally:
                self._building -= 1
                job.ended_at = time.monotonic()
        info.index_file_keys.extend(result.index_file_keys)
        info.serialized_size, info.num_rows = result.serialized_size, result.num_rows
        info.state = IndexState.Finished
        metrics.INDEX_BUILDS.labels("finished").inc()
        log.info("segment index built", segment=req.segmentID, index=req.index_name, rows=result.num_rows)

    def _cancel(self, build_ids: list[int]) -> None:
        """Forget these jobs now; their builds stop (a thread already building finishes, writing
        nothing, and keeps its slot until then)."""
        for b in build_ids:
            job = self.jobs.pop(b, None)
            if job is not None:
                job.cancelled.set()
                if job.runner is not None:
                    job.runner.cancel()

    def _forget_ended(self) -> None:
        """Ended jobs DataCoord never dropped (it died between recording and DropJobs) go after
        `KEEP_ENDED`; a DataCoord that did not record one finds IndexStateNone and assigns again."""
        now = time.monotonic()
        for b, job in list(self.jobs.items()):
            if job.ended_at and now - job.ended_at > KEEP_ENDED:
                del self.jobs[b]
