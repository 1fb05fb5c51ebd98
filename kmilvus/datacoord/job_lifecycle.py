"""The lifecycle every DataCoord Spark job shares (bulk import, compaction), written once.

    submit: job key in etcd → spawn its monitor
    run:    prepare (spec, reserved IDs) → SparkApplication submitted under the concurrency limit
            (handle persisted) → followed to its end (state / progress persisted on change)
            → COMPLETED with a completed manifest: the kind commits its result; anything else:
            the failure (the manifest's file/row/reason first) recorded, then partial files
            removed — both decided on etcd (a commit whose answer was lost may have applied)
    resume: a restarted DataCoord follows every unfinished job again (by its handle)
    cancel: DropCollection cancels the monitors, stops and releases the applications;
            DropPartition fails the jobs that write into the partition
    fenced: a DataCoord that lost its leader lock leaves every job as etcd has it (its
            successor follows them), and deletes nothing

A kind (`ImportManager`, `CompactionManager`) only says what differs: its job message and keys,
how it prepares a spec, commits a result, records a failure and which files it may have left.
What a kind needs from DataCoord is the `JobPort`, not DataCoord itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pymilvus.grpc_gen import schema_pb2

from kmilvus.config import Config
from kmilvus.datacoord.job_scheduler import JobScheduler
from kmilvus.datacoord.meta import SegmentMeta
from kmilvus.datacoord.remover import FencedRemover
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, EtcdKV, FencedError, Op, Snapshot
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.spark import application
from kmilvus.spark import files as infiles
from kmilvus.spark.runner import JobState, JobStatus
from kmilvus.spark.tracking import follow, manifest_error, read_manifest
from kmilvus.storage import ObjectStore, paths
from kmilvus.util import merr
from kmilvus.util.retry import Backoff
from kmilvus.util.tasks import cancel_and_wait, stopping

log = get_logger(__name__)
MAX_REASON = 4000
J = TypeVar("J", data_coord_pb2.ImportJob, data_coord_pb2.CompactionJob)


@dataclass(frozen=True)
class JobPort:
    """Everything the jobs need from DataCoord: its stores, allocators and a few questions."""

    cfg: Config
    kv: EtcdKV
    store: ObjectStore
    meta: SegmentMeta
    alloc_ids: Callable[[int], Awaitable[int]]  # first of `n` fresh IDs
    alloc_ts: Callable[[], Awaitable[int]]
    channels_of: Callable[[int], list[str]]  # a collection's vchannels
    collections: Callable[[], set[int]]  # every watched collection
    schema_of: Callable[[int], schema_pb2.CollectionSchema | None]
    # RootCoord's schema now (None: gone): what a job reads and writes binlogs by
    current_schema: Callable[[int], Awaitable[schema_pb2.CollectionSchema | None]]
    rows_per_segment: Callable[[int, schema_pb2.CollectionSchema], int]
    dropping: Callable[[int], bool]  # a DropCollection is under way
    partition_dropped: Callable[[int, int], bool]  # (collection, partition) dropped or being dropped
    ttl_of: Callable[[int], Awaitable[int]]  # the collection's TTL in seconds (0: none), from RootCoord
    remover: FencedRemover  # every file deletion goes through it


def manifest_key(coll: int, kind: str, job_id: int) -> str:
    """Where a job's manifest goes: a collection-owned prefix (removed by DropCollection)."""
    return f"{paths.stats_log_prefix(coll)}_jobs/{kind}-{int(job_id)}/manifest.json"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def manifest_binlogs(entries: list[dict], prefix: str, error: tuple[int, int]) -> dict[int, internal_pb2.Binlog]:
    """A manifest's binlogs of one segment, by log ID; each must lie under the segment's `prefix`."""
    binlogs = {}
    for b in entries:
        if not b["key"].startswith(prefix):
            raise merr.MilvusError(error, f"binlog {b['key']} is outside {prefix}")
        binlogs[int(b["log_id"])] = internal_pb2.Binlog(
            logID=int(b["log_id"]),
            entries_num=int(b["rows"]),
            timestamp_from=int(b["timestamp_from"]),
            timestamp_to=int(b["timestamp_to"]),
            log_path=b["key"],
            log_size=int(b["size"]),
        )
    return binlogs


class JobLifecycle(Generic[J]):
    """The jobs of one kind: in memory, in etcd, and their monitor tasks."""

    kind = ""  # SparkApplication kind and manifest name: "import" | "compact"
    message: type[J]  # the job's protobuf message (ImportJob | CompactionJob)
    id_field = ""  # its ID field
    key_of: Callable[[int, int], str]  # catalog key of (collection, job ID)
    prefix_of: Callable[[], str]  # catalog prefix of every job of the kind

    def __init__(self, port: JobPort, scheduler: JobScheduler):
        self.port = port
        self.cfg = port.cfg
        self.scheduler = scheduler  # Spark runner, concurrency slots, per-collection locks
        self.jobs: dict[int, J] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # Cancelling a monitor also stops its application; at shutdown only those that would not
        # outlive this process (`JobRunner.outlives_coordinator`).
        self.kill_on_cancel = True

    def job_id(self, job: J) -> int:
        job_id: int = getattr(job, self.id_field)
        return job_id

    def key(self, coll: int, job_id: int) -> str:
        return self.key_of(coll, job_id)

    # ------------------------------------------------------------------ what a kind says
    def finished(self, job: J) -> bool:
        raise NotImplementedError

    async def prepare(self, job: J) -> dict:
        """Write the job's spec (and app name) into `job`; return the spec."""
        raise NotImplementedError

    async def commit(self, job: J, manifest: dict) -> None:
        """Register what a completed job made; a MilvusError fails the job instead."""
        raise NotImplementedError

    def outputs(self, job: J) -> list[tuple[int, int, int]]:
        """(collection, partition, segment) of every segment the job may have written and not
        registered yet: what a failure removes (each only if etcd does not know it)."""
        raise NotImplementedError

    def writes_into(self, job: J, part: int) -> bool:
        """Whether the unfinished job would register segments in partition `part`."""
        raise NotImplementedError

    def record_failure(self, job: J, reason: str) -> None:
        raise NotImplementedError

    def on_submitted(self, job: J) -> None:
        """The application was submitted (the handle is already set)."""

    def on_progress(self, job: J, st: JobStatus) -> None:
        """The application reported progress `st.progress` (already stored in `job.progress`)."""

    def on_resumed(self, job: J) -> None:
        """An unfinished job was loaded after a restart (re-take its reservations)."""

    def on_finished(self, job: J) -> None:
        """The job ended (completed or failed): free its reservations."""

    # ------------------------------------------------------------------ persistence
    async def load(self) -> None:
        for _, raw in await self.port.kv.get_prefix(self.prefix_of()):
            job = self.message.FromString(raw)
            self.jobs[self.job_id(job)] = job
            if not self.finished(job):
                log.info(
                    "resuming job",
                    kind=self.kind,
                    job=self.job_id(job),
                    collection=job.collectionID,
                    spark_state=job.spark_state or "-",
                )
                self.on_resumed(job)
                self._spawn(job)

    async def save(self, job: J) -> bool:
        """Persist unless the job's key is gone (its collection was dropped)."""
        key = self.key(job.collectionID, self.job_id(job))
        return await self.port.kv.txn([Op.put(key, job.SerializeToString())], [Cmp.exists(key)])

    async def submit(self, job: J) -> J:
        """Store a new job and start following it (unless it has nothing to do)."""
        await self.port.kv.put(self.key(job.collectionID, self.job_id(job)), job.SerializeToString())
        self.jobs[self.job_id(job)] = job
        if not self.finished(job):
            self._spawn(job)
        return job

    def of_collection(self, coll: int) -> list[J]:
        return [j for j in self.jobs.values() if j.collectionID == coll]

    def manifest_key(self, job: J) -> str:
        return manifest_key(job.collectionID, self.kind, self.job_id(job))

    def storage_uri(self) -> str:
        """The storage root as the Spark job sees it."""
        store = self.port.store
        return store.root_uri if store.local else self.cfg.storage_uri

    def build_app(self, spec: dict, name: str) -> dict:
        return application.from_config(self.kind, spec, name, self.cfg)

    # ------------------------------------------------------------------ run
    def _spawn(self, job: J) -> None:
        job_id = self.job_id(job)
        task = asyncio.create_task(self._run(job), name=f"{self.kind}-{job_id}")
        self.tasks[job_id] = task

        def forget(t: asyncio.Task[None]) -> None:
            if self.tasks.get(job_id) is t:
                self.tasks.pop(job_id, None)

        task.add_done_callback(forget)

    async def _run(self, job: J) -> None:
        runner = self.scheduler.runner
        try:
            if job.handle:
                status = await self._follow(json.loads(job.handle), job)
            else:
                spec = await self.prepare(job)
                app = self.build_app(spec, job.app_name)
                async with self.scheduler.slots:
                    handle = await runner.submit(app)
                    job.handle = json.dumps(handle)
                    job.spark_state = JobState.SUBMITTED.value
                    self.on_submitted(job)
                    await self.save(job)
                    status = await self._follow(handle, job)
            manifest = await asyncio.to_thread(read_manifest, self.port.store, self.manifest_key(job))
            if status.state != JobState.COMPLETED:
                await self.fail(
                    job,
                    manifest_error(manifest)
                    or status.message
                    or f"the Spark application ended {status.state.value or 'without state'}",
                )
            elif not manifest or manifest.get("status") != "completed":
                await self.fail(job, manifest_error(manifest) or "the Spark job left no manifest")
            else:
                await self.commit(job, manifest)
                await self._delete_manifest(job)
        except asyncio.CancelledError:
            if job.handle and (self.kill_on_cancel or not runner.outlives_coordinator(json.loads(job.handle))):
                await asyncio.shield(self._cancel_handle(job.handle))
            raise
        except FencedError as exc:
            # Not the leader any more: etcd keeps the job as it was, and the successor follows it
            # (and commits it). Failing it here would delete what the successor registers.
            log.warning("job left to the new leader", kind=self.kind, job=self.job_id(job), error=exc.message)
        except infiles.ImportError_ as exc:
            await self.fail(job, "; ".join(p.message() for p in exc.problems[:5]))
        except merr.MilvusError as exc:
            await self.fail(job, exc.message)
        except Exception as exc:
            log.error("job crashed", kind=self.kind, job=self.job_id(job), exc_info=True)
            await self.fail(job, f"{type(exc).__name__}: {exc}")
        finally:
            if self.finished(job):
                self.on_finished(job)
                await self._release_handle(job.handle)

    async def _follow(self, handle: dict, job: J) -> JobStatus:
        return await follow(
            self.scheduler.runner,
            handle,
            poll=self.cfg.spark_poll_interval,
            timeout=self.cfg.spark_job_timeout,
            on_change=lambda st: self._on_change(job, st),
        )

    async def _on_change(self, job: J, st: JobStatus) -> None:
        changed = st.state.value != job.spark_state
        job.spark_state = st.state.value
        if st.progress:
            job.progress = json.dumps(st.progress, sort_keys=True)
            self.on_progress(job, st)
        if changed:
            log.info(
                "job progress",
                kind=self.kind,
                job=self.job_id(job),
                spark_state=st.state.value,
                phase=st.progress.get("phase", "-"),
                rows=st.progress.get("rows", "-"),
            )
            await self.save(job)

    async def fail(self, job: J, reason: str) -> None:
        """Record why the job failed, then remove what it may have written — both decided on
        etcd, never on memory alone: a commit whose answer was lost may have registered the
        job's outputs. A job etcd already holds as finished is taken as it is there; one whose
        key is gone went with its collection (whose drop removes its files). Not the leader: the
        job is left as etcd has it, for the successor. etcd or storage away: tried again."""
        outputs = self.outputs(job)  # before the failure marks every plan done
        backoff = Backoff(0.5, 10.0)
        while True:
            try:
                await self._fail(job, reason, outputs)
                return
            except FencedError as exc:
                log.warning("job left to the new leader", kind=self.kind, job=self.job_id(job), error=exc.message)
                return
            except (Exception, asyncio.CancelledError) as exc:  # every step is idempotent
                if stopping(exc):
                    raise
                log.warning(
                    "recording a job's failure failed; retrying", kind=self.kind, job=self.job_id(job), error=repr(exc)
                )
                await backoff.sleep()

    async def _fail(self, job: J, reason: str, outputs: list[tuple[int, int, int]]) -> None:
        key = self.key(job.collectionID, self.job_id(job))
        raw = (await self.port.kv.snapshot([key])).get(key)
        if raw is None:
            log.info("failed job's collection is gone", kind=self.kind, job=self.job_id(job))
            return
        stored = self.message.FromString(raw)
        if self.finished(stored):
            # Finished meanwhile (a commit whose answer was lost); what a failure recorded
            # earlier did not remove, the garbage collector does (no unfinished job reserves it).
            job.CopyFrom(stored)
            log.warning("job already finished in etcd; kept as it is there", kind=self.kind, job=self.job_id(job))
            return
        self.record_failure(job, reason[:MAX_REASON])
        job.complete_ts = int(time.time())
        if not await self.port.kv.txn([Op.put(key, job.SerializeToString())], [Cmp.value_eq(key, raw)]):
            job.CopyFrom(stored)
            log.warning("job changed in etcd meanwhile; left as it is there", kind=self.kind, job=self.job_id(job))
            return
        self.on_finished(job)
        await self.port.remover.remove_segments(outputs, why=f"{self.kind} failed")
        await self._delete_manifest(job)
        log.warning("job failed", kind=self.kind, job=self.job_id(job), collection=job.collectionID, reason=job.reason)

    async def _delete_manifest(self, job: J) -> None:
        """The manifest of a job etcd holds as finished (or whose collection is gone)."""
        key = self.key(job.collectionID, self.job_id(job))

        def finished(snap: Snapshot, targets: list[str]) -> list[str]:
            raw = snap.get(key)
            return targets if raw is None or self.finished(self.message.FromString(raw)) else []

        try:
            await self.port.remover.remove([self.manifest_key(job)], keys=[key], decide=finished, why="job manifest")
        except FencedError:
            raise
        except Exception:  # a stray manifest is removed with its collection
            log.warning("manifest not deleted", kind=self.kind, job=self.job_id(job), exc_info=True)

    # ------------------------------------------------------------------ cancel
    async def _cancel_handle(self, handle_json: str) -> None:
        if handle_json:
            try:
                await self.scheduler.runner.cancel(json.loads(handle_json))
            except Exception:  # an application already gone needs no stop
                log.info("cancel of a Spark application failed", kind=self.kind, exc_info=True)

    async def _release_handle(self, handle_json: str) -> None:
        if handle_json:
            try:
                await self.scheduler.runner.release(json.loads(handle_json))
            except Exception:  # release only frees the runner's bookkeeping
                log.info("release of a Spark application failed", kind=self.kind, exc_info=True)

    async def cancel_tasks(self, job_ids) -> None:
        """Cancel these jobs' monitors (and so their applications) and wait until they stopped."""
        await cancel_and_wait([self.tasks[j] for j in job_ids if j in self.tasks])

    async def cancel_collection(self, coll: int) -> int:
        """Stop every job of `coll` and its application; forget them (the caller deletes their
        keys). Returns how many there were."""
        jobs = self.of_collection(coll)
        await self.cancel_tasks([self.job_id(j) for j in jobs])
        for j in jobs:  # a job whose monitor had already ended may still hold a handle
            await self._cancel_handle(j.handle)
            await self._release_handle(j.handle)
            self.jobs.pop(self.job_id(j), None)
            self.on_finished(j)
        return len(jobs)

    async def cancel_partition(self, coll: int, part: int) -> int:
        """DropPartition: stop every unfinished job that writes into the partition and fail it
        (its outputs removed). Returns how many there were."""
        jobs = [j for j in self.of_collection(coll) if not self.finished(j) and self.writes_into(j, part)]
        await self.cancel_tasks([self.job_id(j) for j in jobs])
        for j in jobs:
            await self._cancel_handle(j.handle)
            if not self.finished(j):
                await self.fail(j, f"partition {part} was dropped")
            await self._release_handle(j.handle)
        return len(jobs)
