"""How far DataCoord purges each pchannel's stream.

The stream is purged by sequence, one pchannel at a time, never by subject. A purge by subject
moved the consumers that read the pchannel's other subjects on some nats-server versions
(2.9.10 jumped a replaying DataNode to the stream's head), and per-vchannel purges cut holes
into a pchannel's sequence that a reader could not tell from messages it lost.

Below what (`StreamTrimmer.point`): every vchannel's stored checkpoint — a DataNode that takes a
vchannel over resumes there, so no DataNode ever needs less — and, like Milvus, a retention
time instead of asking every reader: a point becomes purgeable only once it has been below the
checkpoints for `retention` seconds. So a QueryNode delegator (which resumes from the stored
checkpoint too, and reads the same messages a little later) misses nothing while it is less
than `retention` behind, or starts its consumer within `retention` after reading the channel's
checkpoint and logs; one further behind gets `StreamGapError` and reloads the channel from
storage, where everything purged already is. The retention also covers a vchannel that is
registered a moment after its first message (the CreateCollection DDL) was published: it holds
the pchannel back (checkpoint 0) from its registration on, and what was published in the
`retention` before that is still there. Holding purges for every live reader instead would let
one stalled reader grow the stream without bound.
"""

from __future__ import annotations

import collections


class StreamTrimmer:
    """Per pchannel, the candidates seen (`observe`) over the last `retention` seconds."""

    def __init__(self, retention: float) -> None:
        self.retention = retention
        self._seen: dict[str, collections.deque[tuple[float, int]]] = {}
        self.purged: dict[str, int] = {}  # pchannel → purged below this seq

    def observe(self, pchannel: str, candidate: int, now: float) -> int:
        """Record that purging `pchannel` below `candidate` is safe for its DataNodes now;
        returns the seq it may be purged below: the least candidate of the last `retention`
        seconds, once it has been watched that long (0 before: nothing)."""
        seen = self._seen.setdefault(pchannel, collections.deque())
        seen.append((now, candidate))
        start = now - self.retention
        while len(seen) >= 2 and seen[1][0] <= start:
            seen.popleft()  # the newest sample at or before the window's start stands for it
        if seen[0][0] > start:
            return 0
        return min(c for _, c in seen)

    def due(self, pchannel: str, point: int) -> bool:
        """Whether a purge below `point` removes anything not purged yet."""
        return point > self.purged.get(pchannel, 1)

    def done(self, pchannel: str, point: int) -> None:
        self.purged[pchannel] = max(point, self.purged.get(pchannel, 1))
