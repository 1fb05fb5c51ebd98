"""Milvus' expression grammar (planparserv2/Plan.g4) → a type-checked `Plan`.

A Pratt parser whose binding powers follow Plan.g4's alternative order (ANTLR gives earlier
alternatives higher precedence): like > ** > unary (+ - ~ not) > * / % > + - > << >> > in / not in
> range / < <= > >= > == != > & > ^ > | > and > or. So `not a > 1` is `(not a) > 1`, refused as in
Milvus: write `not (a > 1)`. Semantic checks and their messages follow planparserv2's
parser_visitor.go; every failure is `cannot parse expression: <expr>, error: <why>` with code 1100,
and a syntax error's <why> is ANTLR's `line 1:<column> <problem>`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import schema_pb2

from kmilvus.analyzer import build
from kmilvus.analyzer import fields as af
from kmilvus.parser import plan as P
from kmilvus.parser.tokenizer import (
    BOOL,
    EOF,
    FLOAT,
    IDENT,
    INT,
    JSON_IDENT,
    KEYWORD,
    LIST,
    OP,
    STRING,
    LexError,
    Token,
    tokenize,
)
from kmilvus.util import merr
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType


class ExprError(Exception):
    """Why an expression is refused (the text after `error:` in Milvus' message)."""


Node = P.Value | P.Predicate

_UNARY_BP = 12
_INFIX_BP = {
    "or": 1,
    "and": 2,
    "|": 3,
    "^": 4,
    "&": 5,
    "==": 6,
    "!=": 6,
    "<": 7,
    "<=": 7,
    ">": 7,
    ">=": 7,
    "in": 8,
    "not in": 8,
    "<<": 9,
    ">>": 9,
    "+": 10,
    "-": 10,
    "*": 11,
    "/": 11,
    "%": 11,
    "**": 13,
    "like": 14,
}
_UNSUPPORTED_INFIX = {"&": "BitAnd", "|": "BitOr", "^": "BitXor", "<<": "shift", ">>": "shift"}
_FUNCTIONS = {
    "array_contains": "one",
    "json_contains": "one",
    "array_contains_all": "all",
    "json_contains_all": "all",
    "array_contains_any": "any",
    "json_contains_any": "any",
    "array_length": "length",
}
_TEXT_FUNCTIONS = {"text_match", "TEXT_MATCH", "phrase_match", "PHRASE_MATCH"}  # Plan.g4's spellings
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NUMERIC = (P.INT, P.FLOAT)


def _is_predicate(node: Node) -> TypeGuard[P.Predicate]:
    return not isinstance(node, (P.Column, P.Literal, P.Arith, P.ArrayLength))


def _kind(node: Node) -> str | None:
    if isinstance(node, (P.Column, P.Literal, P.Arith, P.ArrayLength)):
        return node.kind
    return P.BOOL


def _text(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return str(value)


def _cast(value: Any, kind: str | None) -> Any:
    """`value` as a value of `kind` (Milvus' castValue), or raise ValueError."""
    if kind == P.JSON:
        return value
    if kind == P.BOOL and isinstance(value, bool):
        return value
    if kind == P.INT and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == P.FLOAT and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == P.STRING and isinstance(value, str):
        return value
    raise ValueError(value)


def _cast_list(values: tuple[Any, ...], array: P.KeyArray, kind: str | None) -> tuple[tuple, P.KeyArray | None] | None:
    """`_cast` over a list the lexer read whole (int64 numpy or Arrow strings), in one step: the
    values and their typed array, or None when some value does not cast (the caller's value by
    value loop then names the first one, as Milvus does)."""
    if kind == P.JSON:
        return values, None  # a JSON value is compared as it is, by its own kind
    if isinstance(array, np.ndarray):
        if kind == P.INT:
            return values, array
        if kind == P.FLOAT:
            floats = array.astype(np.float64)
            return tuple(floats.tolist()), floats
        return None
    return (values, array) if kind == P.STRING else None


class _Schema:
    """Name → field, and the dynamic field (Milvus' SchemaHelper.GetFieldFromNameDefaultJSON)."""

    def __init__(self, schema: schema_pb2.CollectionSchema):
        self.by_name = {f.name: f for f in schema.fields}
        self.dynamic = next((f for f in schema.fields if f.is_dynamic), None)

    def column(self, name: str, path: tuple[str | int, ...] = ()) -> P.Column:
        field = self.by_name.get(name)
        if field is None:
            if self.dynamic is None:
                raise ExprError(f"field {name} not exist")
            field, path = self.dynamic, (name, *path)
        if path and field.data_type not in (DT.JSON, DT.Array):
            raise ExprError(f"{DT.Name(field.data_type)} data type not supported accessed with []")
        if field.data_type == DT.Array and path and (len(path) != 1 or not isinstance(path[0], int)):
            raise ExprError("can only access array field with integer index")
        if P.kind_of_type(field.data_type) is None:
            raise ExprError(f"{DT.Name(field.data_type)} field {name} cannot be used in an expression")
        return P.Column(
            field_id=field.fieldID,
            name=field.name,
            data_type=field.data_type,
            element_type=field.element_type,
            path=tuple(path),
            is_pk=field.is_primary_key and not path,
            is_dynamic=field.is_dynamic,
        )


class _Parser:
    def __init__(self, expr: str, schema: _Schema, values: Mapping[str, Any] | None = None):
        self.expr = expr
        self.schema = schema
        self.values = values or {}
        self.tokens = tokenize(expr)
        self.i = 0

    # -- token helpers ------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def _next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def _syntax(self, tok: Token, problem: str) -> ExprError:
        return ExprError(f"line 1:{tok.pos} {problem}")

    def _mismatched(self, tok: Token, expecting: str | None = None) -> ExprError:
        tail = f" expecting {expecting}" if expecting else ""
        return self._syntax(tok, f"mismatched input '{tok.text}'{tail}")

    def _expect(self, text: str) -> Token:
        tok = self.tok
        if tok.kind not in (OP, KEYWORD) or tok.text != text:
            if tok.kind == EOF:
                raise self._syntax(tok, f"missing '{text}' at '<EOF>'")
            raise self._mismatched(tok, f"'{text}'")
        return self._next()

    def _infix_op(self) -> str | None:
        tok = self.tok
        if tok.kind == OP and tok.value in _INFIX_BP:
            return str(tok.value)
        if tok.kind == KEYWORD:
            if tok.value == "not":
                nxt = self._peek()
                return "not in" if nxt.kind == KEYWORD and nxt.value == "in" else None
            if tok.value in _INFIX_BP:
                return str(tok.value)
        return None

    # -- grammar ------------------------------------------------------------------------------

    def parse(self) -> Node:
        node = self.expression(0)
        if self.tok.kind != EOF:
            raise self._syntax(self.tok, f"extraneous input '{self.tok.text}' expecting <EOF>")
        return node

    def expression(self, min_bp: int) -> Node:
        left = self.prefix()
        while True:
            op = self._infix_op()
            if op is None:
                break
            bp = _INFIX_BP[op]
            if bp <= min_bp:
                break
            op_tok = self._next()
            if op == "not in":
                self._next()
            left = self.infix(op, op_tok, left, bp)
        return left

    def prefix(self) -> Node:
        tok = self._next()
        if tok.kind in (INT, FLOAT, BOOL, STRING):
            return P.Literal(tok.value)
        if tok.kind == LIST:
            return P.Literal(tok.value.values, tok.value.array)
        if tok.kind == IDENT:
            if self.tok.kind == OP and self.tok.text == "(":
                return self.call(tok)
            return self.postfix_null(self.schema.column(tok.value))
        if tok.kind == JSON_IDENT:
            name, path = tok.value
            return self.postfix_null(self.schema.column(name, path))
        if tok.kind == OP and tok.text == "(":
            node = self.expression(0)
            self._expect(")")
            return node
        if tok.kind == OP and tok.text == "[":
            return self.array()
        if tok.kind == OP and tok.text == "{":
            return self.template()
        if (tok.kind == KEYWORD and tok.value == "not") or (tok.kind == OP and tok.text in "+-~"):
            return self.unary(tok, self.expression(_UNARY_BP))
        if tok.kind == KEYWORD and tok.value == "exists":
            return self.exists(self.expression(_UNARY_BP))
        if tok.kind == EOF:
            raise self._syntax(tok, "mismatched input '<EOF>' expecting an expression")
        raise self._syntax(tok, f"extraneous input '{tok.text}'")

    def postfix_null(self, column: P.Column) -> Node:
        tok = self.tok
        if tok.kind == KEYWORD and tok.value in ("is null", "is not null"):
            self._next()
            return P.IsNull(column, negate=tok.value == "is not null")
        return column

    def template(self) -> P.Literal:
        """`{name}`: a value passed beside the expression (expr_template_values)."""
        name = self._next()
        if name.kind != IDENT:
            raise self._mismatched(name, "Identifier")
        self._expect("}")
        if name.value not in self.values:
            raise ExprError(f"the value of expression template variable name {{{name.value}}} is not found")
        value = self.values[name.value]
        return P.Literal(_freeze(value))

    def array(self) -> P.Literal:
        values: list[Any] = []
        if self.tok.kind == OP and self.tok.text == "]":
            self._next()
            return P.Literal(())
        tokens = self.tokens
        while True:
            start = self.tok
            if start.kind in (INT, FLOAT, BOOL, STRING) and tokens[self.i + 1].text in (",", "]"):
                self.i += 1  # a plain literal: the common case of long key lists, no Pratt round trip
                values.append(start.value)
            else:
                element = self.expression(0)
                if not isinstance(element, P.Literal):
                    raise ExprError(f"array element type must be generic value, but got: {self._slice(start)}")
                values.append(element.value)
            if self.tok.kind == OP and self.tok.text == ",":
                self._next()
                if self.tok.kind == OP and self.tok.text == "]":
                    break
                continue
            break
        self._expect("]")
        return P.Literal(tuple(values))

    def _slice(self, start: Token) -> str:
        return self.expr[start.pos : self.tok.pos].strip()

    def call(self, name_tok: Token) -> Node:
        name = name_tok.value
        if name in _TEXT_FUNCTIONS:
            return self.text_match(name.lower())
        func = _FUNCTIONS.get(name) or (_FUNCTIONS.get(name.lower()) if name.isupper() else None)
        if func is None:
            raise self._syntax(name_tok, f"function {name} not found")
        self._expect("(")
        args: list[Node] = []
        if not (self.tok.kind == OP and self.tok.text == ")"):
            while True:
                args.append(self.expression(0))
                if self.tok.kind == OP and self.tok.text == ",":
                    self._next()
                    continue
                break
        self._expect(")")
        want = 1 if func == "length" else 2
        if len(args) != want:
            raise ExprError(f"{name} expects {want} argument(s), got {len(args)}")
        column = args[0]
        if func == "length":
            if not isinstance(column, P.Column) or column.kind not in (P.JSON, P.ARRAY):
                raise ExprError(f"array_length operation are only supported on json or array fields now, got: {name}")
            return P.ArrayLength(column)
        op = {"one": "contains", "all": "contains_all", "any": "contains_any"}[func]
        if not isinstance(column, P.Column) or column.kind not in (P.JSON, P.ARRAY):
            raise ExprError(f"{op} operation are only supported on json or array fields now, got: {name}")
        element = args[1]
        if not isinstance(element, P.Literal):
            raise ExprError(f"{op} operation are only supported explicitly specified element")
        values = (element.value,) if func == "one" else element.value
        if func != "one" and not isinstance(values, tuple):
            raise ExprError(f"{op} operation element must be an array")
        if any(isinstance(v, tuple) for v in values):
            raise ExprError(f"{op} operation on nested arrays is not supported yet")
        if column.kind == P.ARRAY:
            elem_kind = P.kind_of_type(column.element_type)
            cast = []
            for v in values:
                try:
                    cast.append(_cast(v, elem_kind))
                except ValueError:
                    raise ExprError(
                        f"{op} operation can't compare between array element type: "
                        f"{DT.Name(column.element_type)} and {P.Literal(v).kind}"
                    ) from None
            values = tuple(cast)
        return P.Contains(column, tuple(values), func)

    def text_match(self, func: str) -> Node:
        """`text_match(field, 'query'[, minimum_should_match=N])` / `phrase_match(field, 'query'[,
        slop])` (Plan.g4's TextMatch / PhraseMatch): the field is an identifier, the query a string."""
        self._expect("(")
        ident = self._next()
        if ident.kind != IDENT:
            raise self._mismatched(ident, "Identifier")
        column = self.schema.column(ident.value)
        self._expect(",")
        query = self._next()
        if query.kind != STRING:
            raise self._mismatched(query, "StringLiteral")
        phrase = func == "phrase_match"
        field = self.schema.by_name.get(column.name)
        if column.kind != P.STRING or field is None:
            raise ExprError(f"{'phrase' if phrase else 'text'} match operation on non-string is unsupported")
        if not af.enable_match(field):
            raise ExprError(f'field "{ident.value}" does not enable match')
        minimum, slop = 1, 0
        if self.tok.kind == OP and self.tok.text == ",":
            self._next()
            if phrase:
                start = self.tok
                value = self.expression(0)
                text = self._slice(start)
                if not isinstance(value, P.Literal) or type(value.value) is not int:
                    raise ExprError(
                        '"slop" should be a const integer expression with "uint32" value. '
                        f'"slop" expression passed: {text}'
                    )
                slop = value.value
                if slop < 0:
                    raise ExprError(f'"slop" should not be a negative interger. "slop" passed: {text}')
                if slop > 0xFFFFFFFF:
                    raise ExprError(f'"slop" exceeds the range of "uint32". "slop" expression passed: {text}')
            else:
                key = self._next()
                if key.kind != IDENT or key.value != "minimum_should_match":
                    raise self._mismatched(key, "'minimum_should_match'")
                self._expect("=")
                value_tok = self._next()
                if value_tok.kind != INT:
                    raise self._mismatched(value_tok, "IntegerConstant")
                minimum = value_tok.value
                if minimum < 1:
                    raise ExprError(f"minimum_should_match should be >= 1, got {minimum}")
                if minimum > 1000:
                    raise ExprError(f"minimum_should_match should be <= 1000, got {minimum}")
        self._expect(")")
        analyzer = af.analyzer_params(field) or ""
        toks = build(analyzer).analyze(pa.array([query.value], pa.large_string()))
        tokens = tuple(zip(toks.text.to_pylist(), toks.position.tolist(), strict=True))
        return P.TextMatch(column, query.value, tokens, analyzer, minimum, phrase, slop)

    def unary(self, tok: Token, child: Node) -> Node:
        op = tok.value
        if op == "~":
            raise ExprError(f"BNOT is not supported: {tok.text}")
        if isinstance(child, P.Literal):
            v = child.value
            if op == "not":
                if not isinstance(v, bool):
                    raise ExprError("not op can only be applied on boolean expression")
                return P.Literal(not v)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ExprError(f"{'negative' if op == '-' else 'positive'} op can only be applied on number")
            return P.Literal(-v if op == "-" else v)
        if op == "not":
            if not _is_predicate(child):
                raise ExprError("not op can only be applied on boolean expression")
            if isinstance(child, P.Const):
                return P.Const(not child.value)
            return P.Not(child)
        if _kind(child) not in (*_NUMERIC, P.JSON):
            raise ExprError(f"unary {op} can only be applied on number")
        if op == "-":
            return P.Arith("*", child, P.Literal(-1), P.FLOAT if _kind(child) != P.INT else P.INT)  # type: ignore[arg-type]
        return child

    def exists(self, child: Node) -> Node:
        if not isinstance(child, P.Column):
            raise ExprError("exists operations are only supported on single fields now")
        if child.data_type != DT.JSON:
            raise ExprError(f"exists operations are only supportted on json field, got:{DT.Name(child.data_type)}")
        if not child.path:
            raise ExprError("exists operations are only supportted on json key")
        return P.Exists(child)

    def infix(self, op: str, op_tok: Token, left: Node, bp: int) -> Node:
        if op in _UNSUPPORTED_INFIX:
            right = self.expression(bp)
            raise ExprError(f"{_UNSUPPORTED_INFIX[op]} is not supported: {self.expr.strip()}")
        if op in ("and", "or"):
            right = self.expression(bp)
            return self.logical(op, left, right)
        if op == "like":
            pattern = self._next()
            if pattern.kind != STRING:
                raise self._mismatched(pattern, "StringLiteral")
            return self.like(left, pattern.value)
        if op in ("in", "not in"):
            right = self.expression(bp)
            return self.term(left, right, negate=op == "not in")
        if op in ("<", "<=", ">", ">="):
            # Range: `lower < x < upper` where x is a field (Plan.g4's Range / ReverseRange).
            mid, after = self.tok, self._peek()
            if (
                mid.kind in (IDENT, JSON_IDENT)
                and after.kind == OP
                and after.text in ("<", "<=", ">", ">=")
                and (after.text[0] == op[0])
            ):
                self._next()
                column = self.schema.column(*(mid.value if mid.kind == JSON_IDENT else (mid.value,)))
                op2 = self._next().text
                upper = self.expression(bp)
                return self.range(left, op, column, op2, upper)
        right = self.expression(bp)
        if op == "**":
            if isinstance(left, P.Literal) and isinstance(right, P.Literal):
                return P.Literal(_fold("**", left.value, right.value))
            raise ExprError(f"power can only apply on constants: {self.expr.strip()}")
        if op in ("+", "-", "*", "/", "%"):
            return self.arith(op, left, right)
        return self.compare(op, left, right)

    # -- semantic checks ----------------------------------------------------------------------

    def logical(self, op: str, left: Node, right: Node) -> Node:
        if (
            isinstance(left, P.Literal)
            and isinstance(right, P.Literal)
            and {type(left.value), type(right.value)} == {bool}
        ):
            return P.Literal(left.value and right.value if op == "and" else left.value or right.value)
        if not (_is_predicate(left) and _is_predicate(right)):  # Milvus refuses `x > 1 and true` too
            raise ExprError(f"'{op}' can only be used between boolean expressions")
        cls = P.And if op == "and" else P.Or
        flat: list[P.Predicate] = []
        for child in (left, right):
            flat.extend(child.children if isinstance(child, cls) else (child,))
        return cls(tuple(flat))

    def like(self, left: Node, pattern: str) -> Node:
        if not isinstance(left, P.Column):
            raise ExprError("like operation on complicated expr is unsupported")
        if left.data_type == DT.Array and not left.path:
            raise ExprError("can not comparisons array fields directly")
        if left.kind not in (P.STRING, P.JSON):
            raise ExprError("like operation on non-string or no-json field is unsupported")
        return P.Like(left, pattern)

    def term(self, left: Node, right: Node, negate: bool) -> Node:
        if isinstance(left, P.Literal):
            raise ExprError(f"'term' can only be used on non-const expression, but got: {_text(left.value)}")
        if not isinstance(left, P.Column):
            raise ExprError("'term' can only be used on single field")
        if left.data_type == DT.Array and not left.path:
            raise ExprError("can not comparisons array fields directly")
        if not isinstance(right, P.Literal) or not isinstance(right.value, tuple):
            raise ExprError("the right-hand side of 'in' must be a list")
        kind = left.kind
        if right.array is not None and (whole := _cast_list(right.value, right.array, kind)) is not None:
            return P.Term(left, whole[0], negate, whole[1])
        values = []
        for v in right.value:
            if isinstance(v, tuple):
                raise ExprError(f"value '{_text(v)}' in list cannot be an array")
            try:
                values.append(_cast(v, kind))
            except ValueError:
                type_name = DT.Name(left.element_type if left.data_type == DT.Array else left.data_type)
                raise ExprError(f"value '{_text(v)}' in list cannot be casted to {type_name}") from None
        return P.Term(left, tuple(values), negate)

    def range(self, lower: Node, op1: str, column: P.Column, op2: str, upper: Node) -> Node:
        if column.data_type == DT.Array and not column.path:
            raise ExprError("can not comparisons array fields directly")
        if op1[0] == ">":  # `upper > x > lower`
            lower, upper, op1, op2 = upper, lower, _FLIP[op2], _FLIP[op1]
        if not isinstance(lower, P.Literal):
            raise ExprError("lowerbound cannot be a non-const expression")
        if not isinstance(upper, P.Literal):
            raise ExprError("upperbound cannot be a non-const expression")
        kind = column.kind
        if kind == P.BOOL:
            raise ExprError("invalid range operations on boolean expr")
        ok = {
            P.STRING: lambda v: isinstance(v, str),
            P.INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
            P.FLOAT: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        }.get(kind or "", lambda v: not isinstance(v, (bool, tuple)))
        if not (ok(lower.value) and ok(upper.value)):
            raise ExprError("invalid range operations")
        lo = P.Compare(_FLIP[op1], column, lower)  # lower < x  ⇔  x > lower
        hi = P.Compare(op2, column, upper)
        return P.And((lo, hi))

    def arith(self, op: str, left: Node, right: Node) -> Node:
        if isinstance(left, P.Literal) and isinstance(right, P.Literal):
            return P.Literal(_fold(op, left.value, right.value))
        for side in (left, right):
            if isinstance(side, P.Column) and side.data_type == DT.Array and not side.path:
                raise ExprError("can not comparisons array fields directly")
        lk, rk = _kind(left), _kind(right)
        name = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod"}[op]
        if lk not in (*_NUMERIC, P.JSON) or rk not in (*_NUMERIC, P.JSON):
            raise ExprError(f"'{name}' can only be used between integer or floating or json field expressions")
        integer = [_kind(x) in (P.INT, P.JSON) for x in (left, right) if not isinstance(x, P.Literal)]
        if op == "%" and not any(integer):
            raise ExprError("modulo can only apply on integer types")
        if op in ("/", "%") and isinstance(right, P.Literal) and right.value == 0:
            raise ExprError("divide by zero" if op == "/" else "modulo by zero")
        kind = P.INT if lk == rk == P.INT else P.FLOAT
        return P.Arith(op, left, right, kind)  # type: ignore[arg-type]

    def compare(self, op: str, left: Node, right: Node) -> Node:
        if isinstance(left, P.Literal) and isinstance(right, P.Literal):
            try:
                return P.Literal(_fold(op, left.value, right.value))
            except TypeError:
                raise ExprError(
                    "comparison operations cannot be applied to two incompatible operands: "
                    f"{_text(left.value)}{op}{_text(right.value)}"
                ) from None
        if _is_predicate(left) or _is_predicate(right):
            raise ExprError(f"comparisons between {_kind(left)} and {_kind(right)} are not supported")
        for side in (left, right):
            if isinstance(side, P.Column) and side.data_type == DT.Array and not side.path:
                raise ExprError("can not comparisons array fields directly")
        if isinstance(left, P.Literal):  # keep the field on the left: `3 < x` → `x > 3`
            left, right, op = right, left, _FLIP[op]
        lk, rk = _kind(left), _kind(right)
        if isinstance(right, P.Literal):
            if isinstance(right.value, tuple):
                raise ExprError(f"comparisons between {lk} and Array are not supported")
            try:
                value = _cast(right.value, lk) if lk != P.INT or not isinstance(right.value, float) else right.value
            except ValueError:
                raise ExprError(f"cannot cast value to {lk}, value is {_text(right.value)}") from None
            if lk == P.BOOL and op not in ("==", "!="):
                raise ExprError(f"comparisons between {lk} and {right.kind} are not supported")
            return P.Compare(op, left, P.Literal(value))  # type: ignore[arg-type]
        compatible = (
            lk == rk
            or (lk in _NUMERIC and rk in _NUMERIC)
            or (P.JSON in (lk, rk) and {lk, rk} <= {P.JSON, P.INT, P.FLOAT, P.STRING, P.BOOL})
        )
        if not compatible:
            raise ExprError(f"comparisons between {lk} and {rk} are not supported")
        return P.Compare(op, left, right)  # type: ignore[arg-type]


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _fold(op: str, a: Any, b: Any) -> Any:
    """Constant folding (Milvus' Add/Less/... on GenericValues)."""
    if op in ("==", "!="):
        same = a == b and (type(a) is type(b) or (not isinstance(a, (str, bool)) and not isinstance(b, (str, bool))))
        return same if op == "==" else not same
    number = (int, float)
    if op in ("<", "<=", ">", ">="):
        if (isinstance(a, str) and isinstance(b, str)) or (
            isinstance(a, number) and isinstance(b, number) and not isinstance(a, bool) and not isinstance(b, bool)
        ):
            return _ORDER[op](a, b)
        raise TypeError(op)
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, number) or not isinstance(b, number):
        raise ExprError(f"{op} can only be applied on numbers")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise ExprError("divide by zero")
        if isinstance(a, int) and isinstance(b, int):
            return int(a / b)  # C / Go integer division truncates toward zero
        return a / b
    if op == "%":
        if not (isinstance(a, int) and isinstance(b, int)):
            raise ExprError("modulo can only apply on integer types")
        if b == 0:
            raise ExprError("modulo by zero")
        return int(math.fmod(a, b))
    if op == "**":
        return float(a) ** float(b)
    raise ExprError(f"unexpected op: {op}")


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (bool, int, float, str)):
        return value
    raise ExprError(f"unsupported template value type: {type(value).__name__}")


def template_values(values: Mapping[str, schema_pb2.TemplateValue]) -> dict[str, Any]:
    """A request's `expr_template_values` as Python values for `parse`."""
    return {name: _template_value(v) for name, v in values.items()}


def _template_value(v: schema_pb2.TemplateValue) -> Any:
    which = v.WhichOneof("val")
    if which == "array_val":
        return _template_array(v.array_val)
    return getattr(v, which) if which else None


def _template_array(a: schema_pb2.TemplateArrayValue) -> list[Any]:
    which = a.WhichOneof("data")
    if which is None:
        return []
    if which == "array_data":
        return [_template_array(x) for x in a.array_data.data]
    if which == "json_data":
        raise ExprError("unsupported template value type: json array")
    return list(getattr(a, which).data)


def _fail(expr: str, why: str) -> MilvusError:
    return MilvusError(merr.PARAMETER_INVALID, f"cannot parse expression: {expr}, error: {why}")


def parse(expr: str, schema: schema_pb2.CollectionSchema, template_values: Mapping[str, Any] | None = None) -> P.Plan:
    """Parse and type-check `expr` against `schema`; the empty expression matches every row.

    `template_values` fills `{name}` placeholders (see `template_values()` for a request's)."""
    if not expr.strip():
        return P.Plan(expr, P.Const(True), schema)
    try:
        node = _Parser(expr, _Schema(schema), template_values).parse()
    except LexError as exc:
        raise _fail(expr, f"line 1:{exc.column} {exc}") from None
    except ExprError as exc:
        raise _fail(expr, str(exc)) from None
    if isinstance(node, P.Literal) and isinstance(node.value, bool):
        return P.Plan(expr, P.Const(node.value), schema)
    if not _is_predicate(node):
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"predicate is not a boolean expression: {expr}, data type: {_kind(node)}",
        )
    return P.Plan(expr, node, schema)
