"""Jobs above the in-process limit on a warm local Spark: one long-lived driver, not one
`spark-submit` (and one JVM start) per job.

`WarmSparkRunner` starts `python -m kmilvus_jobs.warm_driver` — a Python child holding one
SparkSession `local[N]` — on the first job, hands it each job as a JSON line on its stdin, and
stops it after `idle_timeout` seconds without a job, or when the coordinator stops (`close`).
The driver runs the SAME entry as spark-submit (`common.run_on` → `importer.run` /
`compactor.run`) and leaves the same events and exit-code files in the job's work directory,
so the states are `LocalSparkRunner`'s.

Why a long-lived driver rather than Spark Connect: the jobs use the SparkContext
(`defaultParallelism`, job groups) and run `kmilvus_jobs` in their Python workers (this
virtualenv's Python, where the package is installed); a Connect client has neither, so Connect
would need a second copy of the job entry.

Like a spark-submit child, a job does not outlive its coordinator: the driver exits when its
stdin closes, and after a restart the job (no exit code, driver gone) is FAILED and cleaned up.
Cancel cancels the job's Spark job group; a job still running `cancel_grace` seconds later is
ended by stopping the driver (its other jobs fail with it; the next job starts a new one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from kmilvus.log import get_logger
from kmilvus.spark.runner import EVENTS_ENV, LocalSparkRunner, _create_time, _kill_tree

log = get_logger(__name__)
RUNNER = "warm"


class WarmSparkRunner(LocalSparkRunner):
    """Applications on one long-lived local Spark driver (see the module docstring)."""

    vanished = "the warm Spark driver ended before the job did (killed, or its coordinator stopped)"

    def __init__(self, *, idle_timeout: float = 300.0, cancel_grace: float = 10.0, **kw):
        super().__init__(**kw)
        self.idle_timeout = idle_timeout
        self.cancel_grace = cancel_grace
        self._driver: subprocess.Popen | None = None
        self._start_lock = threading.Lock()  # submits run in threads: one driver, whole lines
        self._active: dict[str, Path] = {}  # jobs sent to the current driver: work dirs
        self._idle_since = time.monotonic()
        self._reaper: asyncio.Task | None = None
        self._stopping = False  # _stop_driver is ending the driver's tree

    @property
    def driver_pid(self) -> int | None:
        """The running warm driver's pid (None: none runs; while it is being stopped, its pid)."""
        d = self._driver
        return d.pid if d is not None and (d.poll() is None or self._stopping) else None

    # ------------------------------------------------------------------------------- submit
    async def submit(self, app: dict) -> dict:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap_idle(), name="warm-spark-idle")
        handle, _ = await asyncio.to_thread(self._start, app)
        log.info("job sent to the warm Spark driver", app=handle["name"], pid=handle["pid"])
        return handle

    def _start(self, app: dict) -> tuple[dict, None]:
        name = app["metadata"]["name"]
        workdir = self.work_dir / name
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        handle = {"runner": RUNNER, "name": name, "workdir": str(workdir), "pid": 0, "create_time": 0.0}
        (workdir / "spec.json").write_text(str(app["spec"]["arguments"][0]))
        cmd = {"op": "run", "name": name, "spec": str(workdir / "spec.json"), "workdir": str(workdir)}
        with self._start_lock:
            try:
                driver = self._driver_for(app)
                self._send(driver, cmd)
            except (OSError, KeyError, ValueError) as exc:
                (workdir / "submission-error").write_text(f"the warm Spark driver cannot take the job: {exc}")
                return handle, None
            self._active[name] = workdir
        handle["pid"] = driver.pid
        handle["create_time"] = _create_time(driver.pid) or 0.0
        return handle, None

    def _driver_for(self, app: dict) -> subprocess.Popen:
        """The running driver, or a new one configured like `app` (the first job it serves)."""
        if self._driver is not None and self._driver.poll() is None:
            return self._driver
        self._active.clear()
        home = self.work_dir / "warm-driver"
        home.mkdir(parents=True, exist_ok=True)
        conf = {**self.spark_conf(app), "spark.master": self.master, "spark.app.name": "kmilvus-warm"}
        env = self.environment(app, home)
        env.pop(EVENTS_ENV, None)  # each job writes its own events file
        with open(home / "driver.log", "ab") as out:  # the child keeps its own descriptor
            self._driver = subprocess.Popen(
                [sys.executable, "-m", "kmilvus_jobs.warm_driver", json.dumps(conf)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(home),
                start_new_session=True,
            )
        log.info("warm Spark driver started", pid=self._driver.pid, master=self.master)
        return self._driver

    @staticmethod
    def _send(driver: subprocess.Popen, cmd: dict) -> None:
        assert driver.stdin is not None
        driver.stdin.write((json.dumps(cmd) + "\n").encode())
        driver.stdin.flush()

    # -------------------------------------------------------------------------------- state
    def _alive(self, handle: dict) -> bool:
        """The job runs while it has no exit code and the driver that took it is up (a released
        job — its work dir gone — runs no more)."""
        workdir = Path(handle["workdir"])
        if (workdir / "rc").exists() or not workdir.exists():
            return False
        d = self._driver
        if d is not None and d.pid == handle.get("pid"):
            return d.poll() is None and handle["name"] in self._active
        return super()._alive(handle)  # a previous driver's job: by pid and start time

    # ------------------------------------------------------------------------------- cancel
    async def _stop_run(self, handle: dict) -> None:
        """Cancel the job's Spark job group; stop the driver if the job still runs after
        `cancel_grace` seconds."""
        await asyncio.to_thread(self._send_cancel, handle["name"])
        for _ in range(max(1, int(self.cancel_grace / 0.1))):  # the exit code is a file: look again
            if not self._alive(handle):
                return
            await asyncio.sleep(0.1)
        log.warning("a cancelled job did not stop: stopping the warm Spark driver", app=handle["name"])
        await asyncio.to_thread(self._stop_driver)

    def _send_cancel(self, name: str) -> None:
        with self._start_lock:
            if self._driver is not None:
                with contextlib.suppress(OSError):  # a broken pipe: the driver is gone
                    self._send(self._driver, {"op": "cancel", "name": name})

    async def release(self, handle: dict) -> None:
        self._active.pop(handle["name"], None)
        await super().release(handle)

    # ------------------------------------------------------------------------------ driver
    async def _reap_idle(self) -> None:
        """Stop the driver once no job has run on it for `idle_timeout` seconds."""
        while True:
            await asyncio.sleep(min(5.0, max(0.1, self.idle_timeout / 4)))
            for name, workdir in list(self._active.items()):
                if (workdir / "rc").exists() or not workdir.exists():
                    self._active.pop(name, None)
            if self._active or self.driver_pid is None:
                self._idle_since = time.monotonic()
            elif time.monotonic() - self._idle_since >= self.idle_timeout:
                log.info("warm Spark driver idle: stopping it", idle=self.idle_timeout)
                await asyncio.to_thread(self._stop_driver)

    def _stop_driver(self) -> None:
        """End the driver, its JVM and PySpark's workers; returns once all are gone (a submit
        meanwhile waits, then starts a new driver)."""
        with self._start_lock:
            d = self._driver
            if d is None:
                return
            self._stopping = True
            try:
                _kill_tree(d.pid)  # the whole tree first: once the driver is gone its JVM is not its child
                if d.stdin is not None:
                    with contextlib.suppress(OSError):
                        d.stdin.close()
                d.wait()
            finally:
                self._driver = None
                self._active.clear()
                self._stopping = False

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        await asyncio.to_thread(self._stop_driver)
