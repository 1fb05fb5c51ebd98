"""Deletes as a QueryNode applies them (Milvus' segment delete records): a row is gone when a
delete of its primary key has a timestamp greater than the row's (an upsert's delete and insert
share one timestamp, so the new row stays). Keys are compared in bulk: the deletes are reduced
to one sorted key array with the newest delete timestamp per key, and a segment's keys are
looked up with one searchsorted."""

from __future__ import annotations

import numpy as np

from kmilvus.storage import deltalog


class DeleteSet:
    """Deletes known so far (primary keys and timestamps), appended as they arrive."""

    def __init__(self) -> None:
        self._pks: list[np.ndarray] = []
        self._ts: list[np.ndarray] = []
        self.version = 0
        self._reduced: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return sum(len(p) for p in self._pks)

    def add(self, pks: np.ndarray, ts: np.ndarray) -> None:
        if len(pks):
            self._pks.append(pks)
            self._ts.append(ts.astype(np.int64, copy=False))
            self.version += 1
            self._reduced = None

    def reduced(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted unique keys, newest delete ts per key)."""
        if self._reduced is None:
            if not self._pks:
                self._reduced = (np.array([], dtype=np.int64), np.array([], dtype=np.int64))
            else:
                self._reduced = _newest_per_key(np.concatenate(self._pks), np.concatenate(self._ts))
        return self._reduced

    def reduced_as_of(self, mvcc_ts: int) -> tuple[np.ndarray, np.ndarray]:
        """`reduced()` of the deletes at or before `mvcc_ts` (a snapshot read; not cached: only
        snapshot reads, the iterators', ask)."""
        keys, newest = self.reduced()
        if not len(newest) or int(newest.max()) <= mvcc_ts:
            return keys, newest
        pks, ts = np.concatenate(self._pks), np.concatenate(self._ts)
        early = ts <= mvcc_ts
        return _newest_per_key(pks[early], ts[early])

    def deleted(self, pks: np.ndarray, row_ts: np.ndarray, mvcc_ts: int = 0) -> np.ndarray | None:
        """A bool per row: deleted by this set (None when nothing is); with `mvcc_ts`, by its
        deletes at or before that timestamp."""
        keys, newest = self.reduced_as_of(mvcc_ts) if mvcc_ts else self.reduced()
        if len(keys) == 0 or len(pks) == 0:
            return None
        if keys.dtype.kind != pks.dtype.kind:
            return None  # keys of another type cannot match
        idx = np.searchsorted(keys, pks)
        idx[idx == len(keys)] = 0
        hit = (keys[idx] == pks) & (newest[idx] > row_ts)
        return hit if hit.any() else None


def _newest_per_key(pks: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((ts, pks))
    pks, ts = pks[order], ts[order]
    last = np.ones(len(pks), dtype=bool)
    last[:-1] = pks[1:] != pks[:-1]
    return pks[last], ts[last]


def pk_and_ts(table, pk_field: int) -> tuple[np.ndarray, np.ndarray]:
    """A segment's primary keys (as delete keys compare) and row timestamps."""
    pks = deltalog.pk_numpy(table.column(str(pk_field)))
    ts = table.column("1").to_numpy().astype(np.int64, copy=False)
    return pks, ts
