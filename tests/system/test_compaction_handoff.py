"""A compaction's sources stay served until its target is loaded (Milvus' handoff): otherwise a
Strong read between the swap and the target's load misses every row the compaction moved.

Found by chaos (a QueryNode just killed, storage away: the target's load failed, and Strong
count(*) answered a few thousand rows of 170,000 for seconds)."""

from __future__ import annotations

import time

from kmilvus.util import failpoint
from tests.system.test_delete import _coll_id, _compact, _count, _indexed_and_loaded, _rows, _schema, _segments
from tests.util import wait_until

# How long reads are watched while the target cannot be loaded: QueryCoord handles the swap's
# segment events within milliseconds; this only bounds the observation.
WATCH_SECONDS = 5.0


def test_a_compactions_sources_are_served_until_its_target_is_loaded(node, client, tmp_path):
    ok = tmp_path / "ok"
    client.create_collection("handoff", schema=_schema())
    coll = _coll_id(client, "handoff")
    _indexed_and_loaded(client, "handoff")
    for start in range(0, 400, 100):
        client.insert("handoff", _rows(range(start, start + 100)))
        client.flush("handoff")
    sources = {s.id for s in _segments(node, coll)}
    assert len(sources) == 4 and _count(client, "handoff") == 400
    qn = node.component("querynode")
    failpoint.enable("querynode.load_segments", f"fail({ok})")  # no segment loads until `ok`
    try:
        _compact(node.uri, "handoff")
        targets = {s.id for s in _segments(node, coll)} - sources
        assert targets, "the compaction swapped its sources for a target"
        counts = []
        deadline = time.monotonic() + WATCH_SECONDS
        while time.monotonic() < deadline:
            counts.append(_count(client, "handoff"))
        assert set(counts) == {400}, f"Strong count(*) while the target cannot be loaded: {sorted(set(counts))}"
        assert not targets & set(qn.collections[coll].sealed), "the target was loaded despite the failpoint"
    finally:
        ok.touch()
        failpoint.disable("querynode.load_segments")
    wait_until(lambda: targets <= set(qn.collections[coll].sealed), timeout=60, what="the target loaded")
    assert not sources & set(qn.collections[coll].sealed), "the sources left once the target is in"
    assert _count(client, "handoff") == 400
