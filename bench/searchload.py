"""Concurrent search load from client PROCESSES: the instrument behind every read-path QPS here.

    .venv/bin/python bench/searchload.py --uri http://127.0.0.1:19530 --collection C --field vec \\
        --procs 8 --seconds 5 --queries Q.npy          # ad hoc, against a loaded collection

Why processes, not threads: a pymilvus call costs its Python client ~0.5-1.5 ms of CPU (building
the request, parsing the answer), all of it under one interpreter lock. Eight client threads in
one process therefore share ONE core at most; on a 2-core machine that process, not the server,
sets the ceiling, and a fast server looks as slow as a slow one (bench/readpath.py measured Milvus
2.3.5 at 312 QPS that way where separate clients saw 763). Each worker here is its own process
with its own pymilvus client (and so its own gRPC channel and TCP connection), started with the
Python of the venv whose pymilvus should drive the server; the parent only coordinates.

Method (docs/benchmarks/method.md, "Concurrent search"): every worker connects, then warms up for
`warmup` seconds (at least `warmup_calls` calls per thread: connection, channel, server caches,
lazily built structures); when every worker is warm the parent announces one window [t0, t1] a
little in the future; workers search back to back until t1. A call counts if it COMPLETES inside
the window; QPS = completed calls / window length; p50 / p99 are of those calls. The first answer
per query is kept so the caller can check recall under load. Client CPU per call (the workers'
process CPU over the window) and, given the server's pid, the server's CPU per call (its process
tree over the window) tell which side the time went to. Errors are never swallowed: the first one
fails the measurement.

The worker code uses only APIs that pymilvus 2.3.7 (Milvus 2.3.5's client) and 3.0 both have; the
request kinds: "search" (dense or sparse, optional filter / group_by_field / output_fields),
"hybrid" (several AnnSearchRequests, RRF or Weighted; pymilvus 2.3.7 does not have it) and "query"
(a filter expression per call, or count(*)).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()


# ------------------------------------------------------------------------------------------------
# Worker side (runs in the child process, possibly under another venv's Python).


def _make_call(spec: dict, host: str, port: int, tag: str):
    """A function query -> list of result ids, bound to a fresh client of its own."""
    api, kind = spec.get("api", "client"), spec.get("kind", "search")
    limit, field = int(spec.get("limit", 10)), spec.get("field", "vec")
    params = spec.get("params", {})
    extra: dict = {}
    if spec.get("consistency_level"):
        extra["consistency_level"] = spec["consistency_level"]
    if spec.get("group_by_field"):
        extra["group_by_field"] = spec["group_by_field"]
    if spec.get("output_fields"):
        extra["output_fields"] = spec["output_fields"]
    name = spec["collection"]
    if api == "orm":
        from pymilvus import Collection, connections

        connections.connect(alias=tag, host=host, port=str(port), timeout=60)
        coll = Collection(name, using=tag)
        expr = spec.get("filter") or None

        def call(q):
            return list(coll.search([q], field, params, limit=limit, expr=expr, **extra)[0].ids)

        return call
    from pymilvus import MilvusClient

    kw = {"dedicated": True} if _pymilvus_major() >= 3 else {}
    client = MilvusClient(uri=f"http://{host}:{port}", timeout=60, **kw)
    if kind == "query":  # each "query" is a filter expression; output count(*) for a count
        outs = spec.get("output_fields") or ["id"]
        lvl = {k: v for k, v in extra.items() if k == "consistency_level"}

        def call(q):
            rows = client.query(name, filter=q, output_fields=outs, **lvl)
            if outs == ["count(*)"]:
                return [int(rows[0]["count(*)"])]
            return [r["id"] for r in rows]

        return call
    if kind == "hybrid":
        from pymilvus import AnnSearchRequest, RRFRanker, WeightedRanker

        subs = spec["requests"]  # [{"field", "params", "filter"}], one per vector of a query
        rk = spec.get("ranker", {"rrf": 60})
        ranker = RRFRanker(rk["rrf"]) if "rrf" in rk else WeightedRanker(*rk["weighted"])

        def call(q):
            reqs = [
                AnnSearchRequest([v], s["field"], s.get("params", {}), limit, expr=s.get("filter") or None)
                for v, s in zip(q, subs, strict=True)
            ]
            res = client.hybrid_search(name, reqs, ranker, limit=limit, **extra)
            return [h["id"] for h in res[0]]

        return call
    flt = spec.get("filter") or ""
    per_query = bool(spec.get("per_query_filter"))  # each query: {"vector": [...], "filter": "..."}

    def call(q):
        v, f = (q["vector"], q["filter"]) if per_query else (q, flt)
        res = client.search(name, [v], filter=f, limit=limit, search_params=params, anns_field=field, **extra)
        return [h["id"] for h in res[0]]

    return call


def _pymilvus_major() -> int:
    import pymilvus

    return int(pymilvus.__version__.split(".")[0])


def worker_main(args) -> None:
    """One client process: `threads` clients, warm-up, then back-to-back calls until the window ends."""
    spec = json.loads(Path(args.spec).read_text())
    with open(spec["queries"], "rb") as f:
        queries = pickle.load(f)
    nq = len(queries)
    window: list[float] = []  # [t0, t1] once the parent says go
    go = threading.Event()
    out: list[dict] = []
    errors: list[str] = []
    warm = threading.Barrier(args.threads + 1)

    def one(k: int) -> None:
        done, lat, ids = 0, [], {}
        try:
            call = _make_call(spec, spec["host"], spec["port"], f"w{args.worker}_{k}")
            i = (args.worker * args.threads + k) * 7919  # workers start at different queries
            t_warm = time.perf_counter() + args.warmup
            calls = 0
            while time.perf_counter() < t_warm or calls < args.warmup_calls:
                call(queries[i % nq])
                i, calls = i + 1, calls + 1
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run
            errors.append(f"warm-up: {exc!r}"[:500])
            warm.wait()
            return
        warm.wait()
        go.wait()
        t0, t1 = window
        try:
            while True:
                qi = i % nq
                s = time.time()
                got = call(queries[qi])
                e = time.time()
                i += 1
                if t0 <= e <= t1:
                    done += 1
                    lat.append(e - s)
                    ids.setdefault(qi, got)
                if e >= t1:
                    break
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run
            errors.append(repr(exc)[:500])
        out.append({"done": done, "lat": lat, "ids": ids})

    ts = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(args.threads)]
    for t in ts:
        t.start()
    warm.wait()
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    if not line or line[0] != "go":
        return
    window.extend([float(line[1]), float(line[2])])
    go.set()
    time.sleep(max(0.0, window[0] - time.time()))
    cpu0 = time.process_time()
    time.sleep(max(0.0, window[1] - time.time()))
    cpu1 = time.process_time()
    for t in ts:
        t.join(120)
    print(
        json.dumps(
            {
                "worker": args.worker,
                "threads": out,
                "cpu_s": cpu1 - cpu0,
                "errors": errors,
                "pymilvus": __import__("pymilvus").__version__,
            }
        ),
        flush=True,
    )


# ------------------------------------------------------------------------------------------------
# Parent side.


def _tree_cpu(pid: int | None) -> float:
    import psutil

    total = 0.0
    if not pid:
        return total
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
    return total


def measure(
    host: str,
    port: int,
    spec: dict,
    queries: list,
    *,
    procs: int = 8,
    threads: int = 1,
    seconds: float = 5.0,
    warmup: float = 1.0,
    warmup_calls: int = 5,
    python: str | None = None,
    server_pid: int | None = None,
    timeout: float = 300.0,
) -> dict:
    """`procs` client processes × `threads` clients each calling `spec` back to back on `queries`
    (a list; each item is what one call sends: a vector, a sparse dict, or a tuple of vectors for
    hybrid) over a common window of `seconds`. Returns QPS, latencies, CPU per call and, per query
    index, the ids the first answer to it held."""
    import statistics

    tmp = Path(tempfile.mkdtemp(prefix="searchload-"))
    qfile, sfile = tmp / "queries.pkl", tmp / "spec.json"
    with open(qfile, "wb") as f:
        pickle.dump(queries, f, protocol=4)
    sfile.write_text(json.dumps(spec | {"queries": str(qfile), "host": host, "port": port}))
    argv = [python or sys.executable, str(HERE), "worker", "--spec", str(sfile), "--threads", str(threads)]
    argv += ["--warmup", str(warmup), "--warmup-calls", str(warmup_calls)]
    errs = [open(tmp / f"worker-{w}.err", "w+") for w in range(procs)]  # noqa: SIM115 - closed below
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    ps = [subprocess.Popen([*argv, "--worker", str(w)], stderr=errs[w], **pipes) for w in range(procs)]

    def err_of(w: int) -> str:
        errs[w].seek(0)
        return errs[w].read()[-2000:]

    try:
        deadline = time.time() + timeout
        for w, p in enumerate(ps):
            line = p.stdout.readline() if p.stdout else ""
            if line.strip() != "ready":
                p.wait(5)
                raise RuntimeError(f"search worker did not get ready: {line!r} {err_of(w)}")
            if time.time() > deadline:
                raise TimeoutError("search workers not ready in time")
        t0 = time.time() + 0.3
        t1 = t0 + seconds
        for p in ps:
            assert p.stdin
            p.stdin.write(f"go {t0!r} {t1!r}\n")
            p.stdin.flush()
        load0 = os.getloadavg()
        time.sleep(max(0.0, t0 - time.time()))
        scpu0 = _tree_cpu(server_pid)
        time.sleep(max(0.0, t1 - time.time()))
        scpu1 = _tree_cpu(server_pid)
        reports = []
        for w, p in enumerate(ps):
            out, _ = p.communicate(timeout=timeout)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"search worker failed (rc {p.returncode}): {err_of(w)}")
            reports.append(json.loads(lines[-1]))
    finally:
        for p in ps:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in errs:
            f.close()
        shutil.rmtree(tmp, ignore_errors=True)
    errors = [e for r in reports for e in r["errors"]]
    if errors:
        raise RuntimeError(f"search failed under load ({len(errors)} errors): {errors[0]}")
    lat = sorted(x for r in reports for t in r["threads"] for x in t["lat"])
    done = sum(t["done"] for r in reports for t in r["threads"])
    ids: dict[int, list] = {}
    for r in reports:
        for t in r["threads"]:
            for k, v in t["ids"].items():
                ids.setdefault(int(k), v)
    client_cpu = sum(r["cpu_s"] for r in reports)
    res = {
        "procs": procs,
        "threads": threads,
        "clients": procs * threads,
        "seconds": seconds,
        "warmup_s": warmup,
        "calls": done,
        "qps": done / seconds,
        "p50_s": statistics.median(lat) if lat else None,
        "p99_s": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
        "client_cpu_per_call_s": client_cpu / done if done else None,
        "client_cpu_cores": client_cpu / seconds,
        "per_client_calls": [t["done"] for r in reports for t in r["threads"]],
        "pymilvus": reports[0]["pymilvus"] if reports else None,
        "loadavg": load0,
        "ids": ids,
    }
    if server_pid:
        res["server_cpu_per_call_s"] = (scpu1 - scpu0) / done if done else None
        res["server_cpu_cores"] = (scpu1 - scpu0) / seconds
    return res


def sparse_dicts(matrix) -> list[dict[int, float]]:
    """A scipy sparse matrix's rows as the {dimension: value} dicts pymilvus sends for a
    SPARSE_FLOAT_VECTOR field (what one call of a sparse search takes as its query)."""
    csr = matrix.tocsr()
    csr.sort_indices()
    dims, vals, ptr = csr.indices.tolist(), csr.data.tolist(), csr.indptr.tolist()
    return [dict(zip(dims[a:b], vals[a:b], strict=True)) for a, b in itertools.pairwise(ptr)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("worker", help="(internal) one client process")
    w.add_argument("--spec", required=True)
    w.add_argument("--threads", type=int, default=1)
    w.add_argument("--worker", type=int, default=0)
    w.add_argument("--warmup", type=float, default=1.0)
    w.add_argument("--warmup-calls", type=int, default=5)
    ap.add_argument("--uri", default="http://127.0.0.1:19530")
    ap.add_argument("--collection")
    ap.add_argument("--field", default="vec")
    ap.add_argument("--queries", help=".npy of query vectors (rows), or .npz of a scipy sparse matrix (sparse field)")
    ap.add_argument("--params", default='{"metric_type": "L2", "params": {"ef": 256}}')
    ap.add_argument("--api", choices=["client", "orm"], default="client")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--python", default=None, help="the Python (venv) whose pymilvus drives the server")
    ap.add_argument("--server-pid", type=int, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "worker":
        worker_main(args)
        return
    import numpy as np

    host, port = args.uri.split("://")[-1].rsplit(":", 1)
    spec = {
        "api": args.api,
        "collection": args.collection,
        "field": args.field,
        "params": json.loads(args.params),
        "consistency_level": "Eventually",
    }
    if args.queries.endswith(".npz"):  # a scipy sparse matrix (save_npz): one sparse query a row
        import scipy.sparse

        queries = sparse_dicts(scipy.sparse.load_npz(args.queries))
    else:
        queries = np.load(args.queries).astype("float32").tolist()
    r = measure(
        host,
        int(port),
        spec,
        queries,
        procs=args.procs,
        threads=args.threads,
        seconds=args.seconds,
        warmup=args.warmup,
        python=args.python,
        server_pid=args.server_pid,
    )
    r.pop("ids")
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
