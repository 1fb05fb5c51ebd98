"""Start `kmilvus standalone` for a benchmark and measure its process tree (public tools only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standalone:
    def __init__(self, *args: str, data_dir: Path | None = None, env: dict[str, str] | None = None):
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="kmilvus-bench-"))
        self.port = free_port()
        self.args = args
        self.env = env  # KMILVUS_* settings on top of this process' environment
        self.proc: subprocess.Popen | None = None
        self.ready_seconds = 0.0

    def start(self) -> Standalone:
        exe = Path(sys.executable).with_name("kmilvus")
        log = self.data_dir / "standalone.log"
        t0 = time.perf_counter()
        # The RESTful API on any free port unless asked for: a fixed 19531 taken by another process
        # would stop this standalone, which serves the Milvus API the benchmarks use.
        http = [] if "--http-port" in self.args else ["--http-port", "0"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(exe), "standalone", "--data-dir", str(self.data_dir), "--port", str(self.port), *http, *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env} if self.env else None,
            )
        # The line it prints once serving (a traceback can quote the format string, never the port).
        ready = f"kmilvus standalone ready on 127.0.0.1:{self.port}".encode()
        while ready not in log.read_bytes():
            if self.proc.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.005)
        self.ready_seconds = time.perf_counter() - t0
        return self

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def endpoints(self) -> tuple[str, str]:
        """(etcd HOST:PORT, nats URL) of the servers this standalone started."""
        conf = (self.data_dir / "nats" / "nats.conf").read_text()
        nats = "nats://" + conf.split('listen: "')[1].split('"')[0]
        etcd = next(p for p in psutil.Process(self.proc.pid).children() if p.name() == "etcd").cmdline()
        return etcd[etcd.index("--listen-client-urls") + 1].removeprefix("http://"), nats

    def rss_mib(self) -> dict[str, float]:
        root = psutil.Process(self.proc.pid)
        return {f"{p.name()}": p.memory_info().rss / 2**20 for p in [root, *root.children(recursive=True)]}

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
