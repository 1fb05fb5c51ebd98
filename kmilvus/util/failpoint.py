"""Failpoints for crash tests: `KMILVUS_FAILPOINTS=name1,name2=sleep(2),name3=raise` makes the
process kill itself (SIGKILL, no clean-up) at `name1`, pause two seconds at `name2`, and raise
`FailpointError` at `name3`, when it reaches them. Tests use them to crash, stall or fail a
component at an exact step of a long flow and prove the flow resumes or stays correct; tests that
run components in their own process turn them on and off with `enable` / `disable`. Unset, a
failpoint costs one dict lookup."""

from __future__ import annotations

import asyncio
import os
import re
import signal

from kmilvus.log import get_logger

log = get_logger(__name__)
RAISE = -1.0  # the action "raise FailpointError" (sleeps are >= 0, kill is None)


class FailpointError(RuntimeError):
    """Raised at a failpoint whose action is `raise`: a step failing as an outage would fail it."""


def _action(action: str) -> float | None:
    if action == "raise":
        return RAISE
    m = re.fullmatch(r"sleep\(([\d.]+)\)", action)
    return float(m.group(1)) if m else None


def _parse(spec: str) -> dict[str, float | None]:
    """name → seconds to sleep, RAISE, or None to kill."""
    out: dict[str, float | None] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition("=")
        out[name] = _action(action)
    return out


_ACTIVE = _parse(os.environ.get("KMILVUS_FAILPOINTS", ""))


def enable(name: str, action: str) -> None:
    """Turn a failpoint on in this process (`action`: "kill", "sleep(S)" or "raise")."""
    _ACTIVE[name] = _action(action)


def disable(name: str) -> None:
    _ACTIVE.pop(name, None)


def failpoint(name: str) -> None:
    """Kill the process at `name`, or raise there (sleep actions need `afailpoint`)."""
    if name not in _ACTIVE:
        return
    if _ACTIVE[name] is None:
        log.warning("failpoint reached: killing the process", failpoint=name)
        os.kill(os.getpid(), signal.SIGKILL)
    elif _ACTIVE[name] == RAISE:
        log.warning("failpoint reached: raising", failpoint=name)
        raise FailpointError(f"failpoint {name}")


async def afailpoint(name: str) -> None:
    """Kill the process, raise, or pause this coroutine, at `name`."""
    if name not in _ACTIVE:
        return
    seconds = _ACTIVE[name]
    if seconds is None or seconds == RAISE:
        failpoint(name)
    else:
        log.warning("failpoint reached: sleeping", failpoint=name, seconds=seconds)
        await asyncio.sleep(seconds)
