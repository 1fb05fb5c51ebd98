"""Proxy tasks (Milvus' task interface): PreExecute → Execute → PostExecute, WaitToFinish.

DDL and Flush go through `DdTaskQueue` one at a time, in arrival order, so a Flush never
overtakes the CreateCollection before it; inserts go through `DmTaskQueue`, which runs them
concurrently (their order is fixed by their timestamps).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kmilvus.proxy.meta_cache import StaleMeta
from kmilvus.util.tasks import BackgroundTasks

STALE_META_ATTEMPTS = 3  # a name dropped and created again this often during one write: refused


class Task:
    name = "task"

    def __init__(self) -> None:
        self._done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.result: Any = None

    async def on_enqueue(self) -> None:
        pass

    async def pre_execute(self) -> None:
        pass

    async def execute(self) -> None:
        raise NotImplementedError

    async def post_execute(self) -> None:
        pass

    async def run(self) -> None:
        try:
            for attempt in range(STALE_META_ATTEMPTS):
                try:
                    await self.pre_execute()
                    await self.execute()
                    await self.post_execute()
                    break
                except StaleMeta:
                    # Nothing was published: the collection it was prepared for is gone and its
                    # name is another one's now. From the start, with that one's meta.
                    if attempt + 1 == STALE_META_ATTEMPTS:
                        raise
        except BaseException as exc:  # handed to the waiter
            self.notify(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self.notify(None)

    def notify(self, err: BaseException | None) -> None:
        if not self._done.done():
            if err is None:
                self._done.set_result(None)
            else:
                self._done.set_exception(err)

    async def wait_to_finish(self) -> Any:
        await self._done
        return self.result


class DdTaskQueue:
    """Serial: one worker runs tasks in the order they were enqueued."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Task] = asyncio.Queue()
        self._tasks = BackgroundTasks()

    def start(self) -> None:
        self._tasks.spawn(self._run(), "dd-task-queue")

    async def _run(self) -> None:
        while True:
            task = await self._queue.get()
            await task.run()

    async def enqueue(self, task: Task) -> Any:
        await task.on_enqueue()
        await self._queue.put(task)
        return await task.wait_to_finish()

    async def stop(self) -> None:
        await self._tasks.stop()


class DmTaskQueue:
    """Concurrent, bounded: inserts run side by side, at most `limit` at once."""

    def __init__(self, limit: int = 64) -> None:
        self._sem = asyncio.Semaphore(limit)

    def start(self) -> None:
        pass

    async def enqueue(self, task: Task) -> Any:
        await task.on_enqueue()
        async with self._sem:
            await task.run()
        return await task.wait_to_finish()

    async def stop(self) -> None:
        pass
