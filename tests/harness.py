"""Run kmilvus nodes for tests: in-process on a background event loop (fast), or as separate
`kmilvus run ROLE` processes (for kill/restart scenarios). Tests then talk to them with pymilvus,
which blocks, so the node must not share the test's event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from kmilvus.config import Config
from kmilvus.server import ALL_ROLES, Node
from kmilvus.util.embedded import free_port


def make_config(root: str, etcd: str, nats: str, storage: Path, **overrides: Any) -> Config:
    # Automatic compaction would start Spark jobs in the middle of unrelated tests; the tests
    # of compaction turn it on themselves.
    cfg = Config(
        cluster=root,
        etcd_endpoints=[etcd],
        nats_url=nats,
        storage_uri=storage.as_uri(),
        proxy_port=free_port(),
        http_port=free_port(),
        session_ttl=3,
        dml_channel_num=4,
        auto_compaction=False,
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


class NodeThread:
    """A Node with the given roles on its own event loop in a daemon thread."""

    def __init__(self, cfg: Config, roles: tuple[str, ...] = ALL_ROLES):
        self.cfg = cfg
        # The in-process proxy binds a port the OS picks (`uri` reads it back): a port chosen in
        # advance by free_port() can be taken by another process before the bind. `cfg` keeps
        # its proxy_port for the ProcessNodes started from it.
        self.node = Node(cfg.replace(proxy_port=0, http_port=0), roles)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> NodeThread:
        self.thread.start()
        self.call(self.node.start(), timeout=60)
        return self

    def call(self, coro: Coroutine, timeout: float = 60) -> Any:
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.node.api_port}"

    @property
    def rest_uri(self) -> str:
        """The RESTful API's base address (the Proxy's HTTP port)."""
        return f"http://127.0.0.1:{self.node.http_port}"

    def component(self, role: str):
        return self.node.components[role]

    def stop(self) -> None:
        if not self.loop.is_running():
            return
        try:
            self.call(self.node.stop(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


class ProcessNode:
    """`kmilvus run ROLES...` as a child process (SIGKILL-able)."""

    def __init__(self, cfg: Config, roles: tuple[str, ...], log_path: Path):
        self.cfg = cfg
        self.roles = roles
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(
        self, wait_for: str | None = None, timeout: float = 60, failpoints: str = "", env: dict[str, str] | None = None
    ) -> ProcessNode:
        exe = Path(sys.executable).with_name("kmilvus")
        env = dict(
            os.environ,
            KMILVUS_LOG_LEVEL="info",
            KMILVUS_SESSION_TTL=str(self.cfg.session_ttl),
            KMILVUS_DML_CHANNEL_NUM=str(self.cfg.dml_channel_num),
            KMILVUS_TIME_TICK_INTERVAL=str(self.cfg.time_tick_interval),
            KMILVUS_INSERT_BUFFER_SIZE_MB=str(self.cfg.insert_buffer_size_mb),
            KMILVUS_AUTO_COMPACTION=str(self.cfg.auto_compaction).lower(),
            KMILVUS_FAILPOINTS=failpoints,
            **(env or {}),
        )
        argv = [
            str(exe),
            "run",
            *self.roles,
            "--etcd-endpoint",
            self.cfg.etcd_endpoints[0],
            "--nats-url",
            self.cfg.nats_url,
            "--storage-uri",
            self.cfg.storage_uri,
            "--cluster",
            self.cfg.cluster,
            "--port",
            str(self.cfg.proxy_port),
            "--http-port",
            "0",  # the RESTful API on a free port: several processes may run a proxy
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if wait_for:
            deadline = time.monotonic() + timeout
            while wait_for not in self.log_path.read_text(errors="replace"):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{self.roles} did not log {wait_for!r}:\n" + self.log_path.read_text()[-3000:])
                time.sleep(0.05)
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode
