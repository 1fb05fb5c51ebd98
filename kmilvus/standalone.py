"""`kmilvus standalone`: every component in one process, etcd and nats-server as children when
no endpoints are given, storage under the data directory by default."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from kmilvus import components as roles
from kmilvus.config import Config
from kmilvus.log import get_logger
from kmilvus.server import ALL_ROLES, Node
from kmilvus.util.embedded import ChildServer, start_etcd, start_nats

log = get_logger(__name__)


def run(main: Coroutine[Any, Any, None], cfg: Config) -> None:
    """Run `main` on the configured event loop (`event_loop`): uvloop by default — the gRPC
    servers, NATS and etcd clients all run on it, and its callbacks and socket I/O cost less
    CPU than asyncio's own loop (docs/operations/configuration.md)."""
    factory = None
    if cfg.event_loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def serve(node: Node, ready_line: str | None = None) -> None:
    """Start `node`, print the ready line, and run until SIGINT/SIGTERM — or until the node's
    coordinators lost their leader lock (a supervisor restarts the process, which then waits as a
    standby); then stop everything."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await node.start()
        if ready_line:
            line = ready_line.format(port=node.api_port)
            if node.http_server is not None:
                line += f" (RESTful API on {node.cfg.proxy_host}:{node.http_port})"
            print(line, file=sys.stderr, flush=True)
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(node.lost.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await asyncio.wait_for(node.stop(), 8)


def run_standalone(
    cfg: Config, data_dir: Path, *, etcd_endpoint: str | None, nats_url: str | None, storage_uri: str | None
) -> int:
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    children: list[ChildServer] = []
    try:
        if etcd_endpoint:
            cfg.etcd_endpoints = [etcd_endpoint]
        else:
            children.append(etcd := start_etcd(data_dir / "etcd"))
            cfg.etcd_endpoints = [etcd.endpoint]
        if nats_url:
            cfg.nats_url = nats_url
        else:
            children.append(nats := start_nats(data_dir / "nats", memory_limit_mb=cfg.embedded_nats_memory_mb))
            cfg.nats_url = nats.endpoint
        cfg.storage_uri = storage_uri or (data_dir / "storage").as_uri()
        node = Node(cfg, ALL_ROLES)
        run(serve(node, f"kmilvus standalone ready on {cfg.proxy_host}:{{port}}"), cfg)
        return 1 if node.lost.is_set() else 0
    finally:
        for child in reversed(children):
            try:
                child.stop(timeout=3)
            except Exception:  # logged; the other child must still be stopped
                log.warning("child server did not stop cleanly", exc_info=True)


def run_role(cfg: Config, role_names: tuple[str, ...]) -> int:
    node = Node(cfg, role_names)
    line = None
    if roles.PROXY in role_names:
        line = "kmilvus proxy ready on " + cfg.proxy_host + ":{port}"
    run(serve(node, line), cfg)
    return 1 if node.lost.is_set() else 0
