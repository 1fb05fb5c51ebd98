"""Milvus' expression language: parsing (precedence, type checks, Milvus' error texts), primary-key
extraction, and column-wise evaluation over a small Arrow table of every type."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import parse
from kmilvus.parser import plan as P
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType


def make_schema(dynamic: bool = True, pk_type: int = DT.Int64) -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="exprs", enable_dynamic_field=dynamic)
    s.fields.add(fieldID=100, name="id", data_type=pk_type, is_primary_key=True)
    s.fields.add(fieldID=101, name="b", data_type=DT.Bool)
    s.fields.add(fieldID=102, name="i8", data_type=DT.Int8)
    s.fields.add(fieldID=103, name="i32", data_type=DT.Int32)
    s.fields.add(fieldID=104, name="i64", data_type=DT.Int64)
    s.fields.add(fieldID=105, name="f", data_type=DT.Float)
    s.fields.add(fieldID=106, name="d", data_type=DT.Double)
    s.fields.add(fieldID=107, name="s", data_type=DT.VarChar)
    s.fields.add(fieldID=108, name="meta", data_type=DT.JSON)
    s.fields.add(fieldID=109, name="arr", data_type=DT.Array, element_type=DT.Int64)
    s.fields.add(fieldID=110, name="tags", data_type=DT.Array, element_type=DT.VarChar)
    s.fields.add(fieldID=111, name="vec", data_type=DT.FloatVector)
    if dynamic:
        s.fields.add(fieldID=112, name="$meta", data_type=DT.JSON, is_dynamic=True)
    return s


SCHEMA = make_schema()


def parse_error(expr: str, schema=SCHEMA) -> str:
    with pytest.raises(MilvusError) as info:
        parse(expr, schema)
    assert info.value.code == 1100
    return str(info.value)


# -- primary keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "keys"),
    [
        ("id in [1, 2]", [1, 2]),
        ("id == 3", [3]),
        ("3 == id", [3]),
        ("id in [1,2] or id == 7", [1, 2, 7]),
        ("(id == 1) || (id in [2, 1])", [1, 2]),
        ("id IN [0x10, 010, 0b11]", [16, 8, 3]),
        ("id in [-5]", [-5]),
    ],
)
def test_primary_keys_of_int64_terms(expr, keys):
    got = parse(expr, SCHEMA).primary_keys()
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    assert got.tolist() == keys


@pytest.mark.parametrize(
    "expr",
    ["id > 3", "id in [1] and i64 > 0", "id not in [1]", "not (id == 1)", "i64 == 3", "id == 1 or i64 == 2", ""],
)
def test_no_primary_keys_for_other_expressions(expr):
    assert parse(expr, SCHEMA).primary_keys() is None


def test_primary_keys_of_varchar_pk():
    schema = make_schema(pk_type=DT.VarChar)
    assert parse("id in ['a', \"b\"]", schema).primary_keys() == ["a", "b"]
    assert parse('"c" == id or id == "d"', schema).primary_keys() == ["c", "d"]
    assert "cannot be casted to VarChar" in parse_error("id in [1]", schema)


# -- parse: precedence and shapes --------------------------------------------------------------


def test_precedence_and_binds_tighter_than_or():
    pred = parse("i64 > 1 or i64 < 0 and s == 'x'", SCHEMA).predicate
    assert isinstance(pred, P.Or)
    assert isinstance(pred.children[1], P.And)


def test_arithmetic_precedence_and_folding():
    pred = parse("i64 + 2 * 3 == 7", SCHEMA).predicate
    assert isinstance(pred, P.Compare)
    assert isinstance(pred.left, P.Arith) and pred.left.op == "+"
    assert pred.left.right == P.Literal(6)
    assert parse("1 + 2 * 3 == 7", SCHEMA).predicate == P.Const(True)
    assert parse("7 / 2 == 3 and 7 % 3 == 1 and 2 ** 3 == 8.0", SCHEMA).predicate == P.Const(True)


def test_literal_on_the_left_is_flipped():
    pred = parse("3 < i64", SCHEMA).predicate
    assert pred == P.Compare(">", parse("i64 > 0", SCHEMA).predicate.left, P.Literal(3))


def test_chained_ranges_become_two_comparisons():
    pred = parse("1 < i64 <= 5", SCHEMA).predicate
    assert isinstance(pred, P.And)
    assert [(c.op, c.right.value) for c in pred.children] == [(">", 1), ("<=", 5)]
    pred = parse("10 >= d > 2.5", SCHEMA).predicate
    assert [(c.op, c.right.value) for c in pred.children] == [(">", 2.5), ("<=", 10.0)]


def test_json_paths_and_dynamic_keys():
    col = parse('meta["a"][0]["b"] == 1', SCHEMA).predicate.left
    assert (col.name, col.path) == ("meta", ("a", 0, "b"))
    col = parse("color == 'red'", SCHEMA).predicate.left
    assert (col.name, col.path, col.is_dynamic) == ("$meta", ("color",), True)
    col = parse('$meta["color"] == "red"', SCHEMA).predicate.left
    assert (col.name, col.path) == ("$meta", ("color",))
    col = parse('other["x"] == 1', SCHEMA).predicate.left  # an unknown JSON identifier is a dynamic key too
    assert (col.name, col.path) == ("$meta", ("other", "x"))


def test_strings_and_escapes():
    pred = parse(r's == "a\"b\n" or s == ' + "'it\\'s'", SCHEMA).predicate
    assert [c.right.value for c in pred.children] == ['a"b\n', "it's"]


@pytest.mark.parametrize(
    "expr",
    [
        "b == true and b != False and b == TRUE",
        "s like 'ab%' and s LIKE '%z' and s like '%m%'",
        "i64 not in [1, 2] && not (i8 in [3])",
        "array_contains(arr, 1) and ARRAY_CONTAINS_ALL(arr, [1, 2]) and array_contains_any(tags, ['x'])",
        "array_length(arr) == 2 and arr[0] > 1",
        'json_contains(meta["tags"], "x") and exists meta["k"] and meta["k"] is not null',
        "i64 in []",
        "(((i64 > 1)))",
    ],
)
def test_grammar_accepts(expr):
    assert not isinstance(parse(expr, SCHEMA).predicate, P.Const)


# -- parse: Milvus' errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("id in [1,2", "cannot parse expression: id in [1,2, error: line 1:10 missing ']' at '<EOF>'"),
        ("i64 >", "cannot parse expression: i64 >, error: line 1:5 mismatched input '<EOF>'"),
        ("i64 > 1 i8", "error: line 1:8 extraneous input 'i8' expecting <EOF>"),
        ("i64 @ 1", "error: line 1:4 token recognition error at: '@'"),
        ("s like 1", "error: line 1:7 mismatched input '1' expecting StringLiteral"),
        ("foo(i64)", "error: line 1:0 function foo not found"),
    ],
)
def test_syntax_errors_name_position_and_token(expr, message):
    assert message in parse_error(expr)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("not i64 > 1", "not op can only be applied on boolean expression"),
        ("i64 > 1 and s", "'and' can only be used between boolean expressions"),
        ("i64 > 1 or 3", "'or' can only be used between boolean expressions"),
        ("s in [1, 2]", "value '1' in list cannot be casted to VarChar"),
        ("i64 in [1.5]", "value '1.5' in list cannot be casted to Int64"),
        ("i64 like 'a%'", "like operation on non-string or no-json field is unsupported"),
        ("s + 1 > 2", "'add' can only be used between integer or floating or json field expressions"),
        ("d % 2 == 1", "modulo can only apply on integer types"),
        ("i64 / 0 == 1", "divide by zero"),
        ("i64 & 1 == 1", "BitAnd is not supported"),
        ("i64 << 1 == 2", "shift is not supported"),
        ("i64 ** 2 == 4", "power can only apply on constants"),
        ("array_contains(i64, 1)", "contains operation are only supported on json or array fields now"),
        ("array_contains_all(arr, 1)", "contains_all operation element must be an array"),
        ("array_contains(arr, 'x')", "contains operation can't compare between array element type: Int64 and VarChar"),
        ("exists i64", "exists operations are only supportted on json field"),
        ("arr > 1", "can not comparisons array fields directly"),
        ('s["k"] == 1', "VarChar data type not supported accessed with []"),
        ('arr["k"] == 1', "can only access array field with integer index"),
        ("1 < i64 < s", "upperbound cannot be a non-const expression"),
        ("1 < s < 5", "invalid range operations"),
        ("s > 3", "cannot cast value to VarChar, value is 3"),
        ("i64 + 1", "predicate is not a boolean expression: i64 + 1, data type: Int64"),
        ("i64", "predicate is not a boolean expression"),
    ],
)
def test_semantic_errors(expr, message):
    assert message in parse_error(expr)


def test_unknown_field_without_dynamic_field():
    schema = make_schema(dynamic=False)
    assert parse_error("color == 'red'", schema) == (
        "cannot parse expression: color == 'red', error: field color not exist"
    )
    assert "field $meta not exist" in parse_error('$meta["a"] == 1', schema)


def test_empty_expression_matches_all():
    assert parse("", SCHEMA).predicate == P.Const(True)
    assert parse("   ", SCHEMA).predicate == P.Const(True)
