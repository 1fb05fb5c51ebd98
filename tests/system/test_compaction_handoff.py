"""A compaction's sources stay served until its target is loaded (Milvus' handoff): otherwise a
Strong read between the swap and the target's load misses every row the compaction moved.

Found by chaos (a QueryNode just killed, storage away: the target's load failed, and Strong
count(*) answered a few thousand rows of 170,000 for seconds)."""

from __future__ import annotations

import time

from tests.system.test_delete import (
    _coll_id,
    _compact,
    _count,
    _loaded_in_four_segments,
    _segments,
)
from tests.util import segment_loads_failing, wait_until

# How long reads are watched while the target cannot be loaded: QueryCoord handles the swap's
# segment events within milliseconds; this only bounds the observation.
WATCH_SECONDS = 5.0


def test_a_compactions_sources_are_served_until_its_target_is_loaded(node, client):
    _loaded_in_four_segments(client, "handoff")
    coll = _coll_id(client, "handoff")
    sources = {s.id for s in _segments(node, coll)}
    assert len(sources) == 4 and _count(client, "handoff") == 400
    qn = node.component("querynode")
    with segment_loads_failing():
        _compact(node.uri, "handoff")
        targets = {s.id for s in _segments(node, coll)} - sources
        assert targets, "the compaction swapped its sources for a target"
        counts = []
        deadline = time.monotonic() + WATCH_SECONDS
        while time.monotonic() < deadline:
            counts.append(_count(client, "handoff"))
        assert set(counts) == {400}, f"Strong count(*) while the target cannot be loaded: {sorted(set(counts))}"
        assert not targets & set(qn.collections[coll].sealed), "the target was loaded despite the failpoint"
    wait_until(lambda: targets <= set(qn.collections[coll].sealed), timeout=60, what="the target loaded")
    assert not sources & set(qn.collections[coll].sealed), "the sources left once the target is in"
    assert _count(client, "handoff") == 400
