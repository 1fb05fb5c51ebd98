"""The reduce of search and query results that QueryNodes and the Proxy share (Milvus'
internal/util/reduce): here the result tables, their wire form and top-k merge; the reduce by
group in `groupby`, ORDER BY in `orderby`. It imports no component.

A result is an Arrow table with "nq" (query index), "score", "pk", then output fields by field ID
(a query's rows: also "__ts", the row's timestamp), one Arrow IPC stream on the wire. Every step
is a numpy/Arrow operation over whole columns. A primary key is returned once per query: rows of
one key are merged here (the best hit of a search; the newest row of a query)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

TS = "__ts"


# Up to this many rows, `_first_of_each` sorts (numpy, ~20 us for a search's few dozen hits);
# above, it hashes (pandas: O(n), but ~0.6 ms to set up a DataFrame, more than the search of
# 20k rows it follows).
SORT_MAX_ROWS = 512


def _first_of_each(*cols: np.ndarray) -> np.ndarray:
    """A bool per row: the first row (in the given order) of its combination of `cols`."""
    n = len(cols[0])
    if n > SORT_MAX_ROWS:
        result: np.ndarray = ~pd.DataFrame({str(i): c for i, c in enumerate(cols)}).duplicated(keep="first").to_numpy()
        return result
    # A stable sort by the combination keeps equal rows in their order: the first of each run
    # of equal rows is the first of its combination.
    order = np.lexsort(cols[::-1])
    first = np.ones(n, dtype=bool)
    first[1:] = False
    for c in cols:
        s = c[order]
        first[1:] |= s[1:] != s[:-1]
    keep = np.zeros(n, dtype=bool)
    keep[order[first]] = True
    return keep


def topk_rows(nq: np.ndarray, score: np.ndarray, pks: np.ndarray | None, k: int, larger: bool) -> np.ndarray:
    """Positions of the best `k` rows per query (sorted by query, then best score first), each
    primary key (`pks`; None: no keys to merge) at most once per query: the top-k merge over
    the hits' arrays, before any column of them is built."""
    order = np.lexsort((-score if larger else score, nq))
    if pks is not None:
        order = order[_first_of_each(nq[order], pks[order])]
    nq_sorted = nq[order]
    starts = np.searchsorted(nq_sorted, nq_sorted, side="left")
    rank = np.arange(len(order)) - starts
    kept: np.ndarray = order[rank < k]
    return kept


def merge_topk(table: pa.Table, k: int, larger: bool) -> pa.Table:
    """The best `k` rows per query of `table` (sorted by query, then best score first), each
    primary key at most once per query."""
    if table.num_rows == 0:
        return table
    nq = table.column("nq").to_numpy()
    score = table.column("score").to_numpy().astype(np.float64)
    pks = table.column("pk").to_numpy(zero_copy_only=False) if "pk" in table.column_names else None
    return table.take(pa.array(topk_rows(nq, score, pks, k, larger)))


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


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    result: bytes = sink.getvalue().to_pybytes()
    return result


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
