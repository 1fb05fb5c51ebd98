"""A component announces itself at `session/{role}/{serverID}` under a lease it keeps alive.

When the process dies the lease expires and the key disappears; the others watch the prefix and
react (DataCoord reassigns a dead DataNode's channels, RootCoord stops waiting for a dead Proxy's
time ticks).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass

import aetcd.exceptions

from kmilvus.log import get_logger
from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.sessionutil.keeper import LeaseKeeper
from kmilvus.util.retry import Backoff

log = get_logger(__name__)
SERVER_ID_KEY = "session/id"


@dataclass
class SessionInfo:
    server_id: int
    role: str
    address: str
    hostname: str = ""
    pid: int = 0

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @staticmethod
    def decode(raw: bytes) -> SessionInfo:
        return SessionInfo(**json.loads(raw))


def session_key(role: str, server_id: int) -> str:
    return f"session/{role}/{server_id}"


async def next_server_id(kv: EtcdKV) -> int:
    """A cluster-unique server ID: compare-and-swap on a counter."""
    while True:
        raw, rev = await kv.get_with_rev(SERVER_ID_KEY)
        cur = int(raw) if raw else 0
        cmp = Cmp.mod_revision(SERVER_ID_KEY, rev) if raw else Cmp.missing(SERVER_ID_KEY)
        if await kv.txn([Op.put(SERVER_ID_KEY, str(cur + 1).encode())], [cmp]):
            return cur + 1


async def always_valid() -> bool:
    """A component's session check until a Node gives it its session's (`Session.still_valid`):
    a component run outside a Node (tests, tools) has no session to lose."""
    return True


class Session:
    def __init__(self, kv: EtcdKV, role: str, address: str, *, ttl: int = 10, server_id: int | None = None):
        self.kv = kv
        self.role = role
        self.address = address
        self.ttl = ttl
        self.server_id = server_id or 0
        self.lease = 0
        self._keeper: LeaseKeeper | None = None
        self.lost = asyncio.Event()
        self._deadline = 0.0  # monotonic time until which the lease surely exists on the server

    @property
    def info(self) -> SessionInfo:
        return SessionInfo(self.server_id, self.role, self.address, socket.gethostname(), os.getpid())

    async def register(self) -> None:
        if not self.server_id:
            self.server_id = await next_server_id(self.kv)
        sent = time.monotonic()
        self.lease = await self.kv.grant(self.ttl)
        self._deadline = sent + self.ttl
        await self.kv.put(session_key(self.role, self.server_id), self.info.encode(), lease=self.lease)
        self._keeper = LeaseKeeper(
            self.kv,
            self.lease,
            max(self.ttl / 3, 0.2),
            name=f"session-{self.role}-{self.server_id}",
            on_renewed=self._renewed,
            on_expired=self._expired,
        ).start()
        log.info("session registered", role=self.role, server_id=self.server_id, address=self.address)

    def _renewed(self, sent: float, remaining: int) -> None:
        self._deadline = sent + remaining

    def _expired(self) -> None:
        """etcd says the lease is gone: set `lost`. The owner decides what a lost session means
        (a DataNode gives up its channels and comes back under a new ID); re-registering silently
        under the same ID would let a node act on channels that moved while it was away."""
        if self.lease:
            log.warning("session lease expired", role=self.role, server_id=self.server_id)
        self.lease = 0
        self.lost.set()

    def valid(self) -> bool:
        """True while the session surely still exists: the others still count this component
        (RootCoord still holds time ticks for a Proxy's publishes in flight)."""
        return bool(self.lease) and not self.lost.is_set() and time.monotonic() < self._deadline

    async def still_valid(self) -> bool:
        """`valid()`, or — past the local deadline (a busy or paused process) — whether etcd
        says the lease still exists: then it never expired and nobody stopped counting us."""
        if self.valid():
            return True
        if not self.lease or self.lost.is_set():
            return False
        sent = time.monotonic()
        try:
            remaining = await self.kv.keepalive(self.lease)
        except Exception:  # noqa: BLE001 - etcd unreachable: we cannot know, so no
            return False
        if remaining > 0:
            self._deadline = sent + remaining
        return remaining > 0

    async def stop(self) -> None:
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper = None
        if self.lease:
            with contextlib.suppress(Exception):
                await self.kv.revoke(self.lease)
            self.lease = 0


async def list_sessions(kv: EtcdKV, role: str) -> dict[int, SessionInfo]:
    return {
        info.server_id: info for _, raw in await kv.get_prefix(f"session/{role}/") if (info := SessionInfo.decode(raw))
    }


async def watch_sessions(kv: EtcdKV, role: str) -> AsyncIterator[tuple[str, int, SessionInfo | None]]:
    """Yields ("add", id, info) for current sessions, then ("add"|"del", id, info|None) as they change.

    Never ends on a transient etcd failure (a restart, a lost connection): it logs, backs off and
    resumes the watch after the last revision it saw, so no change is missed. If that revision
    can no longer be watched (compacted), it lists again and yields the difference."""
    prefix = f"session/{role}/"
    known: dict[int, SessionInfo] = {}
    backoff = Backoff(0.1, 2.0)
    rev = 0  # last revision seen; 0: list (again) before watching
    while True:
        try:
            if not rev:
                snapshot = await kv.revision()
                current = await list_sessions(kv, role)
                rev = snapshot  # only once listed: a failed list is listed again
                for sid in [s for s in known if s not in current]:
                    del known[sid]
                    yield "del", sid, None
                for sid, info in current.items():
                    if known.get(sid) != info:
                        known[sid] = info
                        yield "add", sid, info
            async for ev in kv.watch_prefix(prefix, start_revision=rev + 1):
                backoff.reset()
                rev = max(rev, ev.revision)
                sid = int(ev.key.rsplit("/", 1)[1])
                if ev.kind == "put":
                    info = SessionInfo.decode(ev.value)
                    if known.get(sid) == info:
                        continue  # already yielded (listed after `rev`, or a keepalive re-put)
                    known[sid] = info
                    yield "add", sid, info
                else:
                    known.pop(sid, None)
                    yield "del", sid, None
            raise ConnectionError("watch ended")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - etcd away: resume the watch when it is back
            if isinstance(exc, aetcd.exceptions.RevisionCompactedError):
                rev = 0
            log.warning("session watch interrupted; resuming", role=role, after_revision=rev, error=repr(exc))
            await backoff.sleep()
