"""Following a submitted SparkApplication to its end, and reading the manifest it leaves."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

from kmilvus.spark.runner import JobRunner, JobState, JobStatus


async def follow(
    runner: JobRunner,
    handle: dict,
    *,
    poll: float,
    timeout: float,
    on_change: Callable[[JobStatus], Awaitable[None]] | None = None,
) -> JobStatus:
    """Poll `runner` until the application is COMPLETED / FAILED / SUBMISSION_FAILED.

    `on_change` sees every new (state, progress) pair. Past `timeout` seconds the application
    is cancelled and reported FAILED.
    """
    deadline = time.monotonic() + timeout
    last = None
    while True:
        st = await runner.state(handle)
        key = (st.state, json.dumps(st.progress, sort_keys=True, default=str))
        if key != last and on_change is not None:
            await on_change(st)
        last = key
        if st.state.terminal:
            return st
        if time.monotonic() > deadline:
            await runner.cancel(handle)
            return JobStatus(JobState.FAILED, f"timed out after {timeout:.0f} s", st.progress)
        await runner.wait(handle, poll)


def read_manifest(store, key: str) -> dict | None:
    """The job's manifest (None when it wrote none)."""
    try:
        manifest: dict | None = json.loads(store.read_sync(key))
        return manifest
    except (FileNotFoundError, OSError, ValueError):
        return None


def manifest_error(manifest: dict | None) -> str:
    """The failure a manifest reports, as one line naming the file, the row and the reason."""
    if not manifest:
        return ""
    err = manifest.get("error") or {}
    return str(err.get("message") or err.get("reason") or "")
