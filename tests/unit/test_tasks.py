"""kmilvus.util.tasks: background loops go on past a failed step, a crashed task is logged, and
stop() leaves nothing running."""

from __future__ import annotations

import asyncio
import logging

from kmilvus.util.tasks import BackgroundTasks, cancel_and_wait


async def test_every_logs_a_failed_step_with_its_traceback_and_goes_on(caplog):
    calls = 0
    third = asyncio.Event()

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("the first step fails")
        if calls == 3:
            third.set()

    tasks = BackgroundTasks()
    tasks.every(0, step, "loop")
    await asyncio.wait_for(third.wait(), 10)
    await tasks.stop()
    assert len(tasks) == 0
    [rec] = [r for r in caplog.records if r.getMessage() == "periodic step failed"]
    assert rec.exc_info[0] is RuntimeError and rec.kv == {"task": "loop"}


async def test_stop_cancels_every_task_and_a_crashed_one_is_logged(caplog):
    tasks = BackgroundTasks()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async def crash() -> None:
        raise ValueError("crashed")

    long_running = tasks.spawn(forever(), "forever")
    crashed = tasks.spawn(crash(), "crash")
    await started.wait()
    await asyncio.sleep(0)
    await tasks.stop()
    assert long_running.cancelled() and crashed.done() and len(tasks) == 0
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.kv["task"] for r in errors] == ["crash"] and errors[0].exc_info[0] is ValueError


async def test_cancel_and_wait_skips_none_and_logs_a_failure(caplog):
    async def fail_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise OSError("cleanup failed")

    t = asyncio.create_task(fail_on_cancel(), name="cleanup")
    await asyncio.sleep(0)
    await cancel_and_wait([None, t])
    assert t.done()
    [rec] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert rec.kv == {"task": "cleanup"} and rec.exc_info[0] is OSError
