"""Primary-key statistics per segment: which segments of a channel may hold a deleted key.

Milvus keeps a bloom filter and min/max per segment; kmilvus keeps the exact keys (sorted numpy
chunks, merged as they accumulate), so a delete goes to exactly the segments that hold its key
and membership is one vectorised `np.isin` per chunk — no per-key Python. Chunks are merged like
an LSM tree (a chunk with its neighbour once that is at most twice its size), so a key is merged
O(log n) times and there are O(log n) chunks: merging everything every few inserts made each
insert message cost O(segment rows), and a DataNode replaying a large backlog held its event
loop long enough to lose its session. A merge is a linear merge of two sorted runs (a stable
sort is timsort, which finds the runs), never np.union1d: that hashes or sorts both from
scratch (seconds for a segment's keys with numpy 2.4: docs/benchmarks/index.md), on the event
loop the Proxy shares, so unrelated inserts waited behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kmilvus.storage.deltalog import sorted_unique


@dataclass
class PkStats:
    chunks: list[np.ndarray] = field(default_factory=list)
    lo: object = None
    hi: object = None

    def add(self, pks: np.ndarray) -> None:
        if not len(pks):
            return
        keys = sorted_unique(pks)
        self.chunks.append(keys)
        lo, hi = keys[0], keys[-1]
        self.lo = lo if self.lo is None or lo < self.lo else self.lo
        self.hi = hi if self.hi is None or hi > self.hi else self.hi
        chunks = self.chunks
        while len(chunks) > 1 and len(chunks[-2]) <= 2 * len(chunks[-1]):
            newer = chunks.pop()
            chunks[-1] = sorted_unique(np.concatenate((chunks[-1], newer)))

    def contains(self, pks: np.ndarray) -> np.ndarray:
        """Boolean mask: which of `pks` this segment holds."""
        mask = np.zeros(len(pks), dtype=bool)
        if self.lo is None or not len(pks):
            return mask
        in_range = (pks >= self.lo) & (pks <= self.hi)
        if not in_range.any():
            return mask
        cand = pks[in_range]
        hit = np.zeros(len(cand), dtype=bool)
        for c in self.chunks:
            hit |= np.isin(cand, c, assume_unique=False)
        mask[in_range] = hit
        return mask
