"""bench/ops_model.py: what acknowledged and ambiguous operations permit, and how the rows
found are judged against it (the chaos and load benchmarks' invariant check)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from ops_model import (
    ACK,
    DELETED,
    DROPPED,
    FAIL,
    LIVE,
    MAYBE,
    UNKNOWN,
    Journal,
    compare,
    read_journal,
    replay,
    row_values,
)

BASE = 10**13


def ops(*records):
    """(begin, end) pairs from compact tuples (n, op, outcome, fields[, end fields])."""
    return [
        ({"n": r[0], "op": r[1], "lineage": "c", **r[3]}, {"n": r[0], "end": r[2], **(r[4] if len(r) > 4 else {})})
        for r in records
    ]


def model(*records):
    return replay(ops(*records), {"c": BASE})["c"]


def rows(m, keys_vals):
    keys = np.array([k for k, _ in keys_vals], dtype=np.int64)
    vals = np.array([v for _, v in keys_vals], dtype=np.int64)
    return compare(m, keys, vals, "test")


def test_acknowledged_insert_upsert_delete():
    m = model(
        (1, "insert", ACK, {"part": 0, "start": 0, "count": 4}),
        (2, "upsert", ACK, {"part": 0, "keys": [BASE + 1]}),
        (3, "delete_ids", ACK, {"keys": [BASE + 2]}),
    )
    assert m.state[:4].tolist() == [LIVE, LIVE, DELETED, LIVE]
    v0, v1, v3 = (int(row_values(op, np.array([BASE + k]))[0]) for op, k in ((1, 0), (2, 1), (1, 3)))
    assert rows(m, [(BASE, v0), (BASE + 1, v1), (BASE + 3, v3)]).ok
    v = rows(m, [(BASE, v0), (BASE + 1, v0), (BASE + 2, v0), (BASE + 3, v3), (BASE + 3, v3), (BASE + 9, 0)])
    assert v.wrong_value == [BASE + 1] and v.resurrected == [BASE + 2] and v.duplicated == [BASE + 3]
    assert v.stray == [BASE + 9] and v.lost == []
    assert rows(m, [(BASE, v0)]).lost == [BASE + 1, BASE + 3]


def test_unknown_insert_is_absent_or_once():
    m = model((1, "insert", UNKNOWN, {"part": 0, "start": 0, "count": 2}))
    vals = row_values(1, np.array([BASE, BASE + 1]))
    assert m.state[:2].tolist() == [MAYBE, MAYBE]
    assert rows(m, []).ok and rows(m, [(BASE, int(vals[0]))]).ok
    assert rows(m, [(BASE, int(vals[0])), (BASE, int(vals[0]))]).duplicated == [BASE]
    assert rows(m, [(BASE, 7)]).wrong_value == [BASE]


def test_refused_insert_must_not_be_stored():
    m = model((1, "insert", FAIL, {"part": 0, "start": 0, "count": 1}))
    assert rows(m, [(BASE, int(row_values(1, np.array([BASE]))[0]))]).stray == [BASE]


def test_unknown_upsert_is_old_or_new_never_absent():
    m = model(
        (1, "insert", ACK, {"part": 0, "start": 0, "count": 1}),
        (2, "upsert", UNKNOWN, {"part": 0, "keys": [BASE]}),
    )
    old, new = int(row_values(1, np.array([BASE]))[0]), int(row_values(2, np.array([BASE]))[0])
    assert rows(m, [(BASE, old)]).ok and rows(m, [(BASE, new)]).ok
    assert rows(m, []).lost == [BASE]  # a torn upsert: its delete landed, its insert did not
    assert rows(m, [(BASE, old), (BASE, new)]).duplicated == [BASE]


def test_unknown_delete_then_acknowledged_expression_delete():
    m = model(
        (1, "insert", ACK, {"part": 0, "start": 0, "count": 4}),
        (2, "delete_ids", UNKNOWN, {"keys": [BASE]}),
        # val % 1 == 0 matches every key: the maybe key may now be absent too, the rest must be
        (3, "delete_expr", ACK, {"lo": BASE + 1, "hi": BASE + 3, "mod": 1, "rem": 0}),
    )
    assert m.state[:4].tolist() == [MAYBE, DELETED, DELETED, LIVE]
    v0, v3 = (int(row_values(1, np.array([BASE + k]))[0]) for k in (0, 3))
    assert rows(m, [(BASE + 3, v3)]).ok and rows(m, [(BASE, v0), (BASE + 3, v3)]).ok


def test_expression_delete_takes_only_matching_values():
    m = model(
        (1, "insert", ACK, {"part": 0, "start": 0, "count": 10}),
        (2, "delete_expr", ACK, {"lo": BASE, "hi": BASE + 10, "mod": 2, "rem": 0}),
    )
    vals = row_values(1, np.arange(BASE, BASE + 10))
    assert ((m.state[:10] == DELETED) == (vals % 2 == 0)).all()


def test_unknown_import_is_all_or_nothing():
    m = model((1, "import", UNKNOWN, {"part": 0, "start": 0, "count": 3}))
    vals = row_values(1, np.arange(BASE, BASE + 3))
    assert rows(m, []).ok and rows(m, list(zip(range(BASE, BASE + 3), vals.tolist(), strict=True))).ok
    assert rows(m, [(BASE, int(vals[0]))]).torn_imports == [1]


def test_drops_of_a_partition_and_a_collection():
    m = model(
        (1, "create_collection", ACK, {}, {"collection_id": 7}),
        (2, "insert", ACK, {"part": 1, "start": 0, "count": 2}),
        (3, "insert", ACK, {"part": 2, "start": 2, "count": 2}),
        (4, "insert", UNKNOWN, {"part": 1, "start": 4, "count": 1}),
        (5, "drop_partition", ACK, {"part": 1}),
    )
    assert m.state[:5].tolist() == [DROPPED, DROPPED, LIVE, LIVE, MAYBE]
    assert m.maybe[4] == {None, int(row_values(4, np.array([BASE + 4]))[0])}
    vals = row_values(2, np.array([BASE]))
    assert rows(m, [(BASE, int(vals[0]))]).resurrected == [BASE]
    assert m.current_id == 7
    m.apply({"n": 6, "op": "drop_collection"}, {"n": 6, "end": ACK, "collection_id": 7})
    assert m.state[:5].tolist() == [DROPPED, DROPPED, DROPPED, DROPPED, MAYBE] and m.current_id is None


def test_journal_round_trip_and_a_missing_end_is_unknown(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    n1 = j.begin("insert", "c", part=0, start=0, count=2)
    j.end(n1, ACK)
    j.begin("insert", "c", part=0, start=2, count=2)  # the client died during the call
    j.close()
    recs = read_journal(tmp_path / "j.jsonl")
    assert [e["end"] for _, e in recs] == [ACK, UNKNOWN]
    m = replay(recs, {"c": BASE})["c"]
    assert m.state[:4].tolist() == [LIVE, LIVE, MAYBE, MAYBE]


def test_an_import_resolved_late_counts_only_where_nothing_touched_it():
    recs = ops(
        (1, "import", ACK, {"part": 0, "start": 0, "count": 2}, {"resolved": "Completed"}),
        (2, "import", ACK, {"part": 0, "start": 2, "count": 2}, {"resolved": "Completed"}),
        # while op 2 was still unknown an expression delete covered it: it may have run first
        (3, "delete_expr", ACK, {"lo": BASE + 2, "hi": BASE + 4, "mod": 1, "rem": 0}),
    )
    m = replay(recs, {"c": BASE})["c"]
    assert m.state[:4].tolist() == [LIVE, LIVE, MAYBE, MAYBE]
    assert m.maybe[2] == {None, int(row_values(2, np.array([BASE + 2]))[0])}


def test_the_files_are_read_as_reads_return_them_newest_version_minus_deletes_of_its_partition():
    """bench/ops_check.newest_live: a key stored twice counts once, in its newest version (an
    older one stays hidden even where the newest is deleted); a delete applies to rows of its
    partition (-1: every one) older than it. The chaos checker reads the files this way."""
    from ops_check import newest_live

    pks = np.array([1, 1, 2, 3, 3, 4], np.int64)
    ts = np.array([10, 20, 10, 10, 30, 10], np.int64)
    part = np.array([7, 7, 7, 7, 8, 8], np.int64)
    deletes = [
        (np.array([2], np.int64), np.array([15], np.int64), 7),  # deletes key 2 in partition 7
        (np.array([4], np.int64), np.array([15], np.int64), 7),  # key 4 is in partition 8: stays
        (np.array([3], np.int64), np.array([40], np.int64), 8),  # the newest 3; the older stays hidden
        (np.array([1], np.int64), np.array([15], np.int64), -1),  # older than key 1's newest row
    ]
    keep = newest_live(pks, ts, part, deletes)
    assert keep.tolist() == [False, True, False, False, False, True]
    assert not newest_live(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), deletes).any()
