"""The newest version of a key (Milvus reads return a primary key once, its latest insert).

A key inserted twice (two inserts, an import and an insert, ...) has two rows with different
timestamps, possibly in different segments of its channel (a key always goes to the channel its
hash names, so its versions are in one delegator's segments). A read must see only the newest:
every older version is hidden exactly as an upsert's delete would hide it. So the delegator
keeps, for the keys its channel holds more than once, the newest row timestamp as a "shadow"
delete (`shadows`, a DeleteSet: a row is hidden when a delete of its key is newer than it); the
rows of the newest version stay. Rows of one key with the SAME timestamp (one request naming a
key twice) are not told apart here; the result merge keeps one (`reduce`).

Kept columnar and incremental: the sorted keys of the channel with the newest timestamp of
each, in chunks merged like an LSM tree (a merge of two sorted chunks is linear). Rows are
looked up as they come (a growing segment's new batches, a sealed segment new to the channel),
by the next read, in its worker thread (`QueryNode` refreshes before it takes the segments).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from kmilvus.querynode.deletes import DeleteSet, pk_and_ts

if TYPE_CHECKING:
    from kmilvus.querynode.segments import SegmentData


def _newest_per_key(pks: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted unique keys, newest ts of each, how many rows each has). A stable sort (timsort)
    merges a concatenation of sorted runs in linear time: merging two chunks re-sorts nothing."""
    if not len(pks):
        return pks, ts.astype(np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(pks, kind="stable")
    pks, ts = pks[order], ts[order].astype(np.int64, copy=False)
    first = np.ones(len(pks), dtype=bool)
    first[1:] = pks[1:] != pks[:-1]
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, len(pks)))
    return pks[starts], np.maximum.reduceat(ts, starts), counts


class _KeyIndex:
    """Sorted unique keys with the newest timestamp of each, in LSM-merged chunks."""

    def __init__(self) -> None:
        self.chunks: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, keys: np.ndarray, newest: np.ndarray) -> None:
        if not len(keys):
            return
        self.chunks.append((keys, newest))
        while len(self.chunks) > 1 and len(self.chunks[-2][0]) <= 2 * len(self.chunks[-1][0]):
            (k2, t2), (k1, t1) = self.chunks.pop(), self.chunks.pop()
            k, t, _ = _newest_per_key(np.concatenate((k1, k2)), np.concatenate((t1, t2)))
            self.chunks.append((k, t))

    def newest(self, keys: np.ndarray) -> np.ndarray:
        """The newest indexed timestamp of each of `keys` (-1: not indexed)."""
        out = np.full(len(keys), -1, dtype=np.int64)
        for k, t in self.chunks:
            if not len(k) or k.dtype.kind != keys.dtype.kind:
                continue
            idx = np.searchsorted(k, keys)
            idx[idx == len(k)] = 0
            hit = k[idx] == keys
            np.maximum(out, np.where(hit, t[idx], -1), out=out)
        return out


REBUILD_SLACK = 100_000  # rows: the index is rebuilt once it holds this many more than twice the live rows


class KeyVersions:
    """One channel's shadows of older versions (see the module docstring)."""

    def __init__(self) -> None:
        self.shadows = DeleteSet()
        self._index = _KeyIndex()
        self._rows = 0  # rows indexed (a segment handed off or compacted is indexed again)
        self._sealed: set[int] = set()  # sealed segments indexed
        self._growing: dict[int, int] = {}  # growing segment → its batches indexed
        self._lock = threading.Lock()  # reads refresh from worker threads

    def stale(self, sealed: dict[int, SegmentData], growing: dict[int, list]) -> bool:
        """Whether `refresh` has anything to do (cheap: no key is looked at)."""
        return not sealed.keys() <= self._sealed or any(
            len(batches) > self._growing.get(seg, 0) for seg, batches in growing.items()
        )

    def refresh(self, sealed: dict[int, SegmentData], growing: dict[int, list], pk_field: int) -> DeleteSet:
        """Bring the shadows up to date with the channel's `sealed` segments and the record
        batches of its `growing` ones ({segment: [batch, ...]}, in arrival order); return them.

        Only rows not indexed yet are looked at: a sealed segment new here, a growing segment's
        new batches. A row indexed again (a segment handed off from growing to sealed, or a
        compaction target) is no new version: it adds no shadow. Rows that left (released,
        compacted away as deleted) stay indexed — a shadow they leave hides only rows a delete
        or the TTL hides anyway — until the index holds far more rows than the channel, when it
        is rebuilt from the live segments. Blocking: run it in a worker thread."""
        with self._lock:
            live = sum(s.num_rows for s in sealed.values()) + sum(b.num_rows for bs in growing.values() for b in bs)
            if self._rows > 2 * live + REBUILD_SLACK:
                self.shadows, self._index, self._rows = DeleteSet(), _KeyIndex(), 0
                self._sealed, self._growing = set(), {}
            self._add([s.keys_and_ts() for sid, s in sealed.items() if sid not in self._sealed])
            self._sealed = set(sealed)
            seen = self._growing
            self._growing = {}
            for seg, batches in growing.items():
                done = seen.get(seg, 0)
                self._add([pk_and_ts(b, pk_field) for b in batches[done:]])
                self._growing[seg] = len(batches)
            return self.shadows

    def _add(self, parts: Iterable[tuple[np.ndarray, np.ndarray]]) -> None:
        parts = [p for p in parts if len(p[0])]
        if not parts:
            return
        keys, newest, counts = _newest_per_key(
            np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        )
        before = self._index.newest(keys)
        # Another version: a key twice among the new rows, or indexed with another timestamp
        # (the same timestamp is the same row again).
        again = (counts > 1) | ((before >= 0) & (before != newest))
        if again.any():
            self.shadows.add(keys[again], np.maximum(newest[again], before[again]))
        self._index.add(keys, np.maximum(newest, before))
        self._rows += int(counts.sum())
