"""Active-standby fencing for coordinators (Milvus' `enableActiveStandby`).

Only the process holding `leader/{name}` keys may run those coordinators. The keys are created
only if missing, under a lease the holder keeps alive, so two processes never hold one at once.
A holder that cannot renew its lease in time — it crashed, was paused (SIGSTOP), or lost etcd —
is fenced: every write through `fenced(kv)` is refused by etcd itself, because each transaction
compares the leader key with this holder's identity; and `valid()` turns false at the local lease
deadline (a monotonic clock keeps running while a process is stopped), which guards what is
decided without etcd (the TSO window). When etcd answers that the lease is gone, it steps down.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid

from kmilvus.log import get_logger
from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.sessionutil.keeper import LeaseKeeper
from kmilvus.util.retry import Backoff

log = get_logger(__name__)
SAFETY = 0.5  # seconds of the lease a holder never uses: clock rates and network delay


async def no_leader_lock() -> bool:
    """A coordinator's leader check until its process hands it the lock's (`still_valid`):
    coordinators built without a lock (in-process tests) lead while they run."""
    return True


class LeaderLock:
    def __init__(self, kv: EtcdKV, *names: str, ttl: int = 10):
        if not names:
            raise ValueError("a leader lock needs at least one name")
        self.kv = kv
        self.keys = [f"leader/{n}" for n in names]
        self.key = self.keys[0]
        self.ttl = ttl
        self.lease = 0
        self.identity = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}".encode()
        self.lost = asyncio.Event()
        self._deadline = 0.0  # monotonic time until which the lease is surely ours
        self._keeper: LeaseKeeper | None = None

    def valid(self) -> bool:
        """True while this process surely holds the lock."""
        return bool(self.lease) and not self.lost.is_set() and time.monotonic() < self._deadline

    async def acquire(self, poll: float = 0.2) -> None:
        """Wait until this process holds every key of the lock. A standby outlives etcd restarts:
        an error is logged and the attempt repeated (a lease granted by a failed attempt is never
        kept alive, so a lock it may have taken expires and is taken again)."""
        waited = False
        backoff = Backoff(poll, 5.0)
        while True:
            sent = time.monotonic()
            try:
                self.lease = await self.kv.grant(self.ttl)
                puts = [Op.put(k, self.identity, lease=self.lease) for k in self.keys]
                if await self.kv.txn(puts, [Cmp.missing(k) for k in self.keys]):
                    break
                await self.kv.revoke(self.lease)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd away: a standby waits it out
                log.warning("leader lock attempt failed; retrying", keys=",".join(self.keys), error=repr(exc))
                self.lease = 0
                await backoff.sleep()
                continue
            self.lease = 0
            backoff.reset()
            if not waited:
                log.info("standby: waiting for the leader lock", keys=",".join(self.keys))
                waited = True
            await asyncio.sleep(poll)
        self._deadline = sent + self.ttl - SAFETY
        self._keeper = LeaseKeeper(
            self.kv,
            self.lease,
            max(self.ttl / 4, 0.1),
            name=f"leader-{self.key}",
            on_renewed=self._renewed,
            on_expired=lambda: self._step_down("lease expired"),
        ).start()
        log.info("leader lock acquired", keys=",".join(self.keys))

    def fenced(self, kv: EtcdKV) -> EtcdKV:
        """`kv` whose every write applies only while this process holds the lock."""
        return kv.fenced(self.key, self.identity)

    async def still_valid(self) -> bool:
        """`valid()`, or — past the local deadline (a busy or paused process) — whether etcd
        says the lease still exists, which proves nobody else could have taken the lock. For
        what is decided without etcd (timestamps from the TSO window in memory)."""
        if self.valid():
            return True
        if not self.lease or self.lost.is_set():
            return False
        sent = time.monotonic()
        try:
            remaining = await self.kv.keepalive(self.lease)
        except Exception:  # noqa: BLE001 - etcd unreachable: we cannot know, so no
            return False
        if remaining <= 0:
            self._step_down("lease expired")
            return False
        self._deadline = sent + min(remaining, self.ttl) - SAFETY
        return True

    def _renewed(self, sent: float, remaining: int) -> None:
        """On the keeper thread. Only etcd's answer that the lease is gone means the lock is
        lost: a renewal that comes late (a paused process, etcd away) leaves `valid()` false
        meanwhile — writes are refused locally — and restores it if the lease still exists, which
        proves nobody else could have taken the lock."""
        self._deadline = sent + min(remaining, self.ttl) - SAFETY

    def _step_down(self, why: str) -> None:
        log.error("leadership lost: stepping down", keys=",".join(self.keys), reason=why)
        self.lost.set()

    async def release(self) -> None:
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper = None
        if self.lease:
            with contextlib.suppress(Exception):  # best effort: the lease expires anyway
                await self.kv.txn([Op.delete(k) for k in self.keys], [Cmp.value_eq(self.key, self.identity)])
                await self.kv.revoke(self.lease)
            self.lease = 0
