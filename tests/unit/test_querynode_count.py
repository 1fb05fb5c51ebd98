"""count(*) on a QueryNode (`kmilvus.querynode.count` through `reduce.retrieve_segments`): each
live primary key once, as a query returns it — without servers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pymilvus.grpc_gen import schema_pb2

from kmilvus.querynode import count, reduce, segments
from kmilvus.querynode.deletes import DeleteSet
from kmilvus.querynode.filter import compile_filter
from kmilvus.querynode.segments import SegmentData
from kmilvus.querynode.versions import KeyVersions

DT = schema_pb2.DataType
PK = 100


def _schema(varchar: bool = False) -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="c")
    s.fields.add(
        fieldID=PK,
        name="id",
        is_primary_key=True,
        data_type=DT.VarChar if varchar else DT.Int64,
        type_params=[{"key": "max_length", "value": "16"}] if varchar else [],
    )
    s.fields.add(fieldID=101, name="age", data_type=DT.Int64)
    return s


def _seg(sid: int, keys, ts, varchar: bool = False) -> SegmentData:
    keys = [str(k) for k in keys] if varchar else list(keys)
    n = len(keys)
    ts = np.broadcast_to(np.asarray(ts, dtype=np.int64), (n,)).copy()
    table = pa.table(
        {
            "0": pa.array(np.arange(n, dtype=np.int64)),
            "1": pa.array(ts),
            str(PK): pa.array(keys, pa.string() if varchar else pa.int64()),
            "101": pa.array(np.arange(n, dtype=np.int64) % 10),
        }
    )
    return SegmentData.build(sid, 1, table, _schema(varchar))


def _count(segments, expr: str = "", deletes=(), mvcc_ts: int = 0, varchar: bool = False) -> int:
    flt = compile_filter(expr, _schema(varchar))
    return reduce.retrieve_segments([(s, deletes) for s in segments], PK, [], flt, 0, mvcc_ts)[1]


def _rows(segments, expr: str = "", deletes=(), varchar: bool = False) -> int:
    flt = compile_filter(expr, _schema(varchar))
    table, matched = reduce.retrieve_segments([(s, deletes) for s in segments], PK, [PK], flt, -1)
    assert table is not None and matched == table.num_rows
    return matched


def test_the_same_rows_in_two_segments_are_counted_once():
    """A compaction's source and target both loaded (what the read path must never do, and
    count(*) must not show), or a handed-off segment with its growing copy."""
    source = _seg(1, range(100), 5)
    target = _seg(2, range(200), 5)  # the source's rows and another's
    assert _count([source, target]) == 200
    assert _rows([source, target]) == 200
    assert _count([source, target], "age == 3") == 20
    gone = DeleteSet()
    gone.add(np.arange(50, dtype=np.int64), np.full(50, 9, dtype=np.int64))
    assert _count([source, target], deletes=(gone,)) == 150


def test_a_key_repeated_in_one_insert_is_counted_once():
    assert _count([_seg(1, [1, 2, 2, 3, 3, 3], 7)]) == 3
    assert _count([_seg(1, [1, 2, 2], 7), _seg(2, [3, 4], 9)]) == 4
    # Split over two segments of one channel (the same timestamp).
    assert _count([_seg(1, [1, 2, 3], 7), _seg(2, [3, 4], 7)]) == 4


def test_varchar_keys():
    segs = [_seg(1, ["a", "b", "b"], 7, varchar=True), _seg(2, ["b", "c"], 7, varchar=True)]
    assert _count(segs, varchar=True) == 3
    assert _rows(segs, varchar=True) == 3


def test_an_older_version_is_hidden_and_counted_once():
    """Versions of a key with different timestamps: the shadow of the newest hides the older
    one (`versions`); with a snapshot between them, the older one counts instead."""
    old, new = _seg(1, range(10), 5), _seg(2, range(5), 9)
    kv = KeyVersions()
    shadows = kv.refresh({1: old, 2: new}, {}, PK)
    assert _count([old, new], deletes=(shadows,)) == 10
    assert _count([old, new], deletes=(shadows,), mvcc_ts=6) == 10
    assert _count([old, new], deletes=(shadows,), mvcc_ts=4) == 0


def test_segments_written_one_after_another_are_summed_as_they_are(monkeypatch):
    """Disjoint in time (a channel's segments, flushed one after another) or in keys: no key
    is looked at — count(*) stays a sum of mask counts."""

    def refuse(segs):
        raise AssertionError("no segment may share a row here")

    monkeypatch.setattr(count, "_twins", refuse)
    segs = [_seg(i, range(100), 10 + i) for i in range(5)]  # the same keys, other timestamps
    segs += [_seg(10 + i, range(1000 + 100 * i, 1100 + 100 * i), 50) for i in range(5)]  # one import
    segs.append(_seg(20, [200, 201, 200], [60, 60, 61]))  # a key written twice into one segment
    shadows = KeyVersions().refresh({s.segment_id: s for s in segs}, {}, PK)
    assert _count(segs, deletes=(shadows,)) == 100 + 500 + 2


def test_segments_that_may_share_rows_are_searched_for_them_once(monkeypatch):
    """An import's segments (one timestamp, keys in any order) may share rows: their twins are
    found once, then each count(*) looks up only those."""
    calls = []
    monkeypatch.setattr(count, "twin_keys", lambda parts: calls.append(1) or segments.twin_keys(parts))
    rng = np.random.default_rng(7)
    keys = rng.permutation(3000)
    segs = [_seg(i, keys[1000 * i : 1000 * (i + 1)], 50) for i in range(3)]
    assert _count(segs) == 3000
    assert _count(segs, "age == 3") == 300
    assert calls == [1]
    segs.append(_seg(9, keys[:10], 50))  # ten rows of the first segment again: a new group
    assert _count(segs) == 3000
    assert calls == [1, 1]


@pytest.mark.parametrize("block", [2, count.BLOCK])
def test_many_segments_are_compared_in_blocks(block, monkeypatch):
    monkeypatch.setattr(count, "BLOCK", block)
    n = 2 * block + 1
    segs = [_seg(i, [i], 1) for i in range(n)]
    segs.append(_seg(n, [0], 1))  # the first segment's row again
    assert _count(segs) == n
