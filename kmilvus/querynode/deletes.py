"""Deletes as a QueryNode applies them (Milvus' segment delete records): a row is gone when a
delete of its primary key has a timestamp greater than the row's (an upsert's delete and insert
share one timestamp, so the new row stays). Keys are compared in bulk: the deletes are reduced
to one sorted key array with the newest delete timestamp per key, and a segment's keys are
looked up with one searchsorted. Deletes arriving after a reduction are merged into it (a binary
search per new key, one copy of the set), not reduced again from the first one: a read after each
delete costs a copy of the set, not its sort."""

from __future__ import annotations

import numpy as np

from kmilvus.storage import deltalog


class DeleteSet:
    """Deletes known so far (primary keys and timestamps), appended as they arrive."""

    def __init__(self) -> None:
        self._pks: list[np.ndarray] = []
        self._ts: list[np.ndarray] = []
        self.version = 0
        # (sorted unique keys, newest ts each, how many of the first batches they cover): one
        # attribute, so a read in another thread never pairs a reduction with another's count.
        self._reduced: tuple[np.ndarray, np.ndarray, int] | None = None

    def __len__(self) -> int:
        return sum(len(p) for p in self._pks)

    def add(self, pks: np.ndarray, ts: np.ndarray) -> None:
        if len(pks):
            self._pks.append(pks)
            self._ts.append(ts.astype(np.int64, copy=False))
            self.version += 1

    def reduced(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted unique keys, newest delete ts per key)."""
        done = self._reduced
        upto = len(self._pks)
        if done is None or done[2] < upto:
            since = 0 if done is None else done[2]
            if since == upto:
                keys, newest = np.array([], dtype=np.int64), np.array([], dtype=np.int64)
            else:
                keys, newest = _newest_per_key(
                    np.concatenate(self._pks[since:upto]), np.concatenate(self._ts[since:upto])
                )
                if done is not None:
                    keys, newest = _merge_newest((done[0], done[1]), (keys, newest))
            done = self._reduced = (keys, newest, upto)
        return done[0], done[1]

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


def _merge_newest(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Two reductions (sorted unique keys, newest ts each) as one, `b` usually the small one:
    its keys found in `a` keep the newer ts, the others are inserted where they sort — one
    binary search per key of `b` and one copy of `a`, never a sort of both."""
    (ak, at), (bk, bt) = a, b
    if not len(ak) or not len(bk):
        return b if len(bk) else a
    wide = np.promote_types(ak.dtype, bk.dtype)  # VarChar keys: the longer of the two widths
    ak, bk = ak.astype(wide, copy=False), bk.astype(wide, copy=False)
    pos = np.searchsorted(ak, bk)
    found = pos < len(ak)
    found[found] = ak[pos[found]] == bk[found]
    ts = at.copy()  # readers may hold the previous arrays
    hit = pos[found]
    ts[hit] = np.maximum(ts[hit], bt[found])
    new = ~found
    return np.insert(ak, pos[new], bk[new]), np.insert(ts, pos[new], bt[new])


def pk_and_ts(table, pk_field: int) -> tuple[np.ndarray, np.ndarray]:
    """A segment's primary keys (as delete keys compare) and row timestamps."""
    pks = deltalog.pk_numpy(table.column(str(pk_field)))
    ts = table.column("1").to_numpy().astype(np.int64, copy=False)
    return pks, ts
