"""Can gRPC and the RESTful API share one listener in Python without costing gRPC clients?

Milvus 2.4+ serves HTTP/1.1+JSON and gRPC on one port (cmux sniffs each connection's first bytes
in Go and hands it to the right server). grpc.aio cannot take a connection accepted elsewhere, so
the Python equivalent is a front listener that sniffs the HTTP/2 preface and then relays every byte
of the connection to the gRPC server's own port (the RESTful server likewise). This measures what
that relay costs a gRPC client, on the Proxy's own event loop where it would run:

    python bench/bench_rest_port.py [--rounds 5] [--inserts 10] [--searches 300] [--out NAME]

The server (embedded etcd + nats-server, every component, the relay on the same loop) runs in a
child process; one pymilvus client alternates direct (gRPC port) and relayed (front port) rounds:
10,000 x 128 inserts (p50 latency, rows/s) and nq=1 top-10 searches on 20,000 loaded rows (p50,
searches/s), and the server process's CPU time per call (less sensitive to a busy machine than
wall time). The relay is asyncio Protocol-based with flow control: no per-chunk coroutine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DIM = 128


class _Pipe(asyncio.Protocol):
    """One direction-pair of a relayed connection: what one side receives, the other writes."""

    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc):
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self):  # our transport's buffer is full: stop reading the other side
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self):
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Front(_Pipe):
    """The accepted side: sniffs the first bytes, then connects to gRPC or HTTP and relays."""

    def __init__(self, grpc_port: int, http_port: int):
        super().__init__()
        self.ports = (grpc_port, http_port)
        self.sniffed = b""
        self.task: asyncio.Task | None = None

    def data_received(self, data):
        if self.peer is not None or self.task is not None:
            return super().data_received(data)
        self.sniffed += data
        if len(self.sniffed) < len(PREFACE) and PREFACE.startswith(self.sniffed):
            return None
        port = self.ports[0] if self.sniffed.startswith(PREFACE) else self.ports[1]
        self.transport.pause_reading()
        self.task = asyncio.get_running_loop().create_task(self._connect(port))
        return None

    async def _connect(self, port: int):
        loop = asyncio.get_running_loop()
        back = _Pipe()
        await loop.create_connection(lambda: back, "127.0.0.1", port)
        back.peer, self.peer = self, back
        back.transport.write(self.sniffed)
        for chunk in self.pending:
            back.transport.write(chunk)
        self.transport.resume_reading()


async def serve(args) -> None:
    from kmilvus.config import Config
    from kmilvus.server import ALL_ROLES, Node
    from kmilvus.util.embedded import start_etcd, start_nats

    data = Path(args.data_dir)
    etcd, nats = start_etcd(data / "etcd"), start_nats(data / "nats")
    cfg = Config.from_env(
        etcd_endpoints=[etcd.endpoint],
        nats_url=nats.endpoint,
        storage_uri=(data / "storage").as_uri(),
        proxy_port=args.grpc_port,
        http_port=args.http_port,
        auto_compaction=False,
    )
    node = Node(cfg, ALL_ROLES)
    await node.start()
    loop = asyncio.get_running_loop()
    front = await loop.create_server(lambda: _Front(node.api_port, node.http_port), "127.0.0.1", args.front_port)
    print("ready", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    front.close()
    await node.stop()
    nats.stop()
    etcd.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(args) -> dict:
    import numpy as np
    from pymilvus import MilvusClient

    ports = {"direct": _free_port(), "front": _free_port()}
    http = _free_port()
    data = tempfile.mkdtemp(prefix="kmilvus-port-")
    log = open(Path(data) / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    cmd = [sys.executable, __file__, "serve", "--data-dir", data, "--grpc-port", str(ports["direct"])]
    cmd += ["--http-port", str(http), "--front-port", str(ports["front"])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env={**os.environ, "KMILVUS_LOG_LEVEL": "warning"})
    assert proc.stdout.readline().strip() == b"ready", (Path(data) / "server.log").read_text()[-2000:]
    rng = np.random.default_rng(0)
    batch_vecs = rng.random((10_000, DIM), dtype=np.float32)
    import psutil

    server = psutil.Process(proc.pid)

    def cpu() -> float:  # the server process's CPU seconds (its etcd and nats-server children apart)
        t = server.cpu_times()
        return t.user + t.system

    results: dict = {
        name: {"insert_s": [], "search_s": [], "insert_cpu_s": 0.0, "search_cpu_s": 0.0} for name in ("direct", "front")
    }
    try:
        clients = {k: MilvusClient(uri=f"http://127.0.0.1:{p}") for k, p in ports.items()}
        c = clients["direct"]
        c.create_collection("s", dimension=DIM, metric_type="L2", consistency_level="Eventually")
        for k in range(2):
            c.insert("s", [{"id": k * 10_000 + i, "vector": v} for i, v in enumerate(batch_vecs)])
        c.flush("s")
        c.create_collection("w", dimension=DIM, metric_type="L2")
        rows = [{"id": i, "vector": v} for i, v in enumerate(batch_vecs)]
        q = [rng.random(DIM, dtype=np.float32).tolist() for _ in range(args.searches)]
        for name in ("direct", "front"):  # warm both paths
            clients[name].insert("w", rows)
            clients[name].search("s", data=[q[0]], limit=10)
        for _ in range(args.rounds):
            for name in ("direct", "front"):
                cl = clients[name]
                c0 = cpu()
                for _ in range(args.inserts):
                    t = time.perf_counter()
                    cl.insert("w", rows)
                    results[name]["insert_s"].append(time.perf_counter() - t)
                c1 = cpu()
                for v in q:
                    t = time.perf_counter()
                    cl.search("s", data=[v], limit=10)
                    results[name]["search_s"].append(time.perf_counter() - t)
                results[name]["insert_cpu_s"] += c1 - c0
                results[name]["search_cpu_s"] += cpu() - c1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    summary = {}
    for name, r in results.items():
        ins, srch = r["insert_s"], r["search_s"]
        summary[name] = {
            "insert_p50_ms": round(statistics.median(ins) * 1000, 1),
            "insert_rows_per_s": round(10_000 * len(ins) / sum(ins)),
            "search_p50_ms": round(statistics.median(srch) * 1000, 2),
            "searches_per_s": round(len(srch) / sum(srch), 1),
            "server_cpu_ms_per_insert": round(r["insert_cpu_s"] * 1000 / len(ins), 1),
            "server_cpu_ms_per_search": round(r["search_cpu_s"] * 1000 / len(srch), 2),
        }
    return {
        "rounds": args.rounds,
        "inserts_per_round": args.inserts,
        "searches_per_round": args.searches,
        "load_average": os.getloadavg(),
        "summary": summary,
        "raw": results,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("--data-dir", required=True)
    s.add_argument("--grpc-port", type=int, required=True)
    s.add_argument("--http-port", type=int, required=True)
    s.add_argument("--front-port", type=int, required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--inserts", type=int, default=10)
    p.add_argument("--searches", type=int, default=300)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.cmd == "serve":
        asyncio.run(serve(args))
        return
    out = measure(args)
    print(json.dumps(out["summary"], indent=2))
    print("load average", out["load_average"])
    if args.out:
        res = ROOT / "bench" / "results"
        (res / f"{args.out}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
