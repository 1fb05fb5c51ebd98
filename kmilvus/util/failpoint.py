"""Failpoints for crash tests: `KMILVUS_FAILPOINTS=name1,name2=sleep(2),name3=wait(/tmp/go)`
makes the process kill itself (SIGKILL, no clean-up) at `name1`, pause two seconds at `name2`,
and pause at `name3` until the file `/tmp/go` exists, when it reaches them. Tests use them to
crash or stall a component at an exact step of a long flow and prove the flow resumes or stays
correct; `wait(...)` holds a step for exactly as long as the test needs to do something in the
middle of it (no guessed duration). Unset, a failpoint costs one dict lookup."""

from __future__ import annotations

import asyncio
import os
import re
import signal

from kmilvus.log import get_logger

log = get_logger(__name__)
WAIT_POLL = 0.05  # how often a `wait(file)` failpoint looks for its file


def _parse(spec: str) -> dict[str, float | str | None]:
    """name → seconds to sleep, a file to wait for, or None to kill."""
    out: dict[str, float | str | None] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition("=")
        if m := re.fullmatch(r"sleep\(([\d.]+)\)", action):
            out[name] = float(m.group(1))
        elif m := re.fullmatch(r"wait\((.+)\)", action):
            out[name] = m.group(1)
        else:
            out[name] = None
    return out


_ACTIVE = _parse(os.environ.get("KMILVUS_FAILPOINTS", ""))


def failpoint(name: str) -> None:
    """Kill the process at `name` (sleep and wait actions need `afailpoint`)."""
    if name in _ACTIVE and _ACTIVE[name] is None:
        log.warning("failpoint reached: killing the process", failpoint=name)
        os.kill(os.getpid(), signal.SIGKILL)


async def afailpoint(name: str) -> None:
    """Kill the process, or pause this coroutine, at `name`."""
    if name not in _ACTIVE:
        return
    action = _ACTIVE[name]
    if action is None:
        failpoint(name)
    elif isinstance(action, str):
        log.warning("failpoint reached: waiting for its file", failpoint=name, file=action)
        # A file another process creates: no event to wait on but its existence, looked at now and then.
        while True:
            if await asyncio.to_thread(os.path.exists, action):
                break
            await asyncio.sleep(WAIT_POLL)
    else:
        log.warning("failpoint reached: sleeping", failpoint=name, seconds=action)
        await asyncio.sleep(action)
