"""The QueryNode's newest-version index (`kmilvus.querynode.versions`): which rows of a channel
are older versions of a key held again, without servers."""

from __future__ import annotations

import types

import numpy as np
import pyarrow as pa

from kmilvus.querynode import versions
from kmilvus.querynode.versions import KeyVersions, _KeyIndex


def _sealed(keys, ts) -> types.SimpleNamespace:
    keys, ts = np.asarray(keys), np.asarray(ts, dtype=np.int64)
    return types.SimpleNamespace(num_rows=len(keys), keys_and_ts=lambda: (keys, ts))


def _batch(keys, ts) -> pa.RecordBatch:
    return pa.record_batch({"100": pa.array(keys), "1": pa.array(np.asarray(ts, dtype=np.int64))})


def _hidden(kv: KeyVersions, keys, ts) -> list:
    d = kv.shadows.deleted(np.asarray(keys), np.asarray(ts, dtype=np.int64))
    return [] if d is None else sorted(np.asarray(keys)[d].tolist())


def test_older_versions_are_hidden_across_sealed_and_growing_segments():
    kv = KeyVersions()
    sealed = {1: _sealed([1, 2, 3], [10, 10, 10]), 2: _sealed([3, 4], [20, 20])}  # 3 twice, sealed
    growing = {3: [_batch([4, 5], [30, 30])]}  # 4 again, newer, growing
    kv.refresh(sealed, growing, 100)
    assert _hidden(kv, [1, 2, 3, 3, 4, 4, 5], [10, 10, 10, 20, 20, 30, 30]) == [3, 4]
    # A newer batch of a growing segment, an older import: the newest stays visible.
    growing[3].append(_batch([1], [40]))
    sealed[9] = _sealed([5], [5])
    assert kv.stale(sealed, growing)
    kv.refresh(sealed, growing, 100)
    assert _hidden(kv, [1, 1, 5, 5], [10, 40, 30, 5]) == [1, 5]
    assert not kv.stale(sealed, growing)


def test_a_segment_indexed_again_adds_no_shadow():
    """A growing segment handed off to its sealed copy (or sources compacted into a target)
    brings the same rows again: they are no new version."""
    kv = KeyVersions()
    keys = np.arange(1000)
    kv.refresh({}, {7: [_batch(keys, np.full(1000, 5))]}, 100)
    kv.refresh({7: _sealed(keys, np.full(1000, 5))}, {}, 100)
    kv.refresh({8: _sealed(keys, np.full(1000, 5))}, {}, 100)  # compacted: 7 → 8
    assert len(kv.shadows) == 0


def test_varchar_keys():
    kv = KeyVersions()
    kv.refresh({1: _sealed(np.array(["a", "b"]), [1, 1])}, {2: [_batch(["b", "c"], [2, 2])]}, 100)
    assert _hidden(kv, np.array(["a", "b", "b", "c"]), [1, 1, 2, 2]) == ["b"]


def test_the_index_is_rebuilt_once_it_holds_far_more_rows_than_the_channel(monkeypatch):
    monkeypatch.setattr(versions, "REBUILD_SLACK", 10)
    kv = KeyVersions()
    kv.refresh({1: _sealed(np.arange(100), np.ones(100))}, {}, 100)
    kv.refresh({1: _sealed(np.arange(100), np.ones(100)), 2: _sealed([1], [2])}, {}, 100)
    assert _hidden(kv, [1, 1], [1, 2]) == [1]
    kv.refresh({2: _sealed([1], [2]), 3: _sealed([2], [3])}, {}, 100)  # 1 released: 101 rows indexed, 2 live
    assert int((kv._index.newest(np.arange(100)) >= 0).sum()) == 2, "rebuilt from the live rows"
    assert len(kv.shadows) == 0


def test_index_chunks_merge_like_an_lsm_tree_and_answer_exactly():
    """Each batch adds a chunk; chunks merge, so a 1,000-batch channel keeps O(log n) chunks
    and still answers exactly (the newest timestamp of each key)."""
    ix = _KeyIndex()
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 500_000, 200_000)
    ts = np.arange(len(keys), dtype=np.int64)
    for k, t in zip(np.array_split(keys, 1000), np.array_split(ts, 1000), strict=True):
        ix.add(*versions._newest_per_key(k, t)[:2])
    assert len(ix.chunks) <= 2 * int(np.log2(1000)) + 1
    probe = np.arange(500_000)
    want = np.full(len(probe), -1)
    np.maximum.at(want, keys, ts)
    assert np.array_equal(ix.newest(probe), want)


def test_merging_sorted_chunks_does_not_sort_them_from_scratch(monkeypatch):
    """A merge of two sorted chunks is a stable sort of two runs (timsort: linear), never a
    hash or full sort of everything (np.unique / np.union1d / lexsort took seconds for 1M keys
    on this machine)."""
    kinds: list[str] = []
    real_argsort = np.argsort

    def argsort(a, *args, kind=None, **kw):
        kinds.append(kind)
        return real_argsort(a, *args, kind=kind, **kw)

    def forbidden(*_a, **_k):
        raise AssertionError("a full sort of every key")

    monkeypatch.setattr(versions.np, "argsort", argsort)
    monkeypatch.setattr(versions.np, "unique", forbidden)
    monkeypatch.setattr(versions.np, "union1d", forbidden)
    monkeypatch.setattr(versions.np, "lexsort", forbidden)
    kv = KeyVersions()
    for b in range(64):
        kv.refresh({}, {b + 2: [_batch(np.arange(b * 100, b * 100 + 150), np.full(150, b))]}, 100)
    assert kinds and set(kinds) == {"stable"}
    assert len(kv.shadows) > 0
