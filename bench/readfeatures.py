"""Search features of Milvus 2.4-2.5 on the read path: filtered (with and without a scalar index),
group-by, hybrid (two vector fields, RRF) and sparse searches — latency, QPS and recall — and the
recall of each index type (FLAT, IVF_*, SCANN, HNSW, BIN_*), the same script against every system
(bench/workload.py `--read-features`, `./dev bench-vs-milvus --read`).

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
- **sparse**: collection `bench_feat_sparse` (`id`, `sv SPARSE_FLOAT_VECTOR`), `rows` rows shaped like
  learned sparse embeddings (`sparse_matrix`: 100-200 draws per row from a 30k vocabulary with
  Zipf-like term frequencies, duplicates merged, log-normal weights; queries 20-40 draws), seed 7;
  SPARSE_INVERTED_INDEX, IP, `drop_ratio_search` 0 (Milvus' default); recall against numpy's exact
  inner products. A client without SPARSE_FLOAT_VECTOR (pymilvus 2.3, Milvus 2.3.5's) says so;
- **index types**: recall@10 of one batched search of every query per index type, on `vec` (L2)
  rebuilt with each of `FLOAT_INDEXES` in turn (the same build and search params for every system),
  and on a binary collection `bench_feat_bin` (`bv BINARY_VECTOR(256)`, HAMMING) with each of
  `BINARY_INDEXES`. Hamming distances tie a lot: there a hit is any returned row whose exact
  distance is within the exact 10th (ties count). The segments each system loaded are recorded:
  an IVF index is per segment, so nprobe of nlist lists is probed in every segment.

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
SPARSE_NAME = "bench_feat_sparse"
SPARSE_VOCAB = 30_000
SPARSE_ROW_DRAWS = (100, 200)  # terms drawn per row (duplicates merged: ~130 non-zeros on average)
SPARSE_QUERY_DRAWS = (20, 40)
SPARSE_INDEX = {"index_type": "SPARSE_INVERTED_INDEX", "metric_type": "IP", "params": {}}
SPARSE_SEARCH = {"metric_type": "IP", "params": {"drop_ratio_search": 0.0}}  # Milvus' default ratio
SPARSE_NA = "n/a (no sparse vectors in Milvus 2.3: pymilvus {version} has no SPARSE_FLOAT_VECTOR)"

# Index types kmilvus and Milvus 2.3.5 both build, each with the same build and search params
# everywhere: (index type, build params, search params).
IVF_BUILD, IVF_SEARCH = {"nlist": 128}, {"nprobe": 16}
FLOAT_INDEXES: tuple[tuple[str, dict, dict], ...] = (
    ("HNSW", HNSW["params"], {"ef": 64}),
    ("FLAT", {}, {}),
    ("IVF_FLAT", IVF_BUILD, IVF_SEARCH),
    ("IVF_SQ8", IVF_BUILD, IVF_SEARCH),
    ("IVF_PQ", IVF_BUILD | {"m": 16, "nbits": 8}, IVF_SEARCH),
    ("SCANN", IVF_BUILD | {"with_raw_data": True}, IVF_SEARCH | {"reorder_k": 100}),
)
BIN_NAME, BIN_DIM = "bench_feat_bin", 256
BINARY_INDEXES: tuple[tuple[str, dict, dict], ...] = (
    ("BIN_FLAT", {}, {}),
    ("BIN_IVF_FLAT", IVF_BUILD, IVF_SEARCH),
)
POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint16)


def index_rows() -> list[tuple[str, str]]:
    """(result key, label) of every index type's recall row, in table order."""
    out = []
    for name, build, search in (*FLOAT_INDEXES, *BINARY_INDEXES):
        knobs = ", ".join(f"{k}={v}" for k, v in build.items())
        knobs += "; " + ", ".join(f"{k}={v}" for k, v in search.items()) if search else ""
        metric = f"HAMMING, {BIN_DIM} bits" if name.startswith("BIN_") else f"L2, {DIM}-d"
        out.append((f"index_{name}", f"{name}{f' ({knobs})' if knobs else ''}, {metric}"))
    return out


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


def sparse_matrix(rng: np.random.Generator, rows: int, draws: tuple[int, int], vocab: int = SPARSE_VOCAB):
    """`rows` sparse rows shaped like learned sparse (SPLADE-like) embeddings, as a scipy CSR
    matrix: each row draws `draws` terms (inclusive range) from `vocab` with Zipf-like
    frequencies (term r's weight 1 / (r + 10), over a fixed shuffle of the vocabulary), repeated
    terms merged; weights log-normal (median 0.6). Deterministic for a given generator state."""
    import scipy.sparse

    counts = rng.integers(draws[0], draws[1] + 1, rows)
    p = 1.0 / (np.arange(vocab) + 10.0)
    terms = rng.permutation(vocab)[rng.choice(vocab, size=int(counts.sum()), p=p / p.sum())]
    keys = np.unique(np.repeat(np.arange(rows, dtype=np.int64), counts) * vocab + terms)
    row, dim = np.divmod(keys, vocab)
    vals = rng.lognormal(-0.5, 0.6, len(keys)).astype(np.float32)
    return scipy.sparse.csr_array((vals, (row, dim)), shape=(rows, vocab))


def _hamming(data: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Hamming distances of packed bit rows, queries × rows (one query at a time: bounded memory)."""
    return np.stack([POPCOUNT[data ^ q].sum(axis=1) for q in queries])


def _hits(dist: np.ndarray, got: list[int], k: int = TOPK) -> float:
    """Share of the k rows asked for that an answer holds within the exact k-th distance of one
    query (`dist`: that query's exact distances to every row, smaller closer): the exact top-k
    when distances are distinct, tie-aware when many are equal (Hamming)."""
    kth = np.partition(dist, k - 1)[k - 1]
    return np.count_nonzero(dist[list(dict.fromkeys(got))[:k]] <= kth) / k


def _topk_recall(dist: np.ndarray, got: list[list[int]], k: int = TOPK) -> float:
    """`_hits` averaged over queries (row q of `dist` and `got` belong to query q)."""
    return float(np.mean([_hits(dist[q], ids, k) for q, ids in enumerate(got)]))


def index_recall(
    coll, alias: str, field: str, metric: str, specs, queries: list, dist: np.ndarray, built: str | None, log
) -> dict:
    """Recall@10 of `coll`'s `field` under each (index type, build, search params) of `specs`:
    release, drop the field's index, create the next one, wait until built, load, then one search
    of every query (batched: recall only, no latency). `built` names the index type the field has
    already (with its build params): searched without a rebuild. A refused type gets the system's
    own answer."""
    from pymilvus import utility

    out: dict = {}
    for name, build, search in specs:
        key = f"index_{name}"
        try:
            if name != built:
                coll.release()
                with contextlib.suppress(Exception):  # the first round (or a failed one) may have none
                    coll.drop_index(index_name=f"{field}_idx")
                index = {"index_type": name, "metric_type": metric, "params": build}
                coll.create_index(field, index, index_name=f"{field}_idx")
                utility.wait_for_index_building_complete(coll.name, index_name=f"{field}_idx", using=alias)
                coll.load()
            hits = coll.search(queries, field, {"metric_type": metric, "params": search}, limit=TOPK)
            out[key] = {"recall": _topk_recall(dist, [list(h.ids) for h in hits])}
        except Exception as exc:  # noqa: BLE001 - a type the system does not build: said in the table
            out[key] = _err(exc)
            log(f"index types: {name}: {out[key]}")
            continue
        log(f"index types: {name}: recall@10 {out[key]['recall']:.4f}")
    return out


def binary_recall(alias: str, rows: int, queries: int, seed: int, log) -> dict:
    """Collection `bench_feat_bin` (`id`, `bv BINARY_VECTOR(256)`, random bits): recall@10 of
    each of `BINARY_INDEXES` (HAMMING), by `index_recall`; dropped afterwards."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, utility

    rng = np.random.default_rng([seed, 2])
    bits = rng.integers(0, 256, (rows, BIN_DIM // 8), dtype=np.uint8)
    qbits = rng.integers(0, 256, (queries, BIN_DIM // 8), dtype=np.uint8)
    if utility.has_collection(BIN_NAME, using=alias):
        utility.drop_collection(BIN_NAME, using=alias)
    fields = [
        FieldSchema("id", DataType.INT64, is_primary=True),
        FieldSchema("bv", DataType.BINARY_VECTOR, dim=BIN_DIM),
    ]
    try:
        coll = Collection(BIN_NAME, CollectionSchema(fields), using=alias, shards_num=1)
    except Exception as exc:  # noqa: BLE001 - a system without binary vectors: said in the table
        log(f"index types: binary: {_err(exc)}")
        return {f"index_{name}": _err(exc) for name, _, _ in BINARY_INDEXES}
    try:
        for s in range(0, rows, 10_000):
            e = min(rows, s + 10_000)
            coll.insert([list(range(s, e)), [r.tobytes() for r in bits[s:e]]])
        coll.flush()
        qs = [q.tobytes() for q in qbits]
        out = index_recall(coll, alias, "bv", "HAMMING", BINARY_INDEXES, qs, _hamming(bits, qbits), None, log)
        out["segments_bin"] = _segments(BIN_NAME, alias)
        return out
    finally:
        utility.drop_collection(BIN_NAME, using=alias)


def sparse_setup(alias: str, rows: int, queries: int, seed: int, log) -> tuple[list[dict], np.ndarray]:
    """Collection `bench_feat_sparse` (`id`, `sv SPARSE_FLOAT_VECTOR`) of `rows` rows of
    `sparse_matrix`, flushed, SPARSE_INVERTED_INDEX (IP), loaded. Returns the queries as pymilvus
    sends them and their exact negated inner products with every row (smaller is closer)."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, utility

    rng = np.random.default_rng([seed, 3])
    data = sparse_matrix(rng, rows, SPARSE_ROW_DRAWS)
    qm = sparse_matrix(rng, queries, SPARSE_QUERY_DRAWS)
    if utility.has_collection(SPARSE_NAME, using=alias):
        utility.drop_collection(SPARSE_NAME, using=alias)
    fields = [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("sv", DataType.SPARSE_FLOAT_VECTOR)]
    coll = Collection(SPARSE_NAME, CollectionSchema(fields), using=alias, shards_num=1)
    for s in range(0, rows, 10_000):
        e = min(rows, s + 10_000)
        coll.insert([list(range(s, e)), searchload.sparse_dicts(data[s:e])])
    coll.flush()
    coll.create_index("sv", SPARSE_INDEX, index_name="sv_idx")
    utility.wait_for_index_building_complete(SPARSE_NAME, index_name="sv_idx", using=alias)
    coll.load()
    log(f"sparse: {rows:,} rows loaded, {data.nnz / rows:.0f} non-zeros a row, queries {qm.nnz / queries:.0f}")
    return searchload.sparse_dicts(qm), -(qm @ data.T).toarray()


def _segments(name: str, alias: str) -> int | None:
    """How many segments the system serves `name` from (an IVF index is built per segment)."""
    from pymilvus import utility

    try:
        return len(utility.get_query_segment_info(name, using=alias))
    except Exception:  # noqa: BLE001 - informative only
        return None


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
    import pymilvus
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

        # Sparse: a collection of its own.
        if not hasattr(DataType, "SPARSE_FLOAT_VECTOR"):
            res["sparse"] = SPARSE_NA.format(version=pymilvus.__version__)
        else:
            try:
                sq, sdist = sparse_setup(alias, rows, queries, seed, log)
            except Exception as exc:  # noqa: BLE001 - a system without sparse vectors: said in the table
                res["sparse"] = _err(exc)
                log(f"features: sparse: {res['sparse']}")
            else:
                spec = plain | {"collection": SPARSE_NAME, "field": "sv", "params": SPARSE_SEARCH}
                both("sparse", spec, sq, lambda q, got: _hits(sdist[q], got))
            with contextlib.suppress(Exception):
                utility.drop_collection(SPARSE_NAME, using=alias)

        # Recall per index type: `vec` rebuilt with each (HNSW first: built already), then binary.
        res["segments"] = _segments(NAME, alias)
        res.update(index_recall(coll, alias, "vec", "L2", FLOAT_INDEXES, q1.tolist(), d1, "HNSW", log))
        res.update(binary_recall(alias, rows, queries, seed, log))
        res["loadavg_end"] = os.getloadavg()
        utility.drop_collection(NAME, using=alias)
    finally:
        with contextlib.suppress(Exception):
            connections.disconnect(alias)
    return res
