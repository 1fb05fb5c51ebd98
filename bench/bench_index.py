"""Index micro-benchmark (kmilvus/index on faiss): build, serialize/load and search figures.

    .venv/bin/python bench/bench_index.py                       # 20k and 100k × 128, every type
    .venv/bin/python bench/bench_index.py --rows 20000 --types HNSW --threads 1

Per index type: build seconds, serialized MB, load seconds, single-query (nq=1, top-10) p50/p99
latency, batch QPS (nq=100) and recall@10 against exact brute force. Random uniform data (the
hardest case for recall); HNSW M=16 efConstruction=128 ef=64 (and ef=256), IVF nlist=1024
nprobe=16 (and 64) — the issue's reference parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kmilvus import index as kindex
from kmilvus.index import vector_index

CASES = {
    "FLAT": ({}, [{}]),
    "IVF_FLAT": ({"nlist": "1024"}, [{"nprobe": 16}, {"nprobe": 64}]),
    "IVF_SQ8": ({"nlist": "1024"}, [{"nprobe": 16}, {"nprobe": 64}]),
    "HNSW": ({"M": "16", "efConstruction": "128"}, [{"ef": 64}, {"ef": 256}]),
}


def recall(got: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(g) & set(t)) / truth.shape[1] for g, t in zip(got, truth, strict=True)]))


def run(rows: int, dim: int, types: list[str], metric: str, nq: int = 200) -> list[dict]:
    rng = np.random.default_rng(0)
    base = rng.random((rows, dim), dtype=np.float32)
    queries = rng.random((nq, dim), dtype=np.float32)
    _, truth = kindex.brute_force(base, metric).search(queries, 10)
    out = []
    for t in types:
        build_params, search_list = CASES[t]
        t0 = time.perf_counter()
        f = kindex.build(base, t, metric, build_params)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        idx = kindex.load(f.data)
        load_s = time.perf_counter() - t0
        for sp in search_list:
            lat = []
            for q in queries:
                t0 = time.perf_counter()
                idx.search(q[None, :], 10, sp)
                lat.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            _, got = idx.search(queries, 10, sp)
            batch_s = time.perf_counter() - t0
            row = {
                "rows": rows,
                "dim": dim,
                "metric": metric,
                "type": t,
                "build": build_params,
                "search": sp,
                "build_s": round(build_s, 3),
                "size_mb": round(f.serialized_size / 2**20, 1),
                "load_s": round(load_s, 3),
                "p50_ms": round(statistics.median(lat), 3),
                "p99_ms": round(float(np.percentile(lat, 99)), 3),
                "batch_qps": round(nq / batch_s),
                "recall@10": round(recall(got, truth), 3),
            }
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="*", default=[20_000, 100_000])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--types", nargs="*", default=list(CASES))
    ap.add_argument("--metric", default="L2")
    ap.add_argument("--threads", type=int, default=0, help="faiss OpenMP threads (0: faiss' default)")
    a = ap.parse_args()
    if a.threads:
        vector_index.set_threads(a.threads)  # also what a serial search restores
    for rows in a.rows:
        run(rows, a.dim, a.types, a.metric)


if __name__ == "__main__":
    main()
