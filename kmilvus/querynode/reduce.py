"""Search and retrieve over a set of segments, and the top-k merge shared by QueryNodes and the
Proxy. Results are Arrow tables: "nq" (query index), "score", "pk", then output fields by field ID
(retrieve: also "__ts", the row's timestamp); every step is a numpy/Arrow operation over whole
columns. A primary key is returned once per query: older versions of a key are hidden before
(`versions`), and rows of one key with the same timestamp are merged here (the best hit of a
search; the newest row of a retrieve)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kmilvus.querynode import vector_search
from kmilvus.querynode.filter import Filter
from kmilvus.querynode.segments import SegmentData

_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="segment-search")
POOL_MIN_ROWS = 10_000  # a segment this large is worth searching in another thread


def _output_columns(seg: SegmentData, offsets: np.ndarray, pk_field: int, output_ids: list[int]) -> dict[str, pa.Array]:
    idx = pa.array(offsets, pa.int64())
    pks = seg.int64_pks()
    cols = {"pk": pa.array(pks[offsets]) if pks is not None else seg.table.column(str(pk_field)).take(idx)}
    for fid in output_ids:
        name = str(fid)
        if name not in cols:
            col = seg.column(name, idx)
            if col is not None:
                cols[name] = col
    return cols


TS = "__ts"


def _first_of_each(*cols: np.ndarray) -> np.ndarray:
    """A bool per row: the first row (in the given order) of its combination of `cols`."""
    return ~pd.DataFrame({str(i): c for i, c in enumerate(cols)}).duplicated(keep="first").to_numpy()


def merge_topk(table: pa.Table, k: int, larger: bool) -> pa.Table:
    """The best `k` rows per query of `table` (sorted by query, then best score first), each
    primary key at most once per query."""
    if table.num_rows == 0:
        return table
    nq = table.column("nq").to_numpy()
    score = table.column("score").to_numpy().astype(np.float64)
    order = np.lexsort((-score if larger else score, nq))
    if "pk" in table.column_names:
        pks = table.column("pk").to_numpy(zero_copy_only=False)
        order = order[_first_of_each(nq[order], pks[order])]
    nq_sorted = nq[order]
    starts = np.searchsorted(nq_sorted, nq_sorted, side="left")
    rank = np.arange(len(order)) - starts
    keep = order[rank < k]
    return table.take(pa.array(keep))


def _alive(seg: SegmentData, deletes, flt: Filter) -> np.ndarray | None:
    """Rows the filter keeps and no delete removed (None: all)."""
    keep = flt.mask(seg.table, seg.pk_rows)
    alive = seg.alive(deletes)
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


def search_segments(
    segments: list[tuple[SegmentData, object]],
    queries: np.ndarray,
    k: int,
    metric: str,
    anns_field: int,
    pk_field: int,
    output_ids: list[int],
    flt: Filter,
    radius: float | None = None,
    range_filter: float | None = None,
    params: dict | None = None,
) -> pa.Table:
    """Top-k per query over `segments` (each searched in a thread: faiss and BLAS release the
    GIL): a segment's index when it has one for the field, its raw vectors exactly otherwise."""

    def one(item) -> pa.Table | None:
        seg, deletes = item
        if seg.num_rows == 0:
            return None
        valid = _alive(seg, deletes, flt)
        if valid is not None and not valid.any():
            return None
        index = seg.indexes.get(anns_field)
        if index is not None:
            if radius is not None:
                lims, dd, oo = index.range_search(queries, radius, range_filter, params, valid)
                d, i = _topk_from_ranges(lims, dd, oo, len(queries), k)
            else:
                d, i = index.search(queries, min(k, seg.num_rows), params, valid)
        else:
            base = seg.vectors.get(anns_field)
            if base is None:
                return None
            d, i = vector_search.search(
                base,
                queries,
                k,
                metric,
                valid=valid,
                radius=radius,
                range_filter=range_filter,
                base_sq=seg.sq_norms.get(anns_field),
            )
        hit = i >= 0
        q_idx = np.nonzero(hit)[0].astype(np.int32)
        offs = i[hit]
        cols = {"nq": pa.array(q_idx), "score": pa.array(d[hit].astype(np.float32))}
        cols.update(_output_columns(seg, offs, pk_field, output_ids))
        return pa.table(cols)

    # The largest segment is searched in this (already a worker) thread, and so is every small
    # one (growing data): a hand-over to the pool and back costs more than searching a few
    # thousand rows. Only further large segments run beside it in the pool.
    order = sorted(segments, key=lambda item: -item[0].num_rows)
    rest = [_POOL.submit(one, item) for item in order[1:] if item[0].num_rows >= POOL_MIN_ROWS]
    found = [one(item) for i, item in enumerate(order) if i == 0 or item[0].num_rows < POOL_MIN_ROWS]
    found += [f.result() for f in rest]
    parts = [t for t in found if t is not None]
    if not parts:
        return empty_search_result()
    if len(parts) == 1:  # one segment's hits: already at most k per query, by query, best first
        return parts[0]
    table = pa.concat_tables(parts, promote_options="default")
    return merge_topk(table, k, vector_search.larger_is_closer(metric))


def empty_search_result() -> pa.Table:
    return pa.table({"nq": pa.array([], pa.int32()), "score": pa.array([], pa.float32())})


def newest_rows(table: pa.Table) -> pa.Table:
    """One row per primary key of a retrieve's rows: the newest (by "__ts")."""
    if table.num_rows < 2 or TS not in table.column_names:
        return table
    pks = table.column("pk").to_numpy(zero_copy_only=False)
    ts = table.column(TS).to_numpy()
    order = np.argsort(-ts, kind="stable")
    keep = order[_first_of_each(pks[order])]
    return table if len(keep) == table.num_rows else table.take(pa.array(np.sort(keep)))


def retrieve_segments(
    segments: list[tuple[SegmentData, object]], pk_field: int, output_ids: list[int], flt: Filter, limit: int
) -> tuple[pa.Table | None, int]:
    """(rows matching `flt` with "pk", output fields and "__ts", count of matching rows); with
    `limit` ≥ 0 the rows are the `limit` smallest primary keys (stable pagination, as Milvus)."""
    parts = []
    count = 0
    for seg, deletes in segments:
        if seg.num_rows == 0:
            continue
        m = _alive(seg, deletes, flt)
        offs = np.arange(seg.num_rows) if m is None else np.nonzero(m)[0]
        count += len(offs)
        if len(offs) and (limit != 0 or output_ids):
            cols = _output_columns(seg, offs, pk_field, output_ids)
            cols[TS] = pa.array(seg.keys_and_ts()[1][offs])
            parts.append(pa.table(cols))
    if not parts:
        return None, count
    table = newest_rows(pa.concat_tables(parts, promote_options="default"))
    if limit >= 0 and table.num_rows > limit:
        order = pc.sort_indices(table.column("pk"))
        table = table.take(order.slice(0, limit))
    return table, count


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
