"""Failpoints for crash tests: `KMILVUS_FAILPOINTS=name1,name2` makes the process kill itself
(SIGKILL, no clean-up) when it reaches a named point. Tests use them to crash a component at an
exact step of a long flow and prove the flow resumes; unset, a failpoint costs one set lookup."""

from __future__ import annotations

import os
import signal

_ACTIVE = frozenset(filter(None, os.environ.get("KMILVUS_FAILPOINTS", "").split(",")))


def failpoint(name: str) -> None:
    if name in _ACTIVE:
        os.kill(os.getpid(), signal.SIGKILL)
