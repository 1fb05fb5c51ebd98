"""Start etcd and nats-server as child processes on free loopback ports.

`kmilvus standalone` uses these when no endpoint is given, and so do the tests: the real
servers, each with its own data directory, stopped (and reaped) with their owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kmilvus.config import Config

_DEBIAN_PACKAGE = {"etcd": "etcd-server", "nats-server": "nats-server", "java": "default-jre-headless"}


class MissingBinaryError(RuntimeError):
    """A server binary is not installed; the message names the Debian package."""


# Debian puts nats-server in /usr/sbin, which is not on every user's PATH.
SEARCH_DIRS = ["/usr/sbin", "/usr/bin", "/usr/local/bin"]


def binary_env(name: str) -> str:
    """The environment variable naming a server binary to use instead of the pinned one
    (`KMILVUS_NATS_SERVER`, `KMILVUS_ETCD`): tests run against another build, e.g. Debian's."""
    return "KMILVUS_" + name.upper().replace("-", "_")


def pinned_dir() -> Path:
    """Where `./dev setup` (tools/build.sh) links the pinned etcd, nats-server, Kubernetes and
    helm builds: the bin directory of the Python that runs kmilvus (the checkout's .venv)."""
    return Path(sys.executable).parent


def find_binary(name: str) -> str:
    """The binary the environment names, else the pinned build if the set-up made one, else the
    first on PATH (a Debian package's)."""
    named = os.environ.get(binary_env(name))
    if named:
        if not os.access(named, os.X_OK):
            raise MissingBinaryError(f"{binary_env(name)}={named} is not an executable file")
        return named
    pinned = pinned_dir() / name
    if os.access(pinned, os.X_OK):
        return str(pinned)
    found = shutil.which(name) or next((p for d in SEARCH_DIRS if os.access(p := f"{d}/{name}", os.X_OK)), None)
    if not found:
        pkg = _DEBIAN_PACKAGE.get(name, name)
        raise MissingBinaryError(f"{name} not found: run `./dev setup` or install it with `apt-get install {pkg}`")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ChildServer:
    """A server process we started; `stop()` terminates it and waits."""

    name: str
    proc: subprocess.Popen[bytes]
    endpoint: str
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when its parent dies (Linux PR_SET_PDEATHSIG), so a
    kmilvus killed with SIGKILL or crashing hard leaves no etcd or nats-server behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _spawn(name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Python code between fork and exec (preexec_fn) is unsafe in a threaded process: started from
    # one (gRPC, an event-loop thread) the child has died with SIGSEGV before exec. util-linux's
    # setpriv (Essential on Debian) sets the parent-death signal and execs the server instead.
    setpriv = shutil.which("setpriv")
    preexec = None
    if setpriv:
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
    else:
        preexec = _die_with_parent
    with open(log_path, "ab") as out:  # the child keeps its own descriptor
        # New process group: a Ctrl-C to the terminal reaches us, and we stop children in order.
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            preexec_fn=preexec,
        )


def _wait(check: Callable[[], bool], proc: subprocess.Popen[bytes], name: str, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {proc.returncode} during start-up:\n{tail}")
        with contextlib.suppress(OSError, ValueError):
            if check():
                return
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"{name} not ready after {timeout}s; log: {log_path}")


def start_etcd(
    data_dir: Path,
    *,
    port: int | None = None,
    peer_port: int | None = None,
    timeout: float = 20.0,
    tls: tuple[str, str, str] | None = None,
) -> ChildServer:
    """etcd with fast elections (single member) and a raised request size for binlog meta.
    Restart one on its data directory with the same `port` and `peer_port` (`extra`).
    `tls` = (server cert, key, CA): clients speak TLS and need a certificate the CA signed."""
    binary = find_binary("etcd")
    port = port or free_port()
    peer = peer_port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    purl = f"http://127.0.0.1:{peer}"
    argv = [
        binary,
        "--name",
        "kmilvus",
        "--data-dir",
        str(data_dir / "etcd"),
        "--listen-client-urls",
        url,
        "--advertise-client-urls",
        url,
        "--listen-peer-urls",
        purl,
        "--initial-advertise-peer-urls",
        purl,
        "--initial-cluster",
        f"kmilvus={purl}",
        # One member: raft ticks cost CPU at every heartbeat even when nothing happens (a 10 ms
        # heartbeat kept an idle etcd measurably busy: docs/benchmarks/index.md), and the election
        # at start is one tick (etcd advances the rest), so it still answers quickly.
        "--heartbeat-interval",
        "50",
        "--election-timeout",
        "500",
        "--max-request-bytes",
        str(8 * 1024 * 1024),
        "--quota-backend-bytes",
        str(4 * 1024**3),
        "--log-level",
        "error",
    ]
    ctx = None
    if tls:
        cert, key, ca = tls
        argv += ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth"]
        ctx = ssl.create_default_context(cafile=ca)
        ctx.load_cert_chain(cert, key)
    log_path = data_dir / "etcd.log"
    proc = _spawn("etcd", argv, log_path)

    def ready() -> bool:
        with urllib.request.urlopen(f"{url}/health", timeout=1, context=ctx) as r:
            return b'"true"' in r.read()

    _wait(ready, proc, "etcd", log_path, timeout)
    return ChildServer("etcd", proc, f"127.0.0.1:{port}", log_path, {"peer_port": peer})


def start_nats(
    data_dir: Path,
    *,
    port: int | None = None,
    max_payload: int = 8 * 1024 * 1024,
    timeout: float = 20.0,
    memory_limit_mb: int = Config.model_fields["embedded_nats_memory_mb"].default,
    tls: tuple[str, str, str] | None = None,
    user: str = "",
    password: str = "",
) -> ChildServer:
    """nats-server with JetStream on; max_payload is only settable from a config file in 2.9.
    `tls` = (server cert, key, CA): clients must speak TLS and present a CA-signed certificate;
    `user`/`password`: clients must authenticate."""
    binary = find_binary("nats-server")
    port = port or free_port()
    mport = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    conf = data_dir / "nats.conf"
    store = data_dir / "jetstream"
    conf.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f'http: "127.0.0.1:{mport}"\n'
        f"max_payload: {max_payload}\n"
        f"max_pending: {max(4 * max_payload, 64 * 1024 * 1024)}\n"
        f'jetstream {{\n  store_dir: "{store}"\n  max_memory_store: 268435456\n}}\n'
        + (
            f'tls {{\n  cert_file: "{tls[0]}"\n  key_file: "{tls[1]}"\n  ca_file: "{tls[2]}"\n  verify: true\n}}\n'
            if tls
            else ""
        )
        + (f'authorization {{\n  user: "{user}"\n  password: "{password}"\n}}\n' if user else "")
    )
    log_path = data_dir / "nats.log"
    # Go's collector lets the heap grow to twice the live data; JetStream's block caches make that
    # hundreds of MB under a bulk insert. A soft limit makes it collect sooner instead (too low a
    # one, below the live data, makes it collect all the time: see Config.embedded_nats_memory_mb).
    proc = _spawn("nats-server", [binary, "-c", str(conf)], log_path, env={"GOMEMLIMIT": f"{memory_limit_mb}MiB"})

    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/healthz?js-enabled-only=true", timeout=1) as r:
            return bool(r.status == 200)

    _wait(ready, proc, "nats-server", log_path, timeout)
    return ChildServer("nats-server", proc, f"nats://127.0.0.1:{port}", log_path, {"monitor_port": mport})


async def wait_closed(*servers: ChildServer) -> None:
    await asyncio.gather(*(asyncio.to_thread(s.stop) for s in servers))
