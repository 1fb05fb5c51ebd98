"""More vector types indexed and searched through pymilvus 3.0, flushed (sealed segments searched
through their index) and growing (searched exactly) alike: sparse vectors (SPARSE_INVERTED_INDEX,
SPARSE_WAND), binary vectors (BIN_FLAT, BIN_IVF_FLAT with HAMMING, JACCARD, SUBSTRUCTURE,
SUPERSTRUCTURE), float16 / bfloat16 vectors (searched as float32, returned as themselves),
IVF_PQ and SCANN, and range search with Milvus' rules — each refused parameter with Milvus'
message. Group-by, the search iterator and hybrid search work over them too (HAMMING and JACCARD
ordered ascending, a binary metric normalised in a weighted rerank as Milvus does)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pymilvus import AnnSearchRequest, DataType, MilvusClient, MilvusException, RRFRanker, WeightedRanker

from tests.util import wait_until

N_FLUSHED, N_GROWING = 1200, 300


def _create(client: MilvusClient, name: str, dtype: DataType, index_type: str, metric: str, params=None, **kw):
    schema = client.create_schema(enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", dtype, **kw)
    schema.add_field("tag", DataType.INT64)
    client.create_collection(name, schema=schema, consistency_level="Strong")
    index = client.prepare_index_params()
    index.add_index("v", index_type=index_type, metric_type=metric, params=params or {})
    client.create_index(name, index)


def _load(client: MilvusClient, name: str, rows: list[dict]) -> None:
    """Insert and flush the first N_FLUSHED rows, wait for their index, load, then insert the
    rest (growing: searched exactly)."""
    client.insert(name, rows[:N_FLUSHED])
    client.flush(name)
    wait_until(
        lambda: client.describe_index(name, "v").get("indexed_rows") == N_FLUSHED, 60, what="index on flushed rows"
    )
    client.load_collection(name)
    client.insert(name, rows[N_FLUSHED:])


def _err(fn) -> MilvusException:
    with pytest.raises(MilvusException) as e:
        fn()
    return e.value


# ------------------------------------------------------------------------------------ sparse


def _sparse_rows(rng, n: int, dims: int = 500) -> tuple[list[dict], np.ndarray]:
    dense = np.zeros((n, dims), dtype=np.float32)
    for i in range(n):
        cols = rng.choice(dims, size=rng.integers(3, 20), replace=False)
        dense[i, cols] = rng.random(len(cols), dtype=np.float32) + 0.01
    rows = [
        {"id": i, "v": {int(j): float(dense[i, j]) for j in np.flatnonzero(dense[i])}, "tag": i % 5} for i in range(n)
    ]
    return rows, dense


@pytest.mark.parametrize("index_type", ["SPARSE_INVERTED_INDEX", "SPARSE_WAND"])
def test_sparse_search_is_exact_inner_product(client, index_type):
    rng = np.random.default_rng(3)
    rows, dense = _sparse_rows(rng, N_FLUSHED + N_GROWING)
    _create(client, "sp", DataType.SPARSE_FLOAT_VECTOR, index_type, "IP", {"drop_ratio_build": 0.2})
    desc = client.describe_index("sp", "v")
    assert (desc["index_type"], desc["metric_type"], desc["params"]) == (index_type, "IP", {"drop_ratio_build": 0.2})
    _load(client, "sp", rows)
    probes = [5, N_FLUSHED - 1, N_FLUSHED + 7, N_FLUSHED + N_GROWING - 1]  # sealed and growing rows
    res = client.search(
        "sp", data=[rows[i]["v"] for i in probes], limit=10, output_fields=["v", "tag"], search_params={"params": {}}
    )
    scores = dense[probes] @ dense.T
    for hits, want, probe in zip(res, scores, probes, strict=True):
        assert [h["id"] for h in hits] == list(np.argsort(-want, kind="stable")[:10])
        np.testing.assert_allclose([h["distance"] for h in hits], np.sort(want)[::-1][:10], rtol=1e-5)
        assert hits[0]["id"] == probe and hits[0]["entity"]["v"] == pytest.approx(rows[probe]["v"])
    # Only rows sharing a dimension with the query score (no row with score 0 comes back).
    lonely = {499_999: 1.0}
    assert client.search("sp", data=[lonely], limit=5)[0] == []
    # A filter and drop_ratio_search: the best rows still come first (refined on the whole query).
    res = client.search(
        "sp", data=[rows[7]["v"]], limit=5, filter="tag == 2", search_params={"params": {"drop_ratio_search": 0.3}}
    )
    hits = res[0]
    assert all(rows[h["id"]]["tag"] == 2 for h in hits) and len(hits) == 5
    mask = np.array([r["tag"] == 2 for r in rows])
    assert hits[0]["id"] == int(np.argmax(np.where(mask, dense[7] @ dense.T, -np.inf)))
    # Range search: radius < score <= range_filter.
    hi = float(np.sort(dense[7] @ dense.T)[-2])
    res = client.search(
        "sp", data=[rows[7]["v"]], limit=50, search_params={"params": {"radius": 0.5, "range_filter": hi}}
    )
    got = {h["id"]: h["distance"] for h in res[0]}
    want_ids = set(np.flatnonzero(((dense[7] @ dense.T) > 0.5) & ((dense[7] @ dense.T) <= hi + 1e-6)))
    assert set(got) == want_ids and all(0.5 < d <= hi + 1e-5 for d in got.values())


def test_sparse_parameter_checks(client):
    rows, _ = _sparse_rows(np.random.default_rng(1), 20)
    schema = client.create_schema(enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=4)
    client.create_collection("spx", schema=schema, consistency_level="Strong")

    def index(field, index_type, metric, params=None):
        p = client.prepare_index_params()
        p.add_index(field, index_type=index_type, metric_type=metric, params=params or {})
        return lambda: client.create_index("spx", p)

    e = _err(lambda: client.load_collection("spx"))  # every vector field needs an index, as in Milvus
    assert e.code == 700 and "there is no vector index on field: [v]" in e.message
    e = _err(index("v", "SPARSE_INVERTED_INDEX", "L2"))
    assert e.code == 1100 and "only IP is the supported metric type for sparse index" in e.message
    e = _err(index("v", "SPARSE_INVERTED_INDEX", "BM25"))
    assert e.code == 1100 and "only BM25 Function output field support BM25 metric type" in e.message
    e = _err(index("v", "HNSW", "IP", {"M": 8, "efConstruction": 64}))
    assert e.code == 1100 and "data type SparseFloatVector can't build with this index HNSW" in e.message
    e = _err(index("dense", "SPARSE_WAND", "IP"))
    assert "data type FloatVector can't build with this index SPARSE_WAND" in e.message
    e = _err(index("v", "SPARSE_INVERTED_INDEX", "IP", {"drop_ratio_build": 1}))
    assert "invalid drop_ratio_build: 1, must be in range [0, 1)" in e.message
    client.create_index("spx", index_params_of(client, "v", "AUTOINDEX", ""))  # resolves to SPARSE_INVERTED_INDEX, IP
    assert client.describe_index("spx", "v")["metric_type"] == "IP"
    client.create_index("spx", index_params_of(client, "dense", "FLAT", "L2"))
    client.insert("spx", [{"id": r["id"], "v": r["v"], "dense": [0.0, 1.0, 2.0, 3.0]} for r in rows])
    client.load_collection("spx")
    e = _err(
        lambda: client.search(
            "spx", data=[rows[0]["v"]], anns_field="v", search_params={"params": {"drop_ratio_search": 1}}
        )
    )
    assert "drop_ratio_search" in e.message
    e = _err(lambda: client.search("spx", data=[[0.0] * 4], anns_field="v"))
    assert "vector type must be the same" in e.message
    e = _err(lambda: client.search("spx", data=[rows[0]["v"]], anns_field="v", search_params={"metric_type": "L2"}))
    assert "metric type not match" in e.message
    res = client.search("spx", data=[rows[0]["v"]], anns_field="v", limit=1)
    assert res[0][0]["id"] == rows[0]["id"] or res[0][0]["distance"] >= 0  # the AUTOINDEX searches


def index_params_of(client: MilvusClient, field: str, index_type: str, metric: str):
    p = client.prepare_index_params()
    if metric:
        p.add_index(field, index_type=index_type, metric_type=metric)
    else:
        p.add_index(field, index_type=index_type)
    return p


# ------------------------------------------------------------------------------------ binary


def _hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.bitwise_count(a[:, None, :] ^ b[None, :, :]).sum(-1)


def _jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    inter = np.bitwise_count(a[:, None, :] & b[None, :, :]).sum(-1)
    union = np.bitwise_count(a[:, None, :] | b[None, :, :]).sum(-1)
    return np.where(union == 0, 1.0, (union - inter) / np.maximum(union, 1))


@pytest.mark.parametrize(
    ("index_type", "metric", "params", "search"),
    [
        ("BIN_FLAT", "HAMMING", {}, {}),
        ("BIN_FLAT", "JACCARD", {}, {}),
        ("BIN_IVF_FLAT", "HAMMING", {"nlist": 16}, {"nprobe": 16}),
        ("BIN_IVF_FLAT", "JACCARD", {"nlist": 16}, {"nprobe": 16}),
    ],
)
def test_binary_search_matches_numpy(client, index_type, metric, params, search):
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 256, (N_FLUSHED + N_GROWING, 8), dtype=np.uint8)  # dim 64
    rows = [{"id": i, "v": codes[i].tobytes(), "tag": i % 3} for i in range(len(codes))]
    _create(client, "bin", DataType.BINARY_VECTOR, index_type, metric, params, dim=64)
    _load(client, "bin", rows)
    probes = [0, N_FLUSHED - 1, N_FLUSHED + 3]
    res = client.search(
        "bin", data=[rows[i]["v"] for i in probes], limit=5, output_fields=["v"], search_params={"params": search}
    )
    dist = (_hamming if metric == "HAMMING" else _jaccard)(codes[probes], codes)
    for hits, want, probe in zip(res, dist, probes, strict=True):
        assert hits[0]["id"] == probe and hits[0]["distance"] == 0
        assert hits[0]["entity"]["v"] == rows[probe]["v"]  # read back from the index (sealed) or the column
        np.testing.assert_allclose([h["distance"] for h in hits], np.sort(want)[:5], rtol=1e-5)
    # Range search: range_filter <= distance < radius.
    radius = 26 if metric == "HAMMING" else 0.55
    res = client.search(
        "bin", data=[rows[0]["v"]], limit=100, search_params={"params": {**search, "radius": radius, "range_filter": 0}}
    )
    want = set(np.flatnonzero(dist[0] < radius))
    assert {h["id"] for h in res[0]} == want and len(want) > 1
    e = _err(
        lambda: client.search("bin", data=[rows[0]["v"]], search_params={"params": {"radius": 1, "range_filter": 5}})
    )
    assert e.code == 1100 and "range_filter must be less than radius for L2/HAMMING/JACCARD" in e.message


def test_binary_structure_metrics_and_refusals(client):
    codes = np.array([[0b1111_0000], [0b1100_0000], [0b1111_1111], [0b0000_0011]], dtype=np.uint8)
    rows = [{"id": i, "v": codes[i].tobytes(), "tag": 0} for i in range(len(codes))]
    _create(client, "st", DataType.BINARY_VECTOR, "BIN_FLAT", "SUBSTRUCTURE", dim=8)
    client.insert("st", rows)
    client.load_collection("st")
    q = bytes([0b1100_0000])
    res = client.search("st", data=[q], limit=10)
    assert sorted(h["id"] for h in res[0]) == [0, 1, 2] and all(h["distance"] == 0 for h in res[0])  # rows ⊇ query
    e = _err(lambda: client.search("st", data=[q], search_params={"params": {"radius": 1}}))
    assert "Substructure not support range_search" in e.message
    client.release_collection("st")
    client.drop_index("st", "v")
    client.create_index("st", index_params_of(client, "v", "BIN_FLAT", "SUPERSTRUCTURE"))
    client.load_collection("st")
    res = client.search("st", data=[bytes([0b1111_0000])], limit=10)
    assert sorted(h["id"] for h in res[0]) == [0, 1]  # rows ⊆ query

    def index(index_type, metric, params=None):
        p = client.prepare_index_params()
        p.add_index("v", index_type=index_type, metric_type=metric, params=params or {})
        return lambda: client.create_index("st2", p)

    _create(client, "st2", DataType.BINARY_VECTOR, "BIN_FLAT", "HAMMING", dim=8)
    client.drop_index("st2", "v")
    e = _err(index("BIN_IVF_FLAT", "SUBSTRUCTURE", {"nlist": 4}))
    assert "metric type SUBSTRUCTURE not found or not supported, supported: [HAMMING JACCARD]" in e.message
    e = _err(index("BIN_FLAT", "L2"))
    assert (
        "metric type L2 not found or not supported, supported: [HAMMING JACCARD SUBSTRUCTURE SUPERSTRUCTURE]"
        in e.message
    )
    e = _err(index("HNSW", "HAMMING", {"M": 8, "efConstruction": 64}))
    assert "data type BinaryVector can't build with this index HNSW" in e.message
    e = _err(index("BIN_IVF_FLAT", "HAMMING", {"nlist": 0}))
    assert "nlist out of range: [1, 65536]" in e.message
    client.create_index("st2", index_params_of(client, "v", "AUTOINDEX", ""))  # BIN_IVF_FLAT, HAMMING
    assert client.describe_index("st2", "v")["metric_type"] == "HAMMING"


# ------------------------------------------------------------------------------ float16 / bf16


@pytest.mark.parametrize("dtype", [DataType.FLOAT16_VECTOR, DataType.BFLOAT16_VECTOR])
@pytest.mark.parametrize(
    ("index_type", "params", "search"),
    [("HNSW", {"M": 16, "efConstruction": 64}, {"ef": 64}), ("IVF_SQ8", {"nlist": 16}, {"nprobe": 16})],
)
def test_half_vectors_search_as_float32_and_return_as_themselves(client, dtype, index_type, params, search):
    rng = np.random.default_rng(9)
    base = rng.random((N_FLUSHED + N_GROWING, 16), dtype=np.float32)
    if dtype == DataType.FLOAT16_VECTOR:
        vecs = base.astype(np.float16)
        widened = vecs.astype(np.float32)
    else:
        bits = (base.view(np.uint32) >> 16).astype(np.uint16)  # truncate to bfloat16
        vecs = bits
        widened = (bits.astype(np.uint32) << 16).view(np.float32)
    # float16 goes as numpy float16; bfloat16 as float32 data (exact in bfloat16: the server converts)
    half = dtype == DataType.FLOAT16_VECTOR
    rows = [{"id": i, "v": vecs[i] if half else [float(x) for x in widened[i]], "tag": 0} for i in range(len(vecs))]
    _create(client, "half", dtype, index_type, "L2", params, dim=16)
    _load(client, "half", rows)
    probes = [2, N_FLUSHED - 5, N_FLUSHED + 11]
    queries = [vecs[i] if half else [float(x) for x in widened[i]] for i in probes]  # own type / float32
    res = client.search("half", data=queries, limit=3, output_fields=["v"], search_params={"params": search})
    for hits, probe in zip(res, probes, strict=True):
        assert hits[0]["id"] == probe
        got = hits[0]["entity"]["v"]
        raw = got if isinstance(got, bytes) else got[0] if isinstance(got, list) else bytes(got)
        assert bytes(raw) == vecs[probe].tobytes()  # the field's own type, as inserted
    d2 = ((widened[probes[0]] - widened) ** 2).sum(1)
    assert res[0][1]["distance"] == pytest.approx(np.sort(d2)[1], rel=1e-2)


# ------------------------------------------------------------------------------- IVF_PQ, SCANN


@pytest.mark.parametrize(
    ("index_type", "params", "search"),
    [
        ("IVF_PQ", {"nlist": 16, "m": 8, "nbits": 8}, {"nprobe": 16}),
        ("SCANN", {"nlist": 16}, {"nprobe": 16, "reorder_k": 50}),
        ("SCANN", {"nlist": 16, "with_raw_data": False}, {"nprobe": 16}),
    ],
)
@pytest.mark.parametrize("metric", ["L2", "COSINE"])
def test_quantized_indexes_find_own_vectors(client, index_type, params, search, metric):
    rng = np.random.default_rng(13)
    vecs = rng.random((N_FLUSHED + N_GROWING, 16), dtype=np.float32)
    rows = [{"id": i, "v": vecs[i], "tag": 0} for i in range(len(vecs))]
    _create(client, "pq", DataType.FLOAT_VECTOR, index_type, metric, params, dim=16)
    _load(client, "pq", rows)
    probes = list(range(0, N_FLUSHED + N_GROWING, 97))
    res = client.search("pq", data=[vecs[i] for i in probes], limit=10, search_params={"params": search})
    found = np.mean([p in [h["id"] for h in hits] for hits, p in zip(res, probes, strict=True)])
    assert found >= (0.95 if index_type == "SCANN" and "reorder_k" in search else 0.8), found
    if index_type == "SCANN":
        e = _err(lambda: client.search("pq", data=[vecs[0]], limit=10, search_params={"params": {"reorder_k": 5}}))
        assert "reorder_k(5) should be larger than k(10)" in e.message


def test_quantized_index_parameter_checks(client):
    _create(client, "pqx", DataType.FLOAT_VECTOR, "FLAT", "L2", {}, dim=12)
    client.drop_index("pqx", "v")

    def index(index_type, params):
        p = client.prepare_index_params()
        p.add_index("v", index_type=index_type, metric_type="L2", params=params)
        return lambda: client.create_index("pqx", p)

    assert "parameter `m` not found" in _err(index("IVF_PQ", {"nlist": 8})).message
    e = _err(index("IVF_PQ", {"nlist": 8, "m": 5}))
    assert "dimension must be abled to be divided by `m`, dimension: 12, m: 5" in e.message
    assert "nbits out of range: [1, 16]" in _err(index("IVF_PQ", {"nlist": 8, "m": 4, "nbits": 20})).message
    assert "nlist out of range: [1, 65536]" in _err(index("SCANN", {})).message
    _create(client, "odd", DataType.FLOAT_VECTOR, "FLAT", "L2", {}, dim=7)
    client.drop_index("odd", "v")
    p = client.prepare_index_params()
    p.add_index("v", index_type="SCANN", metric_type="L2", params={"nlist": 8})
    assert (
        "dimension must be able to be divided by 2, dimension: 7" in _err(lambda: client.create_index("odd", p)).message
    )


# ------------------------------------------------------------------------------ range search


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_range_search_direction_per_metric(client, metric):
    rng = np.random.default_rng(17)
    vecs = rng.random((N_FLUSHED + N_GROWING, 8), dtype=np.float32)
    rows = [{"id": i, "v": vecs[i], "tag": 0} for i in range(len(vecs))]
    _create(client, "rng", DataType.FLOAT_VECTOR, "IVF_FLAT", metric, {"nlist": 8}, dim=8)
    _load(client, "rng", rows)
    q = vecs[N_FLUSHED + 1]
    if metric == "L2":
        score = ((vecs - q) ** 2).sum(1)
        radius, range_filter, bad = 0.3, 0.05, {"radius": 0.05, "range_filter": 0.3}
        want = set(np.flatnonzero((score < radius) & (score >= range_filter)))
    else:
        b = vecs / np.linalg.norm(vecs, axis=1, keepdims=True) if metric == "COSINE" else vecs
        qq = q / np.linalg.norm(q) if metric == "COSINE" else q
        score = b @ qq
        radius = float(np.quantile(score, 0.97))
        range_filter = float(np.quantile(score, 0.995))
        bad = {"radius": range_filter, "range_filter": radius}
        want = set(np.flatnonzero((score > radius) & (score <= range_filter)))
    res = client.search(
        "rng",
        data=[q],
        limit=200,
        search_params={"params": {"nprobe": 8, "radius": radius, "range_filter": range_filter}},
    )
    got = {h["id"]: h["distance"] for h in res[0]}
    near_bound = {i for i in got.keys() ^ want if min(abs(score[i] - radius), abs(score[i] - range_filter)) < 1e-5}
    assert got.keys() ^ want <= near_bound and want  # every probed list: exactly the rows in range
    ordered = list(got.values())
    assert ordered == sorted(ordered, reverse=metric != "L2")  # best first
    e = _err(lambda: client.search("rng", data=[q], search_params={"params": bad}))
    side = "greater" if metric != "L2" else "less"
    assert e.code == 1100 and f"range_filter must be {side} than radius" in e.message


def test_int8_vectors_are_refused_at_create(client):
    """pymilvus 3.0 sends INT8_VECTOR (DataType 105, VectorField.int8_vector); kmilvus cannot
    store or search it yet, so the collection is refused, never half made."""
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.INT8_VECTOR, dim=8)
    e = _err(lambda: client.create_collection("i8", schema=schema))
    assert e.code == 1100 and "field v: data type Int8Vector is not supported" in e.message
    assert not client.has_collection("i8")


# ----------------------------------------------- group-by, search iterator, hybrid search


def _scored(client: MilvusClient, kind: str, n: int, rng, groups: int = 40):
    """Collection `t` of `n` binary (BIN_IVF_FLAT, HAMMING) or sparse (SPARSE_INVERTED_INDEX)
    rows with `tag` = id % groups, flushed and growing; returns (rows, score(q) → scores of every
    row, larger is closer, search params)."""
    if kind == "binary":
        codes = rng.integers(0, 256, (n, 8), dtype=np.uint8)
        rows = [{"id": i, "v": codes[i].tobytes(), "tag": i % groups} for i in range(n)]
        _create(client, "t", DataType.BINARY_VECTOR, "BIN_IVF_FLAT", "HAMMING", {"nlist": 16}, dim=64)
        _load(client, "t", rows)
        return rows, (lambda q: _hamming(codes[q : q + 1], codes)[0].astype(np.float64)), False, {"nprobe": 16}
    rows, dense = _sparse_rows(rng, n)
    for r in rows:
        r["tag"] = r["id"] % groups
    _create(client, "t", DataType.SPARSE_FLOAT_VECTOR, "SPARSE_INVERTED_INDEX", "IP")
    _load(client, "t", rows)
    return rows, (lambda q: (dense[q] @ dense.T).astype(np.float64)), True, {}


@pytest.mark.parametrize("kind", ["binary", "sparse"])
@pytest.mark.parametrize("strict", [False, True])
def test_group_by_over_binary_and_sparse_vectors(client, kind, strict):
    rng = np.random.default_rng(21)
    rows, score, larger, search = _scored(client, kind, N_FLUSHED + N_GROWING, rng)
    probes = [3, N_FLUSHED + 5]  # a sealed row and a growing one
    res = client.search(
        "t",
        data=[rows[i]["v"] for i in probes],
        limit=5,
        group_by_field="tag",
        group_size=2,
        strict_group_size=strict,
        output_fields=["tag"],
        search_params={"params": search},
    )
    tags = np.array([r["tag"] for r in rows])
    for hits, probe in zip(res, probes, strict=True):
        s = score(probe)
        key = -s if larger else s  # smaller is closer
        scoring = (s != 0) if larger else np.ones(len(s), bool)  # sparse: rows sharing a dimension
        group_best = sorted(float(key[(tags == t) & scoring].min()) for t in range(40) if (scoring & (tags == t)).any())
        got_tags = [h["entity"]["tag"] for h in hits]
        runs = list(dict.fromkeys(got_tags))
        assert len(runs) == 5 and [t for i, t in enumerate(got_tags) if i == 0 or got_tags[i - 1] != t] == runs
        sizes = [got_tags.count(t) for t in runs]
        assert sizes == [2] * 5 if strict else all(1 <= n <= 2 for n in sizes)
        for h in hits:  # each hit is a row of its group, with its own score
            assert tags[h["id"]] == h["entity"]["tag"] and h["distance"] == pytest.approx(s[h["id"]], rel=1e-5)
        # groups in the order of their best row, each led by it: the 5 best groups of all
        firsts = [
            next(-h["distance"] if larger else h["distance"] for h in hits if h["entity"]["tag"] == t) for t in runs
        ]
        np.testing.assert_allclose(firsts, group_best[:5], rtol=1e-5)
        assert hits[0]["id"] == probe
        closeness = [-h["distance"] if larger else h["distance"] for h in hits]
        for t in runs:  # within a group, best first
            mine = [c for c, g in zip(closeness, got_tags, strict=True) if g == t]
            assert mine == sorted(mine)


@pytest.mark.parametrize("kind", ["binary", "sparse"])
def test_search_iterator_over_binary_and_sparse_vectors(client, kind):
    rng = np.random.default_rng(22)
    rows, score, larger, search = _scored(client, kind, N_FLUSHED + N_GROWING, rng)
    q = N_FLUSHED + 9
    it = client.search_iterator(
        "t", data=[rows[q]["v"]], batch_size=100, filter="tag < 30", search_params={"params": search}
    )
    ids: list[int] = []
    dist: list[float] = []
    while page := it.next():
        ids += [h["id"] for h in page]
        dist += [h["distance"] for h in page]
    it.close()
    s = score(q)
    tags = np.array([r["tag"] for r in rows])
    # every row matching the filter once (sparse: every row sharing a dimension with the query)
    want = set(np.flatnonzero((tags < 30) & ((s != 0) if larger else True)).tolist())
    assert len(ids) == len(set(ids)) and set(ids) == want
    assert dist == sorted(dist, reverse=larger)  # HAMMING ascending, IP descending
    np.testing.assert_allclose(dist, s[ids], rtol=1e-5)


def test_hybrid_search_over_dense_and_sparse_fields(client):
    """The usual hybrid search: a dense embedding and a sparse (lexical) one, fused by RRF and by
    a weighted reranker with Milvus' normalisation, checked against the fusion of exact scores."""
    rng = np.random.default_rng(23)
    n = 600
    sparse_rows, sparse = _sparse_rows(rng, n)
    dense = rng.random((n, 8), dtype=np.float32)
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=8)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_field("tag", DataType.INT64)
    index = client.prepare_index_params()
    index.add_index("dense", index_type="FLAT", metric_type="COSINE")
    index.add_index("sparse", index_type="SPARSE_WAND", metric_type="IP")
    client.create_collection("hy", schema=schema, index_params=index, consistency_level="Strong")
    rows = [{"id": i, "dense": dense[i], "sparse": sparse_rows[i]["v"], "tag": i % 4} for i in range(n)]
    client.insert("hy", rows[:400])
    client.flush("hy")
    client.insert("hy", rows[400:])  # growing rows beside the sealed ones
    q = 402  # growing, tag 2
    unit = dense / np.linalg.norm(dense, axis=1, keepdims=True)
    cos = unit @ unit[q]
    ip = sparse @ sparse[q]
    tags = np.array([r["tag"] for r in rows])

    def exact(s, limit, mask):
        order = [int(i) for i in np.lexsort((np.arange(n), -s)) if mask[i] and s[i] != 0][:limit]
        return order, s[order]

    pd = exact(cos, 20, tags != 1)
    ps = exact(ip, 15, np.ones(n, bool))
    reqs = [
        AnnSearchRequest([dense[q]], "dense", {"metric_type": "COSINE", "params": {}}, 20, expr="tag != 1"),
        AnnSearchRequest([sparse_rows[q]["v"]], "sparse", {"metric_type": "IP", "params": {}}, 15),
    ]

    def fuse(contribution, limit):
        total: dict[int, float] = {}
        for i, (ids, scores) in enumerate((pd, ps)):
            for rank, (pk, sc) in enumerate(zip(ids, scores, strict=True)):
                total[pk] = total.get(pk, 0.0) + contribution(i, rank, float(sc))
        return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]

    res = client.hybrid_search("hy", reqs, RRFRanker(), limit=10, output_fields=["tag"])[0]
    want = fuse(lambda i, rank, sc: 1 / (60 + rank + 1), 10)
    assert [h["id"] for h in res] == [pk for pk, _ in want] and res[0]["id"] == q  # q leads both lists
    assert [h["distance"] for h in res] == pytest.approx([sc for _, sc in want], abs=1e-6)
    assert all(h["entity"]["tag"] == tags[h["id"]] for h in res)
    norm = (lambda sc: (1 + sc) * 0.5, lambda sc: 0.5 + math.atan(sc) / math.pi)  # COSINE, IP
    res = client.hybrid_search("hy", reqs, WeightedRanker(0.6, 0.4), limit=10)[0]
    want = fuse(lambda i, rank, sc: (0.6, 0.4)[i] * norm[i](sc), 10)
    assert [h["id"] for h in res] == [pk for pk, _ in want]
    assert [h["distance"] for h in res] == pytest.approx([sc for _, sc in want], abs=1e-5)


def test_hybrid_search_normalises_a_binary_metric_as_milvus(client):
    """HAMMING is a distance: a weighted rerank makes it larger-is-better with Milvus'
    1 - 2·atan(d)/π, normalised or mixed with a similarity."""
    rng = np.random.default_rng(24)
    n = 300
    codes = rng.integers(0, 256, (n, 4), dtype=np.uint8)
    dense = rng.random((n, 8), dtype=np.float32) - 0.5
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("bits", DataType.BINARY_VECTOR, dim=32)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=8)
    index = client.prepare_index_params()
    index.add_index("bits", index_type="BIN_FLAT", metric_type="HAMMING")
    index.add_index("dense", index_type="FLAT", metric_type="IP")
    client.create_collection("hb", schema=schema, index_params=index, consistency_level="Strong")
    client.insert("hb", [{"id": i, "bits": codes[i].tobytes(), "dense": dense[i]} for i in range(n)])
    client.load_collection("hb")
    q = 17
    ham = _hamming(codes[q : q + 1], codes)[0].astype(np.float64)
    ip = (dense @ dense[q]).astype(np.float64)
    # a per-request limit where no two rows tie at the cut (HAMMING distances tie often), so
    # which rows each request answers is defined
    cut = np.sort(ham)
    limit = next(k for k in range(12, n) if cut[k - 1] != cut[k])
    pb = [int(i) for i in np.lexsort((np.arange(n), ham))[:limit]]
    pd = [int(i) for i in np.lexsort((np.arange(n), -ip))[:12]]
    reqs = [
        AnnSearchRequest([codes[q].tobytes()], "bits", {"metric_type": "HAMMING", "params": {}}, limit),
        AnnSearchRequest([dense[q]], "dense", {"metric_type": "IP", "params": {}}, 12),
    ]
    to_greater = lambda d: 1 - 2 * math.atan(d) / math.pi  # noqa: E731
    for norm_score, f_ip in ((True, lambda s: 0.5 + math.atan(s) / math.pi), (False, lambda s: s)):
        total: dict[int, float] = {}
        for pk in pb:
            total[pk] = total.get(pk, 0.0) + 0.5 * to_greater(ham[pk])
        for pk in pd:
            total[pk] = total.get(pk, 0.0) + 0.5 * f_ip(ip[pk])
        want = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
        res = client.hybrid_search("hb", reqs, WeightedRanker(0.5, 0.5, norm_score=norm_score), limit=8)[0]
        assert [h["id"] for h in res] == [pk for pk, _ in want]
        assert [h["distance"] for h in res] == pytest.approx([s for _, s in want], abs=1e-5)
    # HAMMING alone, unnormalised: the fused distances stay ascending, as Milvus sorts them
    alone = client.hybrid_search("hb", reqs[:1], WeightedRanker(1.0, norm_score=False), limit=5)[0]
    assert [h["id"] for h in alone] == pb[:5] and [h["distance"] for h in alone] == pytest.approx(ham[pb[:5]])
