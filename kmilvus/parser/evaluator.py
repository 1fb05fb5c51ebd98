"""Evaluate a `Plan` over Arrow data, column-wise (pyarrow.compute / numpy, no per-row Python).

Columns are found by field ID (`"101"`, as binlogs and insert batches name them) or, failing
that, by field name. Logic is SQL's three-valued one: a JSON key a row lacks, or a value of
another type than the comparison needs, is null; `not` keeps null null; and the final mask takes
null as false. So `meta["k"] > 1` and `not (meta["k"] > 1)` are both false on rows without "k".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import plan as P
from kmilvus.parser.jsonpath import JsonValues, at_path, list_get, read_column
from kmilvus.util import merr
from kmilvus.util.merr import MilvusError

if TYPE_CHECKING:
    from kmilvus.index.text_index import TextIndex

DT = schema_pb2.DataType

_COMPARE = {
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
_ARITH = {"+": pc.add, "-": pc.subtract, "*": pc.multiply, "/": pc.divide}
_WANT = {P.STRING: "string", P.BOOL: "bool"}


JsonCache = MutableMapping[tuple[int, bool], JsonValues]
TextIndexOf = Callable[[int, str], "TextIndex"]


class ColumnIndex(Protocol):
    """A scalar index over one field of `data` (kmilvus/index/scalar_index.py): each lookup answers
    like the scan (null where the row is null) or None when it cannot (the evaluator then scans)."""

    def equal_any(self, values: Sequence[Any]) -> pa.Array | None: ...
    def contains_all(self, values: Sequence[Any]) -> pa.Array | None: ...
    def compare(self, op: str, value: Any) -> pa.Array | None: ...
    def compare_all(self, terms: Sequence[tuple[str, Any]]) -> pa.Array | None: ...
    def prefix(self, p: str) -> pa.Array | None: ...


def evaluate(
    plan: P.Plan,
    data: pa.Table | pa.RecordBatch,
    json_cache: JsonCache | None = None,
    indexes: Mapping[int, ColumnIndex] | None = None,
    text_index: TextIndexOf | None = None,
) -> pa.BooleanArray:
    """One boolean per row of `data`: whether it matches `plan`.

    `json_cache`: parsed JSON columns of `data`, kept by a caller that evaluates the same
    immutable data again (a QueryNode, per sealed segment); parsing is most of a JSON filter's cost.
    `indexes`: scalar indexes over fields of `data` by field ID (a sealed segment's); a term, a
    comparison with a literal, a prefix `like` or an `array_contains*` on an indexed field is
    answered by its index instead of a scan of the column, with the same result.
    `text_index(field ID, analyzer params)`: the text-match index of a field of `data` (a
    segment's); without it `text_match` / `phrase_match` tokenize the column (a scan).
    """
    out = _Context(data, json_cache, indexes, text_index).predicate(plan.predicate)
    out = pc.fill_null(out, False)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    return out


def _kind(node: P.Value) -> str | None:
    return node.kind


def _want(*nodes: P.Value) -> str:
    """Which typed view of a JSON value a comparison needs, from the kinds around it."""
    for node in nodes:
        want = _WANT.get(_kind(node) or "")
        if want:
            return want
    return "number"


def _keep_nulls(source: pa.Array, result: pa.Array) -> pa.Array:
    """`result`, null where `source` is null (is_in and friends answer false there)."""
    if source.null_count == 0:
        return result
    return pc.if_else(pc.is_valid(source), result, pa.scalar(None, pa.bool_()))


def _rows_hit(n: int, parents: np.ndarray, hit: np.ndarray) -> np.ndarray:
    rows = np.zeros(n, dtype=bool)
    rows[parents[hit]] = True
    return rows


_NARROW_BELOW = 8  # narrow an `and` to its surviving rows when fewer than 1 in 8 survive


def _scatter(full: pa.Array, rows: pa.Array, part: pa.Array) -> pa.Array:
    """`full` with `part`'s values (nulls included) at `rows`."""
    values = full.to_numpy(zero_copy_only=False).copy()
    valid = np.ones(len(full), dtype=bool)
    idx = rows.to_numpy()
    values[idx] = pc.fill_null(part, False).to_numpy(zero_copy_only=False)
    valid[idx] = pc.is_valid(part).to_numpy(zero_copy_only=False)
    return pa.array(values, mask=~valid)


_WILDCARD = re.compile(r"(?<!\\)[%_]")


def _like_parts(pattern: str) -> tuple[bool, bool, str | None]:
    """(leading %, trailing %, the literal between them or None when it has wildcards)."""
    lead = pattern.startswith("%")
    trail = pattern.endswith("%") and not pattern.endswith("\\%") and len(pattern) > 1
    core = pattern[1 if lead else 0 : len(pattern) - 1 if trail else len(pattern)]
    if _WILDCARD.search(core) is not None:
        return lead, trail, None
    return lead, trail, re.sub(r"\\(.)", r"\1", core)


def _like(values: pa.Array, pattern: str) -> pa.Array:
    """Milvus' LIKE: prefix%, %suffix, %infix% and exact take the fast kernels, the rest match_like."""
    lead, trail, literal = _like_parts(pattern)
    if literal is not None:
        if lead and trail:
            return pc.match_substring(values, literal)
        if lead:
            return pc.ends_with(values, literal)
        if trail:
            return pc.starts_with(values, literal)
        return pc.equal(values, literal)
    return pc.match_like(values, pattern)


@dataclass(frozen=True, eq=False)
class _IndexRange:
    """Several comparisons of one field already answered by its index (see `_index_ranges`)."""

    hit: pa.Array


class _Context:
    def __init__(
        self,
        data: pa.Table | pa.RecordBatch,
        json_cache: JsonCache | None = None,
        indexes: Mapping[int, ColumnIndex] | None = None,
        text_index: TextIndexOf | None = None,
    ):
        self.data = data
        self.indexes = indexes or {}
        self.text_index = text_index
        self.n = data.num_rows
        self.names = set(data.schema.names)
        self._json: JsonCache = {} if json_cache is None else json_cache
        # With a caller's cache, whole columns are parsed once anyway: no narrowing then.
        self._json_cache_owned = json_cache is None

    # -- values -------------------------------------------------------------------------------

    def column(self, col: P.Column) -> pa.Array:
        key = str(col.field_id)
        if key not in self.names:
            key = col.name
            if key not in self.names:
                raise MilvusError(merr.FIELD_NOT_FOUND, f"field not found[field={col.name}]")
        arr = self.data.column(key)
        return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr

    def json(self, col: P.Column, exact: bool = False) -> JsonValues:
        """The values at `col`'s path; `exact` tells a JSON null from a missing key (`exists`),
        which only the orjson reader can."""
        key = (col.field_id, exact)
        root = self._json.get(key)
        if root is None:
            root = self._json[key] = read_column(self.column(col), exact=exact)
        return at_path(root, col.path)

    def value(self, node: P.Value, want: str = "number") -> Any:
        if isinstance(node, P.Literal):
            return node.value
        if isinstance(node, P.Column):
            if node.data_type == DT.JSON:
                jv = self.json(node)
                return jv.strings() if want == "string" else jv.bools() if want == "bool" else jv.numbers()
            if node.data_type == DT.Array and node.path:
                return list_get(self.column(node), int(node.path[0]))
            return self.column(node)
        if isinstance(node, P.ArrayLength):
            if node.column.data_type == DT.JSON:
                is_list, lengths, _, _ = self.json(node.column).lists()
                return pa.array(lengths, mask=~is_list)
            return pc.list_value_length(self.column(node.column)).cast(pa.int64())
        left, right = self.value(node.left), self.value(node.right)
        if node.op == "%":
            return self._mod(left, right)
        return _ARITH[node.op](left, right)

    def _mod(self, left: Any, right: Any) -> pa.Array:
        """C's `%` (sign of the dividend), as Milvus computes it; null where an operand is."""
        arrays = [x for x in (left, right) if isinstance(x, (pa.Array, pa.ChunkedArray))]
        valid = np.ones(self.n, dtype=bool)
        for a in arrays:
            valid &= pc.is_valid(a).to_numpy(zero_copy_only=False)

        def raw(x: Any) -> Any:
            if isinstance(x, (pa.Array, pa.ChunkedArray)):
                return pc.fill_null(x, 1).to_numpy(zero_copy_only=False)
            return x

        a, b = raw(left), raw(right)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.fmod(a, np.where(b == 0, 1, b))
        valid &= np.broadcast_to(b != 0, valid.shape)
        return pa.array(out, mask=~valid)

    # -- predicates ---------------------------------------------------------------------------

    # -- the index path ------------------------------------------------------------------------

    def _index_of(self, node: P.Predicate) -> ColumnIndex | None:
        """The scalar index that can answer `node` (a whole field, not a JSON path or an element)."""
        if not self.indexes:
            return None
        col = getattr(node, "column", None) or getattr(node, "value", None) or getattr(node, "left", None)
        if not isinstance(col, P.Column) or col.path or col.data_type == DT.JSON:
            return None
        if isinstance(node, P.Compare) and not isinstance(node.right, P.Literal):
            return None
        return self.indexes.get(col.field_id)

    def indexed(self, node: P.Predicate) -> pa.Array | None:
        """`node` answered by an index, or None (no index, or one that cannot answer it)."""
        index = self._index_of(node)
        if index is None:
            return None
        if isinstance(node, P.Compare):
            assert isinstance(node.right, P.Literal)
            return index.compare(node.op, node.right.value)
        if isinstance(node, P.Term):
            hit = index.equal_any(node.values)
            return None if hit is None else pc.invert(hit) if node.negate else hit
        if isinstance(node, P.Like):
            lead, trail, literal = _like_parts(node.pattern)
            if literal == "" and lead:  # `%`: every string
                return index.prefix("")
            if literal is None or lead:
                return None
            return index.prefix(literal) if trail else index.compare("==", literal)
        if isinstance(node, P.Contains):
            return index.contains_all(node.values) if node.mode == "all" else index.equal_any(node.values)
        return None

    def _index_ranges(self, children: tuple[P.Predicate | _IndexRange, ...]) -> tuple[P.Predicate | _IndexRange, ...]:
        """Comparisons of one indexed field with literals under an `and` (`a < x and x <= b`, what
        `a < x <= b` parses to) become one `_IndexRange`: a single lookup of the index."""
        groups: dict[int, list[P.Compare]] = {}
        for c in children:
            if isinstance(c, P.Compare) and c.op != "!=" and self._index_of(c) is not None:
                groups.setdefault(c.left.field_id, []).append(c)  # type: ignore[union-attr]
        merged = {fid: cs for fid, cs in groups.items() if len(cs) > 1}
        if not merged:
            return children
        rest: list[P.Predicate | _IndexRange] = [c for c in children if not any(c in cs for cs in merged.values())]
        hits = []
        for fid, cs in merged.items():
            hit = self.indexes[fid].compare_all([(c.op, c.right.value) for c in cs])  # type: ignore[union-attr]
            if hit is None:
                rest.extend(cs)
            else:
                hits.append(hit)
        if not hits:
            return tuple(rest)
        both = hits[0]
        for h in hits[1:]:
            both = pc.and_kleene(both, h)
        # One, and first: it is over every row, so it must not fall in a narrowed tail.
        return (_IndexRange(both), *rest)

    def predicate(self, node: P.Predicate | _IndexRange) -> pa.Array:
        if isinstance(node, _IndexRange):
            return node.hit
        if isinstance(node, (P.Compare, P.Term, P.Like, P.Contains)):
            hit = self.indexed(node)
            if hit is not None:
                return hit
        if isinstance(node, P.Const):
            return pa.array(np.full(self.n, node.value, dtype=bool))
        if isinstance(node, P.Compare):
            want = _want(node.left, node.right)
            return _COMPARE[node.op](self.value(node.left, want), self.value(node.right, want))
        if isinstance(node, P.And):
            return self.conjunction(node.children)
        if isinstance(node, P.Or):
            out = self.predicate(node.children[0])
            for child in node.children[1:]:
                out = pc.or_kleene(out, self.predicate(child))
            return out
        if isinstance(node, P.Not):
            return pc.invert(self.predicate(node.child))
        if isinstance(node, P.Term):
            out = self.term(node)
            return pc.invert(out) if node.negate else out
        if isinstance(node, P.Like):
            return _like(self.value(node.column, "string"), node.pattern)
        if isinstance(node, P.Contains):
            return self.contains(node)
        if isinstance(node, P.Exists):
            return pa.array(self.json(node.column, exact=True).present())
        if isinstance(node, P.TextMatch):
            return self.text_match(node)
        if isinstance(node, P.IsNull):
            col = node.column
            if col.data_type == DT.JSON and col.path:
                null = pa.array(~self.json(col).not_null())
            elif col.data_type == DT.Array and col.path:
                null = pc.is_null(self.value(col))
            else:
                null = pc.is_null(self.column(col))
            return pc.invert(null) if node.negate else null
        raise MilvusError(merr.SERVICE_INTERNAL, f"cannot evaluate {type(node).__name__}")

    def text_match(self, node: P.TextMatch) -> pa.Array:
        """From the segment's text index, or one built from the column here (growing data)."""
        if self.text_index is not None:
            index = self.text_index(node.column.field_id, node.analyzer)
        else:
            from kmilvus.analyzer import build
            from kmilvus.index.text_index import TextIndex

            index = TextIndex.build(self.column(node.column), build(node.analyzer))
        if node.phrase:
            return pa.array(index.phrase(node.tokens, node.slop))
        return pa.array(index.match([t for t, _ in node.tokens], node.min_should_match))

    def conjunction(self, children: tuple[P.Predicate | _IndexRange, ...]) -> pa.Array:
        """`and` of `children`, left to right; once few rows can still match, the rest is
        evaluated on those rows only (a selective `id in [..]` spares parsing a JSON column).
        Children an index answers go first (`and` is commutative in three-valued logic too)."""
        if self.indexes:
            children = self._index_ranges(children)
            children = tuple(
                sorted(children, key=lambda c: not isinstance(c, _IndexRange) and self._index_of(c) is None)
            )
        out = self.predicate(children[0])
        for i, child in enumerate(children[1:], start=1):
            alive = pc.fill_null(out, True)  # true or null: the rows `and` may still need
            kept = pc.sum(alive).as_py() or 0
            if kept * _NARROW_BELOW < self.n and self._json_cache_owned:
                rows = pa.array(np.flatnonzero(alive.to_numpy(zero_copy_only=False)), pa.int64())
                sub = _Context(self.data.take(rows))
                part = sub.conjunction((P.Const(True), *children[i:])) if kept else pa.array([], pa.bool_())
                part = pc.and_kleene(out.take(rows), part)
                full = pa.array(np.zeros(self.n, dtype=bool))
                return _scatter(full, rows, part)
            out = pc.and_kleene(out, self.predicate(child))
        return out

    def term(self, node: P.Term) -> pa.Array:
        col = node.value
        assert isinstance(col, P.Column)
        if col.data_type != DT.JSON:
            arr = self.value(col)
            # The list as one typed array: whole when the lexer read it so, else from the tuple.
            values = pa.array(node.array) if node.array is not None else None
            if pa.types.is_integer(arr.type):
                arr, vtype = arr.cast(pa.int64()), pa.int64()
            elif pa.types.is_floating(arr.type):
                # is_in hashes, and -0.0 hashes apart from 0.0: `x + 0.0` makes every zero +0.0,
                # so `in` agrees with `==` (and with Milvus, whose hash sets see one zero).
                arr, vtype = pc.add(arr.cast(pa.float64()), 0.0), pa.float64()
                if values is None:
                    values = pa.array([float(v) for v in node.values], pa.float64())
                values = pc.add(values.cast(vtype), 0.0)
            else:
                vtype = arr.type
            if values is None:
                values = pa.array(list(node.values), type=vtype)
            return _keep_nulls(arr, pc.is_in(arr, value_set=values.cast(vtype)))
        jv = self.json(col)
        matched = np.zeros(self.n, dtype=bool)
        groups: dict[str, list[Any]] = {}
        for v in node.values:
            groups.setdefault(_WANT.get(P.Literal(v).kind, "number"), []).append(v)
        for want, values in groups.items():
            if want == "string":
                arr, vs = jv.strings(), pa.array(values, pa.string())
            elif want == "bool":
                arr, vs = jv.bools(), pa.array(values, pa.bool_())
            else:
                arr = jv.numbers()
                if pa.types.is_integer(arr.type) and all(isinstance(v, int) for v in values):
                    vs = pa.array(values, pa.int64())
                else:
                    arr, vs = arr.cast(pa.float64()), pa.array([float(v) for v in values], pa.float64())
            hit = pc.and_(pc.is_valid(arr), pc.is_in(arr, value_set=vs))
            matched |= hit.to_numpy(zero_copy_only=False)
        return pa.array(matched, mask=~jv.not_null())

    def contains(self, node: P.Contains) -> pa.Array:
        col = node.column
        if col.data_type == DT.JSON:
            is_list, _, parents, flat = self.json(col).lists()

            def elements(v: Any) -> pa.Array:
                want = _WANT.get(P.Literal(v).kind, "number")
                return flat.strings() if want == "string" else flat.bools() if want == "bool" else flat.numbers()
        else:
            arr = self.column(col)
            is_list = pc.is_valid(arr).to_numpy(zero_copy_only=False)
            parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
            flat_arr = pc.list_flatten(arr)

            def elements(v: Any) -> pa.Array:
                return flat_arr

        per_value = []
        for v in dict.fromkeys(node.values):
            hit = pc.fill_null(pc.equal(elements(v), v), False).to_numpy(zero_copy_only=False)
            per_value.append(_rows_hit(self.n, parents, hit))
        if node.mode == "all":
            out = np.logical_and.reduce(per_value) if per_value else np.ones(self.n, dtype=bool)
        else:
            out = np.logical_or.reduce(per_value) if per_value else np.zeros(self.n, dtype=bool)
        return pa.array(out, mask=~is_list)
