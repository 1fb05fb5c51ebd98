"""Background tasks a component owns: started by name, stopped together, failures logged.

Every component used to hand-write `task.cancel(); with suppress(CancelledError): await task`;
`BackgroundTasks` is that written once, and `every()` is the "sleep, step, log the failure and
go on" loop the coordinators run at a steady pace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from kmilvus.log import get_logger

log = get_logger(__name__)
_T = TypeVar("_T")


def cancelled_here() -> bool:
    """Whether the running task itself is being cancelled. A CancelledError can also come from
    below (an awaited task, or a gRPC call whose channel was closed): that one is a failure of
    the call, to retry or report, and must not end the caller as if it had been stopped."""
    me = asyncio.current_task()
    return me is not None and me.cancelling() > 0


def stopping(exc: BaseException) -> bool:
    """Whether `exc` ends the running task: its own cancellation. Retry loops catch
    `(Exception, asyncio.CancelledError)` and re-raise only when this holds."""
    return isinstance(exc, asyncio.CancelledError) and cancelled_here()


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None], *, log_failures: bool = True) -> None:
    """Cancel `tasks` and wait until each has ended. A task that had failed is logged with its
    traceback (its exception would otherwise be lost), never raised: stopping must finish."""
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    for t in live:
        try:
            await t
        except asyncio.CancelledError:
            if cancelled_here():
                raise  # we are cancelled ourselves, not just the task we waited for
        except Exception:  # logged (here or by its owner); the stop goes on
            if log_failures:
                log.error("background task failed", task=t.get_name(), exc_info=True)


class BackgroundTasks:
    """The named tasks of one owner; `stop()` cancels and awaits every one still running."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, _T], name: str) -> asyncio.Task[_T]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def every(
        self, interval: float | Callable[[], float], step: Callable[[], Awaitable[object]], name: str
    ) -> asyncio.Task[None]:
        """Run `step` every `interval` seconds until stopped; a failed step is logged (with its
        traceback) and the next one runs as planned."""
        return self.spawn(_periodic(interval, step, name), name)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", task=task.get_name(), exc_info=task.exception())

    def __len__(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        self._tasks.clear()
        await cancel_and_wait(tasks, log_failures=False)  # _done logs them


async def _periodic(interval: float | Callable[[], float], step: Callable[[], Awaitable[object]], name: str) -> None:
    while True:
        await asyncio.sleep(interval() if callable(interval) else interval)
        try:
            await step()
        except (Exception, asyncio.CancelledError) as exc:  # logged; retried on the next period
            if stopping(exc):
                raise
            log.warning("periodic step failed", task=name, exc_info=True)
