"""kmilvus.index: every index type × metric on faiss, serialization, recall, filters, range search,
and Milvus' parameter checks (pkg/util/indexparamcheck)."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus.grpc_gen import schema_pb2

from kmilvus import index as kindex
from kmilvus.index import params as P
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType
DIM = 32
PARAMS = {
    "FLAT": {},
    "IVF_FLAT": {"nlist": "32"},
    "IVF_SQ8": {"nlist": "32"},
    "HNSW": {"M": "16", "efConstruction": "128"},
    "AUTOINDEX": {},
}
SEARCH = {
    "FLAT": {},
    "IVF_FLAT": {"nprobe": 32},
    "IVF_SQ8": {"nprobe": 32},
    "HNSW": {"ef": 64},
    "AUTOINDEX": {"ef": 64},
}


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return np.random.default_rng(7).random((2000, DIM), dtype=np.float32)


def exact(base: np.ndarray, queries: np.ndarray, k: int, metric: str) -> np.ndarray:
    """numpy brute force: the true top-k offsets."""
    if metric == "L2":
        score = ((queries[:, None, :] - base[None, :, :]) ** 2).sum(-1)
    else:
        b, q = (kindex.normalize(base), kindex.normalize(queries)) if metric == "COSINE" else (base, queries)
        score = -(q @ b.T)
    return np.argsort(score, axis=1)[:, :k]


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
@pytest.mark.parametrize("index_type", ["FLAT", "IVF_FLAT", "IVF_SQ8", "HNSW", "AUTOINDEX"])
def test_own_vector_first(data, index_type, metric):
    """A row's own vector comes back first: distance ~0 (L2) or similarity ~1 (COSINE)."""
    f = kindex.build(data, index_type, metric, PARAMS[index_type])
    idx = kindex.load(f.data)
    assert (idx.num_rows, idx.dim, f.num_rows, f.dim) == (2000, DIM, 2000, DIM)
    rows = np.arange(0, 2000, 97)
    d, o = idx.search(data[rows], 10, SEARCH[index_type])
    assert d.shape == o.shape == (len(rows), 10)
    if metric == "IP":
        # IP's best match is not necessarily the row itself; the exact answer is.
        truth = exact(data, data[rows], 1, "IP")[:, 0]
        assert (o[:, 0] == truth).mean() >= 0.9
        assert np.all(np.diff(d, axis=1) <= 1e-4)  # similarity, descending
        return
    assert (o[:, 0] == rows).mean() >= 0.95 if index_type == "IVF_SQ8" else np.array_equal(o[:, 0], rows)
    if metric == "L2":
        tol = 0.05 if index_type == "IVF_SQ8" else 1e-4
        assert np.all(d[:, 0] < tol)
        assert np.all(np.diff(d, axis=1) >= -1e-5)  # squared L2, ascending
        # squared, not plain L2
        j = o[0, 5]
        assert d[0, 5] == pytest.approx(((data[rows[0]] - data[j]) ** 2).sum(), rel=0.05)
    else:
        tol = 0.02 if index_type == "IVF_SQ8" else 1e-4
        assert np.all(np.abs(d[:, 0] - 1) < tol)
        assert np.all(np.diff(d, axis=1) <= 1e-5)


@pytest.mark.parametrize(
    ("index_type", "build_params", "search_params", "floor"),
    [
        ("HNSW", {"M": "16", "efConstruction": "128"}, {"ef": 128}, 0.95),
        ("IVF_FLAT", {"nlist": "64"}, {"nprobe": 32}, 0.95),
        ("IVF_SQ8", {"nlist": "64"}, {"nprobe": 32}, 0.85),
    ],
)
@pytest.mark.parametrize("metric", ["L2", "COSINE"])
def test_recall_at_10(index_type, build_params, search_params, floor, metric):
    rng = np.random.default_rng(11)
    base = rng.random((10_000, DIM), dtype=np.float32)
    queries = rng.random((100, DIM), dtype=np.float32)
    idx = kindex.create(base, index_type, metric, build_params)
    _, got = idx.search(queries, 10, search_params)
    truth = exact(base, queries, 10, metric)
    recall = np.mean([len(set(g) & set(t)) / 10 for g, t in zip(got, truth, strict=True)])
    assert recall >= floor, recall


def test_brute_force_equals_numpy(data):
    q = data[:5] + 0.01
    for metric in ("L2", "IP", "COSINE"):
        _, o = kindex.brute_force(data, metric).search(q, 10)
        assert np.array_equal(o, exact(data, q, 10, metric))


@pytest.mark.parametrize("index_type", ["FLAT", "IVF_FLAT", "HNSW"])
def test_valid_mask_excludes_rows(data, index_type):
    idx = kindex.create(data, index_type, "L2", PARAMS[index_type])
    valid = np.ones(len(data), dtype=bool)
    valid[::2] = False  # even rows deleted
    _d, o = idx.search(data[:4], 5, SEARCH[index_type], valid=valid)
    assert np.all(o[o >= 0] % 2 == 1)
    assert np.array_equal(o[[1, 3], 0], [1, 3])  # a kept row still finds itself


def test_fewer_rows_than_k_and_empty():
    base = np.eye(4, DIM, dtype=np.float32)
    _d, o = kindex.create(base, "HNSW", "L2", PARAMS["HNSW"]).search(base[:1], 10, {"ef": 16})
    assert sorted(o[0][o[0] >= 0]) == [0, 1, 2, 3]
    assert np.all(o[0][4:] == -1)
    ivf = kindex.load(kindex.build(base, "IVF_FLAT", "IP", {"nlist": "128"}).data)  # nlist > rows
    assert ivf.search(base[:1], 1, {"nprobe": 8})[1][0, 0] == 0
    empty = kindex.load(kindex.build(np.zeros((0, DIM), np.float32), "HNSW", "L2", PARAMS["HNSW"]).data)
    assert empty.num_rows == 0
    assert np.all(empty.search(base[:2], 3, {"ef": 16})[1] == -1)


@pytest.mark.parametrize("metric", ["L2", "COSINE"])
@pytest.mark.parametrize("index_type", ["FLAT", "IVF_FLAT", "HNSW"])
def test_range_search(data, index_type, metric):
    idx = kindex.create(data, index_type, metric, PARAMS[index_type])
    q = data[:3]
    _, _o = idx.search(q, 50, {"ef": 64, "nprobe": 32})
    d_all, o_all = kindex.brute_force(data, metric).search(q, 2000)
    if metric == "L2":
        radius, range_filter = float(np.median(d_all[:, 20])), 1e-3  # excludes the row itself
    else:
        radius, range_filter = float(np.median(d_all[:, 20])), 0.999
    lims, d, o = idx.range_search(q, radius, range_filter, {"ef": 64, "nprobe": 32})
    assert len(lims) == 4
    for i in range(3):
        got_d, got_o = d[lims[i] : lims[i + 1]], o[lims[i] : lims[i + 1]]
        assert i not in got_o
        if metric == "L2":
            assert np.all((got_d < radius) & (got_d >= range_filter))
            assert np.all(np.diff(got_d) >= 0)
        else:
            assert np.all((got_d > radius) & (got_d <= range_filter))
            assert np.all(np.diff(got_d) <= 0)
        want = set(o_all[i][(d_all[i] < radius) & (d_all[i] >= range_filter)]) if metric == "L2" else None
        if want is not None and index_type == "FLAT":
            assert set(got_o) == want
        assert len(got_o) > 0


async def test_async_build_and_search(data):
    f = await kindex.abuild(data, "HNSW", "COSINE", PARAMS["HNSW"])
    idx = await kindex.aload(memoryview(f.data))
    _d, o = await idx.asearch(data[:2], 3, {"ef": 32})
    assert list(o[:, 0]) == [0, 1]
    assert f.serialized_size == len(f.data) > DIM * 2000 * 4


# ------------------------------------------------------------------------------ parameter checks


def vec_field(dt: int = DT.FloatVector) -> schema_pb2.FieldSchema:
    return schema_pb2.FieldSchema(name="vec", data_type=dt)


def check(params: dict, dt: int = DT.FloatVector, dim: int = DIM) -> dict:
    return P.check_index_params(params, vec_field(dt), dim)


def test_check_index_params_accepts_and_defaults():
    out = check({"index_type": "HNSW", "metric_type": "l2", "M": 16, "efConstruction": 64})
    assert out == {"index_type": "HNSW", "metric_type": "L2", "M": "16", "efConstruction": "64", "dim": str(DIM)}
    assert check({"index_type": "IVF_FLAT", "nlist": "1024"})["metric_type"] == "COSINE"
    assert check({})["index_type"] == "AUTOINDEX"
    assert P.build_params(check({"index_type": "AUTOINDEX"}))["index_type"] == "HNSW"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"index_type": "NOPE"}, "invalid index type: NOPE"),
        ({"index_type": "HNSW", "metric_type": "HAMMING", "M": 8, "efConstruction": 64}, "metric type HAMMING"),
        ({"index_type": "IVF_FLAT", "nlist": 0}, "nlist out of range: [1, 65536]"),
        ({"index_type": "IVF_SQ8", "nlist": 70000}, "nlist out of range: [1, 65536]"),
        ({"index_type": "IVF_FLAT", "nlist": "x"}, "nlist out of range: [1, 65536]"),
        ({"index_type": "IVF_FLAT"}, "nlist out of range: [1, 65536]"),
        ({"index_type": "HNSW", "M": 65, "efConstruction": 64}, "M out of range: [4, 64]"),
        ({"index_type": "HNSW", "M": 16, "efConstruction": 600}, "efConstruction out of range: [8, 512]"),
    ],
)
def test_check_index_params_rejects(params, message):
    with pytest.raises(MilvusError) as e:
        check(params)
    assert message in e.value.message
    assert e.value.code == 65535  # Milvus answers a checker's plain error as unexpected


def test_check_index_params_field_and_dim():
    with pytest.raises(MilvusError, match=r"can't build hnsw in not vector type\."):
        check({"index_type": "HNSW", "M": 8, "efConstruction": 64}, dt=DT.Int64)
    with pytest.raises(MilvusError, match=r"dim out of range: \[1, 32768\]"):
        check({"index_type": "FLAT"}, dim=40000)
    with pytest.raises(MilvusError, match="STL_SORT"):
        check({"index_type": "STL_SORT"}, dt=DT.Int64)


def test_check_search_params():
    assert P.check_search_params("HNSW", 10, {}) == {"ef": 16}
    assert P.check_search_params("AUTOINDEX", 100, {}) == {"ef": 100}
    assert P.check_search_params("IVF_FLAT", 10, {}) == {"nprobe": 8}
    assert P.check_search_params("FLAT", 10, {"nprobe": 3}) == {}
    with pytest.raises(MilvusError, match=r"ef\(5\) should be larger than k\(10\)"):
        P.check_search_params("HNSW", 10, {"ef": 5})
    with pytest.raises(MilvusError, match=r"topk \[16385\] is invalid"):
        P.check_search_params("FLAT", 16385, {})
    with pytest.raises(MilvusError, match="nprobe"):
        P.check_search_params("IVF_SQ8", 10, {"nprobe": 0})


# ------------------------------------------------------------------- binary, sparse, PQ, SCANN


def test_check_index_params_per_vector_type():
    def on(dt, params, dim=DIM):
        return check(params, dt=dt, dim=dim)

    sparse = on(DT.SparseFloatVector, {"index_type": "SPARSE_WAND", "drop_ratio_build": "0.1"})
    assert sparse == {
        "index_type": "SPARSE_WAND",
        "metric_type": "IP",
        "drop_ratio_build": "0.1",
        "data_type": "SparseFloatVector",
    }  # no dim for a sparse field; the metric defaults to IP
    assert on(DT.BinaryVector, {"index_type": "BIN_FLAT"})["metric_type"] == "HAMMING"
    assert on(DT.Float16Vector, {"index_type": "IVF_PQ", "nlist": 8, "m": 4})["data_type"] == "Float16Vector"
    assert P.user_params(sparse) == {
        "index_type": "SPARSE_WAND",
        "metric_type": "IP",
        "params": '{"drop_ratio_build": 0.1}',
    }
    for dt, params, message, code in [
        (DT.SparseFloatVector, {"index_type": "IVF_FLAT", "nlist": 8}, "SparseFloatVector can't build", 1100),
        (DT.BinaryVector, {"index_type": "FLAT"}, "BinaryVector can't build with this index FLAT", 1100),
        (DT.BFloat16Vector, {"index_type": "BIN_FLAT"}, "BFloat16Vector can't build", 1100),
        (DT.SparseFloatVector, {"index_type": "SPARSE_WAND", "metric_type": "L2"}, "only IP is the supported", 1100),
        (
            DT.SparseFloatVector,
            {"index_type": "SPARSE_WAND", "drop_ratio_build": "x"},
            "invalid drop_ratio_build",
            1100,
        ),
        (
            DT.BinaryVector,
            {"index_type": "BIN_IVF_FLAT", "metric_type": "SUPERSTRUCTURE", "nlist": 4},
            "[HAMMING JACCARD]",
            65535,
        ),
        (DT.FloatVector, {"index_type": "IVF_PQ", "nlist": 8, "m": 0}, "invalid `m`: 0", 65535),
        (DT.FloatVector, {"index_type": "SCANN", "nlist": 8, "with_raw_data": "maybe"}, "invalid with_raw_data", 65535),
    ]:
        with pytest.raises(MilvusError) as e:
            on(dt, params)
        assert message in e.value.message and e.value.code == code, (params, e.value.message)


def test_search_and_range_params():
    assert P.check_search_params("SCANN", 10, {}) == {"nprobe": 8, "reorder_k": 10}
    assert P.check_search_params("BIN_IVF_FLAT", 10, {"nprobe": 3}) == {"nprobe": 3}
    assert P.check_search_params("SPARSE_WAND", 10, {"drop_ratio_search": 0.5}) == {
        "drop_ratio_search": 0.5,
        "refine_factor": 10,
    }
    with pytest.raises(MilvusError, match=r"should be in range \[0.000000, 1.000000\)"):
        P.check_search_params("SPARSE_INVERTED_INDEX", 10, {"drop_ratio_search": 1})
    assert P.check_range_params("IP", {"nprobe": 3}) is None
    assert P.check_range_params("HAMMING", {"radius": 10, "range_filter": 2}) == (10.0, 2.0)
    assert P.check_range_params("COSINE", {"radius": 0.5}) == (0.5, None)
    with pytest.raises(MilvusError, match="range_filter must be greater than radius for IP/COSINE"):
        P.check_range_params("IP", {"radius": 0.5, "range_filter": 0.5})
    with pytest.raises(MilvusError, match="range_filter must be less than radius for L2/HAMMING/JACCARD"):
        P.check_range_params("JACCARD", {"radius": 0.2, "range_filter": 0.3})
    with pytest.raises(MilvusError, match="must pass numpy type for radius"):
        P.check_range_params("L2", {"radius": "1"})
    with pytest.raises(MilvusError, match="Superstructure not support range_search"):
        P.check_range_params("SUPERSTRUCTURE", {"radius": 1})


def _sparse(rng, n: int, dims: int = 300) -> kindex.SparseRows:
    counts = rng.integers(1, 25, n)
    idx = np.concatenate([np.sort(rng.choice(dims, c, replace=False)) for c in counts]).astype(np.uint32)
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return kindex.SparseRows(indptr, idx, rng.random(len(idx), dtype=np.float32) + 0.01)


def _dense_of(rows: kindex.SparseRows, dims: int = 300) -> np.ndarray:
    out = np.zeros((len(rows), dims), np.float32)
    out[rows.row_ids(), rows.indices] = rows.values
    return out


@pytest.mark.parametrize("index_type", ["SPARSE_INVERTED_INDEX", "SPARSE_WAND"])
def test_sparse_index_scores_inner_product_and_round_trips(index_type):
    rng = np.random.default_rng(4)
    rows = _sparse(rng, 800)
    idx = kindex.load(kindex.build(rows, index_type, "IP", {"drop_ratio_build": "0.3"}).data)
    assert (idx.num_rows, idx.holds_raw) == (800, True)
    q = rows.take(np.array([3, 9, 700]))
    want = _dense_of(q) @ _dense_of(rows).T
    d, o = idx.search(q, 10)
    assert np.array_equal(o, np.argsort(-want, axis=1, kind="stable")[:, :10])
    np.testing.assert_allclose(d, np.sort(want, axis=1)[:, ::-1][:, :10], rtol=1e-5)
    valid = np.ones(800, bool)
    valid[9] = False
    assert 9 not in idx.search(q, 10, valid=valid)[1]
    col = idx.raw_column(np.array([9, 3]))  # the stored rows, read back as the binlog's map column
    assert col.to_pylist()[0] == list(
        zip(rows.take(np.array([9])).indices.tolist(), rows.take(np.array([9])).values.tolist(), strict=True)
    )
    # drop_ratio_search: candidates from the pruned query, scores from the whole one.
    d2, o2 = idx.search(q, 10, {"drop_ratio_search": 0.5, "refine_factor": 3})
    hit = o2 >= 0
    np.testing.assert_allclose(d2[hit], want[np.nonzero(hit)[0], o2[hit]], rtol=1e-5)
    lims, rd, ro = idx.range_search(q, 0.5, float(want[0].max()) - 1e-3)
    assert set(ro[lims[0] : lims[1]]) == set(np.flatnonzero((want[0] > 0.5) & (want[0] <= want[0].max() - 1e-3)))
    assert np.all(np.diff(rd[lims[0] : lims[1]]) <= 0)


@pytest.mark.parametrize("metric", ["HAMMING", "JACCARD"])
@pytest.mark.parametrize("index_type", ["BIN_FLAT", "BIN_IVF_FLAT"])
def test_binary_index_distances_and_round_trip(index_type, metric):
    rng = np.random.default_rng(6)
    codes = rng.integers(0, 256, (1500, 8), dtype=np.uint8)
    idx = kindex.load(kindex.build(codes, index_type, metric, {"nlist": "32"}).data)
    assert (idx.num_rows, idx.dim, idx.holds_raw) == (1500, 64, True)
    d, o = idx.search(codes[:4], 5, {"nprobe": 32})  # every list probed: exact
    bits = np.unpackbits(codes, axis=1).astype(bool)
    q = bits[:4, None, :]
    inter, union = (q & bits[None]).sum(-1), (q | bits[None]).sum(-1)
    truth = (q ^ bits[None]).sum(-1) if metric == "HAMMING" else 1 - inter / union
    np.testing.assert_allclose(d, np.sort(truth, axis=1)[:, :5], rtol=1e-6)
    assert list(o[:, 0]) == [0, 1, 2, 3]
    assert idx.raw_column(np.array([7])).to_pylist() == [codes[7].tobytes()]
    valid = np.ones(1500, bool)
    valid[:2] = False
    assert set(idx.search(codes[:2], 3, {"nprobe": 32}, valid)[1].ravel()) & {0, 1} == set()


def test_quantized_dense_indexes_and_small_segments():
    rng = np.random.default_rng(8)
    base = rng.random((3000, DIM), dtype=np.float32)
    truth = exact(base, base[:50], 10, "L2")
    for index_type, params, search in [
        ("IVF_PQ", {"nlist": "16", "m": "8", "nbits": "8"}, {"nprobe": 16}),
        ("SCANN", {"nlist": "16"}, {"nprobe": 16, "reorder_k": 100}),
    ]:
        idx = kindex.load(kindex.build(base, index_type, "L2", params).data)
        _, o = idx.search(base[:50], 10, search)
        rec = np.mean([len(set(g) & set(t)) / 10 for g, t in zip(o, truth, strict=True)])
        assert rec >= (0.9 if index_type == "SCANN" else 0.5), (index_type, rec)
        assert not idx.holds_raw  # quantized: a loaded segment keeps its column
        lims, d, _ = idx.range_search(base[:2], 4.0, 1e-6, search)
        assert len(lims) == 3 and np.all((d < 4.0) & (d >= 1e-6))
    tiny = kindex.load(kindex.build(base[:40], "IVF_PQ", "L2", {"nlist": "64", "m": "4", "nbits": "8"}).data)
    assert list(tiny.search(base[:3], 1, {"nprobe": 64})[1][:, 0]) == [0, 1, 2]  # too few rows for PQ: kept exact


def test_half_precision_vectors_widen_exactly():
    from kmilvus.index import vectors as kvectors

    x = np.random.default_rng(2).random((5, 4), dtype=np.float32)
    f16 = x.astype(np.float16)
    bf16 = (x.view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal(kvectors.half_to_float32(f16.view(np.uint8), DT.Float16Vector), f16.astype(np.float32))
    widened = kvectors.half_to_float32(bf16.view(np.uint8), DT.BFloat16Vector)
    assert np.array_equal(widened, (bf16.astype(np.uint32) << 16).view(np.float32))
    rows = _sparse(np.random.default_rng(3), 7)
    back = kvectors.decode(kvectors.encode(rows), 7, DT.SparseFloatVector)
    assert np.array_equal(back.indptr, rows.indptr) and np.array_equal(back.values, rows.values)


@pytest.mark.parametrize(
    ("index_type", "metric", "params"),
    [
        ("IVF_FLAT", "L2", {"nlist": "32"}),
        ("HNSW", "IP", {"M": "8", "efConstruction": "32"}),
        ("IVF_PQ", "L2", {"nlist": "16", "m": "8", "nbits": "4"}),
        ("SCANN", "COSINE", {"nlist": "16"}),
        ("BIN_IVF_FLAT", "HAMMING", {"nlist": "32"}),
        ("BIN_FLAT", "JACCARD", {}),
        ("SPARSE_INVERTED_INDEX", "IP", {}),
        ("SPARSE_WAND", "IP", {}),
    ],
)
def test_candidates_and_exhaustive_of_every_kind(index_type, metric, params):
    """What group-by and the search iterator ask of an index, for every kind: `candidates` finds
    more rows than the user's top-k (the knobs checked against top-k, then widened: nprobe 1
    still reaches them), `exhaustive` ranks every stored row by its stored vector (SCANN by the
    raw vectors it refines with), each valid row once."""
    rng = np.random.default_rng(12)
    n = 600
    valid = np.ones(n, bool)
    valid[::7] = False
    if index_type.startswith("BIN"):
        vectors = rng.integers(0, 256, (n, 8), dtype=np.uint8)
        queries = vectors[:2]
        bits = np.unpackbits(vectors, axis=1).astype(bool)
        q = bits[:2, None, :]
        inter, union = (q & bits[None]).sum(-1), (q | bits[None]).sum(-1)
        truth = (q ^ bits[None]).sum(-1) if metric == "HAMMING" else 1 - inter / union
        search = {"nprobe": 1}
    elif index_type.startswith("SPARSE"):
        vectors = _sparse(rng, n)
        queries = vectors.take(np.array([0, 1]))
        truth = -(_dense_of(queries) @ _dense_of(vectors).T)
        search = {"refine_factor": 2}
    else:
        vectors = rng.random((n, DIM), dtype=np.float32)
        queries = vectors[:2]
        b, qq = (kindex.normalize(vectors), kindex.normalize(queries)) if metric == "COSINE" else (vectors, queries)
        truth = ((qq[:, None, :] - b[None]) ** 2).sum(-1) if metric == "L2" else -(qq @ b.T)
        search = {"ef": 10} if index_type == "HNSW" else {"nprobe": 1}
    idx = kindex.load(kindex.build(vectors, index_type, metric, params).data)
    # truth: every row's score, smaller is closer; sparse: only rows sharing a dimension score
    reachable = valid & (truth != 0) if index_type.startswith("SPARSE") else np.broadcast_to(valid, truth.shape)
    _, o = idx.candidates(queries, 200, 10, search, valid)
    assert np.all((o >= 0).sum(axis=1) >= np.minimum(150, reachable.sum(axis=1)))
    assert not set(o[o >= 0].tolist()) - set(np.flatnonzero(valid).tolist())
    d, o = idx.exhaustive(queries, n, valid)
    for i in range(2):
        got = o[i][o[i] >= 0]
        assert len(got) == len(set(got.tolist())) and set(got.tolist()) == set(np.flatnonzero(reachable[i]).tolist())
        closeness = -d[i][o[i] >= 0] if metric in ("IP", "COSINE") else d[i][o[i] >= 0]
        assert np.all(np.diff(closeness) >= -1e-5)  # in the metric's order
        if index_type != "IVF_PQ":  # exact scores (IVF_PQ ranks by its quantized ones)
            np.testing.assert_allclose(closeness, np.sort(truth[i][reachable[i]]), rtol=1e-4, atol=1e-5)
    with pytest.raises(MilvusError):  # the user's top-k is still checked
        idx.candidates(queries, 200, 0, search)


SELECTIVE = [
    ("FLAT", "L2", {}, {}),
    ("HNSW", "L2", {"M": "8", "efConstruction": "32"}, {"ef": 16}),
    ("HNSW", "COSINE", {"M": "8", "efConstruction": "32"}, {"ef": 16}),
    ("IVF_FLAT", "IP", {"nlist": "64"}, {"nprobe": 1}),
    ("IVF_SQ8", "L2", {"nlist": "64"}, {"nprobe": 1}),
    ("IVF_PQ", "L2", {"nlist": "64", "m": "8", "nbits": "4"}, {"nprobe": 1}),
    ("SCANN", "L2", {"nlist": "64"}, {"nprobe": 1}),
    ("SCANN", "IP", {"nlist": "64", "with_raw_data": "false"}, {"nprobe": 1}),
    ("BIN_FLAT", "JACCARD", {}, {}),
    ("BIN_IVF_FLAT", "HAMMING", {"nlist": "64"}, {"nprobe": 1}),
    ("SPARSE_INVERTED_INDEX", "IP", {}, {}),
    ("SPARSE_WAND", "IP", {}, {}),
]


def _vectors_of(index_type: str, rng, n: int):
    if index_type.startswith("BIN"):
        return rng.integers(0, 256, (n, 8), dtype=np.uint8)
    if index_type.startswith("SPARSE"):
        return _sparse(rng, n)
    return rng.random((n, DIM), dtype=np.float32)


@pytest.mark.parametrize(("index_type", "metric", "params", "search"), SELECTIVE)
@pytest.mark.parametrize("kept", [0.01, 0.001])
def test_a_selective_filter_is_searched_exactly(index_type, metric, params, search, kept):
    """A filter (or deletes) that keeps few rows: the index's answer is the exact ranking of the
    kept rows by what it stores (`exhaustive`), however narrow the search knobs — an HNSW walk
    or nprobe lists would reach mostly dropped rows (knowhere switches to brute force then).
    Range search likewise returns every kept row within the range."""
    rng = np.random.default_rng(31)
    n = 6000
    vectors = _vectors_of(index_type, rng, n)
    idx = kindex.load(kindex.build(vectors, index_type, metric, params).data)
    valid = rng.random(n) < kept
    valid[:2] = True  # the queries' own rows
    queries = vectors.take(np.arange(4)) if index_type.startswith("SPARSE") else _vectors_of(index_type, rng, 4)
    d, o = idx.search(queries, 10, search, valid)
    want_d, want_o = idx.exhaustive(queries, 10, valid)
    assert np.all(valid[o[o >= 0]])
    np.testing.assert_allclose(d, want_d, rtol=1e-5, atol=1e-5)  # ties (Hamming) may swap rows
    assert np.array_equal(o >= 0, want_o >= 0)
    all_d, all_o = idx.exhaustive(queries, n, valid)
    larger = metric in ("IP", "COSINE")
    for i in range(len(queries)):
        hit = all_o[i] >= 0
        radius = float(all_d[i][hit][min(5, int(hit.sum()) - 1)])
        inside = all_o[i][hit & ((all_d[i] > radius) if larger else (all_d[i] < radius))]
        one = queries.take(np.array([i])) if index_type.startswith("SPARSE") else queries[i : i + 1]
        _, _, got = idx.range_search(one, radius, None, search, valid)
        assert set(got.tolist()) == set(inside.tolist()), (i, radius)


@pytest.mark.parametrize(
    ("index_type", "params", "search"),
    [("HNSW", {"M": "8", "efConstruction": "32"}, {"ef": 16}), ("IVF_FLAT", {"nlist": "64"}, {"nprobe": 4})],
)
def test_a_filter_keeping_a_fifth_keeps_the_recall(index_type, params, search):
    """A filter keeping 20 % of the rows (too many to rank exactly): the index searches wider so
    that the kept rows' recall is that of an unfiltered search with the same knobs."""
    rng = np.random.default_rng(5)
    n = 6000
    base = rng.random((n, DIM), dtype=np.float32)
    queries = rng.random((50, DIM), dtype=np.float32)
    idx = kindex.create(base, index_type, "L2", params)
    valid = rng.random(n) < 0.2
    rows = np.flatnonzero(valid)

    def rec(got, truth):
        return np.mean([len(set(g) & set(t)) / 10 for g, t in zip(got, truth, strict=True)])

    unfiltered = rec(idx.search(queries, 10, search)[1], exact(base, queries, 10, "L2"))
    filtered = rec(idx.search(queries, 10, search, valid)[1], rows[exact(base[rows], queries, 10, "L2")])
    assert filtered >= unfiltered - 0.02, (filtered, unfiltered)
