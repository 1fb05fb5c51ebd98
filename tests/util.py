"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(pred: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> object:
    """Poll until `pred()` is truthy; fail the test with `what` when it never is."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")
        time.sleep(interval)


async def eventually(pred, timeout: float = 20.0, what: str = "") -> object:
    """`wait_until` for async tests: `pred` may be a plain or a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        got = await pred() if asyncio.iscoroutinefunction(pred) else pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or pred}")
        await asyncio.sleep(0.05)


def kmock_object(kmock, res: str, name: str, ns: str | None) -> dict | None:
    """An object as KMock holds it, or None when it does not exist (or was deleted)."""
    key = (kmock.resource(res), ns, name)
    if key not in kmock.objects or kmock.objects[key].deleted:
        return None
    return dict(kmock.objects[key].raw)


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
