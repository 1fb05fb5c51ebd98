"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from kmilvus.util import failpoint

Waited = str | Callable[[], str]


def _timed_out(timeout: float, what: Waited, pred: object) -> AssertionError:
    return AssertionError(f"timed out after {timeout}s waiting for {(what() if callable(what) else what) or pred}")


def wait_until(pred: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: Waited = "") -> object:
    """Poll until `pred()` is truthy and return it; fail the test with `what` (or what it returns:
    the state at the deadline) when it never is. `pred` may assert what must hold meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, pred)
        time.sleep(interval)


async def eventually(pred, timeout: float = 20.0, what: Waited = "", interval: float = 0.05) -> object:
    """`wait_until` for async tests: `pred` may be a plain or a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        got = await pred() if asyncio.iscoroutinefunction(pred) else pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, pred)
        await asyncio.sleep(interval)


def load_indexed(client, node, name: str, field: str, rows: int, index_type: str) -> None:
    """Load `name` once its `rows` flushed rows are indexed, and wait until the QueryNode's sealed
    segments hold their index (attached in the background): searches then go through it."""
    if index_type != "FLAT":
        wait_until(lambda: client.describe_index(name, field).get("indexed_rows") == rows, 60, what="index built")
    client.load_collection(name)
    if node is not None and index_type != "FLAT":
        coll_id = client.describe_collection(name)["collection_id"]
        loaded = node.component("querynode").collections[coll_id]
        wait_until(lambda: all(s.indexes for s in loaded.sealed.values()), 60, what="indexes loaded")


class TcpRelay:
    """A loopback TCP relay to a real server (etcd): `cut()` closes every connection through it
    and refuses new ones — the process behind it is isolated from the server, as by a network
    partition; `restore()` listens again on the same port."""

    def __init__(self, target: str):
        import socket

        host, _, port = target.removeprefix("http://").rpartition(":")
        self.target = (host or "127.0.0.1", int(port))
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._conns: list = []
        self._listener = None
        self._lock = threading.Lock()
        self.restore()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        import socket

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        import socket

        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self, listener) -> None:
        import socket

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst) -> None:
        import socket

        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def segment_loads_failing() -> Iterator[None]:
    """Every QueryNode segment load in this process fails inside the block, as it does against a
    QueryNode just killed or with storage away."""
    with failpoint.activate("querynode.load_segments=raise"):
        yield
