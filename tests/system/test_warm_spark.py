"""Jobs above the in-process limit on the warm local Spark driver (`WarmSparkRunner`): one driver
serves job after job, cancel stops a job, the driver ends with its coordinator (pipe closed or
`close`) and leaves no process behind, and a restarted coordinator fails the job it ran.
(The warm route producing the same segments as the in-process one: tests/system/test_spark_jobs.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from kmilvus.spark.runner import LocalSparkRunner
from kmilvus.spark.tracking import read_manifest
from kmilvus.spark.warm import WarmSparkRunner
from kmilvus.storage import ObjectStore
from tests.system.test_inprocess_jobs import _app, _parquet, _until_done
from tests.util import eventually, wait_until

pytestmark = pytest.mark.spark


def _running_app_ids(handle: dict) -> list[str]:
    events = [json.loads(line) for line in (Path(handle["workdir"]) / "events.jsonl").read_text().splitlines()]
    return [e["app_id"] for e in events if e["event"] == "running"]


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _manifest(tmp_path: Path) -> dict | None:
    return read_manifest(ObjectStore.from_uri((tmp_path / "store").as_uri()), "m.json")


@pytest.mark.parametrize("runner_cls", [LocalSparkRunner, WarmSparkRunner])
def test_a_job_that_ends_while_its_state_is_read_is_completed(tmp_path, runner_cls):
    """A job writes its exit code, then its process (or the warm driver's bookkeeping) lets go
    of it. A state read that looks for the exit code just before it is written and for the
    process just after it is gone must still say COMPLETED, not "vanished" (the full suite
    failed that way once, in test_idle_driver_is_stopped)."""
    workdir = tmp_path / "work" / "kmilvus-import-10-1"
    workdir.mkdir(parents=True)
    ended = subprocess.Popen(["true"])
    ended.wait()  # the job's process: gone once the state is read

    class JobEndsDuringTheRead(runner_cls):  # type: ignore[misc, valid-type]
        def _alive(self, handle: dict) -> bool:
            (workdir / "rc").write_text("0")  # the job ends between the two looks
            return super()._alive(handle)

    runner = JobEndsDuringTheRead(work_dir=str(tmp_path / "work"))
    handle = {"name": workdir.name, "workdir": str(workdir), "pid": ended.pid, "create_time": 1.0}
    st = asyncio.run(runner.state(handle))
    assert st.state.value == "COMPLETED", st


def test_jobs_share_one_driver_and_close_leaves_no_process(tmp_path):
    f = _parquet(tmp_path / "a.parquet", 5000)

    async def main() -> None:
        runner = WarmSparkRunner(work_dir=str(tmp_path / "work"))
        try:
            h1 = await runner.submit(_app(tmp_path, [f], job_id=1))
            st1, seen = await _until_done(runner, h1)
            assert st1.state.value == "COMPLETED", st1
            assert "RUNNING" in seen or "SUBMITTED" in seen
            # DropCollection cancels every job of the collection, finished and released ones too:
            # that must not touch the driver the next job runs on.
            events = _running_app_ids(h1)
            await runner.release(h1)
            await runner.cancel(h1)
            assert runner.driver_pid == h1["pid"]
            h2 = await runner.submit(_app(tmp_path, [f], job_id=2))
            st2, _ = await _until_done(runner, h2)
            assert st2.state.value == "COMPLETED", st2
            # The second job ran on the first one's driver process and SparkContext.
            assert h1["pid"] == h2["pid"] == runner.driver_pid
            assert events == _running_app_ids(h2) and len(events) == 1
            procs = _tree(h1["pid"])
            assert any("java" in p.name() for p in procs), [p.name() for p in procs]  # its JVM
        finally:
            await runner.close()
        assert runner.driver_pid is None
        assert not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    asyncio.run(main())


def test_cancel_stops_the_job_and_the_driver_takes_the_next(tmp_path):
    f = _parquet(tmp_path / "big.parquet", 1_000_000)

    async def main() -> None:
        runner = WarmSparkRunner(work_dir=str(tmp_path / "work"))
        try:
            h = await runner.submit(_app(tmp_path, [f], job_id=1))
            while (st := await runner.state(h)).state.value != "RUNNING":
                assert not st.state.terminal, st
                await runner.wait(h, 0.2)
            await runner.cancel(h)
            st = await runner.state(h)
            assert st.state.value == "FAILED" and st.message == "cancelled", st
            assert not runner._alive(h)  # cancel returned: nothing of the job runs
            manifest = _manifest(tmp_path)
            assert manifest is None or manifest["status"] == "failed", manifest
            small = _parquet(tmp_path / "small.parquet", 100)
            h2 = await runner.submit(_app(tmp_path, [small], job_id=2))
            assert (await _until_done(runner, h2))[0].state.value == "COMPLETED"
        finally:
            await runner.close()

    asyncio.run(main())


def test_driver_ends_with_its_coordinator_and_a_restart_fails_the_job(tmp_path):
    """The coordinator dies (its end of the driver's stdin closes): the driver and its JVM end by
    themselves; a restarted coordinator reports the job it ran FAILED, not running."""
    f = _parquet(tmp_path / "big.parquet", 1_000_000)

    async def main() -> dict:
        runner = WarmSparkRunner(work_dir=str(tmp_path / "work"))
        h = await runner.submit(_app(tmp_path, [f], job_id=1))
        while (st := await runner.state(h)).state.value != "RUNNING":
            assert not st.state.terminal, st
            await runner.wait(h, 0.2)
        procs = _tree(h["pid"])
        assert runner._driver is not None and runner._driver.stdin is not None
        runner._driver.stdin.close()  # what the coordinator's exit does to the pipe
        runner._driver.wait(timeout=120)
        await asyncio.to_thread(
            wait_until, lambda: not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], 60
        )
        if runner._reaper is not None:
            runner._reaper.cancel()
        return h

    handle = asyncio.run(main())
    restarted = WarmSparkRunner(work_dir=str(tmp_path / "work"))
    assert not restarted.outlives_coordinator(handle)
    st = asyncio.run(restarted.state(handle))
    assert st.state.value == "FAILED" and "warm Spark driver ended" in st.message, st
    assert (_manifest(tmp_path) or {}).get("status") != "completed"


def test_idle_driver_is_stopped(tmp_path):
    f = _parquet(tmp_path / "a.parquet", 100)

    async def main() -> None:
        runner = WarmSparkRunner(work_dir=str(tmp_path / "work"), idle_timeout=0.5)
        try:
            h = await runner.submit(_app(tmp_path, [f], job_id=1))
            procs: dict[int, psutil.Process] = {}
            while not (st := await runner.state(h)).state.terminal:  # the tree while the job runs
                with contextlib.suppress(psutil.NoSuchProcess):
                    procs.update((p.pid, p) for p in _tree(h["pid"]))
                await runner.wait(h, 0.1)
            assert st.state.value == "COMPLETED" and any("java" in p.name() for p in procs.values())
            await eventually(lambda: runner.driver_pid is None, 60, "the idle driver stopped")
            assert not [p for p in procs.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        finally:
            await runner.close()

    asyncio.run(main())


def test_import_above_the_limit_runs_warm_and_stopping_the_node_leaves_no_process(node_factory, tmp_path):
    """A standalone-shaped node with the defaults (warm on) and every job on Spark: a bulk import
    through pymilvus runs on the warm driver; stopping the node ends the driver and its JVM."""
    from pymilvus import CollectionSchema, DataType, FieldSchema, MilvusClient, connections, utility
    from pymilvus.client.types import BulkInsertState

    node = node_factory(inprocess_job_max_mb=0)
    f = _parquet(tmp_path / "rows.parquet", 3000)
    client = MilvusClient(uri=node.uri)
    alias = "w" + uuid.uuid4().hex[:8]
    connections.connect(alias, uri=node.uri)
    try:
        client.create_collection(
            "warm",
            schema=CollectionSchema(
                [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=4)]
            ),
        )
        task = utility.do_bulk_insert("warm", files=[str(f)], using=alias)
        st = wait_until(
            lambda: (
                (s := utility.get_bulk_insert_state(task, using=alias)).state
                in (BulkInsertState.ImportCompleted, BulkInsertState.ImportFailed)
                and s
            ),
            600,
            0.2,
        )
        assert st.state == BulkInsertState.ImportCompleted, st.infos
        assert client.get_collection_stats("warm")["row_count"] == 3000
        jobs = node.component("datacoord").jobs
        assert json.loads(jobs.imports.jobs[task].handle)["runner"] == "warm"
        runner = jobs.scheduler.runner
        assert isinstance(runner, WarmSparkRunner) and runner.driver_pid is not None
        procs = _tree(runner.driver_pid)
    finally:
        connections.disconnect(alias)
        client.close()
    node.stop()
    assert not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
