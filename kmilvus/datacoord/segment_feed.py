"""The segment change feed: every change of a segment's meta, pushed to subscribers.

The operator mirrors segments as Kubernetes resources; with the feed it learns of a change when it
happens instead of comparing DataCoord's whole segment map on a timer. `SegmentMeta` publishes
after each committed change; `DataCoord.WatchSegments` streams one subscription (in-process: an
async generator; remotely: a server-streaming RPC). Publishing never blocks the meta writer: a
subscriber more than `maxsize` events behind is cut off (`FeedOverflow`) and must resubscribe and
re-read the segments it cares about.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from kmilvus.proto import data_coord_pb2, internal_pb2


class FeedOverflow(Exception):
    """The subscriber fell too far behind; events were lost."""


class _Subscriber:
    def __init__(self, collection_ids: Iterable[int], maxsize: int):
        self.collections = frozenset(collection_ids)
        self.queue: asyncio.Queue[data_coord_pb2.SegmentEvent] = asyncio.Queue(maxsize)
        self.overflowed = False

    def offer(self, ev: data_coord_pb2.SegmentEvent) -> bool:
        if self.collections and ev.collectionID not in self.collections:
            return True
        try:
            self.queue.put_nowait(ev)
            return True
        except asyncio.QueueFull:
            self.overflowed = True
            return False


class SegmentFeed:
    def __init__(self, maxsize: int = 10_000):
        self.maxsize = maxsize
        self._subs: set[_Subscriber] = set()

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def publish(self, infos: Iterable[internal_pb2.SegmentInfo], *, removed: bool = False) -> None:
        if not self._subs:
            return
        for info in infos:
            ev = data_coord_pb2.SegmentEvent(
                collectionID=info.collectionID, segmentID=info.ID, removed=removed, info=info
            )
            for sub in list(self._subs):
                if not sub.offer(ev):
                    self._subs.discard(sub)  # it gets what is queued, then FeedOverflow

    async def subscribe(self, collection_ids: Iterable[int] = ()) -> AsyncIterator[data_coord_pb2.SegmentEvent]:
        """Events from now on (only for `collection_ids` when given), until the caller stops."""
        sub = _Subscriber(collection_ids, self.maxsize)
        self._subs.add(sub)
        try:
            while True:
                if sub.overflowed and sub.queue.empty():
                    raise FeedOverflow(f"segment feed subscriber fell {self.maxsize} events behind")
                yield await sub.queue.get()
        finally:
            self._subs.discard(sub)
