"""kmilvus.reduce's dedup of (query, primary key) rows: the sort it uses for a search's few hits
and the hash it uses for many rows keep exactly the same rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kmilvus import reduce


def _hashed(*cols: np.ndarray) -> np.ndarray:
    saved = reduce.SORT_MAX_ROWS
    reduce.SORT_MAX_ROWS = -1
    try:
        return reduce._first_of_each(*cols)
    finally:
        reduce.SORT_MAX_ROWS = saved


@pytest.mark.parametrize("n", [0, 1, 2, 17, 300, reduce.SORT_MAX_ROWS])
@pytest.mark.parametrize("kind", ["int", "str"])
def test_sorted_and_hashed_keep_the_same_rows(n: int, kind: str) -> None:
    rng = np.random.default_rng(n)
    nq = rng.integers(0, 3, n).astype(np.int32)
    pks = rng.integers(0, max(1, n // 3), n)
    if kind == "str":
        pks = pks.astype(str).astype(object)
    kept = reduce._first_of_each(nq, pks)
    assert kept.dtype == bool and len(kept) == n
    assert np.array_equal(kept, _hashed(nq, pks))
    seen = set()
    for i in range(n):  # the first row of each (query, key), in the given order
        assert kept[i] == ((nq[i], pks[i]) not in seen)
        seen.add((nq[i], pks[i]))


def test_merge_topk_keeps_each_key_once_per_query_best_first() -> None:
    table = pa.table(
        {
            "nq": pa.array([0, 0, 0, 1, 1, 0], pa.int32()),
            "score": pa.array([0.5, 0.1, 0.3, 0.2, 0.2, 0.1], pa.float32()),
            "pk": pa.array([7, 3, 7, 3, 4, 9]),
        }
    )
    merged = reduce.merge_topk(table, 3, larger=False)
    assert merged.column("nq").to_pylist() == [0, 0, 0, 1, 1]
    assert merged.column("pk").to_pylist() == [3, 9, 7, 3, 4]
    assert merged.column("score").to_pylist() == pytest.approx([0.1, 0.1, 0.3, 0.2, 0.2])
