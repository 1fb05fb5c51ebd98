"""A QueryCoord whose segment feed is behind two compactions in a row never makes a QueryNode
drop rows it serves: the first compaction's target is compacted again and collected (its meta
and files gone) before its "Flushed" event is handled, so loading it as the event says would
install an empty segment in place of its sources; and its sources' "Dropped" events no longer
lead to a target. Strong reads must keep answering every live row until the segment that holds
them now (the second target) is loaded — here it cannot be, as storage is away.

Found by chaos (a 2-core machine under load, QueryCoord's feed ~10 s behind, storage away):
three Strong queries within 3 s missed 26–32 of 35 live keys."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from kmilvus.util import failpoint
from tests.system.test_delete import _coll_id, _compact, _count, _loaded_in_four_segments, _rows, _segments
from tests.util import wait_until

NAME = "behind"


@contextlib.contextmanager
def _storage_away(root: Path) -> Iterator[None]:
    """The local storage root replaced by a file (as chaos' storage outage): every read and
    write of a file fails until the block ends."""
    aside = root.with_name(root.name + "-aside")
    root.rename(aside)
    root.write_text("storage is away")
    try:
        yield
    finally:
        root.unlink()
        aside.rename(root)


class _LoadsSeen:
    """Which segments QueryNode.LoadSegments was asked for (an observer: the call goes on)."""

    def __init__(self, qn) -> None:
        self.segments: set[int] = set()
        self._lock = threading.Lock()
        inner = qn.LoadSegments

        async def spy(req, context=None):
            with self._lock:
                self.segments.update(s.segmentID for s in req.segments)
            return await inner(req, context)

        qn.LoadSegments = spy


def test_reads_stay_whole_while_the_feed_is_behind_two_compactions(node, client, tmp_path):
    _loaded_in_four_segments(client, NAME)
    coll = _coll_id(client, NAME)
    qn = node.component("querynode")
    first = {s.id for s in _segments(node, coll)}
    wait_until(lambda: first <= set(qn.collections[coll].sealed), timeout=60, what="the four segments loaded")
    loads = _LoadsSeen(qn)
    go = tmp_path / "feed-go"
    # The feed held, and index builds (whose completion QueryCoord also loads segments for).
    with failpoint.activate(f"querycoord.segment_event=wait({go}),indexnode.build.after_write=wait({go})"):
        _compact(node.uri, NAME)
        t1 = {s.id for s in _segments(node, coll)} - first
        assert len(t1) == 1, "the first compaction made one target"
        client.insert(NAME, _rows(range(400, 500)))
        client.flush(NAME)
        _compact(node.uri, NAME)
        flushed = {s.id: s for s in _segments(node, coll)}
        assert not t1 & set(flushed), "the first target was compacted again"
        t2 = {sid for sid, s in flushed.items() if set(t1) & set(s.info.compaction_from)}
        assert len(t2) == 1
        dc = node.component("datacoord")
        wait_until(lambda: not t1 & set(dc.meta.segments), timeout=60, what="the first target collected")
        assert _count(client, NAME) == 500
        with _storage_away(tmp_path / "storage"):
            go.touch()  # the feed goes on, with every event it held; builds finish
            counts: list[int] = []

            def read_until_the_second_target_is_asked_for() -> bool:
                counts.append(_count(client, NAME))
                return t2 <= loads.segments

            wait_until(read_until_the_second_target_is_asked_for, timeout=60, what="QueryCoord loading the target")
            counts += [_count(client, NAME) for _ in range(20)]
            assert set(counts) == {500}, f"Strong count(*) while the feed caught up: {sorted(set(counts))}"
            got = client.query(NAME, filter="id >= 0", output_fields=["id"], consistency_level="Strong")
            assert sorted(r["id"] for r in got) == list(range(500))

    # Storage back: the second target is loaded, and what it replaced leaves.
    def handed_off() -> bool:
        served = set(qn.collections[coll].sealed)
        return t2 <= served and not (first | t1) & served

    wait_until(handed_off, timeout=60, what="the second target in, what it replaced out")
    assert _count(client, NAME) == 500
