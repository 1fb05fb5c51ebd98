"""Small jobs without a JVM: the job code run in a thread of this process, and the router that
sends each application to it or to Spark by the size of its input.

A cold `spark-submit` costs seconds of JVM start before the first row moves; a 10,000-row import needs well
under a second of work. `InProcessRunner` runs the SAME job package (`kmilvus_jobs`) through the
same `common.execute` — same validation, binlog writer, manifest, events and failure reports —
on pyarrow record batches (`importer.run_local`, `compactor.run_local`), in a thread so the
event loop stays free (pyarrow releases the GIL while it reads, checks and writes).

It reports the spark-operator states like the other runners; a run does not outlive this
process: after a restart its handle reports COMPLETED if the run had written its completed
manifest (DataCoord then commits it), else FAILED, and DataCoord cleans the job up, as it does for
a local spark-submit stopped with its coordinator. Cancelling is cooperative (between
record batches) and waits until the thread is done.

`RoutingRunner` wraps the configured Spark runner (the warm local driver, local spark-submit, or
the operator's SparkApplication runner): a job whose input is at most `max_bytes` and that the job code can run
without Spark (`local_route_refusal`) runs in-process; the rest goes to Spark.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from kmilvus.log import get_logger
from kmilvus.spark import application
from kmilvus.spark.runner import JobRunner, JobState, JobStatus
from kmilvus.util import memory

log = get_logger(__name__)
RUNNER = "inprocess"


def job_module(name: str) -> ModuleType:
    """`kmilvus_jobs.<name>`: the package spark-submit's drivers and workers import too."""
    import importlib

    return importlib.import_module(f"kmilvus_jobs.{name}")


@dataclass
class _Run:
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread | None = None
    events: list[dict] = field(default_factory=list)
    rc: int | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # an event came, or the run ended

    def report(self, event: dict | None = None) -> None:
        """From the job's thread: record `event` and wake the coordinator's monitor."""
        if event is not None:
            self.events.append(event)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody follows the job any more
            self.loop.call_soon_threadsafe(self.changed.set)


class InProcessRunner(JobRunner):
    """Run an application's job in a thread of this process (see the module docstring)."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    async def submit(self, app: dict) -> dict:
        name = app["metadata"]["name"]
        spec = application.job_spec_of(app)
        run = _Run(asyncio.get_running_loop())
        run.thread = threading.Thread(target=self._main, args=(spec, run), name=f"job-{name}", daemon=True)
        self._runs[name] = run
        run.thread.start()
        log.info("job running in-process", app=name, kind=spec.get("kind"))
        return {"runner": RUNNER, "name": name, "storage_uri": spec["storage_uri"], "manifest": spec["manifest_key"]}

    @staticmethod
    def _main(spec: dict, run: _Run) -> None:
        started = time.time()
        try:
            common = job_module("common")
            common.EVENT_SINK.set(run.report)
            module = job_module({"import": "importer", "compact": "compactor"}[spec["kind"]])
            common.emit("running", kind=spec["kind"], job_id=spec.get("job_id"), app_id=RUNNER)
            run.rc = common.execute(spec, lambda s: module.run_local(s, run.cancel.is_set), started)
        except BaseException as exc:  # noqa: BLE001 - the job could not even start: report it as its failure
            run.events.append({"event": "failed", "error": f"{type(exc).__name__}: {exc}"})
            run.rc = 1
        finally:
            # A job's batches are freed by now, but the allocator keeps their pages for reuse: hand
            # them back, so an import does not leave the coordinator hundreds of MiB larger.
            memory.release()
            run.report()

    async def state(self, handle: dict) -> JobStatus:
        run = self._runs.get(handle["name"])
        if run is None:  # a restarted coordinator: the run ended with the old one
            if await asyncio.to_thread(_completed, handle):
                return JobStatus(JobState.COMPLETED, "", {"phase": "completed"})
            return JobStatus(JobState.FAILED, "the in-process job ended with the coordinator that ran it")
        events = list(run.events)
        progress: dict[str, Any] = next((e.get("progress") for e in reversed(events) if e.get("progress")), {}) or {}
        if run.cancel.is_set():
            done = run.thread is None or not run.thread.is_alive()
            return JobStatus(JobState.FAILED if done else JobState.FAILING, "cancelled", progress)
        if run.rc is None:
            running = any(e.get("event") == "running" for e in events)
            return JobStatus(JobState.RUNNING if running else JobState.SUBMITTED, "", progress)
        if run.rc == 0:
            return JobStatus(JobState.COMPLETED, "", progress)
        error = next((str(e["error"]) for e in reversed(events) if e.get("event") == "failed" and e.get("error")), "")
        return JobStatus(JobState.FAILED, error or f"the in-process job ended with {run.rc}", progress)

    async def wait(self, handle: dict, seconds: float) -> None:
        """Return as soon as the job reports an event or ends (a small job takes well under a
        second: a full poll interval would be most of it)."""
        run = self._runs.get(handle["name"])
        if run is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.changed.wait(), seconds)
        run.changed.clear()

    async def cancel(self, handle: dict) -> None:
        run = self._runs.get(handle["name"])
        if run is None or run.thread is None:
            return
        run.cancel.set()
        await asyncio.to_thread(run.thread.join)
        log.info("in-process job cancelled", app=handle["name"])

    async def release(self, handle: dict) -> None:
        self._runs.pop(handle["name"], None)

    def outlives_coordinator(self, handle: dict) -> bool:
        return False


def _completed(handle: dict) -> bool:
    """Whether the run left a completed manifest (its last act) before its process ended."""
    from kmilvus.spark.tracking import read_manifest
    from kmilvus.storage import ObjectStore

    if not handle.get("manifest"):
        return False
    manifest = read_manifest(ObjectStore.from_uri(handle["storage_uri"]), handle["manifest"])
    return manifest is not None and manifest.get("status") == "completed"


def input_bytes(spec: dict) -> int:
    """What a job reads: its import files (sizes as DataCoord's inspection found them), or its
    compaction's source binlogs."""
    if spec.get("kind") == "import":
        return sum(int(f.get("size", 0)) if isinstance(f, dict) else 1 << 62 for f in spec["files"])
    return sum(int(b.get("size", 0)) for plan in spec["plans"] for s in plan["sources"] for b in s["binlogs"])


def local_refusal(spec: dict, max_bytes: int) -> str | None:
    """Why a job goes to Spark (None: it runs in-process)."""
    size = input_bytes(spec)
    if size > max_bytes:
        return f"{size} bytes of input, more than {max_bytes}"
    if spec.get("kind") == "import":
        result: str | None = job_module("importer").local_route_refusal(spec)
        return result
    return None


class RoutingRunner(JobRunner):
    """Small jobs in-process, the rest on `spark` (see the module docstring)."""

    def __init__(self, spark: JobRunner, max_bytes: int, local: InProcessRunner | None = None):
        self.spark = spark
        self.local = local or InProcessRunner()
        self.max_bytes = max_bytes

    def _of(self, handle: dict) -> JobRunner:
        return self.local if handle.get("runner") == RUNNER else self.spark

    async def submit(self, app: dict) -> dict:
        spec = application.job_spec_of(app)
        try:
            refusal = await asyncio.to_thread(local_refusal, spec, self.max_bytes)
        except Exception as exc:  # noqa: BLE001 - Spark's run reports a bad input properly
            refusal = f"{type(exc).__name__}: {exc}"
        if refusal is None:
            return await self.local.submit(app)
        log.info("job goes to Spark", app=app["metadata"]["name"], why=refusal)
        return await self.spark.submit(app)

    async def state(self, handle: dict) -> JobStatus:
        return await self._of(handle).state(handle)

    async def cancel(self, handle: dict) -> None:
        await self._of(handle).cancel(handle)

    async def release(self, handle: dict) -> None:
        await self._of(handle).release(handle)

    async def wait(self, handle: dict, seconds: float) -> None:
        await self._of(handle).wait(handle, seconds)

    def outlives_coordinator(self, handle: dict) -> bool:
        return self._of(handle).outlives_coordinator(handle)

    async def close(self) -> None:
        await self.spark.close()
