"""A component's reading of one vchannel (a DataNode's flowgraph, a QueryNode's delegator).

Reading never ends on a failure of its own: a read that raises (NATS away during a catch-up, a
handler that failed on a message) closes the vchannel's target and dispatches it again after
the last message handled, with a backoff — the message that failed is read again, nothing is
skipped, and no target that nobody reads holds its pchannel's delivery back. Only messages
purged before they were read (`StreamGapError`) end it: what they meant is the owner's call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kmilvus.log import get_logger
from kmilvus.msgstream.dispatcher import Target
from kmilvus.msgstream.errors import StreamGapError
from kmilvus.msgstream.message import Msg
from kmilvus.util.failpoint import afailpoint
from kmilvus.util.retry import Backoff
from kmilvus.util.tasks import stopping

if TYPE_CHECKING:
    from kmilvus.msgstream.jetstream import MsgStream

log = get_logger(__name__)


class ChannelReader:
    """Reads `vchannel` after `after_seq` through the dispatcher of the component `name`."""

    def __init__(self, stream: MsgStream, vchannel: str, after_seq: int, name: str) -> None:
        self.stream = stream
        self.vchannel = vchannel
        self.name = name
        self.done_seq = after_seq  # the last message handled: where a new dispatch resumes
        self.target: Target | None = None
        self.closed = False
        self.failures = 0  # reads that raised and were started again

    @property
    def processed_seq(self) -> int:
        """The seq of the last message handled (as `Consumer.processed_seq`)."""
        return self.done_seq

    async def start(self) -> None:
        """The first dispatch: a failure goes to the caller (its watch fails and is retried)."""
        self.target = await self.stream.dispatch(self.vchannel, after_seq=self.done_seq, name=self.name)

    async def run(self, handle: Callable[[Msg], Awaitable[bool]]) -> None:
        """`await handle(msg)` for every message, in order, until it answers True or the reader
        is closed. Raises `StreamGapError` (then closed)."""
        backoff = Backoff(0.1, 2.0)
        try:
            while not self.closed:
                try:
                    target = self.target
                    if target is None:
                        target = self.target = await self.stream.dispatch(
                            self.vchannel, after_seq=self.done_seq, name=self.name
                        )
                    async for msg in target:
                        await afailpoint("reader.handle")
                        if await handle(msg):
                            return
                        assert msg.position is not None
                        self.done_seq = msg.position.seq
                        backoff.reset()
                        # Let the session keepalive and the RPCs run: draining a buffered backlog
                        # never awaits anything real, and a loop held for the session TTL loses it.
                        await asyncio.sleep(0)
                    return  # closed
                except StreamGapError:
                    raise
                except (Exception, asyncio.CancelledError) as exc:
                    if stopping(exc):
                        raise
                    log.error(
                        "reading a channel failed; reading it again after the last message handled",
                        channel=self.vchannel,
                        after_seq=self.done_seq,
                        exc_info=True,
                    )
                    self.failures += 1
                    await self._drop_target()
                    await backoff.sleep()
        finally:
            if not self.closed:
                await self.close()

    async def _drop_target(self) -> None:
        target, self.target = self.target, None
        if target is not None:
            with contextlib.suppress(Exception):
                await target.close()

    async def close(self) -> None:
        self.closed = True
        await self._drop_target()
