"""Search features of Milvus 2.4-2.5 on the read path: filtered (with and without a scalar index),
group-by, hybrid (two vector fields, RRF) and sparse searches — latency, QPS and recall, the same
script against every system (bench/workload.py `--read-features`, `./dev bench-vs-milvus --read`).

Collection `bench_feat`: `id INT64 pk, vec FLOAT_VECTOR(128), vec2 FLOAT_VECTOR(128), doc INT64,
tag VARCHAR(16)`, one shard, `rows` random rows (float32 in [0, 1), seed 7), doc = id // 10 (groups
of ten rows), tag = "t" + (id % 100) (each tag 1 % of the rows); both vector fields HNSW (M=16,
efConstruction=128, L2), searched with ef=256, top-10, consistency Eventually. A system that cannot
create a second vector field (Milvus 2.3.5) gets the collection without `vec2`, and its hybrid
cells say why. Measurements go through bench/searchload.py (client processes, warm-up, one window):
p50 of one client and QPS of `clients` clients, each over `seconds`.

- **filtered**: `tag == "tK"` (K = the query's number mod 100: 1 % of the rows), before and after an
  INVERTED index on `tag` (release, create_index, load); recall@10 against numpy brute force over
  the rows with that tag;
- **group-by**: `group_by_field="doc"`, group size 1; recall = share of the exact 10 nearest groups
  (each group's nearest row, by numpy) found. A server that answers ungrouped (two hits of one doc)
  gets n/a: it ignored the parameter;
- **hybrid**: `hybrid_search` of two AnnSearchRequests (vec, vec2; each top-10) fused by
  `RRFRanker(60)`; recall against RRF of the exact per-field top-10 lists;
- **sparse**: not measured yet (bench/searchload.py sends dense queries only); the row says so.
  Sparse search itself is tested in the suite (tests/test_vector_types.py).

Every request kind a system refuses is reported with the error it answered, never dropped.
"""

from __future__ import annotations

import contextlib
import os
import re

import numpy as np
import searchload

NAME = "bench_feat"
DIM = 128
HNSW = {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 128}}
SEARCH = {"metric_type": "L2", "params": {"ef": 256}}
TOPK = 10
TAGS = 100
GROUP = 10
RRF_K = 60
SPARSE_NA = "n/a: not measured by this benchmark yet (sparse queries are not in bench/searchload.py)"


def _exact(data: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Squared L2 distances, queries × rows."""
    return (
        np.einsum("ij,ij->i", queries, queries)[:, None]
        - 2 * queries @ data.T
        + np.einsum("ij,ij->i", data, data)[None, :]
    )


def _rrf(lists: list[list[int]], k: int = RRF_K, limit: int = TOPK) -> list[int]:
    score: dict[int, float] = {}
    for ids in lists:
        for rank, i in enumerate(ids):
            score[i] = score.get(i, 0.0) + 1.0 / (k + rank + 1)
    return [i for i, _ in sorted(score.items(), key=lambda kv: -kv[1])[:limit]]


def _err(exc: BaseException) -> str:
    """The server's own answer, short: pymilvus' `(code=..., message=...)` when it has one."""
    msg = str(exc).replace("\n", " ")
    m = re.search(r"code=(\d+), message=(.*?)\)>?$", msg)
    return f"n/a: {m.group(2)[:110]} (code {m.group(1)})" if m else f"n/a: {msg[:120]}"


def run(
    host: str,
    port: int,
    *,
    rows: int = 20_000,
    queries: int = 200,
    seconds: float = 3.0,
    clients: int = 8,
    warmup: float = 1.0,
    client_python: str | None = None,
    server_pid: int | None = None,
    seed: int = 7,
    log=lambda _msg: None,
) -> dict:
    """Every feature measurement against host:port; {"<feature>": {...} or "n/a: why"}."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections, utility

    rng = np.random.default_rng(seed)
    vec = rng.random((rows, DIM), dtype=np.float32)
    vec2 = rng.random((rows, DIM), dtype=np.float32)
    q1 = rng.random((queries, DIM), dtype=np.float32)
    q2 = rng.random((queries, DIM), dtype=np.float32)
    ids = np.arange(rows)
    doc, tagno = ids // GROUP, ids % TAGS
    alias = "bench_feat"
    connections.connect(alias=alias, host=host, port=str(port), timeout=60)
    res: dict = {"rows": rows, "queries": queries, "loadavg_start": os.getloadavg()}
    try:
        if utility.has_collection(NAME, using=alias):
            utility.drop_collection(NAME, using=alias)
        base = [
            FieldSchema("id", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM),
            FieldSchema("doc", DataType.INT64),
            FieldSchema("tag", DataType.VARCHAR, max_length=16),
        ]
        two = True
        try:
            coll = Collection(
                NAME, CollectionSchema([*base, FieldSchema("vec2", DataType.FLOAT_VECTOR, dim=DIM)]), using=alias
            )
        except Exception as exc:  # noqa: BLE001 - a system without several vector fields: said in the table
            res["hybrid"] = _err(exc)
            two = False
            coll = Collection(NAME, CollectionSchema(base), using=alias, shards_num=1)
        tags = [f"t{t}" for t in tagno]
        for s in range(0, rows, 10_000):
            e = min(rows, s + 10_000)
            cols = [ids[s:e].tolist(), vec[s:e].tolist(), doc[s:e].tolist(), tags[s:e]]
            coll.insert([*cols, vec2[s:e].tolist()] if two else cols)
        coll.flush()
        coll.create_index("vec", HNSW, index_name="vec_idx")
        if two:
            coll.create_index("vec2", HNSW, index_name="vec2_idx")
        for idx in ["vec_idx", "vec2_idx"] if two else ["vec_idx"]:
            utility.wait_for_index_building_complete(NAME, index_name=idx, using=alias)
        coll.load()
        log(f"features: {rows:,} rows loaded (two vector fields: {two})")

        def measure(spec: dict, qs: list, n: int) -> dict:
            return searchload.measure(
                host,
                port,
                spec,
                qs,
                procs=n,
                seconds=seconds,
                warmup=warmup,
                python=client_python,
                server_pid=server_pid,
            )

        def both(key: str, spec: dict, qs: list, score) -> None:
            """p50 of one client, QPS of `clients`, recall by `score(query index, ids)`."""
            try:
                one = measure(spec, qs, 1)
                many = measure(spec, qs, clients)
            except Exception as exc:  # noqa: BLE001 - a refused request kind: said in the table
                res[key] = _err(exc)
                log(f"features: {key}: {res[key]}")
                return
            found = one.pop("ids") | many.pop("ids")
            scores = [score(q, got) for q, got in found.items()]
            if any(s is None for s in scores):
                res[key] = "n/a: parameter ignored (the answer is not grouped)"
                log(f"features: {key}: {res[key]}")
                return
            res[key] = {
                "p50_s": one["p50_s"],
                "p99_s": one["p99_s"],
                "qps_1": one["qps"],
                f"qps_{clients}": many["qps"],
                "recall": float(np.mean(scores)),
                "server_cpu_per_call_s": many.get("server_cpu_per_call_s"),
                "one": one,
                "many": many,
            }
            log(
                f"features: {key}: p50 {one['p50_s'] * 1e3:.2f} ms, {many['qps']:.0f} QPS at {clients} clients, "
                f"recall {res[key]['recall']:.4f}"
            )

        plain = {
            "api": "client",
            "collection": NAME,
            "field": "vec",
            "params": SEARCH,
            "limit": TOPK,
            "consistency_level": "Eventually",
        }
        d1 = _exact(vec, q1)

        # Filtered: one tag per query (1 % of the rows), the filter varied by query.
        def filt_recall(q: int, got: list) -> float:
            rows_k = np.flatnonzero(tagno == q % TAGS)
            best = rows_k[np.argsort(d1[q, rows_k])[:TOPK]]
            return len(set(best.tolist()) & set(got)) / TOPK

        fq = [{"vector": q.tolist(), "filter": f'tag == "t{i % TAGS}"'} for i, q in enumerate(q1)]
        both("filtered", plain | {"per_query_filter": True}, fq, filt_recall)

        # Group-by doc: the exact nearest 10 groups.
        order = np.argsort(d1, axis=1)

        def group_recall(q: int, got: list) -> float | None:
            docs = [i // GROUP for i in got]
            if len(set(docs)) < len(docs):
                return None  # ungrouped answer
            _, first = np.unique(doc[order[q]], return_index=True)
            best_docs = doc[order[q][np.sort(first)[:TOPK]]]
            return len(set(best_docs.tolist()) & set(docs)) / TOPK

        both("group_by", plain | {"group_by_field": "doc"}, q1.tolist(), group_recall)

        # Hybrid: RRF over vec and vec2.
        if two:
            d2 = _exact(vec2, q2)
            top1, top2 = np.argsort(d1, axis=1)[:, :TOPK], np.argsort(d2, axis=1)[:, :TOPK]

            def hybrid_recall(q: int, got: list) -> float:
                return len(set(_rrf([top1[q].tolist(), top2[q].tolist()])) & set(got)) / TOPK

            spec = plain | {
                "kind": "hybrid",
                "requests": [{"field": "vec", "params": SEARCH}, {"field": "vec2", "params": SEARCH}],
                "ranker": {"rrf": RRF_K},
            }
            both("hybrid", spec, [[a.tolist(), b.tolist()] for a, b in zip(q1, q2, strict=True)], hybrid_recall)

        # The same filter with an INVERTED index on tag.
        try:
            coll.release()
            coll.create_index("tag", {"index_type": "INVERTED"}, index_name="tag_idx")
            utility.wait_for_index_building_complete(NAME, index_name="tag_idx", using=alias)
            coll.load()
        except Exception as exc:  # noqa: BLE001 - a system without scalar indexes: said in the table
            res["filtered_inverted"] = _err(exc)
            with contextlib.suppress(Exception):
                coll.load()
        else:
            both("filtered_inverted", plain | {"per_query_filter": True}, fq, filt_recall)
        res["sparse"] = SPARSE_NA
        res["loadavg_end"] = os.getloadavg()
        utility.drop_collection(NAME, using=alias)
    finally:
        with contextlib.suppress(Exception):
            connections.disconnect(alias)
    return res
