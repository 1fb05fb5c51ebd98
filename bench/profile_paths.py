"""Where kmilvus' time goes, per request kind: stage timestamps and a py-spy profile of the server.

    .venv/bin/python bench/profile_paths.py                       # every scenario, 20k rows
    .venv/bin/python bench/profile_paths.py --scenarios read8 --rows 1000000 --seconds 20
    .venv/bin/python bench/profile_paths.py --scenarios insert,delete --out NAME

Starts `kmilvus standalone` through bench/trace_standalone.py (the product unchanged, its stages
timed per request) and, for each scenario, drives it from outside with pymilvus while py-spy
samples the server process (`--nonblocking`: never paused; Python frames only); then asks the
server for the requests' traces (SIGUSR2). Scenarios:

- `single_flat`, `single_hnsw`: one client, nq=1 top-10 searches (FLAT; HNSW M=16 efC=128 ef=256)
  over `--rows` flushed + 1,000 growing random rows × 128, back to back (per-request overhead);
- `read8`: eight client processes (bench/searchload.py), HNSW;
- `insert`: one pymilvus client, ORM inserts of 10,000 rows (the write workload's collection);
- `delete`, `delete10k`: 1,000 (10,000) keys per `delete("id in [...]")`, one request at a time
  (bench/bench_delete.py's request), on 100k flushed rows; `delete_expr`: 1,000 keys per
  `delete("id >= a and id < b")` on them, indexed (FLAT) and loaded;
- `ddl`: drop_collection of collections holding 20k flushed rows, drop_partition of partitions
  holding 20k flushed rows, and num_entities, each RPC timed by the client too.

For each: client-side p50 of the RPC, the server's p50 from receipt to serialized answer, the
stages (median start offset and duration, calls per request), and the profile's shares — per
thread, the functions with the largest inclusive share and the largest self (leaf) share.
Output: results/NAME.json (everything) and results/NAME.md (the tables).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import numpy as np
import readpath
import searchload
import trace_standalone
import workload as w

PYSPY = Path(sys.executable).with_name("py-spy")
FRAME_LINE = re.compile(r":\d+\)$")


def log(msg: str) -> None:
    print(f"[profile {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class TracedStandalone:
    def __init__(self, tmp: Path):
        self.tmp, self.port = tmp, w.free_port()
        self.trace_file = tmp / "trace.json"
        self.proc: subprocess.Popen | None = None

    def start(self) -> TracedStandalone:
        logf = open(self.tmp / "standalone.log", "w")  # noqa: SIM115 - the child owns it
        argv = [sys.executable, str(BENCH / "trace_standalone.py"), "--out", str(self.trace_file), "--"]
        argv += ["--data-dir", str(self.tmp / "data"), "--port", str(self.port)]
        self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        t0 = time.time()
        while "ready on" not in (self.tmp / "standalone.log").read_text():
            if self.proc.poll() is not None or time.time() - t0 > 120:
                raise RuntimeError((self.tmp / "standalone.log").read_text()[-3000:])
            time.sleep(0.05)
        return self

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def traces(self) -> list[dict]:
        """Every request finished since the last call."""
        self.trace_file.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR2)
        for _ in range(500):
            if self.trace_file.exists():
                time.sleep(0.05)
                try:
                    return json.loads(self.trace_file.read_text())
                except json.JSONDecodeError:
                    continue
            time.sleep(0.02)
        raise TimeoutError("no trace dump")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


class Spy:
    """py-spy record on the server while a scenario runs."""

    def __init__(self, pid: int, out: Path, rate: int = 200):
        self.out = out
        argv = [str(PYSPY), "record", "-p", str(pid), "-r", str(rate), "--nonblocking", "-f", "raw", "-t"]
        argv += ["-o", str(out)]  # no --native: py-spy cannot unwind native frames without pausing
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # attached

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not self.out.exists():
            return {"error": err[-1000:]}
        return shares(self.out.read_text())


def _frame(f: str) -> str:
    return FRAME_LINE.sub(")", f.strip())


# Frames every sample of the event loop shares (the loop, click, the entry points): not a cost.
ROOT_FRAMES = re.compile(
    r"\((asyncio/(base_events|runners|events)|click/core|kmilvus/(cli|standalone)|trace_standalone|threading"
    r"|concurrent/futures/thread)\.py\)$"
)


# Leaves that mean "waiting", not working: the event loop in epoll, a worker thread or lease
# keeper blocked on its queue or condition, gRPC's poller thread (in C below Thread.run).
IDLE_LEAVES = re.compile(
    r"^(EpollSelector\.select|Condition\.wait|Event\.wait|_worker|Thread\.run|Thread\._bootstrap_inner|sleep)"
    r" \((selectors|threading|concurrent/futures/thread|asyncio/tasks|time)\.py\)$"
)


def _package(frame: str) -> str:
    """The package (or kmilvus sub-package) a frame's file belongs to."""
    m = re.search(r"\(([^()]*)\)$", frame)
    path = m.group(1) if m else frame
    parts = path.split("/")
    if parts[0] == "kmilvus" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else path


def shares(raw: str, top: int = 25) -> dict:
    """py-spy raw (collapsed) stacks → shares of the BUSY samples (idle leaves left out, counted
    apart) per thread, inclusive per function (once per stack) and self (the leaf frame)."""
    total, idle = 0, 0
    by_thread: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    leaf: collections.Counter = collections.Counter()
    pkg: collections.Counter = collections.Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        c = int(n)
        frames = [_frame(f) for f in stack.split(";")]
        thread = next((f for f in frames[:2] if f.startswith("thread")), "?")
        frames = [f for f in frames if not f.startswith(("thread", "process"))]
        if frames and IDLE_LEAVES.match(frames[-1]):
            idle += c
            continue
        total += c
        by_thread[thread] += c
        for f in set(frames):
            if not ROOT_FRAMES.search(f):
                incl[f] += c
        if frames:
            leaf[frames[-1]] += c
            pkg[_package(frames[-1])] += c
    pct = (lambda k: round(100 * k / total, 1)) if total else (lambda k: 0.0)
    return {
        "samples": total,
        "idle_samples": idle,
        "threads": {t: pct(c) for t, c in by_thread.most_common(8)},
        "inclusive": [(f, pct(c)) for f, c in incl.most_common(top)],
        "self": [(f, pct(c)) for f, c in leaf.most_common(top)],
        "self_by_package": [(f, pct(c)) for f, c in pkg.most_common(12)],
    }


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


# ------------------------------------------------------------------------------------------------
# Scenarios.


def search_collection(host: str, port: int, name: str, rows: int, index: dict) -> list[list[float]]:
    """`name`: rows flushed + 1,000 growing random rows × 128, indexed, loaded; returns queries."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections, utility

    data, queries, _, rows = readpath.vectors("random", rows, 1000, 128, 300, 42)
    connections.connect("prof", host=host, port=str(port), timeout=60)
    schema = CollectionSchema(
        [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=128)]
    )
    coll = Collection(name, schema, using="prof", shards_num=1)
    for s in range(0, rows, 10_000):
        e = min(rows, s + 10_000)
        coll.insert([list(range(s, e)), data[s:e].tolist()])
    coll.flush()
    coll.create_index("vec", index)
    utility.wait_for_index_building_complete(name, using="prof")
    coll.load()
    coll.insert([list(range(rows, rows + 1000)), data[rows:].tolist()])
    coll.query("", output_fields=["count(*)"], consistency_level="Strong")
    connections.disconnect("prof")
    return queries.tolist()


def run_search(srv: TracedStandalone, name: str, queries, procs: int, seconds: float, spy_dir: Path) -> dict:
    spec = {
        "api": "client",
        "collection": name,
        "field": "vec",
        "params": {"metric_type": "L2", "params": {"ef": 256}},
        "limit": 10,
        "consistency_level": "Eventually",
    }
    srv.traces()  # forget the set-up's requests
    spy = Spy(srv.pid, spy_dir / f"{name}_{procs}.raw")
    m = searchload.measure("127.0.0.1", srv.port, spec, queries, procs=procs, seconds=seconds, server_pid=srv.pid)
    prof = spy.stop()
    m.pop("ids")
    return {"client": m, "server": trace_standalone.summarise(srv.traces(), "Search"), "profile": prof}


def scenario_growing(srv: TracedStandalone, rows: int, spy_dir: Path, settle: float = 0.3) -> dict:
    """Searches of rows still growing: a loaded, HNSW-indexed collection receives 10,000-row
    inserts up to `rows` (below the seal size: every row stays growing); `settle` s after each,
    one search (Eventually) — the first after the batch, which finds the growing data changed."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections

    connections.connect("prof_growing", host="127.0.0.1", port=str(srv.port), timeout=60)
    schema = CollectionSchema(
        [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=128)]
    )
    coll = Collection("prof_growing", schema, using="prof_growing", shards_num=1)
    coll.create_index("vec", {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 128}})
    coll.load()
    rng = np.random.default_rng(7)
    params = {"metric_type": "L2", "params": {"ef": 64}}
    srv.traces()
    spy = Spy(srv.pid, spy_dir / "growing.raw")
    lat = []
    for s in range(0, rows, 10_000):
        coll.insert([list(range(s, s + 10_000)), rng.random((10_000, 128), dtype=np.float32)])
        time.sleep(settle)
        q = rng.random((1, 128), dtype=np.float32).tolist()
        t0 = time.perf_counter()
        coll.search(q, "vec", params, limit=10, consistency_level="Eventually")
        lat.append(time.perf_counter() - t0)
    prof = spy.stop()
    connections.disconnect("prof_growing")
    return {
        "client": {"calls": len(lat), "p50_s": statistics.median(lat), "p99_s": pct(lat, 99)},
        "server": trace_standalone.summarise(srv.traces(), "Search"),
        "profile": prof,
    }


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def scenario_insert(srv: TracedStandalone, seconds: float, spy_dir: Path) -> dict:
    client = w.Client("127.0.0.1", srv.port, alias="prof_insert")
    try:
        coll = client.create("prof_insert")
        data = w.Batches(200_000)
        batches = data.batches
        coll.insert(batches[0])  # warm: meta cache, segment allocation
        srv.traces()
        spy = Spy(srv.pid, spy_dir / "insert.raw")
        lat, i, t_end = [], 1, time.perf_counter() + seconds
        cpu0 = time.process_time()
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            coll.insert(batches[i % len(batches)])
            lat.append(time.perf_counter() - t0)
            i += 1
        client_cpu = time.process_time() - cpu0
        prof = spy.stop()
        rows = (i - 1) * w.BATCH
        return {
            "client": {
                "calls": len(lat),
                "p50_s": statistics.median(lat),
                "rows_per_s": rows / sum(lat),
                "client_cpu_per_call_s": client_cpu / len(lat),
            },
            "server": trace_standalone.summarise(traces := srv.traces(), "Insert"),
            "traces": traces,
            "profile": prof,
        }
    finally:
        client.close()


def scenario_delete(
    srv: TracedStandalone, seconds: float, spy_dir: Path, batch: int = 1000, by_expr: bool = False
) -> dict:
    """`batch` keys per request; past the 100k rows the requests start over at key 0 (deleting a
    deleted key again takes the same path). `by_expr`: `id >= a and id < a + batch` on the loaded
    collection (a Strong query for the keys, then their delete) instead of `id in [...]`."""
    name = f"prof_delete_{batch}{'_expr' if by_expr else ''}"
    client = w.Client("127.0.0.1", srv.port, alias=name)
    try:
        coll = client.create(name)
        data = w.Batches(100_000)
        client.insert_all(coll, data)
        data.free()
        client.flush(name)
        if by_expr:
            coll.create_index("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
            coll.load()
            exprs = [f"id >= {s} and id < {s + batch}" for s in range(0, 100_000, batch)]
        else:
            exprs = [f"id in {list(range(s, s + batch))}" for s in range(0, 100_000, batch)]
        coll.delete(exprs[0])
        srv.traces()
        spy = Spy(srv.pid, spy_dir / f"{name}.raw")
        lat, i, t_end = [], 1, time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            coll.delete(exprs[i % len(exprs)])
            lat.append(time.perf_counter() - t0)
            i += 1
        prof = spy.stop()
        return {
            "client": {"calls": len(lat), "p50_s": statistics.median(lat), "keys_per_s": batch * len(lat) / sum(lat)},
            "server": trace_standalone.summarise(traces := srv.traces(), "Delete"),
            "traces": traces,
            "profile": prof,
        }
    finally:
        client.close()


def scenario_ddl(srv: TracedStandalone, count: int, rows: int, spy_dir: Path) -> dict:
    from pymilvus import Collection, utility

    client = w.Client("127.0.0.1", srv.port, alias="prof_ddl")
    out: dict = {}
    try:
        data = w.Batches(rows)
        names = [f"prof_drop_{k}" for k in range(count)]
        for n in names:
            coll = client.create(n)
            client.insert_all(coll, data)
            client.flush(n)
        pcoll = client.create("prof_parts")
        for k in range(count):
            p = f"p{k}"
            pcoll.create_partition(p)
            for b in data.batches:
                pcoll.insert(b, partition_name=p)
        client.flush("prof_parts")
        ne = Collection(names[0], using="prof_ddl")
        ne.num_entities  # noqa: B018 - warm the meta cache
        srv.traces()
        spy = Spy(srv.pid, spy_dir / "ddl.raw")
        lat_ne = timed(lambda: ne.num_entities, 50)
        t_ne = srv.traces()
        lat_dp = []
        for k in range(count):
            t0 = time.perf_counter()
            pcoll.drop_partition(f"p{k}")
            lat_dp.append(time.perf_counter() - t0)
        t_dp = srv.traces()
        lat_dc = []
        for n in names:
            t0 = time.perf_counter()
            utility.drop_collection(n, using="prof_ddl")
            lat_dc.append(time.perf_counter() - t0)
        t_dc = srv.traces()
        prof = spy.stop()
        for key, lat, tr, method in (
            ("num_entities", lat_ne, t_ne, "GetCollectionStatistics"),
            ("drop_partition", lat_dp, t_dp, "DropPartition"),
            ("drop_collection", lat_dc, t_dc, "DropCollection"),
        ):
            out[key] = {
                "client": {"calls": len(lat), "p50_s": statistics.median(lat), "max_s": max(lat)},
                "server": trace_standalone.summarise(tr, method),
                "other_rpcs": sorted(collections.Counter(t["method"] for t in tr).items()),
                "traces": tr,
            }
        out["profile_all_three"] = prof
        return out
    finally:
        client.close()


# ------------------------------------------------------------------------------------------------
# Report.


def stage_table(server: dict) -> list[str]:
    rows = [
        "| stage | starts at (median) | takes (median) | times per call | in % of calls |",
        "|---|---|---|---|---|",
    ]
    for name, s in server.get("stages", {}).items():
        start = "" if s["start_median_s"] is None else f"{s['start_median_s'] * 1e3:.3f} ms"
        rows.append(
            f"| `{name}` | {start} | {s['dur_median_s'] * 1e3:.3f} ms | {s['per_call']:.2g} "
            f"| {100 * s['in_calls']:.0f} |"
        )
    return rows


def profile_table(prof: dict, n: int = 12) -> list[str]:
    if "error" in prof:
        return [f"py-spy failed: {prof['error']}"]
    rows = [
        f"py-spy: {prof['samples']} busy samples ({prof.get('idle_samples')} idle left out); "
        f"threads: {prof['threads']}",
        "",
    ]
    rows += [f"self time by package: {prof.get('self_by_package')}", ""]
    rows += ["| inclusive | % | self (leaf) | % |", "|---|---|---|---|"]
    for (fi, pi), (fs, ps) in zip(prof["inclusive"][:n], prof["self"][:n], strict=False):
        rows.append(f"| `{fi}` | {pi} | `{fs}` | {ps} |")
    return rows


def report(res: dict) -> str:
    out = [f"# kmilvus request profiles ({res['when']})", "", f"Command: `{res['command']}`", ""]
    out.append(f"- load average before → after: {res['load_start']} → {res['load_end']}")
    out.append("- server: `kmilvus standalone` under bench/trace_standalone.py; client: pymilvus " + res["pymilvus"])
    for key, sc in res["scenarios"].items():
        parts = (
            [sc]
            if "server" in sc
            else [sc[k] | {"_name": k} for k in sc if isinstance(sc[k], dict) and "server" in sc[k]]
        )
        for p in parts:
            name = p.get("_name", key)
            c, s = p["client"], p["server"]
            out += ["", f"## {name}", ""]
            cl = ", ".join(
                f"{k} {v * 1e3:.2f} ms" if k.endswith("_s") and not k.endswith("_per_s") else f"{k} {v:,.4g}"
                for k, v in c.items()
                if isinstance(v, int | float)
                and k
                in (
                    "qps",
                    "p50_s",
                    "p99_s",
                    "rows_per_s",
                    "keys_per_s",
                    "calls",
                    "client_cpu_per_call_s",
                    "server_cpu_per_call_s",
                )
            )
            out.append(f"- client: {cl}")
            if s.get("calls"):
                med = s["server_total_median_s"] * 1e3
                out.append(f"- server, receipt → answer serialized: median {med:.3f} ms over {s['calls']} calls")
            out += ["", *stage_table(s)]
        if "profile" in sc:
            out += ["", *profile_table(sc["profile"])]
        if "profile_all_three" in sc:
            out += ["", "### profile over the three RPC kinds", "", *profile_table(sc["profile_all_three"])]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="single_flat,single_hnsw,read8,insert,delete,ddl")
    ap.add_argument("--rows", type=int, default=20_000, help="flushed rows of the search collections")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--growing-rows", type=int, default=200_000, help="rows inserted by the growing scenario")
    ap.add_argument("--ddl-count", type=int, default=10)
    ap.add_argument("--ddl-rows", type=int, default=20_000)
    ap.add_argument("--out", default="profile_paths")
    ap.add_argument("--out-dir", default=str(BENCH / "results"))
    args = ap.parse_args(argv)
    import pymilvus

    tmp = Path(tempfile.mkdtemp(prefix="profile-paths-"))
    spy_dir = tmp / "spy"
    spy_dir.mkdir()
    res: dict = {
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": "python bench/profile_paths.py " + " ".join(sys.argv[1:]),
        "args": vars(args),
        "pymilvus": pymilvus.__version__,
        "load_start": [round(x, 1) for x in os.getloadavg()],
        "scenarios": {},
    }
    srv = TracedStandalone(tmp).start()
    log(f"traced standalone pid {srv.pid} on port {srv.port}")
    wanted = args.scenarios.split(",")
    try:
        hnsw = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 128}}
        flat = {"index_type": "FLAT", "metric_type": "L2", "params": {}}
        q_hnsw = None
        if "single_flat" in wanted:
            q = search_collection("127.0.0.1", srv.port, "prof_flat", args.rows, flat)
            res["scenarios"]["single_flat"] = run_search(srv, "prof_flat", q, 1, args.seconds, spy_dir)
            log("single_flat done")
        if "single_hnsw" in wanted or "read8" in wanted:
            q_hnsw = search_collection("127.0.0.1", srv.port, "prof_hnsw", args.rows, hnsw)
        if "single_hnsw" in wanted:
            res["scenarios"]["single_hnsw"] = run_search(srv, "prof_hnsw", q_hnsw, 1, args.seconds, spy_dir)
            log("single_hnsw done")
        if "read8" in wanted:
            res["scenarios"]["read8"] = run_search(srv, "prof_hnsw", q_hnsw, 8, args.seconds, spy_dir)
            log("read8 done")
        if "insert" in wanted:
            res["scenarios"]["insert"] = scenario_insert(srv, args.seconds, spy_dir)
            log("insert done")
        if "delete" in wanted:
            res["scenarios"]["delete"] = scenario_delete(srv, args.seconds, spy_dir)
            log("delete done")
        if "delete_expr" in wanted:
            res["scenarios"]["delete_expr"] = scenario_delete(srv, args.seconds, spy_dir, by_expr=True)
            log("delete_expr done")
        if "delete10k" in wanted:
            res["scenarios"]["delete10k"] = scenario_delete(srv, args.seconds, spy_dir, batch=10_000)
            log("delete10k done")
        if "growing" in wanted:
            res["scenarios"]["growing"] = scenario_growing(srv, args.growing_rows, spy_dir)
            log("growing done")
        if "ddl" in wanted:
            res["scenarios"]["ddl"] = scenario_ddl(srv, args.ddl_count, args.ddl_rows, spy_dir)
            log("ddl done")
    finally:
        srv.stop()
        res["load_end"] = [round(x, 1) for x in os.getloadavg()]
        shutil.rmtree(tmp, ignore_errors=True)
    out = Path(args.out_dir)
    (out / f"{args.out}.json").write_text(json.dumps(res, indent=1))
    (out / f"{args.out}.md").write_text(report(res))
    print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
