"""A small batch of queries is searched on one OpenMP thread (kmilvus.index.vector_index): the
calling thread's setting only, restored after, and the answer the same as faiss' parallel one."""

from __future__ import annotations

import threading

import faiss
import numpy as np
import pytest

from kmilvus import index as kindex
from kmilvus.index import vector_index


def test_serial_only_for_small_batches_and_restored() -> None:
    before = faiss.omp_get_max_threads()
    with vector_index._serial_below(1):
        assert faiss.omp_get_max_threads() == 1
        other: list[int] = []
        t = threading.Thread(target=lambda: other.append(faiss.omp_get_max_threads()))
        t.start()
        t.join()
        assert other == [before]  # another thread (an index build) keeps its team
    assert faiss.omp_get_max_threads() == before
    with vector_index._serial_below(vector_index.SERIAL_MAX_NQ + 1):
        assert faiss.omp_get_max_threads() == before


@pytest.mark.parametrize(
    ("index_type", "build", "search"),
    [
        ("FLAT", {}, {}),
        ("HNSW", {"M": "16", "efConstruction": "64"}, {"ef": 64}),
        ("IVF_FLAT", {"nlist": "16"}, {"nprobe": 4}),
    ],
)
def test_serial_search_answers_as_the_parallel_one(index_type: str, build: dict, search: dict) -> None:
    rng = np.random.default_rng(3)
    base = rng.random((3000, 16), dtype=np.float32)
    queries = rng.random((vector_index.SERIAL_MAX_NQ, 16), dtype=np.float32)
    ix = kindex.create(base, index_type, "L2", build)
    serial = ix.search(queries, 10, search)  # nq ≤ SERIAL_MAX_NQ: one thread
    saved = vector_index.SERIAL_MAX_NQ
    vector_index.SERIAL_MAX_NQ = 0  # every batch through faiss' team
    try:
        parallel = ix.search(queries, 10, search)
    finally:
        vector_index.SERIAL_MAX_NQ = saved
    assert np.array_equal(serial[1], parallel[1])
    assert np.array_equal(serial[0], parallel[0])


def test_a_set_team_size_is_what_a_serial_search_restores() -> None:
    """A process that sets faiss' team size (bench/bench_index.py --threads) keeps it after a
    serial search: the size restored is the one set, not the one at import."""
    saved = faiss.omp_get_max_threads()
    try:
        vector_index.set_threads(1)
        with vector_index._serial_below(1):
            pass
        assert faiss.omp_get_max_threads() == 1
        vector_index.set_threads(3)
        with vector_index._serial_below(1):
            assert faiss.omp_get_max_threads() == 1
        assert faiss.omp_get_max_threads() == 3
    finally:
        vector_index.set_threads(saved)
