"""Background loops that outlive transient etcd and NATS failures.

A coordinator's session watch that ends on one `ConnectionFailedError` leaves its process up but
deaf (RootCoord's `watch-proxies` once died for good on an etcd restart). Every
long-running task runs its body under `supervise`: a failure is logged and the body runs again
after a capped exponential backoff; only cancellation (or the body returning) ends it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from kmilvus.log import get_logger
from kmilvus.util.tasks import stopping

log = get_logger(__name__)


class Backoff:
    """Capped exponential delays with jitter: base, 2·base, 4·base … cap."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def reset(self) -> None:
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * 2**self.failures)
        self.failures += 1
        jittered: float = delay * random.uniform(0.8, 1.0)  # jitter: restarted peers do not retry in step
        return jittered

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())


async def supervise(
    name: str, body: Callable[[], Awaitable[None]], *, base: float = 0.1, cap: float = 5.0, healthy_after: float = 30.0
) -> None:
    """Run `body()` until it returns normally; when it raises, log it and run it again after a
    backoff (reset once a run lasted `healthy_after` seconds). Cancelling this task ends it; a
    CancelledError from below (a call whose channel was reset) is a failure like the others."""
    backoff = Backoff(base, cap)
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            await body()
            return
        except (Exception, asyncio.CancelledError) as exc:  # the point: log, back off, run again
            if stopping(exc):
                raise
            if loop.time() - started >= healthy_after:
                backoff.reset()
            delay = backoff.next_delay()
            log.warning(
                "background task failed; restarting it",
                task=name,
                error=repr(exc),
                retry_in=round(delay, 2),
                exc_info=backoff.failures == 1,
            )
            await asyncio.sleep(delay)
