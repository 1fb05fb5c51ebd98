"""What both jobs share: the spec argument, events, the SparkSession, manifests, failures.

A job runs on Spark (`main` under spark-submit, or `run_on` in the warm driver) or in-process
(`kmilvus.spark.inprocess`, in a thread of the coordinator); all go through `execute`, so the
manifest, the events and the failure reports are the same on every route.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
EVENT_PREFIX = "KMILVUS_JOB "
EVENTS_ENV = "KMILVUS_JOB_EVENTS"
# An in-process run receives its events here instead of stdout (several jobs share the process).
EVENT_SINK: contextvars.ContextVar[Callable[[dict], None] | None] = contextvars.ContextVar(
    "kmilvus_job_event_sink", default=None
)


class JobFailure(Exception):
    """The job cannot complete; `problems` are what the manifest and the caller report."""

    def __init__(self, problems: list[dict]):
        self.problems = problems
        super().__init__(problems[0].get("message") or problems[0].get("reason", "job failed"))


def load_spec(arg: str) -> dict:
    """The job spec: inline JSON, or the path of a JSON file (`@path` works too)."""
    arg = arg.strip()
    spec: dict[str, Any]
    if arg.startswith("{"):
        spec = json.loads(arg)
        return spec
    arg = arg.removeprefix("@")
    with open(arg) as f:
        spec = json.load(f)
        return spec


def emit(event: str, **fields) -> None:
    """One JSON event on stdout (the driver log) and, for local runs, in the runner's events file."""
    rec = {"event": event, "ts": round(time.time(), 3), **fields}
    sink = EVENT_SINK.get()
    if sink is not None:
        sink(rec)
        return
    line = json.dumps(rec, default=str)
    print(EVENT_PREFIX + line, flush=True)
    path = os.environ.get(EVENTS_ENV)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def progress(phase: str, **counts) -> None:
    emit("progress", progress={"phase": phase, **counts})


def session(app_name: str):
    """The SparkSession spark-submit configured (master, conf); quiet logs."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def write_manifest(storage_uri: str, key: str, manifest: dict) -> None:
    from kmilvus.storage import ObjectStore

    store = ObjectStore.from_uri(storage_uri)
    store.write_sync(key, json.dumps(manifest, indent=1, sort_keys=True, default=str).encode())


def failed_manifest(spec: dict, problems: list[dict], started: float) -> dict:
    return {
        "kind": spec.get("kind"),
        "job_id": spec.get("job_id"),
        "collection_id": spec.get("collection_id"),
        "status": "failed",
        "error": problems[0],
        "errors": problems[:20],
        "segments": [],
        "rows": 0,
        "seconds": round(time.time() - started, 3),
    }


def execute(spec: dict, run: Callable[[dict], dict], started: float) -> int:
    """Run the job, write its manifest (completed or failed) and its last event; the exit code.

    Both routes (spark-submit, in-process) end here, so they report alike."""
    try:
        manifest = run(spec)
    except JobFailure as f:
        write_manifest(spec["storage_uri"], spec["manifest_key"], failed_manifest(spec, f.problems, started))
        emit("failed", error=str(f), problems=f.problems[:5])
        return 1
    except BaseException as exc:  # noqa: BLE001 - reported in the manifest, then re-raised
        problem = {
            "file": None,
            "row": None,
            "field": None,
            "reason": f"{type(exc).__name__}: {exc}"[:2000],
            "message": f"{type(exc).__name__}: {exc}"[:2000],
        }
        try:
            write_manifest(spec["storage_uri"], spec["manifest_key"], failed_manifest(spec, [problem], started))
        finally:
            emit("failed", error=problem["reason"], trace=traceback.format_exc()[-4000:])
        return 1
    manifest["seconds"] = round(time.time() - started, 3)
    write_manifest(spec["storage_uri"], spec["manifest_key"], manifest)
    emit(
        "completed",
        progress={"phase": "completed", "rows": manifest.get("rows", 0)},
        segments=len(manifest.get("segments", [])),
        seconds=manifest["seconds"],
    )
    return 0


def main(kind: str, run) -> int:
    """Entry point: `spark-submit <kind>_job.py SPEC` where SPEC is JSON or a JSON file path."""
    if len(sys.argv) < 2:
        print(f"usage: {kind}_job.py SPEC_JSON_OR_PATH", file=sys.stderr)
        return 2
    started = time.time()
    spec = load_spec(sys.argv[1])
    if spec.get("kind") != kind:
        print(f"spec kind {spec.get('kind')!r} is not {kind!r}", file=sys.stderr)
        return 2
    spark = session(f"kmilvus-{kind}-{spec.get('collection_id')}-{spec.get('job_id')}")
    try:
        return run_on(spark, spec, run, started)
    finally:
        spark.stop()


def run_on(spark, spec: dict, run, started: float) -> int:
    """One job on a SparkSession: its own (`main`) or the warm driver's shared one
    (`warm_driver.py`); the exit code."""
    emit("running", kind=spec.get("kind"), job_id=spec.get("job_id"), app_id=spark.sparkContext.applicationId)
    return execute(spec, lambda s: run(spark, s), started)


def prefetched(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """`items`, produced by a thread up to `depth` ahead: the in-process route reads the next
    record batches while the current one is checked and written (pyarrow releases the GIL in
    both), the overlap Spark gets from its tasks. Stops the thread when the consumer stops."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((done, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            q.put((done, exc))

    thread = threading.Thread(target=produce, name="kmilvus-job-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = q.get()
            if item is done:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                q.get_nowait()  # unblock a producer waiting to put
        thread.join()
