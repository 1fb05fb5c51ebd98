"""count(*) over a QueryNode's segments: the live primary keys, each counted once — as a query
returns each key once (`kmilvus.reduce.newest_rows`).

An older version of a key is hidden already (`versions`: a shadow delete at its newest version),
so what could count a key twice is one row (key and timestamp) held twice: a key repeated in one
insert or import, or the same rows in two segments. Two segments can hold the same row only
where both their timestamp ranges and their key ranges overlap (`SegmentData.span`). The rows of
the other segments are summed as they are; among the segments that may share rows, the keys held
by more than one row ("twins") are found once and kept until those segments change; each count
then only looks up the twins' rows (a binary search in each segment's sorted keys). A channel's
segments written one after another never overlap in time, and an import's segments share no row
unless its files repeat a key: count(*) stays a sum of mask counts.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from kmilvus.querynode.segments import SegmentData, Span, twin_keys
from kmilvus.storage.deltalog import sorted_unique

BLOCK = 1024  # segments compared with all others at once (memory: BLOCK × segments booleans)


def live_keys(parts: Sequence[tuple[SegmentData, np.ndarray | None]]) -> int:
    """The distinct primary keys of `parts`: each segment with a bool per row, live or not
    (not deleted, visible at the read's timestamp, matching the filter; None: every row)."""
    counts = [seg.num_rows if live is None else int(np.count_nonzero(live)) for seg, live in parts]
    parts = [p for p, n in zip(parts, counts, strict=True) if n]
    total = sum(counts)
    shared = _may_share_rows([s for seg, _ in parts if (s := seg.span()) is not None])
    group = [p for p, s in zip(parts, shared, strict=True) if s]
    if not group:
        return total
    twins = _twins([seg for seg, _ in group])
    if not len(twins):
        return total
    held = []  # the keys of live rows that hold a twin
    for seg, live in group:
        rows = seg.pk_rows(twins)
        if live is not None:
            rows = rows[live[rows]]
        total -= len(rows)
        held.append(seg.keys_and_ts()[0][rows])
    return total + len(sorted_unique(np.concatenate(held)))


def _may_share_rows(spans: list[Span]) -> np.ndarray:
    """A bool per span: a row repeats in it, or another span overlaps it in both timestamps
    and keys."""
    out = np.array([s.repeats for s in spans], dtype=bool)
    n = len(spans)
    if n < 2:
        return out
    t0 = np.array([s.first_ts for s in spans], dtype=np.int64)
    t1 = np.array([s.last_ts for s in spans], dtype=np.int64)
    k0 = np.array([s.min_key for s in spans])
    k1 = np.array([s.max_key for s in spans])
    for i in range(0, n, BLOCK):
        rows = slice(i, min(n, i + BLOCK))
        both = (
            (t0[rows, None] <= t1[None, :])
            & (t0[None, :] <= t1[rows, None])
            & (k0[rows, None] <= k1[None, :])
            & (k0[None, :] <= k1[rows, None])
        )
        own = np.arange(both.shape[0])
        both[own, own + i] = False  # a span overlaps itself
        out[rows] |= both.any(axis=1)
    return out


def _twins(segs: list[SegmentData]) -> np.ndarray:
    """The keys more than one row of `segs` holds with one timestamp — over all their rows,
    live or not —, kept on the first segment until the group is another one."""
    first = segs[0]
    cached = first.twins
    same = cached is not None and len(cached[0]) == len(segs)
    if cached is not None and same and all(r() is s for r, s in zip(cached[0], segs, strict=True)):
        return cached[1]  # the same segment objects (identity: SegmentData has no usable ==)
    twins = twin_keys([seg.keys_and_ts() for seg in segs])
    first.twins = (tuple(weakref.ref(s) for s in segs), twins)
    return twins
