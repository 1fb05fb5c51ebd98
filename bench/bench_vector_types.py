"""Recall and latency of the index types beyond FLAT/IVF/HNSW over float32, beside the index
knowhere builds for Milvus with the same data and params (faiss' own classes, as knowhere wraps
them), single process, no server:

    .venv/bin/python bench/bench_vector_types.py                 # every family, 20k rows
    .venv/bin/python bench/bench_vector_types.py --rows 50000 --families sparse

Families:
- dense (128-d uniform random float32, L2): IVF_PQ (nlist 1024, m 16/32, nbits 8) beside faiss'
  IndexIVFPQ; SCANN (nlist 1024, reorder_k 10 / 100) beside knowhere's ScaNN recipe (faiss IVF +
  4-bit fast-scan PQ over pairs of dimensions + refine on the raw vectors); float16 and bfloat16
  vectors (widened to float32) through HNSW M=16 efConstruction=128 beside float32 HNSW;
- binary (256-bit uniform random codes): BIN_FLAT HAMMING / JACCARD (exact), BIN_IVF_FLAT
  (nlist 1024) beside faiss' IndexBinaryIVF (knowhere's BIN_IVF_FLAT);
- sparse (30,000 dimensions, 10-60 values a row drawn Zipf-like, as a SPLADE-ish vocabulary):
  SPARSE_INVERTED_INDEX and SPARSE_WAND, drop_ratio_search 0 (knowhere: exact) and 0.2.

Recall@10 counts a returned row as a hit when its TRUE distance (recomputed exactly, whatever the
index answered) is no worse than the 10th best: ties — frequent with HAMMING — count as hits, for
both sides. Latency: nq=1 top-10, wall p50 / p99 and CPU-time p50 over the queries, in process
(no gRPC). Results as JSON lines on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import faiss

from kmilvus import index as kindex
from kmilvus.index import binary_index
from kmilvus.index.vectors import SparseRows

K = 10


def recall(got: np.ndarray, truth: np.ndarray, larger: bool) -> float:
    """Share of the returned top-k rows whose true distance (`truth`: every query × every row)
    is within the true k-th distance."""
    kth = (-np.sort(-truth, axis=1) if larger else np.sort(truth, axis=1))[:, K - 1 : K]
    d = np.take_along_axis(truth, np.maximum(got, 0), axis=1)
    ok = (d >= kth - 1e-5) if larger else (d <= kth + 1e-5)
    return float(np.mean(ok & (got >= 0)))


def timed(search: Callable[[object], tuple[np.ndarray, np.ndarray]], queries, nq: int) -> dict:
    lat, cpu = [], []
    for i in range(nq):
        q = queries.take(np.array([i])) if isinstance(queries, SparseRows) else queries[i : i + 1]
        t0, c0 = time.perf_counter(), time.process_time()
        search(q)
        lat.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return {
        "p50_ms": round(statistics.median(lat), 3),
        "p99_ms": round(float(np.percentile(lat, 99)), 3),
        "cpu_p50_ms": round(statistics.median(cpu), 3),  # this process' CPU time: less blurred by a busy machine
    }


def emit(row: dict) -> dict:
    print(json.dumps(row), flush=True)
    return row


def kmilvus_case(family, vectors, queries, index_type, metric, build, searches, truth, larger, nq):
    """Build once, then one row per search params: (case name, params)."""
    t0 = time.perf_counter()
    f = kindex.build(vectors, index_type, metric, build)
    build_s = time.perf_counter() - t0
    idx = kindex.load(f.data)
    for name, search in searches:
        _, o = idx.search(queries, K, search)
        emit(
            {
                "family": family,
                "case": name,
                "system": "kmilvus",
                "index": index_type,
                "metric": metric,
                "build": build,
                "search": search,
                "build_s": round(build_s, 2),
                "recall@10": round(recall(o, truth, larger), 4),
                **timed(lambda q, s=search: idx.search(q, K, s), queries, nq),
            }
        )


def faiss_case(family, name, index, queries, search_params, truth, larger, nq, note):
    _, o = index.search(queries, K, params=search_params)
    return emit(
        {
            "family": family,
            "case": name,
            "system": "knowhere-equivalent faiss",
            "note": note,
            "recall@10": round(recall(o, truth, larger), 4),
            **timed(lambda q: index.search(q, K, params=search_params), queries, nq),
        }
    )


def dense(rows: int, nq: int) -> None:
    rng = np.random.default_rng(0)
    dim = 128
    base = rng.random((rows, dim), dtype=np.float32)
    queries = rng.random((nq, dim), dtype=np.float32)
    truth = ((queries**2).sum(1)[:, None] - 2 * queries @ base.T + (base**2).sum(1)[None, :]).astype(np.float32)
    for m in (16, 32):
        build = {"nlist": "1024", "m": str(m), "nbits": "8"}
        cases = [(f"IVF_PQ m={m} nprobe={p}", {"nprobe": p}) for p in (16, 64)]
        kmilvus_case("dense", base, queries, "IVF_PQ", "L2", build, cases, truth, False, nq)
        ref = faiss.IndexIVFPQ(faiss.IndexFlatL2(dim), dim, 1024, m, 8)
        ref.train(base)
        ref.add(base)
        for name, search in cases:
            params = faiss.SearchParametersIVF(nprobe=search["nprobe"])
            faiss_case("dense", name, ref, queries, params, truth, False, nq, "IndexIVFPQ")
    cases = [
        (f"SCANN nprobe={p} reorder_k={r}", {"nprobe": p, "reorder_k": r}) for p, r in ((16, 10), (16, 100), (64, 100))
    ]
    kmilvus_case("dense", base, queries, "SCANN", "L2", {"nlist": "1024"}, cases, truth, False, nq)
    ref = faiss.index_factory(dim, f"IVF1024,PQ{dim // 2}x4fs,RFlat")
    ref.train(base)
    ref.add(base)
    for name, search in cases:
        params = faiss.IndexRefineSearchParameters(
            k_factor=search["reorder_k"] / K, base_index_params=faiss.SearchParametersIVF(nprobe=search["nprobe"])
        )
        faiss_case("dense", name, ref, queries, params, truth, False, nq, "IVF + PQ x4fs + RFlat (knowhere ScaNN)")
    hnsw = {"M": "16", "efConstruction": "128"}
    for label, conv in (
        ("FLOAT32", lambda x: x),
        ("FLOAT16", lambda x: x.astype(np.float16).astype(np.float32)),
        ("BFLOAT16", lambda x: ((x.view(np.uint32) >> 16) << 16).view(np.float32)),
    ):
        cases = [(f"{label} HNSW ef={ef}", {"ef": ef}) for ef in (64, 256)]
        kmilvus_case("dense", conv(base), queries, "HNSW", "L2", hnsw, cases, truth, False, nq)


def binary(rows: int, nq: int) -> None:
    rng = np.random.default_rng(1)
    nbytes = 32  # 256 bits
    codes = rng.integers(0, 256, (rows, nbytes), dtype=np.uint8)
    queries = rng.integers(0, 256, (nq, nbytes), dtype=np.uint8)
    for metric in ("HAMMING", "JACCARD"):
        truth = binary_index.distances(binary_index._words(codes), binary_index._words(queries), metric)
        kmilvus_case("binary", codes, queries, "BIN_FLAT", metric, {}, [(f"BIN_FLAT {metric}", {})], truth, False, nq)
        cases = [(f"BIN_IVF_FLAT {metric} nprobe={p}", {"nprobe": p}) for p in (16, 64)]
        kmilvus_case("binary", codes, queries, "BIN_IVF_FLAT", metric, {"nlist": "1024"}, cases, truth, False, nq)
        if metric == "HAMMING":
            ref = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(nbytes * 8), nbytes * 8, 1024)
            ref.train(codes)
            ref.add(codes)
            for name, search in cases:
                ref.nprobe = search["nprobe"]
                faiss_case("binary", name, ref, queries, None, truth, False, nq, "IndexBinaryIVF")


def sparse(rows: int, nq: int) -> None:
    rng = np.random.default_rng(2)
    dims = 30_000
    weights = 1.0 / np.arange(1, dims + 1) ** 0.8
    weights /= weights.sum()

    def make(n: int) -> SparseRows:
        counts = rng.integers(10, 60, n)
        idx = [np.sort(rng.choice(dims, size=c, replace=False, p=weights)) for c in counts]
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        indices = np.concatenate(idx).astype(np.uint32)
        return SparseRows(indptr, indices, rng.random(len(indices), dtype=np.float32) + 0.01)

    data, queries = make(rows), make(nq)
    exact = kindex.brute_force(data, "IP")
    truth = exact._scores(queries, 0.0, None).toarray()
    for index_type in ("SPARSE_INVERTED_INDEX", "SPARSE_WAND"):
        cases = [(f"{index_type} drop_ratio_search={d}", {"drop_ratio_search": d}) for d in (0.0, 0.2, 0.5)]
        kmilvus_case("sparse", data, queries, index_type, "IP", {}, cases, truth, True, nq)
    emit(
        {
            "family": "sparse",
            "case": "knowhere reference",
            "system": "knowhere-equivalent",
            "note": "knowhere 2.5 with drop_ratio_search 0 scores every shared dimension: exact, recall 1.0",
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--nq", type=int, default=100)
    ap.add_argument("--families", nargs="*", default=["dense", "binary", "sparse"])
    a = ap.parse_args()
    for fam in a.families:
        {"dense": dense, "binary": binary, "sparse": sparse}[fam](a.rows, a.nq)


if __name__ == "__main__":
    main()
