"""Busy loops beside a benchmark: the cores kept busy by other work, as on a shared machine.

Chaos lost acknowledged rows only when the machine was loaded (timers late, leases renewed
late, consumers lagging), so `--load N` runs N processes that spin for the whole run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections.abc import Iterator


def _spin() -> None:
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[list[int]]:
    """Run `n` spinning processes while the block runs; yields their PIDs."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_spin, daemon=True, name=f"busy-{i}") for i in range(n)]
    for p in procs:
        p.start()
    try:
        yield [p.pid for p in procs if p.pid is not None]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.join(5)
