"""Hybrid search through pymilvus: several AnnSearchRequests over several vector fields (each with
its own filter, params, radius / range_filter and limit), fused by RRFRanker, WeightedRanker (with
Milvus' score normalisation per metric) or a rerank Function (rrf, weighted, decay); output
fields, offset, round_decimal, partitions and group-by — every answer checked against the same
fusion computed with numpy over exact (FLAT) searches."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from pymilvus import (
    AnnSearchRequest,
    DataType,
    Function,
    FunctionType,
    MilvusClient,
    MilvusException,
    RRFRanker,
    WeightedRanker,
)

DIM = 8
N = 400


@pytest.fixture
def data(client):
    """Collection `h`: L2 field `a`, IP field `b`; half the rows flushed, half growing."""
    rng = np.random.default_rng(17)
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("a", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("b", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("num", DataType.INT64)
    schema.add_field("doc", DataType.INT64)
    schema.add_field("tag", DataType.VARCHAR, max_length=8)
    index = client.prepare_index_params()
    index.add_index("a", index_type="FLAT", metric_type="L2")
    index.add_index("b", index_type="FLAT", metric_type="IP")
    client.create_collection("h", schema=schema, index_params=index, num_shards=2, consistency_level="Strong")
    client.create_partition("h", "p1")
    a = rng.random((N, DIM), dtype=np.float32)
    b = rng.random((N, DIM), dtype=np.float32) - 0.5
    num = rng.integers(0, 1000, N)
    rows = [{"id": i, "a": a[i], "b": b[i], "num": int(num[i]), "doc": i % 23, "tag": f"t{i % 3}"} for i in range(N)]
    client.insert("h", rows[: N // 2])
    client.insert("h", [r for r in rows[N // 2 :] if r["id"] % 5], partition_name="_default")
    client.insert("h", [r for r in rows[N // 2 :] if r["id"] % 5 == 0], partition_name="p1")
    client.flush("h")
    client.load_collection("h")
    extra = [dict(r, id=r["id"] + N) for r in rows[:40]]  # growing rows beside the sealed ones
    client.insert("h", extra)
    ids = np.array([r["id"] for r in rows + extra])
    return {
        "ids": ids,
        "a": np.concatenate([a, a[:40]]),
        "b": np.concatenate([b, b[:40]]),
        "num": np.concatenate([num, num[:40]]),
        "tag": np.array([r["tag"] for r in rows + extra]),
        "doc": np.array([r["doc"] for r in rows + extra]),
        "rng": rng,
    }


def rerank(fields: list[str] | None = None, **params) -> Function:
    """A rerank Function as pymilvus users write it."""
    return Function("rerank", input_field_names=fields or [], function_type=FunctionType.RERANK, params=params)


def exact(d, field: str, q: np.ndarray, limit: int, mask=None, radius=None, range_filter=None):
    """(ids, scores) of an exact search, best first (L2 on `a`, IP on `b`)."""
    if field == "a":
        s = ((d["a"] - q) ** 2).sum(1)
        order = np.lexsort((d["ids"], s))
    else:
        s = d["b"] @ q
        order = np.lexsort((d["ids"], -s))
    keep = np.ones(len(s), bool) if mask is None else mask
    if radius is not None:
        keep &= (s < radius) if field == "a" else (s > radius)
    if range_filter is not None:
        keep &= (s >= range_filter) if field == "a" else (s <= range_filter)
    order = [i for i in order if keep[i]][:limit]
    return d["ids"][order], s[order]


def fuse(parts, scorer, limit, offset=0):
    """parts: [(ids, scores, metric)]; scorer(rank, score, metric, i) → contribution (summed)."""
    total: dict[int, float] = {}
    for i, (ids, scores, metric) in enumerate(parts):
        for rank, (pk, s) in enumerate(zip(ids, scores, strict=True)):
            total[int(pk)] = total.get(int(pk), 0.0) + scorer(rank, float(s), metric, i)
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[offset : offset + limit]


def norm(s: float, metric: str) -> float:
    return 0.5 + math.atan(s) / math.pi if metric == "IP" else 1 - 2 * math.atan(s) / math.pi


def reqs(d, qa, qb, limit_a=20, limit_b=15, expr_a="tag != 't0'", expr_b="num > 200", param_b=None):
    return [
        AnnSearchRequest([qa], "a", {"metric_type": "L2", "params": {}}, limit_a, expr=expr_a),
        AnnSearchRequest([qb], "b", {"metric_type": "IP", "params": param_b or {}}, limit_b, expr=expr_b),
    ]


def check(hits, want, places: int = 5):
    assert [h["id"] for h in hits] == [pk for pk, _ in want]
    for h, (_, s) in zip(hits, want, strict=True):
        assert h["distance"] == pytest.approx(s, abs=10**-places)


def test_rrf_over_two_fields_each_with_its_filter(client, data):
    d = data
    qa, qb = d["a"][7], d["b"][11]
    pa_ = exact(d, "a", qa, 20, d["tag"] != "t0")
    pb_ = exact(d, "b", qb, 15, d["num"] > 200)
    res = client.hybrid_search("h", reqs(d, qa, qb), RRFRanker(30), limit=10, output_fields=["num", "tag"])
    want = fuse([(*pa_, "L2"), (*pb_, "IP")], lambda r, s, m, i: 1 / (30 + r + 1), 10)
    check(res[0], want)
    by_id = dict(zip(d["ids"].tolist(), zip(d["num"].tolist(), d["tag"].tolist(), strict=True), strict=True))
    for h in res[0]:
        assert (h["entity"]["num"], h["entity"]["tag"]) == by_id[h["id"]]
    # the same as a rerank Function, with offset and round_decimal
    fn = rerank(reranker="rrf", k=30)
    res = client.hybrid_search("h", reqs(d, qa, qb), fn, limit=5, offset=3, round_decimal=3)
    want = fuse([(*pa_, "L2"), (*pb_, "IP")], lambda r, s, m, i: 1 / (30 + r + 1), 5, offset=3)
    assert [h["id"] for h in res[0]] == [pk for pk, _ in want]
    assert all(h["distance"] == pytest.approx(round(s, 3), abs=1e-6) for h, (_, s) in zip(res[0], want, strict=True))


def test_weighted_normalises_each_metric_as_milvus(client, data):
    d = data
    qa, qb = d["a"][3], d["b"][5]
    pa_ = exact(d, "a", qa, 20, d["tag"] != "t0")
    pb_ = exact(d, "b", qb, 15, d["num"] > 200)
    parts = [(*pa_, "L2"), (*pb_, "IP")]
    res = client.hybrid_search("h", reqs(d, qa, qb), WeightedRanker(0.7, 0.3), limit=8)
    check(res[0], fuse(parts, lambda r, s, m, i: (0.7, 0.3)[i] * norm(s, m), 8))
    # norm_score=False with mixed metrics: L2 made larger-is-better, IP as is
    raw = client.hybrid_search("h", reqs(d, qa, qb), WeightedRanker(0.7, 0.3, norm_score=False), limit=8)
    want = fuse(parts, lambda r, s, m, i: (0.7, 0.3)[i] * (s if m == "IP" else 1 - 2 * math.atan(s) / math.pi), 8)
    check(raw[0], want)
    fn = rerank(reranker="weighted", weights=[0.7, 0.3], norm_score=True)
    check(
        client.hybrid_search("h", reqs(d, qa, qb), fn, limit=8)[0],
        fuse(parts, lambda r, s, m, i: (0.7, 0.3)[i] * norm(s, m), 8),
    )


def test_range_search_params_partitions_and_nq(client, data):
    d = data
    qa = [d["a"][1], d["a"][2]]
    qb = [d["b"][1], d["b"][2]]
    r = [
        AnnSearchRequest(qa, "a", {"metric_type": "L2", "params": {"radius": 0.9, "range_filter": 0.1}}, 10),
        AnnSearchRequest(qb, "b", {"metric_type": "IP", "params": {"radius": 0.05, "range_filter": 0.5}}, 10),
    ]
    res = client.hybrid_search("h", r, RRFRanker(), limit=6, partition_names=["p1"])
    p1 = (d["ids"] % 5 == 0) & (d["ids"] >= N // 2) & (d["ids"] < N)
    assert len(res) == 2
    for i in range(2):
        pa_ = exact(d, "a", qa[i], 10, p1.copy(), radius=0.9, range_filter=0.1)
        pb_ = exact(d, "b", qb[i], 10, p1.copy(), radius=0.05, range_filter=0.5)
        check(res[i], fuse([(*pa_, "L2"), (*pb_, "IP")], lambda r, s, m, i: 1 / (60 + r + 1), 6))


def test_decay_rerank_in_search_and_hybrid_search(client, data):
    d = data
    q = d["a"][9]
    for function in ("gauss", "exp", "linear"):
        fn = rerank(["num"], reranker="decay", function=function, origin=500, offset=50, decay=0.6, scale=200)
        res = client.search("h", [q], limit=5, anns_field="a", ranker=fn, output_fields=["num"])[0]
        ids, dist = exact(d, "a", q, 5)  # the search's hits, then reranked
        num = dict(zip(d["ids"].tolist(), d["num"].tolist(), strict=True))

        def curve(v, f=function):
            x = max(0.0, abs(v - 500) - 50)
            if f == "gauss":
                return math.exp(x**2 / (200**2 / math.log(0.6)))
            if f == "exp":
                return math.exp(math.log(0.6) / 200 * x)
            return max(0.6, 1 - (1 - 0.6) / 200 * x)

        want = sorted(
            (
                (int(pk), curve(num[int(pk)]) * (1 - 2 * math.atan(s) / math.pi))
                for pk, s in zip(ids, dist, strict=True)
            ),
            key=lambda kv: (-kv[1], kv[0]),
        )
        check(res, want)
    # hybrid with decay: max over the requests of the larger-is-better score, times the decay
    qa, qb = d["a"][4], d["b"][4]
    pa_ = exact(d, "a", qa, 20, d["tag"] != "t0")
    pb_ = exact(d, "b", qb, 15, d["num"] > 200)
    best: dict[int, float] = {}
    for ids, scores, metric in ((*pa_, "L2"), (*pb_, "IP")):
        for pk, s in zip(ids, scores, strict=True):
            g = s if metric == "IP" else 1 - 2 * math.atan(s) / math.pi
            best[int(pk)] = max(best.get(int(pk), -np.inf), g)
    num = dict(zip(d["ids"].tolist(), d["num"].tolist(), strict=True))
    x = {pk: max(0.0, abs(num[pk] - 500) - 50) for pk in best}
    want = sorted(
        ((pk, math.exp(math.log(0.6) / 200 * x[pk]) * g) for pk, g in best.items()), key=lambda kv: (-kv[1], kv[0])
    )
    fn = rerank(["num"], reranker="decay", function="exp", origin=500, offset=50, decay=0.6, scale=200)
    check(client.hybrid_search("h", reqs(d, qa, qb), fn, limit=7)[0], want[:7])


def test_group_by_in_hybrid_search(client, data):
    d = data
    qa, qb = d["a"][12], d["b"][12]
    res = client.hybrid_search(
        "h",
        reqs(d, qa, qb, expr_a="", expr_b=""),
        RRFRanker(),
        limit=5,
        output_fields=["doc"],
        group_by_field="doc",
        group_size=2,
    )[0]
    docs = [h["entity"]["doc"] for h in res]
    distinct = list(dict.fromkeys(docs))
    assert len(distinct) == 5 and all(docs.count(x) <= 2 for x in distinct)
    # a document's hits are together, groups in the order of their best fused score
    runs = [docs[0]] + [b for a, b in itertools.pairwise(docs) if a != b]
    assert runs == distinct
    firsts = [next(h["distance"] for h in res if h["entity"]["doc"] == g) for g in distinct]
    assert firsts == sorted(firsts, reverse=True)


def test_refusals_as_milvus(client, data):
    d = data
    qa, qb = d["a"][0], d["b"][0]
    with pytest.raises(MilvusException) as e:
        client.hybrid_search("h", reqs(d, qa, qb), WeightedRanker(0.5), limit=5)
    assert e.value.code == 1100
    assert "the length of weights param mismatch with ann search requests" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.hybrid_search("h", reqs(d, qa, qb), RRFRanker(20000), limit=5)
    assert e.value.code == 65535 and e.value.message == "The rank params k should be in range (0, 16384)"
    model = rerank(["tag"], reranker="model", provider="tei", queries=["x"], endpoint="http://localhost:1")
    with pytest.raises(MilvusException) as e:
        client.hybrid_search("h", reqs(d, qa, qb), model, limit=5)
    assert e.value.code == 65535 and "Unsupported rerank function: [model]" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.search("h", [qa], anns_field="a", limit=5, ranker=model)
    assert e.value.code == 65535 and "Unsupported rerank function: [model]" in e.value.message
    bad = rerank(["tag"], reranker="decay", function="gauss", origin=1, scale=1)
    with pytest.raises(MilvusException) as e:
        client.search("h", [qa], anns_field="a", limit=5, ranker=bad)
    assert e.value.message == "Decay rerank: unsupported input field type:VarChar, only support numberic field"
    with pytest.raises(MilvusException) as e:
        client.hybrid_search(
            "h", [AnnSearchRequest([qa, qa], "a", {}, 5), AnnSearchRequest([qb], "b", {}, 5)], RRFRanker(), limit=5
        )
    assert e.value.code == 1100 and "sub search request nq should be the same" in e.value.message
    decay = rerank(["num"], reranker="decay", function="exp", origin=1, scale=1)
    with pytest.raises(MilvusException) as e:
        client.hybrid_search("h", reqs(d, qa, qb), decay, limit=5, group_by_field="doc")
    assert e.value.code == 1100 and "Current rerank does not support grouping search" in e.value.message
