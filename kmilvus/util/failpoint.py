"""Failpoints for crash tests: `KMILVUS_FAILPOINTS=a,b=sleep(2),c=raise,d=wait(/tmp/go),e=fail(/tmp/ok)`
makes the process kill itself (SIGKILL, no clean-up) at `a`, pause two seconds at `b`, raise
`FailpointError` at `c`, pause at `d` until the file `/tmp/go` exists, and raise at `e` for as
long as the file `/tmp/ok` does not exist, when it reaches them. Tests use them to crash, stall
or fail a component at an exact step of a long flow and prove the flow resumes or stays correct;
the file actions hold or fail a step for exactly as long as the test needs (no guessed duration).
Tests that run components in their own process turn them on and off with `enable` / `disable`.
Unset, a failpoint costs one dict lookup."""

from __future__ import annotations

import asyncio
import os
import re
import signal

from kmilvus.log import get_logger

log = get_logger(__name__)
WAIT_POLL = 0.05  # how often a `wait(file)` failpoint looks for its file
# ("kill", None) | ("sleep", seconds) | ("raise", None) | ("wait", file) | ("fail", file)
Action = tuple[str, float | str | None]


class FailpointError(RuntimeError):
    """Raised at a failpoint whose action is `raise` (or `fail(file)`): a step failing as an
    outage would fail it."""


def _action(text: str) -> Action:
    if text == "raise":
        return "raise", None
    if m := re.fullmatch(r"sleep\(([\d.]+)\)", text):
        return "sleep", float(m.group(1))
    if m := re.fullmatch(r"(wait|fail)\((.+)\)", text):
        return m.group(1), m.group(2)
    return "kill", None


def _parse(spec: str) -> dict[str, Action]:
    out: dict[str, Action] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, text = item.partition("=")
        out[name] = _action(text)
    return out


_ACTIVE = _parse(os.environ.get("KMILVUS_FAILPOINTS", ""))


def enable(name: str, action: str) -> None:
    """Turn a failpoint on in this process (`action`: "kill", "sleep(S)", "raise", "wait(FILE)"
    or "fail(FILE)")."""
    _ACTIVE[name] = _action(action)


def disable(name: str) -> None:
    _ACTIVE.pop(name, None)


def failpoint(name: str) -> None:
    """Kill the process at `name`, or raise there (sleep and wait actions need `afailpoint`)."""
    if name not in _ACTIVE:
        return
    kind, arg = _ACTIVE[name]
    if kind == "kill":
        log.warning("failpoint reached: killing the process", failpoint=name)
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "raise" or (kind == "fail" and not os.path.exists(str(arg))):
        log.warning("failpoint reached: raising", failpoint=name)
        raise FailpointError(f"failpoint {name}")


async def afailpoint(name: str) -> None:
    """Kill the process, raise, or pause this coroutine, at `name`."""
    if name not in _ACTIVE:
        return
    kind, arg = _ACTIVE[name]
    if kind == "sleep":
        log.warning("failpoint reached: sleeping", failpoint=name, seconds=arg)
        await asyncio.sleep(float(arg or 0))
    elif kind == "wait":
        log.warning("failpoint reached: waiting for its file", failpoint=name, file=arg)
        # A file another process creates: no event to wait on but its existence, looked at now and then.
        while True:
            if await asyncio.to_thread(os.path.exists, str(arg)):
                break
            await asyncio.sleep(WAIT_POLL)
    elif kind == "fail":
        if not await asyncio.to_thread(os.path.exists, str(arg)):
            log.warning("failpoint reached: raising", failpoint=name)
            raise FailpointError(f"failpoint {name}")
    else:
        failpoint(name)
