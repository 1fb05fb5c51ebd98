"""The typed plan an expression parses into (Milvus' planpb.Expr, as Python dataclasses).

Value nodes (`Column`, `Literal`, `Arith`, `ArrayLength`) compute a value per row; predicate
nodes compute a boolean per row. The parser has checked every node against the schema, so the
evaluator never meets a field that does not exist or a comparison Milvus would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

DT = schema_pb2.DataType

# Static kinds of a value, for type checks (Milvus' schemapb data types, coarsened).
BOOL = "Bool"
INT = "Int64"
FLOAT = "Double"
STRING = "VarChar"
JSON = "JSON"
ARRAY = "Array"

_KIND_OF_TYPE = {
    DT.Bool: BOOL,
    DT.Int8: INT,
    DT.Int16: INT,
    DT.Int32: INT,
    DT.Int64: INT,
    DT.Float: FLOAT,
    DT.Double: FLOAT,
    DT.VarChar: STRING,
    DT.String: STRING,
    DT.JSON: JSON,
    DT.Array: ARRAY,
}


def kind_of_type(data_type: int) -> str | None:
    """The kind of a schema data type, or None for a type no expression may use (vectors)."""
    return _KIND_OF_TYPE.get(data_type)


@dataclass(frozen=True)
class Column:
    """A field, or a path inside a JSON field / an element of an Array field.

    `path` is empty for the field itself; for JSON it is keys and indexes (`meta["a"][0]` →
    ("a", 0)); for an Array field it is one index. A dynamic key `k` is `$meta` with path ("k",).
    """

    field_id: int
    name: str
    data_type: int
    element_type: int = 0
    path: tuple[str | int, ...] = ()
    is_pk: bool = False
    is_dynamic: bool = False

    @property
    def kind(self) -> str | None:
        if self.data_type == DT.JSON:
            return JSON
        if self.data_type == DT.Array and self.path:
            return kind_of_type(self.element_type)
        return kind_of_type(self.data_type)


# The values of a list literal as one typed array: int64 numpy, or Arrow strings.
KeyArray: TypeAlias = np.ndarray | pa.Array


@dataclass(frozen=True)
class Literal:
    value: Any  # bool | int | float | str | tuple (array literal)
    # A list of plain integers or plain strings the lexer read in one pass (`tokenizer.ListToken`):
    # the same values as one typed array, so a long `pk in [...]` never goes value by value.
    array: KeyArray | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        v = self.value
        if isinstance(v, bool):
            return BOOL
        if isinstance(v, int):
            return INT
        if isinstance(v, float):
            return FLOAT
        if isinstance(v, str):
            return STRING
        return ARRAY


@dataclass(frozen=True)
class Arith:
    """`left op right` with op in + - * / % (Milvus' BinaryArithExpr)."""

    op: str
    left: Value
    right: Value
    kind: str


@dataclass(frozen=True)
class ArrayLength:
    column: Column
    kind: str = INT


Value = Column | Literal | Arith | ArrayLength


@dataclass(frozen=True)
class Compare:
    """`left op right`, op in == != < <= > >= (UnaryRange / BinaryArithOpEvalRange / CompareExpr)."""

    op: str
    left: Value
    right: Value


@dataclass(frozen=True)
class Term:
    """`value in [...]` / `value not in [...]` (TermExpr); values are already cast to the column's kind."""

    value: Value
    values: tuple[Any, ...]
    negate: bool = False
    # `values` as one typed array of the column's kind (int64 / float64 numpy, Arrow strings)
    # when the list came in one pass from the lexer; what `primary_keys()` and the evaluator use.
    array: KeyArray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Like:
    """`column like "pattern"` (Milvus' `%` and `_` wildcards, `\\` escapes)."""

    column: Column
    pattern: str


@dataclass(frozen=True)
class Contains:
    """array_contains / _all / _any (and json_contains*): `mode` is "one", "all" or "any"."""

    column: Column
    values: tuple[Any, ...]
    mode: str


@dataclass(frozen=True)
class Exists:
    column: Column


@dataclass(frozen=True)
class IsNull:
    column: Column
    negate: bool = False


@dataclass(frozen=True)
class TextMatch:
    """`text_match(field, "query")` (rows with at least `min_should_match` of the query's
    tokens) or, with `phrase`, `phrase_match(field, "query", slop)` (the tokens in order, at most
    `slop` positions apart). `tokens`: the query through the field's analyzer, with positions;
    `analyzer`: the field's analyzer params (a scan tokenizes the column with them)."""

    column: Column
    query: str
    tokens: tuple[tuple[str, int], ...]
    analyzer: str = ""
    min_should_match: int = 1
    phrase: bool = False
    slop: int = 0


@dataclass(frozen=True)
class And:
    children: tuple[Predicate, ...]


@dataclass(frozen=True)
class Or:
    children: tuple[Predicate, ...]


@dataclass(frozen=True)
class Not:
    child: Predicate


@dataclass(frozen=True)
class Const:
    """A predicate known at parse time: `true`, `false`, or the empty expression (match all)."""

    value: bool


Predicate = Compare | Term | Like | Contains | Exists | IsNull | TextMatch | And | Or | Not | Const


@dataclass(frozen=True)
class Plan:
    """A parsed, type-checked expression: what QueryNodes evaluate and Delete takes keys from."""

    expr: str
    predicate: Predicate
    schema: schema_pb2.CollectionSchema = field(repr=False, compare=False)

    def primary_keys(self) -> KeyArray | None:
        """The distinct keys (first occurrence order) when the whole expression names primary
        keys only (`pk in [..]`, `pk == v`, `v == pk`, an `or` of those), else None: Delete then
        needs no query first. Int64 keys as int64 numpy, VarChar keys as an Arrow string array;
        a list the lexer read in one pass is taken whole, never value by value."""
        parts = _pk_values(self.predicate)
        if parts is None:
            return None
        pk = next(f for f in self.schema.fields if f.is_primary_key)
        if pk.data_type == DT.VarChar:
            strings = [p if isinstance(p, pa.Array) else pa.array(p, pa.string()) for p in parts]
            unique: pa.Array = pc.unique(pa.concat_arrays([s.cast(pa.string()) for s in strings]))
            return unique
        ints = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]) if parts else np.empty(0, np.int64)
        keys: np.ndarray = pc.unique(pa.array(ints)).to_numpy()
        return keys


def _pk_values(node: Predicate) -> list[KeyArray | list[Any]] | None:
    """The primary keys `node` names, as parts (an array, or a list of Python values), or None."""
    if isinstance(node, Term) and not node.negate and isinstance(node.value, Column) and node.value.is_pk:
        return [node.array if node.array is not None else list(node.values)]
    if isinstance(node, Compare) and node.op == "==":
        for col, lit in ((node.left, node.right), (node.right, node.left)):
            if isinstance(col, Column) and col.is_pk and isinstance(lit, Literal):
                return [[lit.value]]
        return None
    if isinstance(node, Or):
        out: list[KeyArray | list[Any]] = []
        for child in node.children:
            part = _pk_values(child)
            if part is None:
                return None
            out.extend(part)
        return out
    return None
