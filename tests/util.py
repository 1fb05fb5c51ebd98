"""Small helpers shared by tests."""

from __future__ import annotations

import time
from typing import Callable


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
