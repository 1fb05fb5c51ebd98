"""Failpoints for crash tests: `KMILVUS_FAILPOINTS=name1,name2=sleep(2)` makes the process kill
itself (SIGKILL, no clean-up) at `name1`, and pause two seconds at `name2`, when it reaches them.
Tests use them to crash or stall a component at an exact step of a long flow and prove the flow
resumes or stays correct; unset, a failpoint costs one dict lookup."""

from __future__ import annotations

import asyncio
import os
import re
import signal

from kmilvus.log import get_logger

log = get_logger(__name__)


def _parse(spec: str) -> dict[str, float | None]:
    """name → seconds to sleep, or None to kill."""
    out: dict[str, float | None] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition("=")
        m = re.fullmatch(r"sleep\(([\d.]+)\)", action)
        out[name] = float(m.group(1)) if m else None
    return out


_ACTIVE = _parse(os.environ.get("KMILVUS_FAILPOINTS", ""))


def failpoint(name: str) -> None:
    """Kill the process at `name` (sleep actions need `afailpoint`)."""
    if name in _ACTIVE and _ACTIVE[name] is None:
        log.warning("failpoint reached: killing the process", failpoint=name)
        os.kill(os.getpid(), signal.SIGKILL)


async def afailpoint(name: str) -> None:
    """Kill the process, or pause this coroutine, at `name`."""
    if name not in _ACTIVE:
        return
    seconds = _ACTIVE[name]
    if seconds is None:
        failpoint(name)
    else:
        log.warning("failpoint reached: sleeping", failpoint=name, seconds=seconds)
        await asyncio.sleep(seconds)
