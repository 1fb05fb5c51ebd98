"""The pinned helm and Kubernetes binaries (tools/versions.env) for the tests that need them.

`./dev test` builds etcd and nats-server first and helm and the Kubernetes binaries in the
background while lint and the tests run (docs/development.md): on a fresh machine that build takes
longer than most of the suite, so the tests that need those binaries run last (tests/conftest.py)
and wait for it, saying how far it got, before their timeouts start. Without a background build
(`./dev setup` built everything, or pytest was started by hand) nothing waits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from kmilvus.util.embedded import pinned_dir

ROOT = Path(__file__).resolve().parents[1]
# tools/build.sh's names: the directory each binary is built into is <dir>-<version>.
TOOLS = {
    "helm": ("helm", "HELM_VERSION"),
    "kube-apiserver": ("kubernetes", "KUBERNETES_VERSION"),
    "kube-controller-manager": ("kubernetes", "KUBERNETES_VERSION"),
    "kube-scheduler": ("kubernetes", "KUBERNETES_VERSION"),
    "kubectl": ("kubernetes", "KUBERNETES_VERSION"),
}
HELM = ("helm",)
KUBERNETES = tuple(TOOLS)
PROGRESS_EVERY = 60.0


def pins() -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in (ROOT / "tools/versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )


def built(name: str) -> bool:
    """The set-up linked `name` to a finished build of its pinned version."""
    link = pinned_dir() / name
    if not os.access(link, os.X_OK):
        return False
    prefix, pin = TOOLS[name]
    target = link.resolve()
    return target.parent.name == f"{prefix}-{pins()[pin]}" and (target.parent / ".complete").exists()


def background_build() -> tuple[Path, Path] | None:
    """(log, exit-code file) of `./dev test`'s background build, if there is one."""
    rc, log = os.environ.get("KMILVUS_TOOLS_BUILD_RC"), os.environ.get("KMILVUS_TOOLS_BUILD_LOG")
    return (Path(log), Path(rc)) if rc and log else None


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("[tools]")]
    except OSError:
        return ""
    return lines[-1].removeprefix("[tools]").strip() if lines else ""


def wait_for_build(names: tuple[str, ...], say: Callable[[str], None]) -> None:
    """Return when `names` are built or the background build has ended (a test then fails on
    what is missing, with `missing()`'s message); say every minute how far the build got."""
    bg = background_build()
    if bg is None:
        return
    log, rc = bg
    start = time.monotonic()
    said = -PROGRESS_EVERY
    while not all(built(n) for n in names) and not rc.exists():
        waited = time.monotonic() - start
        if waited - said >= PROGRESS_EVERY:
            said = waited
            say(f"[tests] waiting {waited:.0f} s for the background build of {', '.join(names)}: {_last_line(log)}")
        time.sleep(1.0)
    if time.monotonic() - start > 1:
        say(f"[tests] waited {time.monotonic() - start:.0f} s for {', '.join(names)}")


def missing(names: tuple[str, ...]) -> str:
    """Why `names` are not there ('' when they are): the background build's failure, or the
    set-up that never built them."""
    absent = [n for n in names if not built(n)]
    if not absent:
        return ""
    bg = background_build()
    if bg is not None and bg[1].exists():
        tail = "\n".join(bg[0].read_text(errors="replace").splitlines()[-30:])
        return f"the background build of {', '.join(absent)} failed (exit {bg[1].read_text().strip()}):\n{tail}"
    return f"{', '.join(absent)} not built for the pinned versions: run `./dev setup` (tools/build.sh)"


def stop_background_build() -> None:
    """End `./dev test`'s background build if it still runs when the tests are done (a selection
    that needed none of its binaries): it is a process group of its own; what it compiled so far
    stays in Go's build cache for the next run."""
    bg, pid = background_build(), os.environ.get("KMILVUS_TOOLS_BUILD_PID")
    if bg is None or not pid or not pid.isdigit() or bg[1].exists():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(pid), signal.SIGTERM)
