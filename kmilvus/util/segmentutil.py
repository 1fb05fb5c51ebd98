"""Where a segment's rows live now (Milvus' `internal/util/segmentutil`): a compaction drops its
sources and names them in its target's `compaction_from`; a target compacted again is dropped in
turn. A reader that must find the rows of a segment it learned of earlier — the Proxy deciding
whether an import is visible — follows that chain to the Flushed segment at its end
(docs/architecture/jobs.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kmilvus.proto import internal_pb2
from kmilvus.util.constants import SegmentState


def targets_by_source(segments: Iterable[internal_pb2.SegmentInfo]) -> dict[int, internal_pb2.SegmentInfo]:
    """{source segment ID: the compaction target that named it}, over a collection's Flushed and
    Dropped segments."""
    return {src: t for t in segments for src in t.compaction_from}


def compacted_into(segment_id: int, into: Mapping[int, internal_pb2.SegmentInfo]) -> internal_pb2.SegmentInfo | None:
    """The Flushed segment that holds `segment_id`'s rows after one or more compactions, or None
    when it was not compacted (or dropped for another reason: a partition drop, an import that
    failed). `into`: `targets_by_source` of the collection's segments."""
    seen = {segment_id}
    t = into.get(segment_id)
    while t is not None and t.state == SegmentState.Dropped and t.ID not in seen:
        seen.add(t.ID)
        t = into.get(t.ID)
    return t if t is not None and t.state == SegmentState.Flushed else None
