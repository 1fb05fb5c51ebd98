"""kmilvus.util.retry: a supervised background loop outlives its failures and says so."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kmilvus.util.retry import Backoff, supervise


async def test_supervise_runs_the_body_again_after_each_failure_and_logs_it(caplog):
    calls = []

    async def body() -> None:
        calls.append(len(calls))
        if len(calls) < 3:
            raise ConnectionError(f"transient {len(calls)}")

    with caplog.at_level(logging.WARNING, logger="kmilvus.util.retry"):
        await supervise("flaky", body, base=0.001, cap=0.002)
    assert calls == [0, 1, 2]
    failures = [r for r in caplog.records if r.getMessage() == "background task failed; restarting it"]
    assert [r.kv["task"] for r in failures] == ["flaky", "flaky"]
    assert "transient 1" in failures[0].kv["error"] and "transient 2" in failures[1].kv["error"]


async def test_supervise_is_cancellable_while_backing_off():
    started = asyncio.Event()

    async def body() -> None:
        started.set()
        raise RuntimeError("always")

    task = asyncio.create_task(supervise("doomed", body, base=60, cap=60))
    await started.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_backoff_doubles_up_to_the_cap_and_resets():
    b = Backoff(base=1.0, cap=4.0)
    delays = [b.next_delay() for _ in range(5)]
    for got, top in zip(delays, [1, 2, 4, 4, 4], strict=True):
        assert 0.8 * top <= got <= top
    b.reset()
    assert b.next_delay() <= 1.0


async def test_supervise_restarts_a_body_cancelled_from_below():
    """A CancelledError that is not the supervisor's own cancellation (a gRPC call whose channel
    was reset raises one) is a failure like any other: the loop must not end for good."""
    calls = []

    async def body() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise asyncio.CancelledError()

    await supervise("reset", body, base=0.001, cap=0.002)
    assert calls == [0, 1]
