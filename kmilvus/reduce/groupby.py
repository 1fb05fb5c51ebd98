"""Group-by search (Milvus' search_group_by): hits grouped by a scalar field's value.

Per segment (segcore's GroupIteratorResult): walk the hits best first; a hit joins its group while
the group has fewer than `group_size` hits, and a new group opens while fewer than `topk` groups
exist. The walk stops once `topk` groups exist (every group then has 1..group_size hits), or with
`strict_group_size` once each of them has `group_size` hits; the caller fetches more candidates
until the walk stops or the segment is exhausted.

Across segments and QueryNodes (the reduce by group, as Milvus' proxy does): groups are ordered by
their best hit, each keeps its best `group_size` hits, `offset` skips whole groups and `limit`
counts groups; the result lists a group's hits together.

All of it is numpy over whole result matrices: a group is a dictionary code, a (query, group)
pair one int64 key.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

GROUP = "group"  # the result column holding each hit's group value


def codes(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """(a dense int64 code per value, number of distinct values); null is a value of its own."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    enc = pc.dictionary_encode(values, null_encoding="encode")
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)


def _first_and_rank(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For keys in walk order: (is this the key's first occurrence, occurrence rank of the key)."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.searchsorted(sorted_keys, sorted_keys, side="left")
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - starts
    return rank == 0, rank


def _group_ordinal(keys: np.ndarray, is_first: np.ndarray, ordinal_at: np.ndarray) -> np.ndarray:
    """Each candidate's group ordinal: the ordinal at the position where its group opened."""
    _, inverse = np.unique(keys, return_inverse=True)
    first = np.flatnonzero(is_first)
    first_idx = np.zeros(inverse.max() + 1 if len(inverse) else 0, dtype=np.int64)
    first_idx[inverse[first]] = first
    return ordinal_at[first_idx[inverse]]


def select_in_segment(
    offsets: np.ndarray, group_codes: np.ndarray, ngroups: int, topk: int, group_size: int, strict: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One segment's walk over its candidates.

    `offsets` (nq × k, best first, -1 = no row) and `group_codes` (same shape, the code of each
    candidate's group). Returns (kept: bool nq × k, done: bool per query — the walk stopped before
    the candidates ran out, so more candidates cannot change the answer)."""
    nq, k = offsets.shape
    valid = offsets >= 0
    qidx = np.repeat(np.arange(nq, dtype=np.int64), k).reshape(nq, k)
    keys = np.where(valid, qidx * max(ngroups, 1) + group_codes, -1).ravel()
    is_first, rank = _first_and_rank(keys)
    is_first &= keys >= 0
    opened = np.cumsum(is_first.reshape(nq, k), axis=1)  # groups opened so far in the query
    ordinal = _group_ordinal(keys, is_first, (opened - 1).ravel()).reshape(nq, k)
    is_first = is_first.reshape(nq, k)
    rank = rank.reshape(nq, k)
    kept = valid & (ordinal < topk) & (rank < group_size)
    # Where the walk stops (segcore's IsGroupResEnough), per query.
    pos = np.broadcast_to(np.arange(k), (nq, k))
    groups = opened[:, -1] if k else np.zeros(nq, dtype=np.int64)
    if not strict:
        # the position where the topk-th group opens
        opening = np.where(is_first & (opened == topk), pos, k)
        stop = opening.min(axis=1) if k else np.zeros(nq, dtype=np.int64)
        done = groups >= topk
    else:
        full = kept & (rank == group_size - 1)  # a selected group reaches group_size here
        nfull = full.sum(axis=1)
        done = (groups >= topk) & (nfull >= topk)
        stop = np.where(full, pos, -1).max(axis=1) if k else np.zeros(nq, dtype=np.int64)
        stop = np.where(done, stop, k)
    kept &= pos <= stop[:, None]
    return kept, done


def merge_groups(table: pa.Table, limit: int, group_size: int, larger: bool, offset: int = 0) -> pa.Table:
    """The reduce by group of hits from several segments or nodes (columns "nq", "score",
    GROUP, ...): per query, groups ordered by their best hit; groups [offset, offset + limit)
    with each group's best `group_size` hits; the rows of a group together, best first."""
    if table.num_rows == 0:
        return table
    nq = table.column("nq").to_numpy().astype(np.int64)
    score = table.column("score").to_numpy().astype(np.float64)
    walk = np.lexsort((-score if larger else score, nq))  # per query, best first
    code, ngroups = codes(table.column(GROUP))
    keys = nq[walk] * max(ngroups, 1) + code[walk]
    is_first, rank = _first_and_rank(keys)
    # ordinal of the group within its query: groups opened before it in this query
    opened = np.cumsum(is_first)
    q = nq[walk]
    query_start = np.searchsorted(q, q, side="left")
    before = np.where(query_start > 0, opened[np.maximum(query_start - 1, 0)], 0)
    ordinal_at = opened - before - 1
    ordinal = _group_ordinal(keys, is_first, ordinal_at)
    keep = (ordinal >= offset) & (ordinal < offset + limit) & (rank < group_size)
    pos = np.arange(len(walk))
    sel = np.flatnonzero(keep)
    order = sel[np.lexsort((pos[sel], ordinal[sel], q[sel]))]
    return table.take(pa.array(walk[order]))
