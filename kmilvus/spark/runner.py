"""Running SparkApplications: the `JobRunner` interface and the local `spark-submit` runner.

A runner takes a SparkApplication (`sparkoperator.k8s.io/v1beta2`, as `kmilvus.spark.application`
builds it) and reports the states Kubeflow's spark-operator puts in
`status.applicationState.state`. DataCoord only talks to this interface, so the operator can plug
in a runner that creates SparkApplication custom resources; without a cluster, `LocalSparkRunner`
runs the SAME application through `spark-submit --master local[N]` with the same state machine:

    ""  →  SUBMITTED (spark-submit started)  →  RUNNING (the job's SparkSession is up)
        →  COMPLETED (exit 0) | FAILED (non-zero exit, cancelled, or the process vanished)
    SUBMISSION_FAILED when spark-submit cannot be started at all.

Handles are JSON-able dicts: DataCoord persists them in etcd and asks about them again after a
restart (a local run survives its coordinator: it records its exit code in its work directory).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from kmilvus.log import get_logger
from kmilvus.spark import application

log = get_logger(__name__)
EVENTS_ENV = "KMILVUS_JOB_EVENTS"  # file the job appends its JSON events to (local runs)
INLINE_ARG_LIMIT = 64 * 1024  # longer arguments are handed over as a file


class JobState(StrEnum):
    NEW = ""
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    SUBMISSION_FAILED = "SUBMISSION_FAILED"
    PENDING_RERUN = "PENDING_RERUN"
    INVALIDATING = "INVALIDATING"
    SUCCEEDING = "SUCCEEDING"
    FAILING = "FAILING"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.SUBMISSION_FAILED)


@dataclass
class JobStatus:
    state: JobState
    message: str = ""
    progress: dict = field(default_factory=dict)  # the job's latest progress event, if known


class JobRunner(abc.ABC):
    """What DataCoord needs from whatever runs a SparkApplication."""

    @abc.abstractmethod
    async def submit(self, app: dict) -> dict:
        """Start `app`; return a JSON-able handle."""

    @abc.abstractmethod
    async def state(self, handle: dict) -> JobStatus:
        """Where the application is now."""

    @abc.abstractmethod
    async def cancel(self, handle: dict) -> None:
        """Stop the application; returns once nothing of it runs any more."""

    async def release(self, handle: dict) -> None:  # noqa: B027 - an optional hook: by default nothing to release
        """Forget a finished application (remove its leftovers). Optional."""

    async def wait(self, handle: dict, seconds: float) -> None:
        """Until the next state check: `seconds`, or less when the runner knows of a change."""
        await asyncio.sleep(seconds)

    def outlives_coordinator(self, handle: dict) -> bool:
        """Whether the application keeps running when this process stops (on a cluster it does;
        a local one is stopped with its coordinator and cleaned up after the restart)."""
        return True

    async def close(self) -> None:  # noqa: B027 - an optional hook: by default nothing runs between jobs
        """The coordinator stops: end what the runner keeps between applications. Optional."""


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def find_spark_submit(configured: str = "") -> str:
    if configured:
        return configured
    cand = Path(sys.executable).with_name("spark-submit")
    if cand.exists():
        return str(cand)
    cand = Path(spark_home()) / "bin" / "spark-submit"
    if cand.exists():
        return str(cand)
    found = shutil.which("spark-submit")
    if found:
        return found
    raise FileNotFoundError("spark-submit not found: install pyspark into this environment")


class LocalSparkRunner(JobRunner):
    """`spark-submit --master local[N]` for a SparkApplication, one child process per run."""

    vanished = "the spark-submit process ended without an exit code (killed, or the machine restarted)"

    def __init__(
        self,
        *,
        master: str = "local[2]",
        work_dir: str = "",
        spark_submit: str = "",
        extra_conf: dict | None = None,
        env: dict | None = None,
    ):
        self.master = master
        self.work_dir = Path(work_dir or os.path.join(tempfile.gettempdir(), "kmilvus-spark"))
        self.spark_submit = spark_submit
        self.extra_conf = {"spark.ui.enabled": "false", **(extra_conf or {})}
        self.env = dict(env or {})
        self._procs: dict[str, subprocess.Popen] = {}
        self._cancelled: set[str] = set()

    # ------------------------------------------------------------------------------- submit
    def spark_conf(self, app: dict) -> dict[str, str]:
        """The Spark settings of `app` on this machine (its sparkConf, memory, this runner's extras)."""
        spec = app["spec"]
        conf = dict(spec.get("sparkConf") or {})
        conf.update(self.extra_conf)
        drv, exe = spec.get("driver") or {}, spec.get("executor") or {}
        if drv.get("memory"):
            conf["spark.driver.memory"] = str(drv["memory"])
        if exe.get("memory"):
            conf.setdefault("spark.executor.memory", str(exe["memory"]))
        return conf

    def command(self, app: dict, workdir: Path) -> tuple[list[str], dict]:
        """The spark-submit argv and environment that run `app` locally."""
        spec = app["spec"]
        name = app["metadata"]["name"]
        argv = [
            find_spark_submit(self.spark_submit),
            "--master",
            self.master,
            "--deploy-mode",
            "client",
            "--name",
            name,
        ]
        conf = self.spark_conf(app)
        if "spark.driver.memory" in conf:  # the driver JVM's heap is set before it starts
            argv += ["--driver-memory", conf.pop("spark.driver.memory")]
        for k, v in sorted(conf.items()):
            argv += ["--conf", f"{k}={v}"]
        py_files = [application.local_path(p) for p in (spec.get("deps") or {}).get("pyFiles") or []]
        if py_files:
            argv += ["--py-files", ",".join(py_files)]
        argv.append(application.local_path(spec["mainApplicationFile"]))
        for i, arg in enumerate(spec.get("arguments") or []):
            arg = str(arg)
            if len(arg) > INLINE_ARG_LIMIT:
                path = workdir / f"arg{i}.json"
                path.write_text(arg)
                arg = str(path)
            argv.append(arg)
        return argv, self.environment(app, workdir)

    def environment(self, app: dict, workdir: Path) -> dict:
        """The environment of `app`'s driver: its pods' plain variables, this venv's Python (where
        `kmilvus_jobs` is installed) for driver and workers, the events file in `workdir`."""
        spec = app["spec"]
        drv, exe = spec.get("driver") or {}, spec.get("executor") or {}
        env = dict(os.environ)
        for e in (drv.get("env") or []) + (exe.get("env") or []):
            if "value" in e and e["name"] not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
                env[e["name"]] = str(e["value"])
        env["SPARK_HOME"] = spark_home()
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env[EVENTS_ENV] = str(workdir / "events.jsonl")
        env.update(self.env)
        return env

    async def submit(self, app: dict) -> dict:
        # Clearing the work dir, writing the command and forking spark-submit block: off the loop.
        handle, proc = await asyncio.to_thread(self._start, app)
        if proc is not None:
            self._procs[handle["name"]] = proc
            log.info("spark application submitted", app=handle["name"], pid=proc.pid, master=self.master)
        return handle

    def _start(self, app: dict) -> tuple[dict, subprocess.Popen | None]:
        name = app["metadata"]["name"]
        workdir = self.work_dir / name
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        handle = {"runner": "local", "name": name, "workdir": str(workdir), "pid": 0, "create_time": 0.0}
        try:
            argv, env = self.command(app, workdir)
        except (OSError, KeyError) as exc:
            (workdir / "submission-error").write_text(str(exc))
            return handle, None
        (workdir / "command.json").write_text(json.dumps(argv))
        rc = workdir / "rc"
        script = (
            'rc=0; "$@" || rc=$?; echo "$rc" > "$KMILVUS_RC_FILE.tmp" && mv "$KMILVUS_RC_FILE.tmp" "$KMILVUS_RC_FILE"'
        )
        env["KMILVUS_RC_FILE"] = str(rc)
        with open(workdir / "driver.log", "ab") as out:  # the child keeps its own descriptor
            try:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", script, "sh", *argv],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    cwd=str(workdir),
                    start_new_session=True,
                )
            except OSError as exc:
                (workdir / "submission-error").write_text(str(exc))
                return handle, None
        handle["pid"] = proc.pid
        handle["create_time"] = _create_time(proc.pid)
        return handle, proc

    # -------------------------------------------------------------------------------- state
    def _alive(self, handle: dict) -> bool:
        name, pid = handle["name"], handle.get("pid") or 0
        proc = self._procs.get(name)
        if proc is not None:
            return proc.poll() is None
        if not pid:
            return False
        ct = _create_time(pid)
        return ct is not None and abs(ct - float(handle.get("create_time") or 0)) < 1.0

    async def state(self, handle: dict) -> JobStatus:
        workdir = Path(handle["workdir"])
        events = _read_events(workdir / "events.jsonl")
        progress: dict[str, Any] = next((e.get("progress") for e in reversed(events) if e.get("progress")), {}) or {}
        if (workdir / "submission-error").exists():
            return JobStatus(JobState.SUBMISSION_FAILED, (workdir / "submission-error").read_text(), progress)
        if handle["name"] in self._cancelled or (workdir / "cancelled").exists():
            if self._alive(handle):
                return JobStatus(JobState.FAILING, "cancelled", progress)
            return JobStatus(JobState.FAILED, "cancelled", progress)
        # Alive first, exit code second: a job writes its exit code before it lets go, so one
        # that ends between the two looks is found by the second, never taken for vanished.
        alive = self._alive(handle)
        rc_path = workdir / "rc"
        if rc_path.exists():
            proc = self._procs.pop(handle["name"], None)
            if proc is not None:
                proc.wait()
            try:
                rc = int(rc_path.read_text().strip() or "1")
            except ValueError:
                rc = 1
            if rc == 0:
                return JobStatus(JobState.COMPLETED, "", progress)
            return JobStatus(JobState.FAILED, _failure_message(workdir, events, rc), progress)
        if alive:
            running = any(e.get("event") == "running" for e in events)
            return JobStatus(JobState.RUNNING if running else JobState.SUBMITTED, "", progress)
        if not handle.get("pid"):
            return JobStatus(JobState.NEW, "", progress)
        return JobStatus(JobState.FAILED, self.vanished, progress)

    # ------------------------------------------------------------------------------- cancel
    async def cancel(self, handle: dict) -> None:
        name = handle["name"]
        self._cancelled.add(name)
        with contextlib.suppress(FileNotFoundError):  # no work dir: nothing to mark
            await asyncio.to_thread((Path(handle["workdir"]) / "cancelled").write_text, "cancelled")
        if not self._alive(handle):
            return
        await self._stop_run(handle)
        log.info("spark application cancelled", app=name)

    async def _stop_run(self, handle: dict) -> None:
        """End a cancelled application that still runs: its spark-submit process tree."""
        await asyncio.to_thread(_kill_tree, int(handle["pid"]))
        proc = self._procs.pop(handle["name"], None)
        if proc is not None:
            await asyncio.to_thread(proc.wait)

    def outlives_coordinator(self, handle: dict) -> bool:
        return False

    async def release(self, handle: dict) -> None:
        self._procs.pop(handle["name"], None)
        self._cancelled.discard(handle["name"])
        shutil.rmtree(handle["workdir"], ignore_errors=True)


def _create_time(pid: int) -> float | None:
    try:
        import psutil

        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p.create_time()
    except Exception:  # noqa: BLE001 - psutil cannot see the process: it is gone
        return None


def _kill_tree(pid: int, grace: float = 5.0) -> None:
    """SIGTERM the process and every descendant (PySpark's daemon has its own process group),
    then SIGKILL whatever is left after `grace` seconds; wait until all are gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace)
    # Late-forked workers (a daemon forking while we signalled) are caught on a second sweep.
    extra = []
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            extra += p.children(recursive=True)
    for p in alive + extra:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive + extra, timeout=grace)


def _read_events(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _failure_message(workdir: Path, events: list[dict], rc: int) -> str:
    for e in reversed(events):
        if e.get("event") == "failed" and e.get("error"):
            return str(e["error"])
    tail = ""
    try:
        with open(workdir / "driver.log", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4000))
            tail = f.read().decode(errors="replace")
    except OSError:
        pass
    lines = [ln for ln in tail.splitlines() if ln.strip() and " WARN " not in ln and " INFO " not in ln]
    return f"spark-submit exited with {rc}: " + " | ".join(lines[-5:])[-1500:]
