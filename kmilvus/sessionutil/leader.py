"""Active-standby fencing for coordinators (Milvus' `enableActiveStandby`).

Only the process holding `leader/{name}` may run the coordinators. The key is created only if
missing, under a lease the holder keeps alive, so two processes can never hold it at once; a
holder that dies loses it when its lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

from kmilvus.log import get_logger
from kmilvus.meta import Cmp, EtcdKV, Op

log = get_logger(__name__)


class LeaderLock:
    def __init__(self, kv: EtcdKV, name: str, *, ttl: int = 10):
        self.kv = kv
        self.key = f"leader/{name}"
        self.ttl = ttl
        self.lease = 0
        self.identity = f"{socket.gethostname()}:{os.getpid()}:{id(self)}".encode()
        self._keepalive: asyncio.Task | None = None

    async def acquire(self, poll: float = 0.2) -> None:
        """Wait until this process holds the lock."""
        self.lease = await self.kv.grant(self.ttl)
        self._keepalive = asyncio.create_task(self._keep(), name=f"leader-{self.key}")
        waited = False
        while not await self.kv.txn([Op.put(self.key, self.identity, lease=self.lease)], [Cmp.missing(self.key)]):
            if not waited:
                log.info("waiting for the leader lock", key=self.key)
                waited = True
            await asyncio.sleep(poll)
        log.info("leader lock acquired", key=self.key)

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(max(self.ttl / 3, 0.2))
            with contextlib.suppress(Exception):
                await self.kv.keepalive(self.lease)

    async def release(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
            self._keepalive = None
        if self.lease:
            with contextlib.suppress(Exception):
                await self.kv.txn([Op.delete(self.key)], [Cmp.value_eq(self.key, self.identity)])
                await self.kv.revoke(self.lease)
            self.lease = 0
