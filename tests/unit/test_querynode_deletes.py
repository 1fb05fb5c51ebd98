"""A QueryNode's delete set (kmilvus/querynode/deletes.py): deletes arriving between reads are
merged into the reduction the last read made, and every read sees exactly what reducing all the
deletes at once gives — Int64 and VarChar keys, keys deleted again with an older or a newer
timestamp, reads between any two batches."""

from __future__ import annotations

import numpy as np
import pytest

from kmilvus.querynode.deletes import DeleteSet, _newest_per_key


@pytest.mark.parametrize("kind", ["int", "str"])
def test_reads_between_batches_see_what_one_reduction_of_all_gives(kind):
    rng = np.random.default_rng(3)
    deletes = DeleteSet()
    all_pks, all_ts = [], []
    for _ in range(60):
        n = int(rng.integers(0, 50))
        pks = rng.integers(0, 300, size=n)  # keys repeat across batches
        pks = pks.astype(str) if kind == "str" else pks.astype(np.int64)
        ts = rng.integers(1, 10_000, size=n).astype(np.int64)  # older and newer than before
        deletes.add(pks, ts)
        all_pks.append(pks)
        all_ts.append(ts)
        if rng.random() < 0.5:  # a read now and then
            keys, newest = deletes.reduced()
            want_keys, want_ts = _newest_per_key(np.concatenate(all_pks), np.concatenate(all_ts))
            assert keys.tolist() == want_keys.tolist() and newest.tolist() == want_ts.tolist()
    rows = np.unique(np.concatenate(all_pks))
    hit = deletes.deleted(rows, np.full(len(rows), 5_000, dtype=np.int64))
    want_keys, want_ts = _newest_per_key(np.concatenate(all_pks), np.concatenate(all_ts))
    assert hit is not None and hit.tolist() == (want_ts > 5_000).tolist()


def test_longer_varchar_keys_deleted_later_are_kept_whole():
    deletes = DeleteSet()
    deletes.add(np.array(["a", "c"]), np.array([5, 5]))
    deletes.reduced()
    deletes.add(np.array(["bbbbbbbb", "c"]), np.array([7, 3]))
    keys, newest = deletes.reduced()
    assert keys.tolist() == ["a", "bbbbbbbb", "c"] and newest.tolist() == [5, 7, 5]
