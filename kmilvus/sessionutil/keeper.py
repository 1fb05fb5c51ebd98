"""Lease renewal on a thread of its own.

A session or leader lease must expire only when its process is gone or paused, never because
the process's event loop is busy: a DataNode draining a multi-million-row backlog, or a
coordinator under CPU starvation, would otherwise lose its session with no fault at all, give up
its channels and start over (Milvus renews from a goroutine for the same reason). The thread
waits on the network with the GIL released, so a loop that does not yield does not stop it; a
process stopped with SIGSTOP stops it too, so its lease still expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV

log = get_logger(__name__)


class LeaseKeeper:
    """Renews `lease` every `interval` seconds. `on_renewed(sent, remaining)` runs on the keeper
    thread (it must only record the new deadline); `on_expired()` runs on the owner's event loop
    once etcd answers that the lease is gone, and the keeper stops."""

    def __init__(
        self,
        kv: EtcdKV,
        lease: int,
        interval: float,
        *,
        name: str,
        on_renewed: Callable[[float, int], None],
        on_expired: Callable[[], None],
    ):
        self._loop = asyncio.get_running_loop()
        self._conn = kv.blocking_lease()
        self._lease = lease
        self._interval = interval
        self._on_renewed = on_renewed
        self._on_expired = on_expired
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No renewal after this returns an answer; closing the channel ends one in flight."""
        self._stopped.set()
        self._conn.close()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            if self._loop.is_closed():  # the owner is gone without stopping us: as if it died
                self._conn.close()
                return
            sent = time.monotonic()
            try:
                remaining = self._conn.refresh(self._lease)
            except Exception as exc:  # noqa: BLE001 - etcd away: keep trying until it answers
                if not self._stopped.is_set():
                    log.warning("lease keepalive failed", thread=self._thread.name, error=str(exc))
                continue
            if self._stopped.is_set():
                return
            if remaining <= 0:
                with contextlib.suppress(RuntimeError):  # the owner's loop closed: nobody to tell
                    self._loop.call_soon_threadsafe(self._on_expired)
                return
            self._on_renewed(sent, remaining)
