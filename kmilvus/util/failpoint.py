"""Failpoints for crash tests: `KMILVUS_FAILPOINTS=a,b=sleep(2),c=wait(/tmp/go),d=fail(/tmp/ok)`
makes the process kill itself (SIGKILL, no clean-up) at `a`, pause two seconds at `b`, pause at
`c` until the file `/tmp/go` exists, and raise `FailpointError` at `d` for as long as the file
`/tmp/ok` does not exist, when it reaches them. Tests use them to crash, stall or fail a
component at an exact step of a long flow and prove the flow resumes or stays correct; the file
actions hold or fail a step for exactly as long as the test needs (no guessed duration). Unset,
a failpoint costs one dict lookup."""

from __future__ import annotations

import asyncio
import os
import re
import signal

from kmilvus.log import get_logger

log = get_logger(__name__)
WAIT_POLL = 0.05  # how often a `wait(file)` failpoint looks for its file
Action = tuple[str, float | str | None]  # ("kill", None) | ("sleep", s) | ("wait", file) | ("fail", file)


class FailpointError(RuntimeError):
    """Raised at a `fail(file)` failpoint."""


def action(text: str) -> Action:
    """One failpoint's action as written after `name=` (empty: kill)."""
    if m := re.fullmatch(r"sleep\(([\d.]+)\)", text):
        return "sleep", float(m.group(1))
    if m := re.fullmatch(r"(wait|fail)\((.+)\)", text):
        return m.group(1), m.group(2)
    return "kill", None


def _parse(spec: str) -> dict[str, Action]:
    out: dict[str, Action] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, text = item.partition("=")
        out[name] = action(text)
    return out


_ACTIVE = _parse(os.environ.get("KMILVUS_FAILPOINTS", ""))


def failpoint(name: str) -> None:
    """Kill the process at `name` (the other actions need `afailpoint`)."""
    if _ACTIVE.get(name, ("", None))[0] == "kill":
        log.warning("failpoint reached: killing the process", failpoint=name)
        os.kill(os.getpid(), signal.SIGKILL)


async def afailpoint(name: str) -> None:
    """Kill the process, pause this coroutine, or raise, at `name`."""
    if name not in _ACTIVE:
        return
    kind, arg = _ACTIVE[name]
    if kind == "kill":
        failpoint(name)
    elif kind == "sleep":
        log.warning("failpoint reached: sleeping", failpoint=name, seconds=arg)
        await asyncio.sleep(float(arg or 0))
    elif kind == "wait":
        log.warning("failpoint reached: waiting for its file", failpoint=name, file=arg)
        # A file another process creates: no event to wait on but its existence, looked at now and then.
        while True:
            if await asyncio.to_thread(os.path.exists, str(arg)):
                break
            await asyncio.sleep(WAIT_POLL)
    elif kind == "fail" and not await asyncio.to_thread(os.path.exists, str(arg)):
        log.warning("failpoint reached: failing", failpoint=name, file=arg)
        raise FailpointError(f"failpoint {name}")
