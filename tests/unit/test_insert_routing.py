"""The Insert path's row grouping (rows by shard and partition) and its MutationResult."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus.proxy.insert import all_succeeded, group_rows


@pytest.mark.parametrize(
    "group",
    [
        np.array([2, 0, 1, 0, 2, 2, 1, 0], dtype=np.int64),
        np.random.default_rng(1).integers(0, 8, 10_000),
        np.random.default_rng(2).integers(0, 3 * 70_000, 5_000),  # above uint16: the int64 sort
        np.zeros(5, dtype=np.int64),
        np.array([7], dtype=np.int64),
    ],
)
def test_group_rows_lands_every_row_once_in_order(group):
    order, ranges = group_rows(group)
    assert sorted(order.tolist()) == list(range(len(group)))  # every row exactly once
    assert ranges[0][0] == 0 and ranges[-1][1] == len(group)
    assert all(a < b for a, b in ranges) and all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
    seen = []
    for a, b in ranges:
        rows = order[a:b]
        assert len(set(group[rows].tolist())) == 1  # one group per range
        assert (np.diff(rows) > 0).all()  # rows keep their order within the group
        seen.append(int(group[rows[0]]))
    assert seen == sorted(set(group.tolist()))  # each group once, in key order


def test_group_rows_of_nothing():
    order, ranges = group_rows(np.zeros(0, dtype=np.int64))
    assert len(order) == 0 and ranges == []


@pytest.mark.parametrize("n", [1, 127, 128, 10_000, 20_000])
def test_all_succeeded_matches_a_range(n):
    ids = schema_pb2.IDs()
    ids.int_id.data.extend([5, 6])
    got = all_succeeded(n, IDs=ids, insert_cnt=n, timestamp=42)
    want = milvus_pb2.MutationResult(IDs=ids, insert_cnt=n, timestamp=42, succ_index=range(n))
    assert got == want and got.SerializeToString() == want.SerializeToString()
    assert all_succeeded(n) == milvus_pb2.MutationResult(succ_index=range(n))  # the cached form reused
