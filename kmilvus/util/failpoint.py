"""Failpoints for crash tests: `KMILVUS_FAILPOINTS=name1,name2=sleep(2),name3=raise,name4=raise(1)`
makes the process kill itself (SIGKILL, no clean-up) at `name1`, pause two seconds at `name2`,
raise `FailpointError` every time it reaches `name3` and the first time it reaches `name4`;
`name5=wait(/tmp/go)` pauses there until the file `/tmp/go` exists and `name6=fail(/tmp/ok)`
raises there for as long as the file `/tmp/ok` does not exist (a step held or failed for exactly
as long as the test needs, no guessed duration). Tests use them to crash, stall or fail a
component at an exact step of a long flow and prove the flow resumes or stays correct; tests that
run components in their own process turn them on and off with `enable` / `disable`, or for a
block with `activate`. Unset, a failpoint costs one dict lookup."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from kmilvus.log import get_logger

log = get_logger(__name__)
WAIT_POLL = 0.05  # how often a `wait(file)` failpoint looks for its file


class FailpointError(RuntimeError):
    """Raised at a failpoint whose action is `raise`: a step failing as an outage would fail it
    (for a commit: etcd applied it and its answer was lost)."""


@dataclass
class _Action:
    kind: str  # "kill" | "sleep" | "raise" | "wait" | "fail"
    seconds: float = 0.0
    left: int = -1  # raises still to come (-1: every time)
    file: str = ""  # wait: until it exists; fail: while it does not


def _action(action: str) -> _Action:
    if m := re.fullmatch(r"sleep\(([\d.]+)\)", action):
        return _Action("sleep", seconds=float(m.group(1)))
    if m := re.fullmatch(r"raise(?:\((\d+)\))?", action):
        return _Action("raise", left=int(m.group(1)) if m.group(1) else -1)
    if m := re.fullmatch(r"(wait|fail)\((.+)\)", action):
        return _Action(m.group(1), file=m.group(2))
    return _Action("kill")


def _parse(spec: str) -> dict[str, _Action]:
    out: dict[str, _Action] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition("=")
        out[name] = _action(action)
    return out


_ACTIVE = _parse(os.environ.get("KMILVUS_FAILPOINTS", ""))


def enable(name: str, action: str) -> None:
    """Turn a failpoint on in this process (`action`: "kill", "sleep(S)", "raise", "raise(N)",
    "wait(FILE)" or "fail(FILE)")."""
    _ACTIVE[name] = _action(action)


def disable(name: str) -> None:
    _ACTIVE.pop(name, None)


@contextlib.contextmanager
def activate(spec: str) -> Iterator[None]:
    """Failpoints (as in KMILVUS_FAILPOINTS) on in this process for the duration of the block."""
    added = _parse(spec)
    saved = {name: _ACTIVE.get(name) for name in added}
    _ACTIVE.update(added)
    try:
        yield
    finally:
        for name, before in saved.items():
            if before is None:
                _ACTIVE.pop(name, None)
            else:
                _ACTIVE[name] = before


def failpoint(name: str) -> None:
    """Kill the process at `name`, or raise there (sleep actions need `afailpoint`)."""
    action = _ACTIVE.get(name)
    if action is None:
        return
    if action.kind == "kill":
        log.warning("failpoint reached: killing the process", failpoint=name)
        os.kill(os.getpid(), signal.SIGKILL)
    elif (action.kind == "raise" and action.left != 0) or (action.kind == "fail" and not os.path.exists(action.file)):
        if action.left > 0:
            action.left -= 1
        log.warning("failpoint reached: raising", failpoint=name)
        raise FailpointError(f"failpoint {name}")


async def afailpoint(name: str) -> None:
    """Kill the process, raise, or pause this coroutine, at `name`."""
    action = _ACTIVE.get(name)
    if action is None:
        return
    if action.kind == "sleep":
        log.warning("failpoint reached: sleeping", failpoint=name, seconds=action.seconds)
        await asyncio.sleep(action.seconds)
    elif action.kind in ("wait", "fail"):
        # A file another process creates: no event to wait on but its existence, looked at now and then.
        there = await asyncio.to_thread(os.path.exists, action.file)
        if action.kind == "fail" and not there:
            log.warning("failpoint reached: raising", failpoint=name)
            raise FailpointError(f"failpoint {name}")
        if not there:
            log.warning("failpoint reached: waiting for its file", failpoint=name, file=action.file)
        while not there:
            await asyncio.sleep(WAIT_POLL)
            there = await asyncio.to_thread(os.path.exists, action.file)
    else:
        failpoint(name)
