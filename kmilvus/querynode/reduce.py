"""Search and retrieve over a QueryNode's segments, into the result tables of `kmilvus.reduce`.
Every step is a numpy/Arrow operation over whole columns. A primary key is returned once per
query: older versions of a key are hidden before (`versions`), and rows of one key with the same
timestamp are merged by `kmilvus.reduce` (the best hit of a search; the newest row of a
retrieve)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kmilvus.querynode import count, vector_search
from kmilvus.querynode.filter import Filter
from kmilvus.querynode.search_plan import SearchPlan
from kmilvus.querynode.segments import SegmentData
from kmilvus.reduce import TS, empty_search_result, groupby, merge_topk, newest_rows, orderby, topk_rows

_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="segment-search")
POOL_MIN_ROWS = 10_000  # a segment this large is worth searching in another thread
# A search over at most this many rows in all (and a few queries) takes less than a millisecond
# or so: the QueryNode computes it on its event loop rather than hand it to a worker thread.
SMALL_MAX_ROWS = 65_536
SMALL_MAX_NQ = 8


def small(segments: Sequence[tuple[SegmentData, object]], plan: SearchPlan) -> bool:
    """Whether a plain top-k search of `plan` over `segments` is small enough to compute on
    the caller's thread (`SMALL_MAX_ROWS`); group-by, iterator and range searches walk wider."""
    if plan.nq > SMALL_MAX_NQ or plan.group is not None or plan.bound is not None or plan.radius is not None:
        return False
    return sum(seg.num_rows for seg, _ in segments) <= SMALL_MAX_ROWS


def _pk_array(seg: SegmentData, offsets: np.ndarray, pk_field: int) -> pa.Array:
    """The primary keys of rows `offsets` (Int64 keys from the segment's numpy copy)."""
    ints = seg.int64_pks()
    if ints is not None:
        return pa.array(ints[offsets])
    return seg.table.column(str(pk_field)).take(pa.array(offsets, pa.int64()))


def _output_columns(seg: SegmentData, offsets: np.ndarray, pk_field: int, output_ids: list[int]) -> dict[str, pa.Array]:
    idx = pa.array(offsets, pa.int64())
    cols = {"pk": _pk_array(seg, offsets, pk_field)}
    for fid in output_ids:
        name = str(fid)
        if name not in cols:
            col = seg.column(name, idx)
            if col is not None:
                cols[name] = col
    return cols


def _alive(seg: SegmentData, deletes, flt: Filter, mvcc_ts: int = 0) -> np.ndarray | None:
    """Rows the filter keeps and no delete removed (None: all); with `mvcc_ts`, as of that
    timestamp (later rows invisible, later deletes not applied)."""
    keep = flt.mask(seg.table, seg.pk_rows, seg.scalar_indexes)
    alive = seg.alive_at(deletes, mvcc_ts) if mvcc_ts else seg.alive(deletes)
    if alive is None:
        return keep
    return alive if keep is None else keep & alive


def _topk_from_ranges(lims: np.ndarray, d: np.ndarray, o: np.ndarray, nq: int, k: int):
    """A range search's hits (best first per query) as the (nq, k) form of a top-k search."""
    out_d = np.full((nq, k), np.nan, dtype=np.float32)
    out_i = np.full((nq, k), -1, dtype=np.int64)
    qid = np.repeat(np.arange(nq), np.diff(lims))
    rank = np.arange(len(o)) - lims[qid]
    keep = rank < k
    out_d[qid[keep], rank[keep]] = d[keep]
    out_i[qid[keep], rank[keep]] = o[keep]
    return out_d, out_i


def _segment_topk(seg: SegmentData, plan: SearchPlan, valid: np.ndarray | None, k: int):
    """(distances, offsets) nq × k, best first, -1 where no row: through the segment's index of
    the field when it has one, its raw vectors exactly otherwise (None: no such vectors). `k`
    may exceed the plan's topk (group-by): the index then searches wider. An iterator page
    searches every stored vector (`VectorIndex.exhaustive`): a row an approximate search missed
    before the page's bound would never come back. Binary and sparse vectors without an index
    are searched through an exact kmilvus.index index over them (`SegmentData.index_for`)."""
    index = seg.index_for(plan.anns_field, plan.metric)
    if index is not None:
        # BM25: the document side of the score (kmilvus/querynode/bm25.py) as the index's hook.
        hook = {} if plan.scorer is None else {"scorer": plan.scorer}
        if plan.radius is not None:
            lims, dd, oo = index.range_search(plan.queries, plan.radius, plan.range_filter, plan.params, valid, **hook)
            return _topk_from_ranges(lims, dd, oo, plan.nq, k)
        k = min(k, seg.num_rows)
        if plan.iterating:
            return index.exhaustive(plan.queries, k, valid, **hook)
        if k > plan.topk:
            return index.candidates(plan.queries, k, plan.topk, plan.params, valid, **hook)
        return index.search(plan.queries, k, plan.params, valid, **hook)
    base = seg.vectors.get(plan.anns_field)
    if base is None:
        return None
    # Dense: binary and sparse vectors are always searched through an index (`index_for`).
    assert isinstance(plan.queries, np.ndarray)
    return vector_search.search(
        base,
        plan.queries,
        k,
        plan.metric,
        valid=valid,
        radius=plan.radius,
        range_filter=plan.range_filter,
        base_sq=seg.sq_norms.get(plan.anns_field),
    )


def _excluded(seg: SegmentData, plan: SearchPlan, valid: np.ndarray | None) -> np.ndarray | None:
    """`valid` without the rows an iterator page must not repeat (primary keys at its bound)."""
    if plan.bound is None or not len(plan.bound.excluded):
        return valid
    keys = plan.bound.excluded
    if keys.dtype.kind in "iu" and seg.int64_pks() is not None:
        hit = np.zeros(seg.num_rows, dtype=bool)
        hit[seg.pk_rows(keys)] = True
    else:
        col = seg.table.column(str(plan.pk_field))
        hit = np.asarray(pc.is_in(col, value_set=pa.array(keys.tolist(), col.type)).to_numpy(zero_copy_only=False))
    mask = ~hit
    return mask if valid is None else valid & mask


def _grow(k: int, limit: int) -> int:
    return min(limit, max(k * 4, k + 1))


def _past_bound(seg: SegmentData, plan: SearchPlan, valid: np.ndarray | None, n: int):
    """An iterator page: the best `topk` rows not closer than the page's bound. Candidates are
    fetched best first in growing batches until enough lie past the bound (or none are left)."""
    assert plan.bound is not None
    floor = plan.bound.closeness_floor(plan.larger_is_closer)
    k = min(n, max(plan.topk * 2, 16))
    while True:
        got = _segment_topk(seg, plan, valid, k)
        if got is None:
            return None
        d, i = got
        ok = (i >= 0) & ((d <= floor) if plan.larger_is_closer else (d >= floor))
        if k >= n or bool((ok.sum(axis=1) >= plan.topk).all()):
            break
        k = _grow(k, n)
    # keep the qualifying candidates, packed to the left (order preserved)
    rank = np.cumsum(ok, axis=1) - 1
    out_d = np.full((plan.nq, plan.topk), np.nan, dtype=np.float32)
    out_i = np.full((plan.nq, plan.topk), -1, dtype=np.int64)
    take = ok & (rank < plan.topk)
    rows = np.nonzero(take)
    out_d[rows[0], rank[take]] = d[take]
    out_i[rows[0], rank[take]] = i[take]
    return out_d, out_i


def _grouped(seg: SegmentData, plan: SearchPlan, valid: np.ndarray | None, n: int):
    """Group-by over one segment (`groupby.select_in_segment`): candidates are fetched best first
    in growing batches until every query's walk stops or the segment is exhausted. Returns
    (distances, offsets) with the rows not kept set to -1, and the group values' column."""
    assert plan.group is not None
    col = seg.table.column(str(plan.group.field_id))
    k = min(n, max(plan.topk * plan.group.size, plan.topk))
    while True:
        got = _segment_topk(seg, plan, valid, k)
        if got is None:
            return None
        d, i = got
        slot = i >= 0
        taken = col.take(pa.array(np.where(slot, i, 0).ravel()))
        code, ngroups = groupby.codes(taken)
        kept, done = groupby.select_in_segment(
            i, code.reshape(i.shape), ngroups, plan.topk, plan.group.size, plan.group.strict
        )
        if k >= n or bool(done.all()):
            break
        k = _grow(k, n)
    return d, np.where(kept, i, -1)


@dataclass
class _Hits:
    """One segment's hits, before any column is built: query index, score and row offset of
    each, queries in order and best first within each."""

    seg: SegmentData
    nq: np.ndarray  # int32
    score: np.ndarray  # float32
    offsets: np.ndarray  # int64

    def pks(self) -> np.ndarray:
        """The hits' primary keys as numpy (what the merge compares): Int64 keys straight from
        the segment's numpy copy, with no Arrow array made and read back."""
        ints = self.seg.int64_pks()
        if ints is not None:
            found: np.ndarray = ints[self.offsets]
            return found
        keys: np.ndarray = _pk_array(self.seg, self.offsets, self.seg.pk_field).to_numpy(zero_copy_only=False)
        return keys

    def table(self, plan: SearchPlan, rows: np.ndarray | None = None) -> pa.Table:
        """The hits (`rows` of them: positions, in their order) as a result table: "nq",
        "score", "pk", the group value for a group-by search, then output fields by ID."""
        nq, score, offs = (self.nq, self.score, self.offsets)
        if rows is not None:
            nq, score, offs = nq[rows], score[rows], offs[rows]
        cols = {"nq": pa.array(nq), "score": pa.array(score)}
        cols.update(_output_columns(self.seg, offs, plan.pk_field, plan.output_ids))
        if plan.group is not None:
            cols[groupby.GROUP] = self.seg.table.column(str(plan.group.field_id)).take(pa.array(offs, pa.int64()))
        return pa.Table.from_arrays(list(cols.values()), names=list(cols))


def _segment_hits(seg: SegmentData, deletes, plan: SearchPlan) -> _Hits | None:
    """One segment's hits for the plan (None: none)."""
    if seg.num_rows == 0:
        return None
    valid = _excluded(seg, plan, _alive(seg, deletes, plan.filter, plan.mvcc_ts))
    if valid is not None and not valid.any():
        return None
    n = seg.num_rows if valid is None else int(valid.sum())
    if plan.group is not None:
        got = _grouped(seg, plan, valid, n)
    elif plan.bound is not None:
        got = _past_bound(seg, plan, valid, n)
    else:
        got = _segment_topk(seg, plan, valid, plan.topk)
    if got is None:
        return None
    d, i = got
    hit = i >= 0
    return _Hits(seg, np.nonzero(hit)[0].astype(np.int32), d[hit].astype(np.float32, copy=False), i[hit])


def merge_search(table: pa.Table, plan: SearchPlan) -> pa.Table:
    """Hits of several segments (or nodes) reduced to the plan's answer: top-k per query, or the
    reduce by group."""
    if plan.group is not None:
        return groupby.merge_groups(table, plan.topk, plan.group.size, plan.larger_is_closer)
    return merge_topk(table, plan.topk, plan.larger_is_closer)


def _merge_hits(found: list[_Hits], plan: SearchPlan) -> pa.Table:
    """The top-k merge of several segments' hits (`kmilvus.reduce.topk_rows`) over their
    arrays: columns are built for the kept rows only — without output fields straight from the
    arrays, else each segment's kept rows at once, put back in the merged order."""
    sizes = [len(h.offsets) for h in found]
    pks = np.concatenate([h.pks() for h in found])
    nq = np.concatenate([h.nq for h in found])
    score = np.concatenate([h.score for h in found])
    keep = topk_rows(nq, score.astype(np.float64), pks, plan.topk, plan.larger_is_closer)
    if not plan.output_ids:
        pk_type = found[0].seg.table.schema.field(str(plan.pk_field)).type
        cols = [pa.array(nq[keep]), pa.array(score[keep]), pa.array(pks[keep], pk_type)]
        return pa.Table.from_arrays(cols, names=["nq", "score", "pk"])
    owner = np.repeat(np.arange(len(found)), sizes)[keep]
    starts = np.cumsum([0, *sizes[:-1]])
    by_seg = np.argsort(owner, kind="stable")  # the kept rows grouped by segment, in order
    used = np.unique(owner).tolist()
    if len(used) <= 1:  # the kept rows (if any) are one segment's, in order
        j = used[0] if used else 0
        return found[j].table(plan, keep - starts[j])
    parts = [found[j].table(plan, keep[by_seg][owner[by_seg] == j] - starts[j]) for j in used]
    back = np.empty_like(by_seg)
    back[by_seg] = np.arange(len(by_seg))
    return pa.concat_tables(parts, promote_options="default").take(pa.array(back))


def search_segments(segments: Sequence[tuple[SegmentData, object]], plan: SearchPlan) -> pa.Table:
    """The plan's answer over `segments`: a segment's index when it has one for the field, its
    raw vectors exactly otherwise. Runs in the caller's thread (a worker, or the QueryNode's
    loop for a small search); further large segments are searched beside it in a pool (faiss
    and BLAS release the GIL)."""

    def one(item) -> _Hits | None:
        return _segment_hits(item[0], item[1], plan)

    # The largest segment is searched in the calling thread (a worker, or the event loop for a
    # small search: QueryNode._compute), and so is every small one (growing data): a hand-over
    # to the pool and back costs more than searching a few thousand rows. Only further large
    # segments run beside it in the pool.
    order = sorted(segments, key=lambda item: -item[0].num_rows)
    rest = [_POOL.submit(one, item) for item in order[1:] if item[0].num_rows >= POOL_MIN_ROWS]
    found = [one(item) for i, item in enumerate(order) if i == 0 or item[0].num_rows < POOL_MIN_ROWS]
    found += [f.result() for f in rest]
    hits = [h for h in found if h is not None]
    if not hits:
        return empty_search_result()
    if len(hits) == 1 and plan.group is None:  # one segment's hits: at most k per query, best first
        return hits[0].table(plan)
    if plan.group is None:
        return _merge_hits(hits, plan)
    return merge_search(pa.concat_tables([h.table(plan) for h in hits], promote_options="default"), plan)


def retrieve_segments(
    segments: Sequence[tuple[SegmentData, object]],
    pk_field: int,
    output_ids: list[int],
    flt: Filter,
    limit: int,
    mvcc_ts: int = 0,
    order_by: list[orderby.OrderByField] | None = None,
) -> tuple[pa.Table | None, int]:
    """(rows matching `flt` with "pk", output fields and "__ts", how many primary keys match);
    with `limit` ≥ 0 the rows are the `limit` smallest primary keys (stable pagination, as
    Milvus) — or the first `limit` in `order_by` order (with the order-by columns); with
    `mvcc_ts`, as of that timestamp (a query iterator's snapshot). A key stored in several
    segments is returned once, in its newest version, before any limit applies: a per-segment
    top-`limit` could keep a stale version whose newer one ranks lower. The count counts each
    key once as well; with `limit` 0 and no outputs (count(*)) no row is built for it."""
    parts = []
    live: list[tuple[SegmentData, np.ndarray | None]] = []
    sort_ids = [f.field_id for f in order_by or ()]
    for seg, deletes in segments:
        if seg.num_rows == 0:
            continue
        m = _alive(seg, deletes, flt, mvcc_ts)
        live.append((seg, m))
        if limit == 0 and not output_ids:
            continue  # count(*)
        offs = np.arange(seg.num_rows) if m is None else np.nonzero(m)[0]
        if len(offs):
            cols = _output_columns(seg, offs, pk_field, [*output_ids, *sort_ids])
            cols[TS] = pa.array(seg.keys_and_ts()[1][offs])
            parts.append(pa.table(cols))
    if not parts:
        return None, count.live_keys(live)
    table = newest_rows(pa.concat_tables(parts, promote_options="default"))
    matched = table.num_rows
    if order_by and limit >= 0:
        table = table.take(orderby.sort_indices(table, order_by, limit))
    elif limit >= 0 and table.num_rows > limit:
        order = pc.sort_indices(table.column("pk"))
        table = table.take(order.slice(0, limit))
    return table, matched
