"""Milvus' expression language: parsing (precedence, type checks, Milvus' error texts), primary-key
extraction, and column-wise evaluation over a small Arrow table of every type."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import evaluate, jsonpath, parse
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
    assert parse("id in ['a', \"b\"]", schema).primary_keys().to_pylist() == ["a", "b"]
    assert parse('"c" == id or id == "d"', schema).primary_keys().to_pylist() == ["c", "d"]
    assert "cannot be casted to VarChar" in parse_error("id in [1]", schema)


def _term(expr: str, schema=SCHEMA) -> P.Term:
    pred = parse(expr, schema).predicate
    assert isinstance(pred, P.Term)
    return pred


def _outcome(expr: str):
    """What parsing `expr` gives: the predicate (with the Python types of a Term's values), or
    the error text."""
    try:
        pred = parse(expr, SCHEMA).predicate
    except MilvusError as exc:
        return str(exc)
    return pred, [type(v) for v in pred.values] if isinstance(pred, P.Term) else None


@pytest.fixture
def token_by_token(monkeypatch):
    """Parse with the list rule switched off: every list token by token."""
    from kmilvus.parser import tokenizer

    def parse_slowly(expr: str):
        with monkeypatch.context() as m:
            m.setattr(tokenizer, "_list_literal", lambda expr, i: None)
            return _outcome(expr)

    return parse_slowly


@pytest.mark.parametrize(
    "expr",
    [
        "id in [1, 2, 3]",
        "id in [ 7 ,\n-8,\t0 , ]",
        "id in [-0]",
        "id in [- 5, -\n6]",
        "id in [999999999999999999, -999999999999999999]",
        "id not in [4, 5]",
        "d in [1, 2]",
        's in ["a", "b c", ""]',
        "s in ['x', 'é']",
        'meta["k"] in [1, 2]',
        "arr[0] in [3]",
    ],
)
def test_a_list_of_plain_literals_is_read_whole_with_the_same_values(expr, token_by_token):
    """A list after `in` of plain integers or strings is lexed in one pass (its values also as
    one typed array); the plan is the one the token rules give for the same list."""
    fast = _term(expr)
    assert _outcome(expr) == token_by_token(expr)
    if fast.value.kind == P.JSON:
        assert fast.array is None  # JSON values keep their own kinds
    else:
        got = fast.array.to_pylist() if isinstance(fast.array, pa.Array) else fast.array.tolist()
        assert got == list(fast.values)


@pytest.mark.parametrize(
    "expr",
    [
        "id in [010, 2]",  # octal
        "id in [0x10]",
        "id in [1234567890123456789]",  # 19 digits: may leave int64, token by token
        "id in [99999999999999999999]",
        "id in [+5]",
        "id in [1, 2 + 3]",
        "id in [1 2]",
        "id in [1, -, 2]",
        "id in [,1]",
        "id in [--5]",
        "d in [1.5]",
        r's in ["a\"b"]',
        "s in ['a', \"b\"]",  # mixed quotes
        "id in []",
    ],
)
def test_lists_the_whole_list_rule_does_not_take_go_token_by_token(expr, token_by_token):
    assert _outcome(expr) == token_by_token(expr)
    assert isinstance(_outcome(expr), str) or _term(expr).array is None


def test_random_integer_lists_read_whole_parse_as_token_by_token(token_by_token):
    """Lists of what the integer rule looks at — digits, `-`, commas, whitespace — in random
    shapes: the same plan or the same error either way."""
    rng = np.random.default_rng(7)
    pieces = ["0", "7", "42", "-", "-1", "007", "1" * 18, "9" * 19, "9" * 21, ",", " ", "\n", "\t", ", ", " ,"]
    for _ in range(400):
        body = "".join(rng.choice(pieces, size=int(rng.integers(1, 9))))
        expr = f"id in [{body}]"
        assert _outcome(expr) == token_by_token(expr), expr


def test_a_long_key_list_gives_its_keys_as_one_array():
    keys = [*range(10**17, 10**17 + 10_000), 10**17]  # one duplicate
    got = parse(f"id in {keys}", SCHEMA).primary_keys()
    assert got.dtype == np.int64 and got.tolist() == keys[:-1]
    schema = make_schema(pk_type=DT.VarChar)
    names = [f"k{i}" for i in range(5000)]
    got = parse(f"id in {names}", schema).primary_keys()
    assert isinstance(got, pa.Array) and got.to_pylist() == names


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ('id in ["a", "b"]', "value '\"a\"' in list cannot be casted to Int64"),
        ("s in [1, 2]", "value '1' in list cannot be casted to VarChar"),
        ("b in [1]", "value '1' in list cannot be casted to Bool"),
        ("1 in [1, 2]", "'term' can only be used on non-const expression, but got: 1"),
        ("id in [1, 2] + 1", "+ can only be applied on numbers"),
    ],
)
def test_a_list_read_whole_is_refused_as_token_by_token(expr, message):
    assert message in parse_error(expr)


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
        ('json_contains(meta["t"], [1, 2])', "contains operation on nested arrays is not supported yet"),
        ('meta["t"] in [[1, 2]]', "value '[1,2]' in list cannot be an array"),
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


# -- evaluate ----------------------------------------------------------------------------------

ROWS = [
    # id, b, i8, i32, i64, f, d, s, meta, arr, tags, $meta
    (
        1,
        True,
        -3,
        10,
        100,
        0.5,
        1.5,
        "apple",
        {"k": 1, "s": "x", "t": [1, 2], "o": {"p": 5}},
        [1, 2, 3],
        ["a"],
        {"color": "red", "n": 1},
    ),
    (2, False, 0, 20, 200, 1.5, 2.5, "banana", {"k": 2.5, "s": "y", "t": [3]}, [4], ["b", "c"], {"color": "blue"}),
    (3, True, 7, 30, 300, 2.5, 3.5, "cherry", {"k": "str", "t": []}, [], [], {"n": 3}),
    (4, False, 12, 40, 400, 3.5, 4.5, "apricot", {"s": None, "o": {"p": 6}}, [2, 2], ["a", "b"], {}),
    (5, True, -8, 50, 500, 4.5, 5.5, "%odd_", {"k": 5, "t": [5, "five"]}, [9, 1], ["z"], {"color": "red", "n": 10}),
]


def make_table(rows=ROWS, json_bytes=None) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    dumps = json_bytes or (lambda v: json.dumps(v).encode())
    return pa.table(
        {
            "100": pa.array(cols[0], pa.int64()),
            "101": pa.array(cols[1], pa.bool_()),
            "102": pa.array(cols[2], pa.int8()),
            "103": pa.array(cols[3], pa.int32()),
            "104": pa.array(cols[4], pa.int64()),
            "105": pa.array(cols[5], pa.float32()),
            "106": pa.array(cols[6], pa.float64()),
            "107": pa.array(cols[7], pa.string()),
            "108": pa.array([dumps(v) for v in cols[8]], pa.binary()),
            "109": pa.array(cols[9], pa.list_(pa.int64())),
            "110": pa.array(cols[10], pa.list_(pa.string())),
            "112": pa.array([dumps(v) for v in cols[11]], pa.binary()),
        }
    )


TABLE = make_table()

CASES = [
    ("", [1, 2, 3, 4, 5]),
    ("id in [1, 3, 9]", [1, 3]),
    ("id not in [1, 3]", [2, 4, 5]),
    ("id == 2 or 4 == id", [2, 4]),
    ("b == true", [1, 3, 5]),
    ("b != True", [2, 4]),
    ("i8 < 0", [1, 5]),
    ("-5 <= i8 < 10", [1, 2, 3]),
    ("20 > i32 >= 10", [1]),
    ("i64 >= 300 && i64 != 400", [3, 5]),
    ("f > 1.5", [3, 4, 5]),
    ("d <= 2.5", [1, 2]),
    ("f == 0.5 or d == 5.5", [1, 5]),
    ("i64 > f * 100", [1, 2, 3, 4, 5]),
    ("i32 + 5 == 25", [2]),
    ("i64 / 100 == 2", [2]),
    ("i64 % 200 == 100", [1, 3, 5]),
    ("i8 % 2 == -1", [1]),
    ("i64 - i32 * 10 == 0", [1, 2, 3, 4, 5]),
    ("-i8 > 2", [1, 5]),
    ("s == 'apple'", [1]),
    ("s > 'b'", [2, 3]),
    ("s in ['cherry', 'kiwi']", [3]),
    ("s like 'ap%'", [1, 4]),
    ("s like '%rry'", [3]),
    ("s like '%an%'", [2]),
    ("s like 'banana'", [2]),
    ("s like 'a_ple'", [1]),
    (r"s like '\\%odd\\_'", [5]),
    ("s like 'ap%' and not (i64 > 100)", [1]),
    ("not (s like 'ap%')", [2, 3, 5]),
    ('meta["k"] == 1', [1]),
    ('meta["k"] > 1', [2, 5]),
    ('meta["k"] < 3 and meta["k"] >= 1', [1, 2]),
    ('not (meta["k"] > 1)', [1]),
    ('meta["k"] != 1', [2, 5]),
    ('meta["k"] == "str"', [3]),
    ('meta["k"] in [1, 5, "str"]', [1, 3, 5]),
    ('meta["k"] not in [1, 5]', [2, 3]),
    ('meta["s"] like "x%"', [1]),
    ('meta["o"]["p"] == 6', [4]),
    ('meta["t"][0] == 3', [2]),
    ('meta["t"][1] == "five"', [5]),
    ('meta["k"] + 1 > 3', [2, 5]),
    ('exists meta["k"]', [1, 2, 3, 5]),
    ('exists meta["o"]["p"]', [1, 4]),
    ('meta["s"] is null', [3, 4, 5]),
    ('meta["s"] is not null', [1, 2]),
    ('json_contains(meta["t"], 5)', [5]),
    ('json_contains_all(meta["t"], [1, 2])', [1]),
    ('json_contains_any(meta["t"], [3, "five"])', [2, 5]),
    ('array_length(meta["t"]) == 0', [3]),
    ("array_contains(arr, 2)", [1, 4]),
    ("array_contains_all(arr, [1, 2])", [1]),
    ("array_contains_any(arr, [4, 9])", [2, 5]),
    ("not array_contains(arr, 2)", [2, 3, 5]),
    ("array_contains(tags, 'a')", [1, 4]),
    ("array_contains_any(tags, ['b', 'z'])", [2, 4, 5]),
    ("array_length(arr) == 2", [4, 5]),
    ("array_length(tags) >= 1", [1, 2, 4, 5]),
    ("arr[0] == 2", [4]),
    ("arr[1] > 1", [1, 4]),
    ("arr[0] in [1, 4]", [1, 2]),
    ("tags[0] == 'a'", [1, 4]),
    ("color == 'red'", [1, 5]),
    ('$meta["color"] == "blue"', [2]),
    ("n > 2", [3, 5]),
    ("exists color", [1, 2, 5]),
    ("color in ['red', 'blue'] and n == 1", [1]),
    ("(i8 > 0 or s == 'apple') and b == true", [1, 3]),
    ("i8 > 0 or s == 'apple' and b == false", [3, 4]),
    ("not (i8 > 0 or s == 'apple')", [2, 5]),
    ("i64 in []", []),
    ("i64 not in []", [1, 2, 3, 4, 5]),
    ("id < 0", []),
]


def matching_ids(expr: str, table: pa.Table = TABLE) -> list[int]:
    mask = evaluate(parse(expr, SCHEMA), table)
    assert isinstance(mask, pa.BooleanArray) and len(mask) == table.num_rows and mask.null_count == 0
    return table.column("100").filter(mask).to_pylist()


@pytest.mark.parametrize(("expr", "ids"), CASES)
def test_evaluate(expr, ids):
    assert matching_ids(expr) == ids


JSON_CASES = [c for c in CASES if "meta" in c[0] or "color" in c[0] or c[0].startswith("n ")]


@pytest.mark.parametrize(("expr", "ids"), JSON_CASES)
def test_evaluate_json_through_orjson(expr, ids, monkeypatch):
    """Columns Arrow's JSON reader cannot take (mixed types of a key) are read with orjson."""
    monkeypatch.setattr(jsonpath, "_read_arrow", lambda col: None)
    assert matching_ids(expr) == ids


def test_json_reader_choice():
    uniform = pa.array([b'{"a": 1, "b": [1]}', b'{"a": 2}', b"{}"], pa.binary())
    assert isinstance(jsonpath.read_column(uniform), jsonpath._ArrowJson)
    mixed = pa.array([b'{"a": 1}', b'{"a": "x"}'], pa.binary())
    assert isinstance(jsonpath.read_column(mixed), jsonpath._ObjJson)
    newline = pa.array([b'{"a":\n 1}', b'{"a": 2}'], pa.binary())
    assert isinstance(jsonpath.read_column(newline), jsonpath._ObjJson)


UNIFORM_ROWS = [
    {"k": 1, "s": "x", "t": [1, 2], "o": {"p": 5}},
    {"k": 2, "s": "y", "t": [3]},
    {"k": 3, "t": []},
    {"s": None, "o": {"p": 6}},
    {"k": 5, "s": "xy", "t": [5, 6]},
]


@pytest.mark.parametrize(
    ("expr", "ids"),
    [
        ('meta["k"] > 1', [2, 3, 5]),
        ('not (meta["k"] > 1)', [1]),
        ('meta["k"] in [1, 5]', [1, 5]),
        ('meta["k"] not in [1, 5]', [2, 3]),
        ('meta["k"] % 2 == 1', [1, 3, 5]),
        ('meta["s"] like "x%"', [1, 5]),
        ('meta["s"] == "y"', [2]),
        ('meta["o"]["p"] >= 5', [1, 4]),
        ('meta["t"][1] == 6', [5]),
        ('json_contains(meta["t"], 3)', [2]),
        ('json_contains_all(meta["t"], [5, 6])', [5]),
        ('json_contains_any(meta["t"], [1, 6])', [1, 5]),
        ('array_length(meta["t"]) == 2', [1, 5]),
        ('exists meta["o"]', [1, 4]),
        ('exists meta["s"]', [1, 2, 4, 5]),
        ('meta["s"] is null', [3, 4]),
    ],
)
def test_arrow_and_orjson_readers_agree(expr, ids, monkeypatch):
    rows = [(*r[:8], meta, *r[9:]) for r, meta in zip(ROWS, UNIFORM_ROWS, strict=True)]
    table = make_table(rows)
    assert isinstance(jsonpath.read_column(table.column("108")), jsonpath._ArrowJson)
    assert matching_ids(expr, table) == ids
    monkeypatch.setattr(jsonpath, "_read_arrow", lambda col: None)
    assert matching_ids(expr, table) == ids


def test_evaluate_record_batch_by_field_name():
    batch = TABLE.to_batches()[0]
    renamed = batch.rename_columns([f.name for f in SCHEMA.fields if str(f.fieldID) in batch.schema.names])
    assert renamed.schema.names[7] == "s"
    mask = evaluate(parse("s like 'ap%' and i64 > 100", SCHEMA), renamed)
    assert mask.to_pylist() == [False, False, False, True, False]


def test_evaluate_chunked_table():
    table = pa.concat_tables([TABLE.slice(0, 2), TABLE.slice(2)])
    assert table.column("100").num_chunks == 2
    assert matching_ids('meta["k"] > 1 or array_contains(arr, 2)', table) == [1, 2, 4, 5]


def test_json_null_rows_and_missing_keys_are_false_not_errors():
    table = TABLE.set_column(8, "108", pa.array([None, b"{}", b'{"k": 3}', b"[1, 2]", b'"text"'], pa.binary()))
    assert matching_ids('meta["k"] >= 3', table) == [3]
    assert matching_ids('not (meta["k"] >= 3)', table) == []
    assert matching_ids("meta is null", table) == [1]


# -- property: evaluate agrees with a per-row reference interpreter -----------------------------


def _random_expr(rng: np.random.Generator, depth: int) -> tuple[str, str]:
    """(Milvus expression, the same as Python over a row `r`) over the int columns i8 / i32 / i64."""
    if depth == 0 or rng.random() < 0.3:
        col = rng.choice(["i8", "i32", "i64"])
        kind = rng.integers(0, 4)
        if kind == 0:
            op = rng.choice(["==", "!=", "<", "<=", ">", ">="])
            v = int(rng.integers(-10, 400))
            return f"{col} {op} {v}", f"(r['{col}'] {op} {v})"
        if kind == 1:
            vals = [int(v) for v in rng.integers(-10, 60, rng.integers(0, 4))]
            neg = bool(rng.integers(0, 2))
            return (f"{col} {'not in' if neg else 'in'} {vals}", f"(r['{col}'] {'not in' if neg else 'in'} {vals})")
        if kind == 2:
            m = int(rng.integers(2, 5))
            k = int(rng.integers(0, m))
            return f"{col} % {m} == {k}", f"(math.fmod(r['{col}'], {m}) == {k})"
        lo, hi = sorted(int(v) for v in rng.integers(-10, 400, 2))
        return f"{lo} < {col} <= {hi}", f"({lo} < r['{col}'] <= {hi})"
    kind = rng.integers(0, 3)
    left, pleft = _random_expr(rng, depth - 1)
    if kind == 0:
        return f"not ({left})", f"(not ({pleft}))"
    right, pright = _random_expr(rng, depth - 1)
    op = rng.choice(["and", "or", "&&", "||"])
    pop = {"&&": "and", "||": "or"}.get(str(op), str(op))
    return f"{left} {op} {right}", f"{pleft} {pop} {pright}"  # no parentheses: precedence decides both


def test_evaluate_matches_reference_interpreter():
    import math

    rng = np.random.default_rng(7)
    n = 200
    table = pa.table(
        {
            "100": pa.array(np.arange(n), pa.int64()),
            "102": pa.array(rng.integers(-128, 128, n), pa.int8()),
            "103": pa.array(rng.integers(-50, 60, n), pa.int32()),
            "104": pa.array(rng.integers(0, 400, n), pa.int64()),
        }
    )
    rows = [
        {"i8": a, "i32": b, "i64": c}
        for a, b, c in zip(
            table.column("102").to_pylist(),
            table.column("103").to_pylist(),
            table.column("104").to_pylist(),
            strict=True,
        )
    ]
    for _ in range(300):
        expr, python = _random_expr(rng, 3)
        check = eval(f"lambda r: {python}", {"math": math})  # the reference: one row at a time
        expected = [check(r) for r in rows]
        assert evaluate(parse(expr, SCHEMA), table).to_pylist() == expected, expr


# -- expression templates (pymilvus' expr_params / filter_params) -------------------------------


def test_template_values_from_pymilvus_request():
    from pymilvus.client.prepare import Prepare

    from kmilvus.parser import template_values

    proto = Prepare.prepare_expression_template({"ids": [1, 3], "name": "apple", "lo": 1.5, "tags": [["a"], ["b"]]})
    values = template_values(proto)
    assert values == {"ids": [1, 3], "name": "apple", "lo": 1.5, "tags": [["a"], ["b"]]}
    plan = parse("id in {ids} or (s == {name} and f > {lo})", SCHEMA, values)
    assert plan.primary_keys() is None
    assert evaluate(plan, TABLE).to_pylist() == [True, False, True, False, False]
    assert parse("id in {ids}", SCHEMA, values).primary_keys().tolist() == [1, 3]
    assert "template variable name {nope} is not found" in parse_error("id in {nope}")
    with pytest.raises(MilvusError, match="value '\"x\"' in list cannot be casted to Int64"):
        parse("id in {v}", SCHEMA, {"v": ["x"]})


def test_selective_and_evaluates_the_rest_on_surviving_rows_only(monkeypatch):
    from kmilvus.parser import evaluator

    rows = [ROWS[i % len(ROWS)] for i in range(400)]
    rows = [(i, *r[1:]) for i, r in enumerate(rows)]
    table = make_table(rows)
    exprs = [
        'id in [3, 6, 9, 200] and meta["k"] > 1',
        'id < 20 and not (meta["k"] > 1) and color == "red"',
        'id in [1, 2] and (meta["s"] == "y" or meta["k"] == "str")',
        "id < 0 and meta['k'] > 1",
        'meta["k"] >= 1 and id in [0, 1, 4]',
    ]
    parsed: list[int] = []
    real = evaluator.read_column
    monkeypatch.setattr(evaluator, "read_column", lambda col, exact=False: parsed.append(len(col)) or real(col, exact))
    for expr in exprs:
        plan = parse(expr, SCHEMA)
        narrowed = evaluate(plan, table).to_pylist()
        whole = evaluate(plan, table, json_cache={}).to_pylist()  # a caller's cache: no narrowing
        assert narrowed == whole, expr
    assert parsed[:2] == [4, 400]  # the first expression parsed 4 rows of meta, then all 400 with the cache
    assert evaluate(parse(exprs[0], SCHEMA), table).to_pylist().count(True) == 2  # ids 6 (k=2.5) and 9 (k=5)
