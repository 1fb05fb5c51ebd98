"""Many clients, and the client's own limit.

    .venv/bin/python bench/clients.py --milvus-venv /work/main/bench/.venv-milvus   # ~12 min
    .venv/bin/python bench/clients.py --seconds 10 --clients 1,8 --systems kmilvus,sink  # quick look
    .venv/bin/python bench/clients.py --profile-only --profile-clients 8                  # py-spy only

Aggregate insert throughput of N client *processes* (N in --clients, default 1,4,8), each inserting
10,000-row batches of bench/workload.py's schema (id INT64 pk, vec FLOAT_VECTOR(128), tag
VARCHAR(64); one shard) with `Collection.insert` for `--seconds`, into one shared collection and
into 8 collections (client i → collection i % 8; with one client both layouts are the same, so
that cell runs once). Every cell gets a fresh server in a fresh data dir; systems alternate
(k M, M k, ...). Per cell:

  rows/s         sum of rows acknowledged / wall time from the common start (a barrier all client
                 processes wait on) to the last client's last answer; a client starts no insert
                 after `--seconds`
  p50 / p99      per-client Insert latency (successful calls), the median over clients of each
  peak RSS       sum over the server's processes (kmilvus + etcd + nats-server; Milvus' one
                 process), sampled every 50 ms by workload.py's memwatch during the inserts
  CPU            the server's and the clients' CPU seconds during the inserts (2 cores: ≤ 2 s/s)
  rate-limited   back-pressure answers (code 8 / RateLimit): pymilvus' own retry is turned off
                 (`retry_on_rate_limit=False`) so each one is counted here, then the same batch is
                 retried after a back-off (10 ms doubling, ≤ 1 s)

"sink" is not a database: a bench tool (`clients.py sink`), kmilvus' own gRPC server stack
(kmilvus.util.grpcutil.start_server) serving a MilvusService that keeps the schemas it is given
(CreateCollection / HasCollection / DescribeCollection / DropCollection), answers Connect and
GetVersion, and answers Insert with success, the request's primary keys, a timestamp and
`succ_index` (as kmilvus does) — and does nothing else. Against it, N clients measure what the
clients alone can send on this machine; kmilvus ÷ sink at one client is the share of the client's
own limit a server reaches.

`--profile-clients N` adds one more kmilvus cell (one collection, N clients) with
`py-spy record --function --nonblocking` on the standalone process during the inserts (not a
measured cell: sampling costs CPU); the top functions by own time, and kmilvus' functions by
inclusive time, go into the JSON and the markdown. Each client inserts one batch before the
common start (a collection's first insert also sets up its segment and channel), not counted.

Results: bench/results/<--name>.{json,md,png} (default `clients`).

Internals (run by the above in the system's venv, in a session and private network namespace of
its own where `unshare -n` works, like vs_milvus.py):
    python bench/clients.py cell --system kmilvus|milvus|sink --clients N --collections C ...
    python bench/clients.py sink --port P
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import datetime
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import workload as w

SYSTEMS = {"kmilvus": "kmilvus", "milvus": "Milvus 2.3.5", "sink": "sink (bench tool: accepts, stores nothing)"}
RATE_LIMIT_CODE = 8  # pymilvus ErrorCode.RATE_LIMIT; common_pb2.RateLimit is the legacy code
SINK_READY = "clients sink ready on"


def log(msg: str) -> None:
    print(f"[clients {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# The sink: a MilvusService that accepts Insert and does nothing (a bench tool).


def sink_main(args) -> None:
    from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc, schema_pb2

    from kmilvus.util.grpcutil import start_server

    ok = common_pb2.Status

    class Sink(milvus_pb2_grpc.MilvusServiceServicer):
        """Keeps schemas; Insert answers what kmilvus answers (IDs, count, timestamp,
        succ_index) without storing anything."""

        def __init__(self) -> None:
            self.colls: dict[str, tuple[int, schema_pb2.CollectionSchema, int]] = {}
            self.next_id = 1000

        async def Connect(self, req, context=None):
            resp = milvus_pb2.ConnectResponse(status=ok(), identifier=1)
            resp.server_info.build_tags = "v2.3.5"
            resp.server_info.deploy_mode = "bench-sink"
            return resp

        async def GetVersion(self, req, context=None):
            return milvus_pb2.GetVersionResponse(status=ok(), version="v2.3.5")

        async def CreateCollection(self, req, context=None):
            self.next_id += 1
            schema = schema_pb2.CollectionSchema.FromString(req.schema)
            self.colls[req.collection_name] = (self.next_id, schema, req.shards_num or 1)
            return ok()

        async def HasCollection(self, req, context=None):
            return milvus_pb2.BoolResponse(status=ok(), value=req.collection_name in self.colls)

        async def DropCollection(self, req, context=None):
            self.colls.pop(req.collection_name, None)
            return ok()

        def _missing(self, name: str) -> common_pb2.Status:
            return ok(error_code=common_pb2.CollectionNotExists, code=100, reason=f"collection not found[{name}]")

        async def DescribeCollection(self, req, context=None):
            c = self.colls.get(req.collection_name)
            if c is None:
                return milvus_pb2.DescribeCollectionResponse(status=self._missing(req.collection_name))
            cid, schema, shards = c
            return milvus_pb2.DescribeCollectionResponse(
                status=ok(),
                schema=schema,
                collectionID=cid,
                collection_name=req.collection_name,
                shards_num=shards,
                virtual_channel_names=[f"sink-dml_{i}_{cid}v{i}" for i in range(shards)],
                physical_channel_names=[f"sink-dml_{i}" for i in range(shards)],
                created_timestamp=_hybrid_ts(),
                created_utc_timestamp=int(time.time() * 1000),
                consistency_level=common_pb2.Bounded,
                db_name=req.db_name or "default",
            )

        async def Insert(self, req, context=None):
            c = self.colls.get(req.collection_name)
            if c is None:
                return milvus_pb2.MutationResult(status=self._missing(req.collection_name))
            pk = next(f.name for f in c[1].fields if f.is_primary_key)
            col = next(fd for fd in req.fields_data if fd.field_name == pk)
            n = req.num_rows
            ids = schema_pb2.IDs()
            if col.scalars.HasField("long_data"):
                ids.int_id.data[:] = col.scalars.long_data.data
            else:
                ids.str_id.data[:] = col.scalars.string_data.data
            return milvus_pb2.MutationResult(
                status=ok(), IDs=ids, insert_cnt=n, timestamp=_hybrid_ts(), succ_index=range(n)
            )

    async def serve() -> None:
        server, port = await start_server(
            "127.0.0.1", args.port, [(milvus_pb2_grpc.add_MilvusServiceServicer_to_server, Sink())]
        )
        print(f"{SINK_READY} 127.0.0.1:{port}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop(1)

    asyncio.run(serve())


def _hybrid_ts() -> int:
    return int(time.time() * 1000) << 18


class SinkServer(w.Server):
    """`clients.py sink` as a child process on a free port (started and stopped like kmilvus)."""

    system = "sink"
    version = "bench sink"

    def __init__(self, data_dir: Path, *, pidfile: str | None = None):
        self.port = w.free_port()
        self.pidfile, self.proc, self._procs = pidfile, None, []
        self.log_path = Path(data_dir) / "sink.log"

    def start(self, timeout: float = 60.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "w")  # noqa: SIM115 - closed by the pump thread
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "sink", "--port", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        w.wait_ready(self, self.proc.stderr, logf, lambda line: SINK_READY in line, timeout, "clients sink")

    def stop(self) -> None:
        w.stop_child(self, "clients sink")


# ------------------------------------------------------------------------------------------------
# One cell: a fresh server, N client processes, one common start.


def client_main(i: int, host: str, port: int, name: str, seconds: float, pool_rows: int, barrier, out) -> None:
    """One client process: insert 10k-row batches into `name` from the barrier for `seconds`.
    Vectors and tags come from a pool generated before the barrier; IDs are fresh per batch."""
    from pymilvus import Collection, connections
    from pymilvus.exceptions import MilvusException
    from pymilvus.grpc_gen import common_pb2

    alias = f"client{i}"
    connections.connect(alias=alias, host=host, port=str(port), timeout=60)
    coll = Collection(name, using=alias)
    pool = w.Batches(pool_rows, seed=i).batches
    base = (i + 1) * 10**12
    # Warm-up, not counted: a collection's first insert also sets up its segment and channel.
    _, vecs, tags = pool[-1]
    coll.insert([list(range(base - len(vecs), base)), vecs, tags], timeout=600)
    lat: list[float] = []
    rows, limited, errors = 0, 0, Counter()
    barrier.wait(timeout=600)
    t_start = time.monotonic()
    cpu0 = time.process_time()
    deadline = t_start + seconds
    k, backoff = 0, 0.01
    while time.monotonic() < deadline:
        _, vecs, tags = pool[k % len(pool)]
        n = len(vecs)
        ids = list(range(base, base + n))
        t0 = time.perf_counter()
        try:
            coll.insert([ids, vecs, tags], timeout=120, retry_on_rate_limit=False)
        except MilvusException as exc:
            if exc.code == RATE_LIMIT_CODE or exc.compatible_code == common_pb2.RateLimit:
                limited += 1
                time.sleep(backoff)
                backoff = min(1.0, backoff * 2)
            else:
                errors[f"code {exc.code}: {exc.message[:80]}"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors[type(exc).__name__] += 1
            continue
        lat.append(time.perf_counter() - t0)
        rows, base, k, backoff = rows + n, base + n, k + 1, 0.01
    t_end = time.monotonic()
    out.put(
        {
            "client": i,
            "collection": name,
            "rows": rows,
            "t_start": t_start,
            "t_end": t_end,
            "cpu_s": time.process_time() - cpu0,
            "latencies": lat,
            "rate_limited": limited,
            "errors": dict(errors),
        }
    )
    connections.disconnect(alias)


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def cell_main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f"clients-{args.system}-", dir=args.tmp_dir))

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    server: w.Server | None = None
    procs: list = []
    spy = None
    try:
        if args.system == "sink":
            server = SinkServer(tmp, pidfile=args.pidfile)
            t0 = time.perf_counter()
            server.start()
            server.startup_s = time.perf_counter() - t0
        else:
            server = w.start_server(args.system, tmp, pidfile=args.pidfile, kmilvus_bin=args.kmilvus_bin)
        admin = w.Client(server.host, server.port, alias="admin")
        names = [f"clients_{c}" for c in range(args.collections)]
        for n in names:
            admin.create(n)
        admin.close()
        ctx = mp.get_context("spawn")
        barrier, out = ctx.Barrier(args.clients + 1), ctx.Queue()
        procs = [
            ctx.Process(
                target=client_main,
                args=(i, server.host, server.port, names[i % len(names)], args.seconds, args.pool_rows, barrier, out),
            )
            for i in range(args.clients)
        ]
        for p in procs:
            p.start()
        mem = w.MemWatch(server.pid, pidfile=args.pidfile)
        load_start = os.getloadavg()
        barrier.wait(timeout=600)
        mem.phase("insert")
        if args.py_spy:
            spy = subprocess.Popen(
                [
                    args.py_spy,
                    "record",
                    "--pid",
                    str(server.pid),
                    "--duration",
                    str(int(args.seconds)),
                    "--rate",
                    "50",
                    "--function",
                    "--nonblocking",
                    "--format",
                    "raw",
                    "--output",
                    args.py_spy_out,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        results = [out.get(timeout=args.seconds + 600) for _ in procs]
        mem.phase("end")
        load_end = os.getloadavg()
        for p in procs:
            p.join(30)
        memory = mem.stop()
        if spy:
            _, err = spy.communicate(timeout=120)
            if spy.returncode:
                log(f"py-spy exited {spy.returncode}: {err[-500:]}")
            spy = None
        t0, t1 = min(r["t_start"] for r in results), max(r["t_end"] for r in results)
        rows = sum(r["rows"] for r in results)
        ins = memory.get("phases", {}).get("insert", {})
        res = {
            "system": args.system,
            "server_version": server.version,
            "clients": args.clients,
            "collections": args.collections,
            "seconds": args.seconds,
            "rows": rows,
            "wall_s": t1 - t0,
            "rows_per_s": rows / (t1 - t0),
            "p50_s": _median([_pct(r["latencies"], 0.50) for r in results]),
            "p99_s": _median([_pct(r["latencies"], 0.99) for r in results]),
            "max_s": max((max(r["latencies"]) for r in results if r["latencies"]), default=None),
            "inserts": sum(len(r["latencies"]) for r in results),
            "rate_limited": sum(r["rate_limited"] for r in results),
            "errors": dict(sum((Counter(r["errors"]) for r in results), Counter())),
            "peak_rss": ins.get("peak_rss"),
            "server_cpu_s": ins.get("cpu_seconds"),
            "server_cpu_by_process": ins.get("cpu_by_process"),
            "client_cpu_s": sum(r["cpu_s"] for r in results),
            "per_process_peak_rss": memory.get("per_process_peak_rss"),
            "loadavg_start": load_start,
            "loadavg_end": load_end,
            "startup_s": getattr(server, "startup_s", None),
            "per_client": [
                {k: v for k, v in r.items() if k != "latencies"}
                | {"p50_s": _pct(r["latencies"], 0.5), "p99_s": _pct(r["latencies"], 0.99)}
                for r in results
            ],
        }
        Path(args.out).write_text(json.dumps(res, indent=1))
        log(
            f"{args.system} {args.clients} clients × {args.collections} coll.: {res['rows_per_s']:,.0f} rows/s, "
            f"p50 {res['p50_s'] or 0:.3f} s, rate-limited {res['rate_limited']}, load {load_end[0]:.1f}"
        )
    finally:
        if spy and spy.poll() is None:
            spy.kill()
        for p in procs:
            if p.is_alive():
                p.kill()
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _median(xs: list) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


# ------------------------------------------------------------------------------------------------
# The profile: collapsed stacks from py-spy → top functions.


IDLE = ("Condition.wait ", "EpollSelector.select ", "Event.wait ")


def top_functions(raw: Path, k: int = 12) -> dict:
    """Shares of the busy samples from py-spy's raw collapsed stacks (`frame;...;frame count`):
    own time per leaf frame, and inclusive time per kmilvus function (outer frames such as the
    event loop are in every stack and say nothing). Stacks ending in a wait are idle."""
    own: Counter = Counter()
    incl: Counter = Counter()
    total = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        if frames[-1].startswith(IDLE):
            idle += n
            continue
        total += n
        own[frames[-1]] += n
        for f in {f for f in frames if "kmilvus/" in f and "kmilvus/cli.py" not in f}:
            incl[f] += n
    share = (lambda c: [(f, v / total) for f, v in c.most_common(k)]) if total else (lambda c: [])
    return {"samples": total, "idle_samples": idle, "own": share(own), "inclusive": share(incl)}


# ------------------------------------------------------------------------------------------------
# The driver.


def run_cell(
    system: str, python: str, args, tmp: Path, clients: int, colls: int, prefix: list[str], *, spy: str = ""
) -> dict:
    from vs_milvus import REAPER

    tag = f"{system}-{clients}x{colls}{'-spy' if spy else ''}"
    out, pidfile = tmp / f"{tag}.json", tmp / f"{tag}.pids"
    REAPER.pidfiles.append(pidfile)
    argv = [
        *prefix,
        python,
        str(Path(__file__).resolve()),
        "cell",
        "--system",
        system,
        "--clients",
        str(clients),
        "--collections",
        str(colls),
        "--seconds",
        str(args.seconds),
        "--pool-rows",
        str(args.pool_rows),
        "--out",
        str(out),
        "--pidfile",
        str(pidfile),
        "--tmp-dir",
        str(tmp),
    ]
    if system == "kmilvus":
        argv += ["--kmilvus-bin", str(Path(python).parent / "kmilvus")]
    if spy:
        argv += ["--py-spy", args.py_spy, "--py-spy-out", spy]
    log(f"cell {tag}")
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(ROOT))
    REAPER.popens.append(p)
    try:
        rc = p.wait(args.seconds + 900)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        REAPER.stop_popen(p)
        REAPER.popens.remove(p)
        left = REAPER.kill_leftovers(pidfile)
        if left:
            log(f"killed leftover processes of {tag}: {left}")
    if out.exists():
        return json.loads(out.read_text())
    return {"system": system, "clients": clients, "collections": colls, "error": f"exit code {rc}"}


def mib(v) -> str:
    return "n/a" if v is None else f"{v / 2**20:,.0f} MiB"


def ms(v) -> str:
    return "n/a" if v is None else f"{v * 1e3:,.0f} ms"


def tables(cells: list[dict]) -> tuple[list[str], list[list[str]], list[str]]:
    """The cell table and the summary lines (ratios against the targets)."""
    header = [
        "clients × collections",
        "system",
        "rows/s",
        "p50",
        "p99",
        "peak RSS (server)",
        "server CPU s/s",
        "client CPU s/s",
        "rate-limited",
        "errors",
        "load avg",
    ]
    body = []
    for c in cells:
        if c.get("error"):
            body.append([f"{c['clients']} × {c['collections']}", c["system"], c["error"], *[""] * 8])
            continue
        body.append(
            [
                f"{c['clients']} × {c['collections']}",
                SYSTEMS[c["system"]].split(" (")[0],
                f"{c['rows_per_s']:,.0f}",
                ms(c["p50_s"]),
                ms(c["p99_s"]),
                mib(c["peak_rss"]) if c["system"] != "sink" else "—",
                f"{(c['server_cpu_s'] or 0) / c['wall_s']:.2f}",
                f"{c['client_cpu_s'] / c['wall_s']:.2f}",
                str(c["rate_limited"]),
                str(sum(c["errors"].values())),
                f"{c['loadavg_start'][0]:.1f} → {c['loadavg_end'][0]:.1f}",
            ]
        )
    by = {(c["system"], c["clients"], c["collections"]): c for c in cells if not c.get("error")}
    summary = []
    for n, coll in sorted({(c["clients"], c["collections"]) for c in cells if not c.get("error")}):
        k, m = by.get(("kmilvus", n, coll)), by.get(("milvus", n, coll))
        if k and m:
            summary.append(
                f"{n} clients × {coll} collection(s): kmilvus ÷ Milvus 2.3.5 = "
                f"{k['rows_per_s'] / m['rows_per_s']:.2f}× ({k['rows_per_s']:,.0f} vs {m['rows_per_s']:,.0f} rows/s)"
                + (" — target ≥ 1.5× at 8 clients" if n == 8 else "")
            )
        s = by.get(("sink", n, 1))
        if k and s and coll == 1:
            summary.append(
                f"{n} client(s), one collection: kmilvus ÷ sink = {k['rows_per_s'] / s['rows_per_s']:.0%} "
                f"({k['rows_per_s']:,.0f} vs {s['rows_per_s']:,.0f} rows/s)"
                + (" — target ≥ 85 % at one client" if n == 1 else "")
            )
    return header, body, summary


def draw(cells: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = sorted({(c["clients"], c["collections"]) for c in cells if not c.get("error")})
    systems = [s for s in SYSTEMS if any(c["system"] == s for c in cells)]
    colors = {"kmilvus": "#1f77b4", "milvus": "#ff7f0e", "sink": "#999999"}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 7.5))
    width = 0.8 / len(systems)
    by = {(c["system"], c["clients"], c["collections"]): c for c in cells if not c.get("error")}
    for j, s in enumerate(systems):
        xs = [i + (j - (len(systems) - 1) / 2) * width for i in range(len(layouts))]
        ys = [by[(s, *lay)]["rows_per_s"] if (s, *lay) in by else 0 for lay in layouts]
        ax1.bar(xs, ys, width, color=colors[s], label=SYSTEMS[s])
        rss = [(by[(s, *lay)]["peak_rss"] or 0) / 2**20 if (s, *lay) in by and s != "sink" else 0 for lay in layouts]
        if s != "sink":
            ax2.bar(xs, rss, width, color=colors[s], label=SYSTEMS[s])
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(layouts)))
        ax.set_xticklabels([f"{n} clients × {c} coll." for n, c in layouts], fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_title("aggregate insert rows/s (10k-row batches × 128-dim), higher is better")
    ax2.set_title("peak RSS of the server's processes during the inserts (MiB)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def driver_main(args) -> int:
    import vs_milvus as vm

    t_start = time.monotonic()
    signal.signal(signal.SIGTERM, vm._on_signal)
    atexit.register(vm.REAPER.cleanup)
    systems = [s for s in args.systems.split(",") if s]
    pythons = {"kmilvus": args.kmilvus_python, "sink": args.kmilvus_python}
    if "milvus" in systems:
        pythons["milvus"] = str(vm.ensure_milvus_venv(Path(args.milvus_venv)))
    prefix = [] if args.no_netns else vm.netns_prefix()
    log("private network namespace per cell: " + ("yes" if prefix else "no"))
    tmp = Path(tempfile.mkdtemp(prefix="clients-bench-"))
    cells: list[dict] = []
    profile = None
    try:
        layouts = [(n, c) for n in (int(x) for x in args.clients.split(",")) for c in (1, 8) if not (n == 1 and c == 8)]
        if args.profile_only:
            layouts = []
        for i, (n, c) in enumerate(layouts):
            order = [s for s in ("kmilvus", "milvus") if s in systems]
            if i % 2:
                order.reverse()
            if "sink" in systems and c == 1:
                order.append("sink")
            for s in order:
                cells.append(run_cell(s, pythons[s], args, tmp, n, c, prefix))
        if args.profile_clients:
            raw = tmp / "py-spy.txt"
            prof_cell = run_cell(
                "kmilvus", pythons["kmilvus"], args, tmp, args.profile_clients, 1, prefix, spy=str(raw)
            )
            if raw.exists():
                profile = {"cell": prof_cell} | top_functions(raw)
                shutil.copy(raw, Path(args.out_dir) / f"{args.name}_py-spy.txt")
    finally:
        vm.REAPER.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    header, body, summary = tables(cells)
    when = datetime.datetime.now().isoformat(timespec="seconds")
    notes = [
        f"{when}, {platform.node()}, {os.cpu_count()} CPUs, shared with other work (load average: table)",
        f"{args.seconds:g} s of inserts per cell, 1 run each; fresh server per cell; systems alternate",
        "client: `Collection.insert([ids, vectors, tags])` of 10,000 rows, plain lists, one call at a time per "
        "process; kmilvus and the sink driven by pymilvus 3.0 (kmilvus' .venv), Milvus 2.3.5 by pymilvus 2.3.7",
        "server CPU s/s and client CPU s/s: CPU seconds per wall second during the inserts (the machine has 2 cores)",
        "network: " + ("each cell in a private network namespace (loopback only)" if prefix else "host network"),
    ]
    text = [w.text_table(header, body), "", *summary, "", *notes]
    if profile:
        text += [
            "",
            f"py-spy, kmilvus standalone, {args.profile_clients} clients × 1 collection "
            f"({profile['samples']} samples; load {profile['cell'].get('loadavg_end', [0])[0]:.1f}):",
        ]
        text += [f"  own  {v:6.1%}  {f}" for f, v in profile["own"]]
        text += [f"  incl {v:6.1%}  {f}" for f, v in profile["inclusive"]]
    print("\n".join(text))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "when": when,
        "args": vars(args),
        "total_s": time.monotonic() - t_start,
        "notes": notes,
        "summary": summary,
        "table": {"header": header, "body": body},
        "cells": cells,
        "profile": profile,
    }
    (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1, default=str))
    md = [
        f"# Many clients and the client's own limit ({when})",
        "",
        "Command: `.venv/bin/python bench/clients.py " + " ".join(sys.argv[1:]) + "`",
        "",
    ]
    if body:
        md += [w.markdown_table(header, body), "", *[f"- {s}" for s in summary], ""]
    md += [f"- {n}" for n in notes]
    if profile:
        md += [
            "",
            f"## py-spy: kmilvus standalone during {args.profile_clients} clients × 1 collection",
            "",
            f"{profile['samples']} busy samples at 50 Hz (`--function --nonblocking`; "
            f"{profile['idle_samples']} samples of threads waiting left out); "
            f"that cell: {profile['cell'].get('rows_per_s', 0):,.0f} rows/s, load "
            f"{profile['cell'].get('loadavg_start', [0])[0]:.1f} → {profile['cell'].get('loadavg_end', [0])[0]:.1f}. "
            f"Raw stacks: `{args.name}_py-spy.txt`.",
            "",
            w.markdown_table(["own time", "function"], [[f"{v:.1%}", f"`{f}`"] for f, v in profile["own"]]),
            "",
            w.markdown_table(["inclusive", "function"], [[f"{v:.1%}", f"`{f}`"] for f, v in profile["inclusive"]]),
        ]
    if cells:
        md += ["", f"![chart]({args.name}.png)"]
        try:
            draw(cells, out / f"{args.name}.png")
        except Exception as exc:  # noqa: BLE001 - the table is the result; the chart a view of it
            log(f"chart failed: {exc}")
    (out / f"{args.name}.md").write_text("\n".join(md) + "\n")
    log(f"wrote {out / args.name}.{{json,md,png}} in {(time.monotonic() - t_start) / 60:.1f} min")
    return 1 if any(c.get("error") for c in cells) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of inserts per cell")
    ap.add_argument("--clients", default="1,4,8", help="client process counts")
    ap.add_argument("--systems", default="kmilvus,milvus,sink")
    ap.add_argument("--pool-rows", type=int, default=20_000, help="rows of vectors/tags each client cycles through")
    ap.add_argument("--profile-clients", type=int, default=0, help="one more kmilvus cell under py-spy (N clients)")
    ap.add_argument("--profile-only", action="store_true", help="only the py-spy cell")
    ap.add_argument("--py-spy", default=str(Path(sys.executable).parent / "py-spy"))
    ap.add_argument("--milvus-venv", default=str(BENCH / ".venv-milvus"))
    ap.add_argument("--kmilvus-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--out-dir", default=str(BENCH / "results"))
    ap.add_argument("--name", default="clients")
    c = sub.add_parser("cell", help="internal: one cell, JSON to --out")
    c.add_argument("--system", choices=list(SYSTEMS), required=True)
    c.add_argument("--clients", type=int, required=True)
    c.add_argument("--collections", type=int, default=1)
    c.add_argument("--seconds", type=float, default=20.0)
    c.add_argument("--pool-rows", type=int, default=20_000)
    c.add_argument("--out", required=True)
    c.add_argument("--pidfile", default=None)
    c.add_argument("--tmp-dir", default=None)
    c.add_argument("--kmilvus-bin", default=None)
    c.add_argument("--py-spy", default="")
    c.add_argument("--py-spy-out", default="")
    s = sub.add_parser("sink", help="the sink server (a bench tool)")
    s.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "cell":
        cell_main(args)
        return 0
    if args.cmd == "sink":
        sink_main(args)
        return 0
    return driver_main(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc})")
        with contextlib.suppress(Exception):
            import vs_milvus

            vs_milvus.REAPER.cleanup()
        sys.exit(130)
