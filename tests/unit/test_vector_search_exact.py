"""The exact search of dense vectors without an index (`querynode.vector_search`: growing rows,
segments not indexed yet) gives Milvus' scores, and a search reads the segment's matrix in
place: per query it allocates distances, never a copy of the rows (a growing segment holds up
to a sealed segment's worth of vectors, so a copy per search would cost more than the search)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from kmilvus.querynode import vector_search


def _reference(base: np.ndarray, queries: np.ndarray, metric: str) -> np.ndarray:
    """Milvus' distances in float64: squared L2, inner product, cosine (a zero vector scores 0)."""
    b, q = base.astype(np.float64), queries.astype(np.float64)
    if metric == "L2":
        d: np.ndarray = ((q[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
        return d
    if metric == "COSINE":
        bn = np.linalg.norm(b, axis=1)
        qn = np.linalg.norm(q, axis=1)
        bn[bn == 0] = 1.0
        qn[qn == 0] = 1.0
        b, q = b / bn[:, None], q / qn[:, None]
    ip: np.ndarray = q @ b.T
    return ip


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_exact_scores_and_order_are_milvus(metric: str) -> None:
    rng = np.random.default_rng(7)
    base = rng.standard_normal((500, 16)).astype(np.float32)
    base[3] = 0.0  # a zero vector: cosine 0 with every query, not NaN
    queries = rng.standard_normal((4, 16)).astype(np.float32)
    sq = np.einsum("ij,ij->i", base, base)
    k = 10
    for base_sq in (None, sq):
        d, i = vector_search.search(base, queries, k, metric, base_sq=base_sq)
        ref = _reference(base, queries, metric)
        larger = metric != "L2"
        want = np.argsort(-ref if larger else ref, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(i, want)
        np.testing.assert_allclose(d, np.take_along_axis(ref, want, axis=1), rtol=1e-4, atol=1e-4)
    if metric == "COSINE":
        d, i = vector_search.search(base, queries, len(base), metric, base_sq=sq)
        assert not np.isnan(d).any()
        np.testing.assert_allclose(d[i == 3], 0.0, atol=1e-6)


@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_a_search_does_not_copy_the_rows(metric: str) -> None:
    rng = np.random.default_rng(1)
    base = rng.random((20_000, 64), dtype=np.float32)  # 5 MiB of rows
    sq = np.einsum("ij,ij->i", base, base)
    query = rng.random((1, 64), dtype=np.float32)
    vector_search.search(base, query, 10, metric, base_sq=sq)  # warm
    tracemalloc.start()
    try:
        vector_search.search(base, query, 10, metric, base_sq=sq)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The distances and the top-k: a few times the row count in floats, far below the rows.
    assert peak < base.nbytes // 4, f"{metric}: a search allocated {peak:,} bytes for {base.nbytes:,} of rows"
