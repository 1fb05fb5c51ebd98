"""Scalar indexes (Milvus' segcore scalar indexes): STL_SORT, INVERTED, Trie and BITMAP, built per
segment over one scalar field and answering the filter evaluator's `==`, `!=`, `<`…`>=`, `in`,
prefix `like` and `array_contains*` without reading the column.

Two columnar layouts, both built with numpy / Arrow kernels (no per-row Python):

- posting lists (STL_SORT, INVERTED, Trie): the field's distinct values sorted (`uniq`) and, for
  each, the rows holding it (`rows[offsets[i]:offsets[i+1]]`, CSR). A term is one binary search
  per value, a range or a prefix is two binary searches and one contiguous slice of `rows`: the
  cost follows the rows matched, not the segment. STL_SORT is Milvus' sorted (value, row) array,
  Trie its sorted string dictionary (marisa): the same structure answers both.
- dictionary codes (BITMAP, low cardinality): `uniq` plus one code per row; a term or a range is a
  lookup table over the codes (one gather per row, no string compared). Array fields keep posting
  lists under BITMAP too (a row holds several values).

Three-valued logic as the scan's (kmilvus/parser/evaluator.py): a null row answers null; a NaN
float equals nothing and compares false (so it matches `!=`). A lookup returns None when its
literal does not fit the index (the evaluator then scans).

The file: MAGIC, a JSON meta (type, params, rows, sections), then each section as one Arrow IPC
stream — what the IndexNode writes under index_files/ and a QueryNode loads.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kmilvus import metrics
from kmilvus.index import fileformat
from kmilvus.index import scalar_params as SP
from kmilvus.index.vector_index import IndexFile

MAGIC = b"KMSIDX1\0"  # kmilvus/index/fileformat.py's envelope
_SECTIONS = ("uniq", "offsets", "rows", "codes", "nulls")


def is_scalar_index_file(data: bytes | memoryview) -> bool:
    return fileformat.has_magic(data, MAGIC)


class _ArrowSeq(Sequence):
    """An Arrow array seen as a Python sequence, so `bisect` runs its binary search over it
    (O(log n) scalar reads; strings compare by code point, which is UTF-8 byte order)."""

    def __init__(self, arr: pa.Array):
        self.arr = arr

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i):
        return self.arr[i].as_py()


def _next_prefix(p: str) -> str | None:
    """The smallest string greater than every string starting with `p` (None: no bound)."""
    while p and p[-1] == "\U0010ffff":
        p = p[:-1]
    return p[:-1] + chr(ord(p[-1]) + 1) if p else None


class ScalarIndex:
    """One segment's index over one scalar field (row offsets 0..num_rows-1, as loaded)."""

    holds_raw = False  # the QueryNode keeps the column: outputs still read it
    scalar = True

    def __init__(
        self,
        index_type: str,
        params: Mapping[str, str],
        num_rows: int,
        uniq: pa.Array,
        offsets: np.ndarray | None,
        rows: np.ndarray | None,
        codes: np.ndarray | None,
        nulls: np.ndarray | None,
        is_array: bool = False,
    ):
        self.index_type = index_type
        self.params = dict(params)
        self._n = num_rows
        self.uniq = uniq
        self.offsets, self.rows, self.codes, self.nulls = offsets, rows, codes, nulls
        self.is_array = is_array
        self.is_string = pa.types.is_string(uniq.type) or pa.types.is_large_string(uniq.type)
        self._np = None if self.is_string else uniq.to_numpy(zero_copy_only=False)
        self._lookups = metrics.SCALAR_INDEX_LOOKUPS.labels(index_type)

    @property
    def num_rows(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        arrays = [a for a in (self.offsets, self.rows, self.codes, self.nulls) if a is not None]
        result: int = self.uniq.nbytes + sum(a.nbytes for a in arrays)
        return result

    @property
    def _lists(self) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, rows): the posting lists, the layout of an index without `codes`."""
        assert self.offsets is not None and self.rows is not None
        return self.offsets, self.rows

    # Positions in `uniq` ------------------------------------------------------------------
    def _search(self, value: Any, side: Literal["left", "right"]) -> int:
        if self._np is not None:
            return int(np.searchsorted(self._np, value, side=side))
        seq = _ArrowSeq(self.uniq)
        return bisect.bisect_left(seq, value) if side == "left" else bisect.bisect_right(seq, value)

    def _fits(self, value: Any) -> bool:
        if self.is_string:
            return isinstance(value, str)
        if isinstance(value, bool):
            result: bool = pa.types.is_boolean(self.uniq.type)
            return result
        return isinstance(value, (int, float)) and not pa.types.is_boolean(self.uniq.type)

    def _positions(self, values: Sequence[Any]) -> np.ndarray:
        """Positions in `uniq` of the values present (sorted, distinct)."""
        if self._np is None:  # strings
            found = pc.index_in(pa.array(list(values), self.uniq.type), value_set=self.uniq)
            pos = found.drop_null().to_numpy(zero_copy_only=False)
        else:
            v = np.asarray(list(values))
            pos = np.searchsorted(self._np, v)
            ok = pos < len(self._np)
            ok[ok] = self._np[pos[ok]] == v[ok]
            pos = pos[ok]
        return np.unique(pos.astype(np.int64))

    # Rows of positions ---------------------------------------------------------------------
    def _mask_range(self, lo: int, hi: int) -> np.ndarray:
        if self.codes is not None:
            hit: np.ndarray = self.codes == lo if hi - lo == 1 else (self.codes >= lo) & (self.codes < hi)
            return hit
        offsets, rows = self._lists
        m = np.zeros(self._n, dtype=bool)
        if hi > lo:
            m[rows[offsets[lo] : offsets[hi]]] = True
        return m

    def _mask_positions(self, pos: np.ndarray) -> np.ndarray:
        if self.codes is not None:
            hit: np.ndarray
            if len(pos) == 1:
                hit = self.codes == pos[0]
                return hit
            lut = np.zeros(len(self.uniq) + 1, dtype=bool)  # the last slot: code -1 (null, NaN)
            lut[pos] = True
            hit = lut[self.codes]
            return hit
        offsets, rows = self._lists
        m = np.zeros(self._n, dtype=bool)
        if len(pos):
            starts, ends = offsets[pos], offsets[pos + 1]
            counts = ends - starts
            at = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
            m[rows[at]] = True
        return m

    def _answer(self, hit: np.ndarray) -> pa.Array:
        self._lookups.inc()
        return pa.array(hit) if self.nulls is None else pa.array(hit, mask=self.nulls)

    # What the evaluator asks (kmilvus/parser/evaluator.py) ----------------------------------
    def equal_any(self, values: Sequence[Any]) -> pa.Array | None:
        """`field in values` (for an Array field: it contains any of them)."""
        if not all(self._fits(v) for v in values):
            return None
        return self._answer(self._mask_positions(self._positions(values)))

    def contains_all(self, values: Sequence[Any]) -> pa.Array | None:
        """`array_contains_all(field, values)`."""
        if not self.is_array or not all(self._fits(v) for v in values):
            return None
        hit = np.ones(self._n, dtype=bool)
        for v in dict.fromkeys(values):
            hit &= self._mask_positions(self._positions([v]))
        return self._answer(hit)

    def _bounds(self, op: str, value: Any) -> tuple[int, int]:
        """The positions in `uniq` of the values `op value` keeps (a contiguous run)."""
        n = len(self.uniq)
        if op == "==":
            return self._search(value, "left"), self._search(value, "right")
        if op in ("<", "<="):
            return 0, self._search(value, "left" if op == "<" else "right")
        return self._search(value, "right" if op == ">" else "left"), n

    def compare(self, op: str, value: Any) -> pa.Array | None:
        """`field op value`, op in == != < <= > >=."""
        if self.is_array or not self._fits(value):
            return None
        if op == "!=":
            return self._answer(~self._mask_range(*self._bounds("==", value)))
        return self._answer(self._mask_range(*self._bounds(op, value)))

    def compare_all(self, terms: Sequence[tuple[str, Any]]) -> pa.Array | None:
        """`field op1 v1 and field op2 v2 ...` (ops == < <= > >=): one run of positions, so a
        range is one slice of postings, not two half-segment masks and-ed."""
        if self.is_array or any(op == "!=" or not self._fits(v) for op, v in terms):
            return None
        lo, hi = 0, len(self.uniq)
        for op, value in terms:
            a, b = self._bounds(op, value)
            lo, hi = max(lo, a), min(hi, b)
        return self._answer(self._mask_range(lo, max(lo, hi)))

    def prefix(self, p: str) -> pa.Array | None:
        """`field like "p%"`."""
        if self.is_array or not self.is_string:
            return None
        upper = _next_prefix(p)
        hi = len(self.uniq) if upper is None else self._search(upper, "left")
        return self._answer(self._mask_range(self._search(p, "left"), hi))

    # File ----------------------------------------------------------------------------------
    def serialize(self) -> IndexFile:
        parts: list[bytes] = []
        sections = []
        arrays = {"uniq": self.uniq, "offsets": self.offsets, "rows": self.rows, "codes": self.codes}
        if self.nulls is not None:
            arrays["nulls"] = self.nulls
        for name in _SECTIONS:
            arr = arrays.get(name)
            if arr is None:
                continue
            blob = _ipc(pa.table({name: arr if isinstance(arr, pa.Array) else pa.array(arr)}))
            parts.append(blob)
            sections.append([name, len(blob)])
        meta = {
            "index_type": self.index_type,
            "params": self.params,
            "num_rows": self._n,
            "is_array": self.is_array,
            "sections": sections,
        }
        data = fileformat.pack(MAGIC, meta) + b"".join(parts)
        return IndexFile(data, self.index_type, "", self.params, 0, self._n)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    result: bytes = sink.getvalue().to_pybytes()
    return result


def load(data: bytes | memoryview) -> ScalarIndex:
    """Deserialize what `build` wrote."""
    meta, buf = fileformat.unpack(data, MAGIC, "scalar index")
    at = 0
    got: dict[str, Any] = {}
    for name, size in meta["sections"]:
        col = pa.ipc.open_stream(pa.py_buffer(bytes(buf[at : at + size]))).read_all().column(name).combine_chunks()
        got[name] = col if name == "uniq" else col.to_numpy(zero_copy_only=False)
        at += size
    return ScalarIndex(
        meta["index_type"],
        meta["params"],
        meta["num_rows"],
        got["uniq"],
        got.get("offsets"),
        got.get("rows"),
        got.get("codes"),
        got.get("nulls"),
        meta["is_array"],
    )


# Build ------------------------------------------------------------------------------------
def _values(column: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray | None, bool]:
    """(indexed values, the row of each, null rows or None, is_array): nulls, NaNs left out;
    an Array field gives one (element, row) pair per element."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(col)
    nulls = None
    if col.null_count:
        nulls = ~np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    is_array = pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
    if is_array:
        rows = pc.list_parent_indices(col).to_numpy(zero_copy_only=False).astype(np.int64)
        values = pc.list_flatten(col)
    else:
        rows = np.arange(n, dtype=np.int64)
        values = col
    if values.null_count:
        keep = pc.is_valid(values)
        rows = rows[keep.to_numpy(zero_copy_only=False)]
        values = values.filter(keep)
    if pa.types.is_floating(values.type):
        keep = pc.invert(pc.is_nan(values))
        rows = rows[keep.to_numpy(zero_copy_only=False)]
        values = values.filter(keep)
    return values, rows, nulls, is_array


def _keys(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(distinct values sorted, each value's position among them)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        enc = pc.dictionary_encode(values)
        dictionary = enc.dictionary
        order = pc.sort_indices(dictionary).to_numpy()
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return dictionary.take(pa.array(order)), rank[enc.indices.to_numpy(zero_copy_only=False)]
    raw = values.to_numpy(zero_copy_only=False)
    if pa.types.is_integer(values.type):
        raw = raw.astype(np.int64, copy=False)
    elif pa.types.is_floating(values.type):
        raw = raw.astype(np.float64, copy=False)
    uniq, inverse = np.unique(raw, return_inverse=True)
    return pa.array(uniq), inverse.astype(np.int64)


def create(column: pa.ChunkedArray | pa.Array, params: Mapping[str, str]) -> ScalarIndex:
    """Build the index `params` names (a FieldIndex's checked params) over one segment's column.
    HYBRID (what AUTOINDEX means for ints and strings) picks BITMAP below its cardinality limit,
    else STL_SORT (numbers) or Trie (strings) — per segment, as Milvus' HybridScalarIndex."""
    values, row_of, nulls, is_array = _values(column)
    n = len(column)
    uniq, keys = _keys(values)
    index_type = params[SP.INDEX_TYPE]
    if index_type == SP.HYBRID:
        limit = int(params.get(SP.BITMAP_CARDINALITY_LIMIT, SP.DEFAULT_BITMAP_CARDINALITY_LIMIT))
        if len(uniq) < limit:
            index_type = SP.BITMAP
        elif is_array:
            index_type = SP.INVERTED
        else:
            index_type = SP.TRIE if pa.types.is_string(uniq.type) else SP.STL_SORT
    offsets = rows = codes = None
    if index_type == SP.BITMAP and not is_array:
        codes = np.full(n, -1, dtype=np.int32)
        codes[row_of] = keys
    else:
        order = np.lexsort((row_of, keys))
        k, r = keys[order], row_of[order]
        if is_array and len(k) > 1:  # a row holding a value twice is one posting
            first = np.ones(len(k), dtype=bool)
            first[1:] = (k[1:] != k[:-1]) | (r[1:] != r[:-1])
            k, r = k[first], r[first]
        offsets = np.searchsorted(k, np.arange(len(uniq) + 1)).astype(np.int64)
        rows = r.astype(np.int32 if n < 2**31 else np.int64)
    return ScalarIndex(index_type, params, n, uniq, offsets, rows, codes, nulls, is_array)


def build(column: pa.ChunkedArray | pa.Array, params: Mapping[str, str]) -> IndexFile:
    """Build and serialize: the bytes an IndexNode writes to object storage."""
    return create(column, params).serialize()


async def abuild(column: pa.ChunkedArray | pa.Array, params: Mapping[str, str]) -> IndexFile:
    return await asyncio.to_thread(build, column, params)
