"""The flush-path workload shared by bench/bench_flush.py and bench/vs_milvus.py.

One file, no kmilvus imports, so the SAME code drives kmilvus (pymilvus 3.0, /work/main/.venv)
and Milvus 2.3.5 (pymilvus 2.3.7, bench/.venv-milvus). It only uses pymilvus APIs both versions
have: ORM `connections` / `Collection` / `utility`, and the raw `MilvusService` stub that both
ship (`pymilvus.grpc_gen.milvus_pb2`) for the RPCs that are timed on their own.

Workload (docs/benchmarks/method.md): collection `id INT64 pk, vec FLOAT_VECTOR(128),
tag VARCHAR(64)`, one shard, inserts of 10,000 rows, one at a time.

Client path. pymilvus' fastest honest insert path, measured on both versions: ORM
`Collection.insert([ids, vectors, tags])` (column-based) with plain Python lists; per 10k batch
pymilvus 3.0 spends ~60 ms building the request from lists, ~110 ms from a 2-D numpy array
(it iterates numpy scalars), ~70-80 ms from row dicts (MilvusClient.insert). So data is generated
once with numpy and converted to lists before the timed region (`gc.freeze()` keeps the
collector from walking millions of generated objects in the middle of a timed insert); vectors
repeat after 200k rows (see `Batches`).

Measurements (seconds unless said otherwise):
  insert rows/s      rows / wall time of the sequential insert loop, as the client sees it
  flush_rpc          the `Flush` RPC alone
  flushed            from the `Flush` call until `GetFlushState` answers true (polled every 10 ms
                     with the flush's segment IDs and flush_ts, as pymilvus does every 500 ms)
  small_flush        insert 1,000 rows, Flush, poll until flushed (whole sequence), k times
  num_entities       `Collection.num_entities` (GetCollectionStatistics) after the flush
  drop_rpc           the `DropCollection` RPC alone
  files_gone         from the drop until no file is left under insert_log/<collectionID>
  bulk_import        `utility.do_bulk_insert` of a Parquet file until the task is Completed
  read (--read-rows N) the read path of bench/readpath.py on a collection of its own: create_index
                     (HNSW) + load, search p50/p99, QPS at 1 and 8 clients, recall@10, query by
                     expression and count(*) latency, RSS once loaded
  memory             peak of the SUM of RSS of every process of the server (kmilvus + etcd +
                     nats-server; Milvus' single process), sampled every 50 ms by a separate
                     process (`workload.py memwatch`), per phase and over the whole run

Command line (used by vs_milvus.py; bench_flush.py imports this module):
  python bench/workload.py run --system kmilvus|milvus|lite --rows 200000,1000000 [--bulk PARQUET]
                               [--out JSON] [--pidfile FILE] [--uri URI --storage-dir DIR]
                               [--read-rows 100000]   (--rows '' runs the read path only)
                               [--read-dataset random|glove-50]   (a real set: its rows, its metric)
  python bench/workload.py gen-parquet PATH --rows 1000000
  python bench/workload.py memwatch --root PID ...   (internal)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np
import psutil

warnings.filterwarnings("ignore")

DIM = 128
BATCH = 10_000
TAG_MAX = 64
SMALL_ROWS = 1_000
POLL = 0.010  # GetFlushState poll interval
FILES_POLL = 0.020  # insert_log directory poll interval after a drop
HERE = Path(__file__).resolve().parent
READY_RE = re.compile(r"kmilvus standalone ready on ([\d.]+):(\d+)")


def log(msg: str) -> None:
    print(f"[workload {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


# ------------------------------------------------------------------------------------------------
# Data, generated once, outside every timed region.


class Batches:
    """`rows` rows as 10k-row column batches of Python lists: [ids, vectors, tags].

    IDs and tags are unique. Vectors are unique within the first `pool_rows` rows and then
    repeat (batch b reuses the vector lists of batch b mod pool): creating 128 Python floats per
    row is what generation costs (~10 s and 4 GiB per million rows), and neither server looks
    at vector values on this path (no dedup, no index); binlog compression cannot exploit the
    repeat either, as repeated rows lie 100 MB apart."""

    _pool: ClassVar[list] = []  # per-process vector pool, shared by every Batches

    def __init__(self, rows: int, *, start_id: int = 0, seed: int = 0, batch: int = BATCH, pool_rows: int = 200_000):
        self.rows, self.batches = rows, []
        pool = Batches._pool if batch == BATCH else []
        rng = np.random.default_rng(seed)
        npool = max(1, min(rows, pool_rows) // batch + (1 if min(rows, pool_rows) % batch else 0))
        while len(pool) < npool:
            pool.append(rng.random((batch, DIM), dtype=np.float32).tolist())
        for b, s in enumerate(range(0, rows, batch)):
            n = min(batch, rows - s)
            ids = list(range(start_id + s, start_id + s + n))
            vecs = pool[b % npool]
            vecs = vecs if n == len(vecs) else vecs[:n]
            tags = [f"tag-{(start_id + s + i) % 1000:04d}-{start_id + s + i:012d}" for i in range(n)]
            self.batches.append([ids, vecs, tags])
        gc.collect()
        gc.freeze()  # generated objects leave the collector's view (see module doc)

    def free(self) -> None:
        self.batches = []
        gc.unfreeze()
        gc.collect()


def write_parquet(path: Path, rows: int, *, start_id: int = 50_000_000, seed: int = 7) -> Path:
    """The bulk-import file in pymilvus BulkWriter's Parquet layout (vector = list<float32>)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    rng = np.random.default_rng(seed)
    schema = pa.schema([("id", pa.int64()), ("vec", pa.list_(pa.float32())), ("tag", pa.string())])
    with pq.ParquetWriter(tmp, schema) as w:
        for s in range(0, rows, 50_000):
            n = min(50_000, rows - s)
            ids = np.arange(start_id + s, start_id + s + n, dtype=np.int64)
            flat = rng.random(n * DIM, dtype=np.float32)
            offsets = pa.array(np.arange(0, n * DIM + 1, DIM, dtype=np.int32))
            tags = pa.array([f"tag-{i % 1000:04d}-{i:012d}" for i in ids.tolist()])
            w.write_table(
                pa.table(
                    {"id": ids, "vec": pa.ListArray.from_arrays(offsets, pa.array(flat)), "tag": tags}, schema=schema
                ),
                row_group_size=50_000,
            )
    tmp.rename(path)
    return path


# ------------------------------------------------------------------------------------------------
# Process trees.


def tree(pid: int) -> list:
    """psutil.Process objects of `pid` and all its descendants (kmilvus' etcd and nats-server run
    in sessions of their own but are still its children)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def kill_tree(procs: list, timeout: float = 5.0) -> None:
    """SIGKILL every process in `procs` that is still the same process (pid + create time)."""
    alive = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running():
                p.kill()
                alive.append(p)
    psutil.wait_procs(alive, timeout=timeout)


def record_pids(pidfile: str | None, procs) -> None:
    if not pidfile:
        return
    with open(pidfile, "a") as f:
        for p in procs:
            with contextlib.suppress(psutil.Error):
                f.write(f"{p.pid} {p.create_time()!r} {p.name()}\n")


class MemWatch:
    """Runs `workload.py memwatch` as a separate process (so sampling costs the client nothing)
    and tells it phase names; `stop()` returns its JSON report."""

    def __init__(self, root_pid: int, *, pidfile: str | None = None, interval: float = 0.05):
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "memwatch",
            "--root",
            str(root_pid),
            "--interval",
            str(interval),
        ]
        if pidfile:
            argv += ["--pidfile", pidfile]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def phase(self, name: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(f"phase {name}\n")
            self.proc.stdin.flush()

    def stop(self) -> dict:
        try:
            out, _ = self.proc.communicate("quit\n", timeout=30)
            return json.loads(out)
        except Exception as exc:  # noqa: BLE001 - memory is reported as missing, not fatal
            self.proc.kill()
            return {"error": repr(exc)}


def memwatch_main(args) -> None:
    """Sample the RSS sum of the trees under --root every --interval s; phases come on stdin."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    roots = list(args.root)
    procs: dict[int, psutil.Process] = {}
    seen: set[tuple[int, float]] = set()
    per_name_peak: dict[str, int] = {}
    phases: dict[str, dict] = {}
    phase, t_phase = "start", time.monotonic()
    cpu_at_switch: dict[str, float] = {}
    peak_total, n, last_refresh = 0, 0, 0.0
    cpu_of: dict[int, float] = {}

    def refresh() -> None:
        new = []
        for r in roots:
            for p in tree(r):
                key = (p.pid, p.create_time())
                if p.pid not in procs or key not in seen:
                    procs[p.pid] = p
                    seen.add(key)
                    new.append(p)
        record_pids(args.pidfile, new)

    name_of: dict[int, str] = {}

    def cpu_total() -> dict[str, float]:
        """CPU seconds (user + system) so far, per process name."""
        for pid, p in list(procs.items()):
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                cpu_of[pid] = t.user + t.system + t.children_user + t.children_system
                name_of.setdefault(pid, p.name())
        out: dict[str, float] = {}
        for pid, c in cpu_of.items():
            out[name_of.get(pid, "?")] = out.get(name_of.get(pid, "?"), 0.0) + c
        return out

    def close_phase(now: float) -> None:
        nonlocal cpu_at_switch
        c = cpu_total()
        ph = phases.setdefault(phase, {"peak_rss": 0})
        ph["seconds"] = ph.get("seconds", 0.0) + now - t_phase
        by = ph.setdefault("cpu_by_process", {})
        for k, v in c.items():
            by[k] = by.get(k, 0.0) + v - cpu_at_switch.get(k, 0.0)
        ph["cpu_seconds"] = sum(by.values())
        cpu_at_switch = c

    refresh()
    cpu_at_switch = cpu_total()
    done = False
    while not done:
        now = time.monotonic()
        if now - last_refresh > 0.5:
            refresh()
            last_refresh = now
        total = 0
        for pid, p in list(procs.items()):
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                procs.pop(pid, None)
                continue
            total += rss
            name = p.name()
            per_name_peak[name] = max(per_name_peak.get(name, 0), rss)
        n += 1
        peak_total = max(peak_total, total)
        ph = phases.setdefault(phase, {"peak_rss": 0})
        ph["peak_rss"] = max(ph["peak_rss"], total)
        r, _, _ = select.select([sys.stdin], [], [], args.interval)
        if r:
            line = sys.stdin.readline()
            if not line or line.startswith("quit"):
                done = True
            elif line.startswith("phase "):
                now = time.monotonic()
                close_phase(now)
                phase, t_phase = line.split(None, 1)[1].strip(), now
    close_phase(time.monotonic())
    print(json.dumps({"peak_rss": peak_total, "samples": n, "phases": phases, "per_process_peak_rss": per_name_peak}))


# ------------------------------------------------------------------------------------------------
# Servers.


class Server:
    system = "?"
    pid: int | None = None
    host, port = "127.0.0.1", 0
    storage_dir: Path | None = None  # where insert_log/<collectionID> lives, if known
    version = "?"

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def collection_files(self, name: str, cid: int) -> Path | None:
        """The directory holding a collection's insert binlogs (kmilvus and Milvus 2.3.5 alike)."""
        return self.storage_dir / "insert_log" / str(cid) if self.storage_dir else None

    def partition_files(self, name: str, cid: int, partition: str, pid: int | None) -> Path | None:
        return self.storage_dir / "insert_log" / str(cid) / str(pid) if self.storage_dir else None

    def partition_id(self, client: Client, name: str, partition: str) -> int | None:
        return _partition_id(client, name, partition)


def wait_ready(server, stream, logf, is_ready, timeout: float, what: str) -> None:
    """Copy the server's output `stream` to `logf` (draining it, so the server never blocks on
    it) until a line `is_ready`; on exit or `timeout`, stop it and raise with the log's tail.
    Records the server's process tree once ready."""
    server.pid = server.proc.pid
    record_pids(server.pidfile, tree(server.pid))
    ready = threading.Event()

    def pump() -> None:
        for line in stream:
            logf.write(line)
            logf.flush()
            if is_ready(line):
                ready.set()
        logf.close()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not ready.wait(0.05):
        if server.proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            tail = server.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{what} did not start:\n{tail}")
    server._procs = tree(server.pid)


def stop_child(server, what: str) -> None:
    """SIGTERM a server started as a child, 20 s to exit, then kill whatever of its process tree
    is left (kmilvus' etcd and nats-server too)."""
    if not server.proc:
        return
    procs = server._procs + [p for p in tree(server.pid) if p not in server._procs]
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(20)
        except subprocess.TimeoutExpired:
            log(f"{what} did not stop in 20 s after SIGTERM; killing its tree")
    kill_tree(procs)
    server.proc = None


class KmilvusServer(Server):
    """`kmilvus standalone` in a temp data dir on a free port; ready when it logs its line."""

    system = "kmilvus"

    def __init__(self, data_dir: Path, *, port: int | None = None, exe: str | None = None, pidfile: str | None = None):
        self.data_dir, self.port = Path(data_dir), port or free_port()
        self.exe = exe or str(Path(sys.executable).parent / "kmilvus")
        self.storage_dir = self.data_dir / "storage"
        self.pidfile, self.proc, self._procs = pidfile, None, []
        self.log_path = self.data_dir.parent / "kmilvus-standalone.log"

    def start(self, timeout: float = 90.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "w")  # noqa: SIM115 - closed by the pump thread
        self.proc = subprocess.Popen(
            [self.exe, "standalone", "--data-dir", str(self.data_dir), "--port", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        wait_ready(self, self.proc.stderr, logf, READY_RE.search, timeout, "kmilvus standalone")
        record_pids(self.pidfile, self._procs)
        with contextlib.suppress(Exception):
            self.version = subprocess.run(
                [self.exe, "--version"], capture_output=True, text=True, timeout=30, check=False
            ).stdout.strip()

    def stop(self) -> None:
        stop_child(self, "kmilvus")


class MilvusLiteServer(Server):
    """Milvus 2.3.5 standalone from the PyPI `milvus` package (embedded etcd, rocksmq, local
    storage: one process). Every component's `.ip` is set to 127.0.0.1; note that the 2.3.5
    binary's gRPC and metrics listeners still bind all interfaces (vs_milvus.py runs it in a
    private network namespace when it can)."""

    system = "milvus"
    COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexCoord", "indexNode", "dataCoord", "dataNode")

    def __init__(self, data_dir: Path, *, port: int | None = None, pidfile: str | None = None):
        self.data_dir, self.port = Path(data_dir), port or free_port()
        self.storage_dir = self.data_dir / "data"
        self.pidfile, self.srv, self._procs = pidfile, None, []

    @staticmethod
    def _bin_cache() -> Path:
        """Unpack the package's lzma'd binaries once per venv; each run hard-links them."""
        import milvus

        cache = Path(sys.prefix) / "milvus-bin-cache"
        if not (cache / "bin" / "milvus").exists():
            milvus._initialize_data_files(str(cache))
        return cache / "bin"

    def start(self) -> None:
        import milvus
        from milvus import MilvusServer, MilvusServerConfig

        self.version = milvus.__version__
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cache, bin_dir = self._bin_cache(), self.data_dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        for f in cache.iterdir():
            with contextlib.suppress(FileExistsError):
                try:
                    os.link(f, bin_dir / f.name)
                except OSError:
                    shutil.copy2(f, bin_dir / f.name)
        cfg = MilvusServerConfig(data_dir=str(self.data_dir), proxy_port=self.port)
        for comp in self.COMPONENTS:
            cfg.set(f"{comp}.ip", "127.0.0.1")
        self.srv = MilvusServer(cfg)
        self.srv.start()  # waits for /healthz, then 1 s more
        self.pid = self.srv.server_proc.pid
        self._procs = tree(self.pid)
        record_pids(self.pidfile, self._procs)

    def stop(self) -> None:
        if not self.srv:
            return
        procs = self._procs + [p for p in tree(self.pid) if p not in self._procs]
        with contextlib.suppress(Exception):
            self.srv.stop()  # SIGTERM, 1 s, SIGKILL
        kill_tree(procs)
        self.srv = None


class MilvusLiteTcpServer(Server):
    """Milvus Lite 3.x (PyPI `milvus-lite`): `milvus-lite server --host 127.0.0.1 --port P
    --data-dir D`, one Python process; ready when it prints its listening line. Its data lives
    under D/collections/<name>/partitions/<partition>/{data,delta}/*.parquet (no IDs: Lite
    answers collection ID 0 and no partition IDs)."""

    system = "lite"

    def __init__(self, data_dir: Path, *, exe: str, port: int | None = None, pidfile: str | None = None):
        self.data_dir, self.port, self.exe = Path(data_dir), port or free_port(), exe
        self.storage_dir = self.data_dir
        self.pidfile, self.proc, self._procs = pidfile, None, []
        self.log_path = self.data_dir.parent / "milvus-lite.log"

    def start(self, timeout: float = 90.0) -> None:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "w")  # noqa: SIM115 - closed by the pump thread
        argv = [self.exe, "server", "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        wait_ready(self, self.proc.stdout, logf, lambda line: "listening on" in line, timeout, "milvus-lite server")
        record_pids(self.pidfile, self._procs)
        with contextlib.suppress(Exception):
            from pymilvus import connections, utility

            connections.connect("lite-version", host="127.0.0.1", port=str(self.port), timeout=30)
            self.version = utility.get_server_version(using="lite-version")
            connections.disconnect("lite-version")

    def stop(self) -> None:
        stop_child(self, "milvus-lite server")

    def collection_files(self, name: str, cid: int) -> Path | None:
        return self.data_dir / "collections" / name

    def partition_files(self, name: str, cid: int, partition: str, pid: int | None) -> Path | None:
        return self.data_dir / "collections" / name / "partitions" / partition

    def partition_id(self, client: Client, name: str, partition: str) -> int | None:
        return None  # ShowPartitions answers names only


class AttachedServer(Server):
    """A server someone else started (`--uri`); memory is sampled if its pid can be found."""

    def __init__(self, uri: str, storage_dir: str | None = None, system: str = "attached"):
        m = re.match(r"^(?:\w+://)?([^:/]+):(\d+)", uri)
        if not m:
            raise SystemExit(f"bad --uri {uri!r}; expected http://HOST:PORT")
        self.host, self.port, self.system = m.group(1), int(m.group(2)), system
        self.storage_dir = Path(storage_dir) if storage_dir else None
        with contextlib.suppress(Exception):
            for c in psutil.net_connections("tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr.port == self.port and c.pid:
                    self.pid = c.pid
                    break


# ------------------------------------------------------------------------------------------------
# The client side.


class Client:
    def __init__(self, host: str, port: int, alias: str = "bench"):
        from pymilvus import connections

        self.alias = alias
        connections.connect(alias=alias, host=host, port=str(port), timeout=60)
        self.handler = connections._fetch_handler(alias)
        self.stub = self.handler._stub

    def close(self) -> None:
        from pymilvus import connections

        with contextlib.suppress(Exception):
            connections.disconnect(self.alias)

    def create(self, name: str):
        from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, utility

        if utility.has_collection(name, using=self.alias):
            utility.drop_collection(name, using=self.alias)
        schema = CollectionSchema(
            [
                FieldSchema("id", DataType.INT64, is_primary=True),
                FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM),
                FieldSchema("tag", DataType.VARCHAR, max_length=TAG_MAX),
            ]
        )
        return Collection(name, schema, using=self.alias, shards_num=1)

    def collection_id(self, name: str) -> int:
        return int(self.handler.describe_collection(name)["collection_id"])

    def insert_all(self, coll, data: Batches) -> float:
        t0 = time.perf_counter()
        for b in data.batches:
            coll.insert(b)
        return time.perf_counter() - t0

    def flush(self, name: str, timeout: float = 600.0) -> tuple[float, float]:
        """(Flush RPC seconds, seconds from the Flush call until GetFlushState is true)."""
        from pymilvus.grpc_gen import milvus_pb2

        t0 = time.perf_counter()
        resp = self.stub.Flush(milvus_pb2.FlushRequest(collection_names=[name]), timeout=60)
        t_rpc = time.perf_counter() - t0
        if resp.status.error_code != 0:
            raise RuntimeError(f"Flush failed: {resp.status}")
        req = milvus_pb2.GetFlushStateRequest(
            segmentIDs=list(resp.coll_segIDs[name].data), flush_ts=resp.coll_flush_ts[name], collection_name=name
        )
        while True:
            st = self.stub.GetFlushState(req, timeout=60)
            if st.status.error_code != 0:
                raise RuntimeError(f"GetFlushState failed: {st.status}")
            if st.flushed:
                return t_rpc, time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"{name} not flushed after {timeout} s")
            time.sleep(POLL)

    def drop(self, name: str) -> float:
        from pymilvus.grpc_gen import milvus_pb2

        t0 = time.perf_counter()
        st = self.stub.DropCollection(milvus_pb2.DropCollectionRequest(collection_name=name), timeout=60)
        dt = time.perf_counter() - t0
        if st.error_code != 0:
            raise RuntimeError(f"DropCollection failed: {st}")
        return dt


def files_under(d: Path) -> int:
    n = 0
    for _, _, files in os.walk(d):
        n += len(files)
    return n


def wait_files_gone(d: Path, t0: float, cap: float) -> float | None:
    """Seconds from t0 until no file is left under `d` (None: still there after `cap`)."""
    while True:
        if not d.exists() or files_under(d) == 0:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > cap:
            return None
        time.sleep(FILES_POLL)


def bulk_import(client: Client, name: str, files: list[str], timeout: float = 900.0) -> dict:
    """do_bulk_insert + get_bulk_insert_state until Completed; UNIMPLEMENTED → not implemented."""
    import grpc
    from pymilvus import BulkInsertState, utility

    quiet = logging.getLogger("pymilvus")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # an UNIMPLEMENTED answer is expected, not news
    t0 = time.perf_counter()
    try:
        task = utility.do_bulk_insert(collection_name=name, files=files, using=client.alias)
    except Exception as exc:  # noqa: BLE001
        code = exc.code() if isinstance(exc, grpc.RpcError) else None
        text = f"{type(exc).__name__}: {exc}"
        if code == grpc.StatusCode.UNIMPLEMENTED or "UNIMPLEMENTED" in text or "not implemented" in text.lower():
            return {"status": "unimplemented", "error": text[:300]}
        return {"status": "error", "error": text[:500]}
    finally:
        quiet.setLevel(level)
    rpc = time.perf_counter() - t0
    done = {BulkInsertState.ImportCompleted}
    failed = {BulkInsertState.ImportFailed, BulkInsertState.ImportFailedAndCleaned}
    while True:
        st = utility.get_bulk_insert_state(task, using=client.alias)
        if st.state in done:
            return {"status": "ok", "seconds": time.perf_counter() - t0, "rpc": rpc, "row_count": st.row_count}
        if st.state in failed:
            return {"status": "failed", "error": str(st.infos)[:500], "seconds": time.perf_counter() - t0}
        if time.perf_counter() - t0 > timeout:
            return {"status": "timeout", "seconds": time.perf_counter() - t0}
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------------
# Flat metrics of a run, and how to print them (shared by bench_flush.py and vs_milvus.py).


def metrics(res: dict) -> dict:
    """A run's result → {metric key: number or None}. None = not measured / not reached."""
    m: dict = {}
    for n, s in res.get("sizes", {}).items():
        m[f"insert_rps_{n}"] = s["insert_rows_per_s"]
        m[f"flush_rpc_{n}"] = s["flush_rpc_s"]
        m[f"flushed_{n}"] = s["flushed_s"]
        m[f"num_entities_{n}"] = s["num_entities_s"]["median"]
    if "small_flush" in res:
        m["small_flush"] = res["small_flush"]["total_s"]["median"]
        m["small_flush_only"] = res["small_flush"]["flushed_s"]["median"]
    if "delete" in res:
        m["delete_kps"] = res["delete"]["keys_per_s"]
        m["delete_flushed"] = res["delete"]["flushed_s"]
    if "drop_partition" in res:
        m["drop_partition_rpc"] = res["drop_partition"]["rpc_s"]
        m["drop_partition_gone"] = res["drop_partition"]["files_gone_s"]
    if "drop" in res:
        m["drop_rpc"] = res["drop"]["rpc_s"]
        m["files_gone"] = res["drop"]["files_gone_s"]
    if "compact" in res:
        c = res["compact"]
        m["compact_s"] = c.get("seconds") if c["status"] == "ok" else None
    if "bulk_import" in res:
        b = res["bulk_import"]
        m["bulk_import_s"] = b.get("seconds") if b["status"] == "ok" else None
        m["bulk_import_rps"] = b.get("rows_per_s") if b["status"] == "ok" else None
    rd = res.get("read") or {}
    for key in READ_KEYS:
        if key in rd:
            m[f"read_{key}"] = rd[key]
    for feat, got in (res.get("read_features") or {}).items():
        if isinstance(got, dict):
            for k in FEATURE_KEYS:
                if k in got:
                    m[f"feat_{feat}_{k}"] = got[k]
        elif isinstance(got, str) and got.startswith("n/a"):
            for k in FEATURE_KEYS:
                m[f"feat_{feat}_{k}_na"] = got
    mem = res.get("memory") or {}
    phases = mem.get("phases") or {}
    for n in res.get("sizes", {}):
        peaks = [phases[p]["peak_rss"] for p in (f"insert_{n}", f"flush_{n}", f"stats_{n}") if p in phases]
        m[f"peak_rss_{n}"] = max(peaks) if peaks else None
    if "peak_rss" in mem:
        m["peak_rss_run"] = mem["peak_rss"]
    m["startup_s"] = res.get("startup_s")
    return m


READ_KEYS = (
    "index_load_s",
    "index_built_s",
    "search_p50_s",
    "search_p99_s",
    "server_cpu_per_search_s",
    "client_cpu_per_search_s",
    "qps_1",
    "qps_8",
    "recall",
    "recall_loaded",
    "server_cpu_per_search_loaded_s",
    "query_s",
    "count_s",
    "rss_loaded",
)


FEATURE_KEYS = ("p50_s", "qps_8", "recall", "server_cpu_per_call_s")
FEATURES = (
    ("filtered", 'filtered search, `tag == "tK"` (1 % of rows), no scalar index'),
    ("filtered_inverted", "filtered search, same filter, INVERTED index on `tag`"),
    ("group_by", "group-by search (`group_by_field=doc`, groups of 10 rows)"),
    ("hybrid", "hybrid search, two vector fields, RRF(60)"),
    ("sparse", "sparse search (SPARSE_INVERTED_INDEX, IP; ~136 of 30k dims a row, ~29 a query)"),
)


def feature_rows_table(rows: int) -> list[dict]:
    """The search features' rows (bench/readfeatures.py) on `rows` rows, then one recall row per
    index type."""
    import readfeatures

    out = []
    for feat, label in FEATURES:
        for k, what, unit, better in (
            ("p50_s", "p50, 1 client", "ms", "lower"),
            ("qps_8", "QPS, 8 clients", "qps", "higher"),
            ("recall", "recall@10", "ratio", "higher"),
            ("server_cpu_per_call_s", "server CPU per search, 8 clients", "ms", "lower"),
        ):
            out.append(
                {
                    "key": f"feat_{feat}_{k}",
                    "label": f"{label} ({human_rows(rows)}): {what}",
                    "unit": unit,
                    "better": better,
                }
            )
    for key, label in readfeatures.index_rows():
        out.append(
            {
                "key": f"feat_{key}_recall",
                "label": f"recall@10 by index type ({human_rows(rows)}): {label}",
                "unit": "ratio",
                "better": "higher",
            }
        )
    return out


def read_rows_table(read_rows: int, dataset: str = "random") -> list[dict]:
    """The read path's rows (bench/readpath.py), `read_rows` flushed rows × 128 (random) or of a
    real `dataset` (at most `read_rows`: as many as it has)."""
    n = f"{human_rows(read_rows)} rows" if dataset == "random" else f"{dataset}, ≤ {human_rows(read_rows)} rows"
    spec = [
        ("index_load_s", f"create_index + load (HNSW M=16, efC=128), {n}", "s", "lower"),
        ("index_built_s", "  of which: until every row indexed", "s", "lower"),
        ("search_p50_s", "search p50 (nq=1, top-10, ef=256)", "ms", "lower"),
        ("search_p99_s", "search p99", "ms", "lower"),
        ("server_cpu_per_search_s", "server CPU time per search (all its processes)", "ms", "lower"),
        ("client_cpu_per_search_s", "client (pymilvus) CPU time per search", "ms", "lower"),
        ("qps_1", "search QPS, 1 client", "qps", "higher"),
        ("qps_8", "search QPS, 8 clients", "qps", "higher"),
        ("recall", "recall@10 vs numpy brute force (1 client)", "ratio", "higher"),
        ("recall_loaded", "recall@10 under 8 clients", "ratio", "higher"),
        ("server_cpu_per_search_loaded_s", "server CPU time per search, 8 clients", "ms", "lower"),
        ("query_s", "query `id in [3 ids]` latency", "ms", "lower"),
        ("count_s", "count(*) latency", "ms", "lower"),
        ("rss_loaded", f"RSS (sum) once loaded, {n}", "MiB", "lower"),
    ]
    return [{"key": f"read_{k}", "label": label, "unit": u, "better": b} for k, label, u, b in spec]


def human_rows(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


def table_rows(rows: list[int], read_rows: int = 0, read_dataset: str = "random", feature_rows: int = 0) -> list[dict]:
    """(key, label, unit, better) of every printed row; unit 'rps' | 'qps' | 's' | 'ms' | 'MiB' |
    'ratio'. No write-path sizes (`rows` empty): only the read path's rows and start-up."""
    startup = {"key": "startup_s", "label": "server start-up (not a target)", "unit": "s", "better": "lower"}
    read = read_rows_table(read_rows, read_dataset) if read_rows else []
    read += feature_rows_table(feature_rows) if feature_rows else []
    if not rows:
        return [*read, startup]
    first = human_rows(rows[0])
    out = []
    for n in rows:
        out.append(
            {
                "key": f"insert_rps_{n}",
                "label": f"insert rows/s, {human_rows(n)} rows",
                "unit": "rps",
                "better": "higher",
            }
        )
    for n in rows:
        out.append({"key": f"flush_rpc_{n}", "label": f"Flush RPC, {human_rows(n)}", "unit": "ms", "better": "lower"})
        out.append({"key": f"flushed_{n}", "label": f"until flushed, {human_rows(n)}", "unit": "s", "better": "lower"})
    out.append(
        {
            "key": "small_flush",
            "label": "small flush: insert 1k, Flush, until flushed (median)",
            "unit": "ms",
            "better": "lower",
        }
    )
    out.append(
        {
            "key": f"num_entities_{rows[0]}" if rows else "",
            "label": f"num_entities latency ({first} rows)",
            "unit": "ms",
            "better": "lower",
        }
    )
    out.append(
        {
            "key": "delete_kps",
            "label": f"delete keys/s (of {first} rows, 1,000 keys per request)",
            "unit": "rps",
            "better": "higher",
        }
    )
    out.append(
        {"key": "delete_flushed", "label": "Flush after the deletes, until flushed", "unit": "s", "better": "lower"}
    )
    out.append(
        {"key": "drop_partition_rpc", "label": "drop_partition RPC (100k rows)", "unit": "ms", "better": "lower"}
    )
    out.append(
        {"key": "drop_partition_gone", "label": "dropped partition's files gone", "unit": "s", "better": "lower"}
    )
    out.append(
        {
            "key": "drop_rpc",
            "label": f"drop_collection RPC ({human_rows(rows[-1]) if rows else ''} rows)",
            "unit": "ms",
            "better": "lower",
        }
    )
    out.append({"key": "files_gone", "label": "dropped collection's files gone", "unit": "s", "better": "lower"})
    out.append(
        {
            "key": "compact_s",
            "label": "compaction of 20 flushed segments × 1k rows (FLAT index), until Completed",
            "unit": "s",
            "better": "lower",
        }
    )
    out.append(
        {"key": "bulk_import_s", "label": "bulk import from Parquet, until Completed", "unit": "s", "better": "lower"}
    )
    out.append({"key": "bulk_import_rps", "label": "bulk import rows/s", "unit": "rps", "better": "higher"})
    for n in rows:
        out.append(
            {
                "key": f"peak_rss_{n}",
                "label": f"peak RSS (sum), {human_rows(n)} insert+flush",
                "unit": "MiB",
                "better": "lower",
            }
        )
    out.append({"key": "peak_rss_run", "label": "peak RSS (sum), whole run", "unit": "MiB", "better": "lower"})
    out += read
    out.append(startup)
    return out


def fmt_value(v, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit in ("rps", "qps"):
        return f"{v:,.0f}"
    if unit == "ratio":
        return f"{v:.4f}"
    if unit == "ms":
        return f"{v * 1e3:,.1f} ms"
    if unit == "MiB":
        return f"{v / 2**20:,.0f} MiB"
    return f"{v:,.2f} s" if v < 100 else f"{v:,.0f} s"


def fmt_stat(values: list, unit: str) -> str:
    """'median [min–max]' of the non-None values; one value → just it."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a"
    med = statistics.median(vals)
    s = fmt_value(med, unit)
    if len(vals) > 1:
        lo, hi = fmt_value(min(vals), unit), fmt_value(max(vals), unit)
        for suffix in (" ms", " s", " MiB"):
            lo = lo.removesuffix(suffix)
        s += f" [{lo}–{hi}]"
    if len(vals) < len(values):
        s += f" ({len(values) - len(vals)} n/a)"
    return s


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def text_table(header: list[str], body: list[list[str]]) -> str:
    w = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]

    def line(r):
        return "  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i]) for i, c in enumerate(r))

    return "\n".join([line(header), "  ".join("-" * x for x in w)] + [line(r) for r in body])


# ------------------------------------------------------------------------------------------------
# One run: every measurement against one (fresh) server.


def run_suite(
    server: Server,
    *,
    rows: list[int],
    small_count: int = 10,
    num_entities_count: int = 10,
    drop: bool = True,
    files_cap: float = 30.0,
    parquet: str | None = None,
    pidfile: str | None = None,
    data_cache: dict | None = None,
    delete_keys: int = 0,
    partition_rows: int = 0,
    compact_segments: int = 0,
    read: dict | None = None,
) -> dict:
    """Runs every measurement against an already started `server`; returns a JSON-able dict."""
    import pymilvus

    res: dict = {
        "system": server.system,
        "server_version": server.version,
        "pymilvus": pymilvus.__version__,
        "python": sys.version.split()[0],
        "rows": rows,
        "batch": BATCH,
        "loadavg_start": os.getloadavg(),
        "sizes": {},
    }
    mem = MemWatch(server.pid, pidfile=pidfile) if server.pid else None
    phase = mem.phase if mem else (lambda _n: None)
    cache = data_cache if data_cache is not None else {}
    client = Client(server.host, server.port)
    try:
        t_run = time.perf_counter()
        for i, n in enumerate(rows):
            phase(f"gen_{n}")
            if n not in cache:
                log(f"generating {n:,} rows")
                cache.clear()  # one data set in memory at a time
                cache[n] = Batches(n)
            data = cache[n]
            name = f"bench_{n}"
            coll = client.create(name)
            phase(f"insert_{n}")
            log(f"{server.system}: inserting {n:,} rows into {name}")
            cpu0 = time.process_time()
            dt = client.insert_all(coll, data)
            client_cpu = time.process_time() - cpu0
            phase(f"flush_{n}")
            rpc, flushed = client.flush(name)
            phase(f"stats_{n}")
            ne = []
            count = None
            for _ in range(num_entities_count):
                t0 = time.perf_counter()
                count = coll.num_entities
                ne.append(time.perf_counter() - t0)
            res["sizes"][str(n)] = {
                "insert_s": dt,
                "insert_rows_per_s": n / dt,
                "insert_client_cpu_s": client_cpu,
                "flush_rpc_s": rpc,
                "flushed_s": flushed,
                "num_entities_s": stats(ne),
                "num_entities": count,
                "collection_id": client.collection_id(name),
            }
            log(
                f"{server.system}: {n:,} rows: {n / dt:,.0f} rows/s, Flush RPC {rpc * 1e3:.1f} ms, "
                f"flushed after {flushed:.2f} s, num_entities={count} in {statistics.median(ne) * 1e3:.1f} ms"
            )
            if i == 0 and small_count:
                phase("small_flush")
                res["small_flush"] = small_flush(client, small_count)
                log(f"{server.system}: small flush median {res['small_flush']['total_s']['median']:.3f} s")
            if i == 0 and delete_keys:
                phase("delete")
                res["delete"] = delete_run(client, coll, name, min(delete_keys, n))
                log(f"{server.system}: delete {res['delete']}")
            if i == 0 and partition_rows:
                phase("drop_partition")
                res["drop_partition"] = drop_partition_run(client, server, coll, name, partition_rows, files_cap)
                log(f"{server.system}: drop_partition {res['drop_partition']}")
            if i == 0 and compact_segments:
                phase("compact")
                res["compact"] = compact_run(client, compact_segments)
                log(f"{server.system}: compact {res['compact']}")
        if drop and rows:
            phase("drop")
            name = f"bench_{rows[-1]}"
            cid = client.collection_id(name)
            d = server.collection_files(name, cid)
            files_before = files_under(d) if d is not None and d.exists() else None
            t0 = time.perf_counter()
            rpc = client.drop(name)
            gone = None
            if d is not None:
                gone = wait_files_gone(d, t0, files_cap)
            res["drop"] = {
                "collection_rows": rows[-1],
                "rpc_s": rpc,
                "files_gone_s": gone,
                "files_cap_s": files_cap,
                "watched_dir": str(d) if d else None,
                "files_left": files_under(d) if d and d.exists() else 0,
                "files_before": files_before,
            }
            log(
                f"{server.system}: drop RPC {rpc * 1e3:.1f} ms, files gone: "
                f"{f'{gone:.2f} s' if gone is not None else f'> {files_cap:.0f} s' if d else 'n/a'}"
            )
        if parquet:
            cache.clear()
            gc.unfreeze()
            gc.collect()
            phase("bulk_import")
            res["bulk_import"] = run_bulk(client, server, parquet)
            log(f"{server.system}: bulk import: {res['bulk_import']}")
        if read and read.get("flushed"):
            import readpath

            cache.clear()
            gc.unfreeze()
            gc.collect()
            phase("read")
            feats = read.pop("features", 0)
            res["read"] = readpath.run(
                server.host, server.port, server_pid=server.pid, log=lambda m: log(f"{server.system}: {m}"), **read
            )
            if feats:
                import readfeatures

                phase("read_features")
                res["read_features"] = readfeatures.run(
                    server.host,
                    server.port,
                    rows=feats,
                    seconds=min(3.0, read["qps_seconds"]),
                    client_python=read.get("client_python"),
                    server_pid=server.pid,
                    log=lambda m: log(f"{server.system}: {m}"),
                )
        phase("end")
        res["total_s"] = time.perf_counter() - t_run
    finally:
        client.close()
        res["loadavg_end"] = os.getloadavg()
        if mem:
            res["memory"] = mem.stop()
    return res


def delete_run(client: Client, coll, name: str, keys: int, batch: int = 1000) -> dict:
    """Delete `keys` existing keys, `batch` per `Collection.delete("id in [...]")`, one request at
    a time (**delete keys/s**), then Flush until flushed (the deletes durable)."""
    exprs = [f"id in {list(range(s, min(s + batch, keys)))}" for s in range(0, keys, batch)]
    t0 = time.perf_counter()
    for e in exprs:
        coll.delete(e)
    dt = time.perf_counter() - t0
    _, flushed = client.flush(name)
    return {"keys": keys, "batch": batch, "delete_s": dt, "keys_per_s": keys / dt, "flushed_s": flushed}


def drop_partition_run(client: Client, server: Server, coll, name: str, rows: int, cap: float) -> dict:
    """Insert `rows` into a new partition, flush, then DropPartition: the RPC's latency and the
    seconds until no file of the partition is left under insert_log/<collection>/<partition>
    (both systems lay binlogs out that way on local storage)."""
    part = coll.create_partition("p_bench")
    data = Batches(rows, start_id=50_000_000, seed=3)
    for b in data.batches:
        part.insert(b)
    data.free()
    client.flush(name)
    pid = server.partition_id(client, name, "p_bench")
    d = server.partition_files(name, client.collection_id(name), "p_bench", pid)
    files_before = files_under(d) if d is not None and d.exists() else None
    t0 = time.perf_counter()
    coll.drop_partition("p_bench")
    rpc = time.perf_counter() - t0
    gone = wait_files_gone(d, t0, cap) if d is not None else None
    return {"rows": rows, "rpc_s": rpc, "files_gone_s": gone, "files_cap_s": cap, "files_before": files_before}


def _partition_id(client: Client, name: str, partition: str) -> int:
    from pymilvus.grpc_gen import milvus_pb2

    resp = client.stub.ShowPartitions(milvus_pb2.ShowPartitionsRequest(collection_name=name))
    return int(dict(zip(resp.partition_names, resp.partitionIDs, strict=True))[partition])


def compact_run(client: Client, k: int, rows: int = SMALL_ROWS, timeout: float = 300.0) -> dict:
    """`k` small flushed segments (insert `rows`, Flush until flushed, k times) with a FLAT index
    built on them (Milvus 2.3.5 plans no compaction of segments without an index: it answers
    Completed at once and merges nothing), then `Collection.compact()` until
    `get_compaction_state()` says Completed (polled every POLL): **compaction s**; the flushed
    segments before and after (an "ok" that merged nothing is reported as such)."""
    from pymilvus import utility
    from pymilvus.grpc_gen import common_pb2

    name = "bench_compact"
    coll = client.create(name)
    data = Batches(rows * k, start_id=70_000_000, seed=5, batch=rows, pool_rows=rows * k)
    for b in data.batches:
        coll.insert(b)
        client.flush(name)
    data.free()

    def flushed() -> int | None:
        try:
            infos = client.handler.get_persistent_segment_infos(name)
        except Exception:  # noqa: BLE001 - a system without GetPersistentSegmentInfo (Milvus Lite)
            return None
        return sum(1 for s in infos if s.state == common_pb2.SegmentState.Flushed and s.num_rows)

    before = None
    try:
        coll.create_index("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
        utility.wait_for_index_building_complete(name, using=client.alias, timeout=timeout)
        before = flushed()
        t0 = time.perf_counter()
        coll.compact()
        while (st := coll.get_compaction_state()).state.name != "Completed":
            if time.perf_counter() - t0 > timeout:
                return {"status": "timeout", "segments_before": before, "state": st.state.name}
            time.sleep(POLL)
    except Exception as exc:  # noqa: BLE001 - a system without compaction: reported as n/a with its answer
        status = "unimplemented" if "UNIMPLEMENTED" in str(exc).upper() else "error"
        return {"status": status, "error": str(exc)[:300], "segments_before": before}
    dt = time.perf_counter() - t0
    after = flushed()
    seen = {"seconds": dt, "segments_before": before, "segments_after": after}
    if before is None or after is None:
        return {"status": "no segment info", **seen}  # whether anything was merged cannot be told
    if after >= before:
        return {"status": "merged nothing", **seen}
    return {"status": "ok", "segments": k, "rows": rows, **seen}


def small_flush(client: Client, k: int) -> dict:
    data = Batches(SMALL_ROWS * k, start_id=90_000_000, seed=1, batch=SMALL_ROWS, pool_rows=SMALL_ROWS * k)
    name = "bench_small"
    coll = client.create(name)
    total, rpcs, flushed = [], [], []
    for b in data.batches:
        t0 = time.perf_counter()
        coll.insert(b)
        rpc, fl = client.flush(name)
        total.append(time.perf_counter() - t0)
        rpcs.append(rpc)
        flushed.append(fl)
    data.free()
    return {
        "k": k,
        "rows": SMALL_ROWS,
        "total_s": stats(total),
        "flush_rpc_s": stats(rpcs),
        "flushed_s": stats(flushed),
        "all_total_s": total,
    }


def run_bulk(client: Client, server: Server, parquet: str) -> dict:
    """Import `parquet` (absolute path; for kmilvus also linked under its storage root, so a
    storage-relative key works too) into a fresh collection."""
    src = Path(parquet).resolve()
    name = "bench_bulk"
    client.create(name)
    files = [str(src)]
    if server.system == "kmilvus" and server.storage_dir:
        dst = server.storage_dir / "bulk" / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
        files = [str(dst)]
    r = bulk_import(client, name, files)
    if r["status"] == "failed" and server.system == "kmilvus" and server.storage_dir:
        # Maybe it wants a key relative to its storage root.
        client.create(name)
        r2 = bulk_import(client, name, [f"bulk/{src.name}"])
        if r2["status"] == "ok":
            r = r2
        else:
            r["retry_relative"] = r2
    if r["status"] == "ok":
        from pymilvus import Collection

        r["num_entities"] = Collection(name, using=client.alias).num_entities
    r["file"] = str(src)
    r["file_rows"] = parquet_rows(src)
    if r["status"] == "ok" and r["file_rows"]:
        r["rows_per_s"] = r["file_rows"] / r["seconds"]
    return r


def parquet_rows(path: Path) -> int | None:
    with contextlib.suppress(Exception):
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    return None


def start_server(
    system: str,
    data_dir: Path,
    *,
    pidfile: str | None = None,
    uri: str | None = None,
    storage_dir: str | None = None,
    kmilvus_bin: str | None = None,
    lite_bin: str | None = None,
) -> Server:
    if uri:
        return AttachedServer(uri, storage_dir, system)
    if system == "kmilvus":
        srv = KmilvusServer(data_dir / "data", exe=kmilvus_bin, pidfile=pidfile)
    elif system == "milvus":
        srv = MilvusLiteServer(data_dir / "data", pidfile=pidfile)
    elif system == "lite":
        srv = MilvusLiteTcpServer(data_dir / "data", exe=lite_bin or "milvus-lite", pidfile=pidfile)
    else:
        raise SystemExit(f"unknown system {system!r}")
    t0 = time.perf_counter()
    srv.start()
    srv.startup_s = time.perf_counter() - t0
    log(f"{system} {srv.version} ready on 127.0.0.1:{srv.port} (pid {srv.pid}) in {srv.startup_s:.1f} s")
    return srv


def run_main(args) -> None:
    rows = [int(x) for x in args.rows.split(",") if x]
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{args.system}-", dir=args.tmp_dir))
    server = None
    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        server = start_server(
            args.system,
            tmp,
            pidfile=args.pidfile,
            uri=args.uri,
            storage_dir=args.storage_dir,
            kmilvus_bin=args.kmilvus_bin,
            lite_bin=args.lite_bin,
        )
        res = run_suite(
            server,
            rows=rows,
            small_count=args.small_count,
            drop=not args.no_drop,
            files_cap=args.files_cap,
            parquet=args.bulk,
            pidfile=args.pidfile,
            delete_keys=args.delete_keys,
            partition_rows=args.partition_rows,
            compact_segments=args.compact_segments,
            read={
                "flushed": args.read_rows,
                "growing": args.read_growing,
                "searches": args.read_searches,
                "qps_seconds": args.read_qps_seconds,
                "dataset": args.read_dataset,
                "client_python": args.read_client_python,
                "clients": tuple(int(x) for x in args.read_clients.split(",")),
                "features": args.read_features,
            },
        )
        res["startup_s"] = getattr(server, "startup_s", None)
        text = json.dumps(res, indent=1)
        if args.out:
            Path(args.out).write_text(text)
        else:
            print(text)
    finally:
        if server:
            server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="start a server (or attach), run the workload, print JSON")
    r.add_argument("--system", choices=["kmilvus", "milvus", "lite"], required=True)
    r.add_argument("--rows", default="200000,1000000")
    r.add_argument("--small-count", type=int, default=10)
    r.add_argument("--files-cap", type=float, default=30.0)
    r.add_argument("--no-drop", action="store_true")
    r.add_argument("--delete-keys", type=int, default=100_000, help="keys to delete after the first size (0: skip)")
    r.add_argument(
        "--partition-rows",
        type=int,
        default=100_000,
        help="rows of the partition dropped after the first size (0: skip)",
    )
    r.add_argument(
        "--compact-segments",
        type=int,
        default=20,
        help="small flushed segments compacted after the first size (0: skip)",
    )
    r.add_argument("--bulk", default=None, help="Parquet file to bulk-import")
    r.add_argument("--read-rows", type=int, default=0, help="read path (bench/readpath.py): flushed rows (0: skip)")
    r.add_argument("--read-growing", type=int, default=1_000, help="read path: growing rows on top")
    r.add_argument("--read-searches", type=int, default=300, help="read path: single searches timed")
    r.add_argument("--read-qps-seconds", type=float, default=5.0, help="read path: seconds per QPS run")
    r.add_argument(
        "--read-dataset",
        default="random",
        help="read path: random, or a real set of bench/readpath.py's DATASETS (e.g. glove-50)",
    )
    r.add_argument(
        "--read-client-python",
        default=None,
        help="read path: the Python whose pymilvus drives the searches (default: this one)",
    )
    r.add_argument("--read-clients", default="1,8", help="read path: client process counts, comma-separated")
    r.add_argument(
        "--read-features", type=int, default=0, help="read path: rows of bench/readfeatures.py's collection (0: skip)"
    )
    r.add_argument("--uri", default=None)
    r.add_argument("--storage-dir", default=None, help="with --uri: the server's storage root")
    r.add_argument("--kmilvus-bin", default=None)
    r.add_argument("--lite-bin", default=None, help="the `milvus-lite` executable (--system lite)")
    r.add_argument("--pidfile", default=None, help="append every server pid seen here")
    r.add_argument("--tmp-dir", default=None)
    r.add_argument("--out", default=None)
    r.add_argument("--keep", action="store_true", help="keep the server's data dir")
    g = sub.add_parser("gen-parquet")
    g.add_argument("path")
    g.add_argument("--rows", type=int, default=1_000_000)
    m = sub.add_parser("memwatch")
    m.add_argument("--root", type=int, action="append", required=True)
    m.add_argument("--interval", type=float, default=0.05)
    m.add_argument("--pidfile", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run_main(args)
    elif args.cmd == "gen-parquet":
        t0 = time.perf_counter()
        write_parquet(Path(args.path), args.rows)
        log(f"wrote {args.rows:,} rows to {args.path} in {time.perf_counter() - t0:.1f} s")
    else:
        memwatch_main(args)


if __name__ == "__main__":
    main()
