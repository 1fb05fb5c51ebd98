"""`DropTask.broadcast` once done answers at once: the RPC's second call must not queue behind
the drop's background task (docs/architecture/drop.md)."""

from __future__ import annotations

import asyncio

from kmilvus.rootcoord.drop_tasks import DropTask


def _task(calls: list[str]) -> DropTask:
    async def broadcast() -> None:
        calls.append("broadcast")

    async def finish() -> None:
        calls.append("finish")

    return DropTask(kv=None, key="k", kind="collection", what="db.c (1)", broadcast=broadcast, finish=finish)  # type: ignore[arg-type]


async def test_done_broadcast_does_not_wait_for_the_lock() -> None:
    calls: list[str] = []
    task = _task(calls)
    await task.broadcast()
    # Another caller holds the lock (the background task between its steps): a done broadcast
    # answers without waiting for it.
    release = asyncio.Event()

    async def holder() -> None:
        async with task._lock:
            await release.wait()

    h = asyncio.create_task(holder())
    await asyncio.sleep(0)
    second = asyncio.create_task(task.broadcast())
    done, _ = await asyncio.wait({second}, timeout=5)
    release.set()
    await h
    assert second in done, "a done broadcast waited for the lock's holder"
    assert calls == ["broadcast"]


async def test_broadcast_under_way_is_waited_for_and_made_once() -> None:
    calls: list[str] = []
    gate = asyncio.Event()

    async def slow() -> None:
        await gate.wait()
        calls.append("broadcast")

    task = DropTask(kv=None, key="k", kind="collection", what="x", broadcast=slow, finish=slow)  # type: ignore[arg-type]
    first = asyncio.create_task(task.broadcast())
    second = asyncio.create_task(task.broadcast())
    await asyncio.sleep(0)
    assert not second.done()
    gate.set()
    await asyncio.gather(first, second)
    assert calls == ["broadcast"] and task.broadcast_done
