"""JSON paths over a column of JSON texts, column at a time.

Two ways to read a column, picked per column: Arrow's JSON reader (C++, several times faster) when
every row is an object and every key has one type across the column; otherwise orjson, one
`loads` per row mapped in C, then a path step per list comprehension. Both give the same typed
views (`numbers()`, `strings()`, ...): a value of another type than asked, or a missing key, is
null there, so a comparison on it is null and finally false (SQL-like).
"""

from __future__ import annotations

import gc
import itertools
from typing import Protocol

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json


class JsonValues(Protocol):
    """The values at one path of every row."""

    def step(self, key: str | int) -> JsonValues: ...
    def numbers(self) -> pa.Array: ...
    def strings(self) -> pa.Array: ...
    def bools(self) -> pa.Array: ...
    def present(self) -> np.ndarray: ...
    def not_null(self) -> np.ndarray: ...
    def lists(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, JsonValues]: ...


def list_get(arr: pa.Array, index: int) -> pa.Array:
    """`arr[i][index]` per row, null where the list is null or too short (pc.list_element raises)."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    ok = lengths > index
    offsets = arr.offsets.to_numpy()[:-1] - arr.offsets[0].as_py()
    positions = np.where(ok, offsets + index, 0)
    flat = arr.flatten()
    if len(flat) == 0:
        return pa.nulls(len(arr), arr.type.value_type)
    return flat.take(pa.array(positions, mask=~ok))


# -- Arrow's JSON reader ------------------------------------------------------------------------


class _ArrowJson:
    def __init__(self, arr: pa.Array):
        self.arr = arr

    def step(self, key: str | int) -> JsonValues:
        t = self.arr.type
        if isinstance(key, str) and pa.types.is_struct(t) and t.get_field_index(key) >= 0:
            return _ArrowJson(pc.struct_field(self.arr, key))
        if isinstance(key, int) and pa.types.is_list(t):
            return _ArrowJson(list_get(self.arr, key))
        return _ArrowJson(pa.nulls(len(self.arr)))

    def numbers(self) -> pa.Array:
        t = self.arr.type
        if pa.types.is_integer(t):
            return self.arr.cast(pa.int64())
        if pa.types.is_floating(t):
            return self.arr.cast(pa.float64())
        return pa.nulls(len(self.arr), pa.float64())

    def strings(self) -> pa.Array:
        t = self.arr.type
        return self.arr if pa.types.is_string(t) else pa.nulls(len(self.arr), pa.string())

    def bools(self) -> pa.Array:
        return self.arr if pa.types.is_boolean(self.arr.type) else pa.nulls(len(self.arr), pa.bool_())

    def present(self) -> np.ndarray:
        # Arrow reads a JSON null as null, like a missing key: `exists` reads with orjson.
        return self.not_null()

    def not_null(self) -> np.ndarray:
        result: np.ndarray = pc.is_valid(self.arr).to_numpy(zero_copy_only=False)
        return result

    def lists(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, JsonValues]:
        n = len(self.arr)
        if not pa.types.is_list(self.arr.type):
            return np.zeros(n, bool), np.zeros(n, np.int64), np.zeros(0, np.int64), _ArrowJson(pa.nulls(0))
        is_list = self.not_null()
        lengths = pc.fill_null(pc.list_value_length(self.arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        parents = pc.list_parent_indices(self.arr).to_numpy(zero_copy_only=False)
        return is_list, lengths, parents, _ArrowJson(pc.list_flatten(self.arr))


def _read_arrow(col: pa.Array) -> JsonValues | None:
    """The column through Arrow's JSON reader, or None when it cannot take it (then use orjson)."""
    n = len(col)
    if n == 0:
        return None
    text = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), col), b"\n")[0].as_buffer()
    if np.count_nonzero(np.frombuffer(text, dtype=np.uint8) == ord("\n")) != n - 1:
        return None  # a value with a raw newline in it: rows would not line up
    try:
        table = pa_json.read_json(pa.BufferReader(text))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != n:
        return None
    return _ArrowJson(table.to_struct_array().combine_chunks())


# -- orjson ------------------------------------------------------------------------------------


class _Missing:
    """A key the row does not have (unlike a JSON null, which it has)."""


_MISSING = _Missing()
_NULL, _BOOL, _INT, _FLOAT, _STR, _LIST, _OBJ, _ABSENT = range(8)
_CODES = {
    type(None): _NULL,
    bool: _BOOL,
    int: _INT,
    float: _FLOAT,
    str: _STR,
    list: _LIST,
    dict: _OBJ,
    _Missing: _ABSENT,
}


_NONE = np.array(None, dtype=object)  # np.where's "else" (numpy's stubs take no bare None)


class _ObjJson:
    def __init__(self, values: list):
        self.n = len(values)
        self.values = values
        self.objs = np.fromiter(values, dtype=object, count=self.n)
        self.codes = np.fromiter(map(_CODES.__getitem__, map(type, values)), dtype=np.int8, count=self.n)

    def step(self, key: str | int) -> JsonValues:
        if isinstance(key, str):
            return _ObjJson([o.get(key, _MISSING) if o.__class__ is dict else _MISSING for o in self.values])
        return _ObjJson([o[key] if o.__class__ is list and len(o) > key else _MISSING for o in self.values])

    def _typed(self, mask: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
        return pa.array(np.where(mask, self.objs, _NONE), type=arrow_type, from_pandas=True)

    def numbers(self) -> pa.Array:
        if not (self.codes == _FLOAT).any():
            try:
                return self._typed(self.codes == _INT, pa.int64())
            except (OverflowError, pa.ArrowInvalid):
                pass
        mask = (self.codes == _INT) | (self.codes == _FLOAT)
        return pa.array(np.where(mask, self.objs, np.nan).astype(np.float64), mask=~mask)

    def strings(self) -> pa.Array:
        return self._typed(self.codes == _STR, pa.string())

    def bools(self) -> pa.Array:
        return self._typed(self.codes == _BOOL, pa.bool_())

    def present(self) -> np.ndarray:
        result: np.ndarray = self.codes != _ABSENT
        return result

    def not_null(self) -> np.ndarray:
        result: np.ndarray = (self.codes != _ABSENT) & (self.codes != _NULL)
        return result

    def lists(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, JsonValues]:
        is_list = self.codes == _LIST
        chosen = self.objs[is_list]
        lengths = np.zeros(self.n, np.int64)
        lengths[is_list] = np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))
        parents = np.repeat(np.arange(self.n, dtype=np.int64), lengths)
        return is_list, lengths, parents, _ObjJson(list(itertools.chain.from_iterable(chosen)))


def _read_orjson(col: pa.Array) -> JsonValues:
    rows = col.to_numpy(zero_copy_only=False)
    enabled = gc.isenabled()
    gc.disable()  # a million fresh dicts would otherwise trigger collection after collection
    try:
        values = list(map(orjson.loads, rows))
    finally:
        if enabled:
            gc.enable()
    return _ObjJson(values)


def read_column(col: pa.Array | pa.ChunkedArray, exact: bool = False) -> JsonValues:
    """Every row of a JSON column (binary JSON texts; a null row reads as `{}`).

    `exact` reads with orjson, which tells a key holding null from a missing key."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(b"{}", col.type))
    return (None if exact else _read_arrow(col)) or _read_orjson(col)


def at_path(root: JsonValues, path: tuple[str | int, ...]) -> JsonValues:
    values = root
    for key in path:
        values = values.step(key)
    return values
