"""The lexer of Milvus' expression grammar (planparserv2/Plan.g4), hand-written.

Token kinds follow Plan.g4's lexer rules; a JSON path (`meta["a"][0]`) is one token, as
JSONIdentifier is, so no whitespace may stand inside it. Columns are 0-based, as ANTLR reports
them ("line 1:7 ..."), so error messages point where Milvus' do.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

# Token kinds.
INT = "IntegerConstant"
FLOAT = "FloatingConstant"
BOOL = "BooleanConstant"
STRING = "StringLiteral"
IDENT = "Identifier"
JSON_IDENT = "JSONIdentifier"
OP = "op"  # punctuation and operators; `text` says which
KEYWORD = "keyword"  # and / or / not / in / like / exists / is null / is not null; `value` is canonical
LIST = "ListLiteral"  # a whole `[...]` of plain literals right after `in`; `value` is a ListValue
EOF = "<EOF>"


class LexError(Exception):
    """A character sequence no lexer rule matches (ANTLR: token recognition error)."""

    def __init__(self, column: int, message: str):
        super().__init__(message)
        self.column = column


class Token(NamedTuple):  # a tuple: cheap to make, and long key lists make many
    kind: str
    text: str  # as written
    pos: int  # 0-based column
    value: Any = None  # literal value / canonical keyword / path steps


class ListValue(NamedTuple):
    """The values of a list the lexer read in one pass: as Python values (what the parser's
    `Literal` holds) and as one typed array (int64 numpy, or Arrow strings)."""

    values: tuple[Any, ...]
    array: np.ndarray | pa.Array


_KEYWORDS = {
    "and": "and",
    "AND": "and",
    "or": "or",
    "OR": "or",
    "not": "not",
    "NOT": "not",
    "in": "in",
    "IN": "in",
    "like": "like",
    "LIKE": "like",
    "exists": "exists",
    "EXISTS": "exists",
}
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
# Longest first: the lexer takes the longest operator that matches.
_OPERATORS = (
    "**",
    "<<",
    ">>",
    "<=",
    ">=",
    "==",
    "!=",
    "&&",
    "||",
    "<",
    ">",
    "+",
    "-",
    "*",
    "/",
    "%",
    "&",
    "|",
    "^",
    "~",
    "!",
    "(",
    ")",
    "[",
    "]",
    ",",
    "{",
    "}",
    "=",  # text_match(..., minimum_should_match=N) only
)
_CANONICAL_OP = {"&&": "and", "||": "or", "!": "not"}

_IDENT = re.compile(r"\$meta|[A-Za-z_][A-Za-z0-9_]*")
_IS_NULL = re.compile(r"(is|IS)[ \t]+(?:(not|NOT)[ \t]+)?(null|NULL)\b")
_FLOAT = re.compile(r"(?:[0-9]*\.[0-9]+|[0-9]+\.)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_INT = re.compile(r"0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


def _string(expr: str, start: int) -> tuple[str, int]:
    """Decode the quoted literal at `start` (C escapes, as Milvus' strconv.Unquote); return (value, end)."""
    quote = expr[start]
    out: list[str] = []
    i = start + 1
    n = len(expr)
    while i < n:
        c = expr[i]
        if c == quote:
            return "".join(out), i + 1
        if c in "\r\n":
            break
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            break
        e = expr[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = expr[i + 2 : i + 2 + width]
            if len(digits) != width or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                raise LexError(i, f"token recognition error at: '{expr[start : i + 2]}'")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif e == "x":
            m = re.match(r"[0-9a-fA-F]{1,2}", expr[i + 2 :])
            if m is None:
                raise LexError(i, f"token recognition error at: '{expr[start : i + 2]}'")
            out.append(chr(int(m.group(), 16)))
            i += 2 + len(m.group())
        elif e in "01234567":
            m = re.match(r"[0-7]{1,3}", expr[i + 1 :])
            assert m is not None
            out.append(chr(int(m.group(), 8)))
            i += 1 + len(m.group())
        else:  # Plan.g4 accepts any escaped character; keep it
            out.append(e)
            i += 2
    raise LexError(start, f"token recognition error at: '{expr[start:i]}'")


def _int(text: str) -> int:
    if text[0] != "0" or len(text) == 1:
        return int(text)
    if text[:2] in ("0x", "0X"):
        return int(text[2:], 16)
    if text[:2] in ("0b", "0B"):
        return int(text[2:], 2)
    return int(text[1:], 8)


def _json_path(expr: str, i: int) -> tuple[list[str | int], int]:
    """The `["key"][0]...` steps right after an identifier (no whitespace), and where they end."""
    steps: list[str | int] = []
    n = len(expr)
    while i < n and expr[i] == "[":
        j = i + 1
        if j < n and expr[j] in "'\"":
            key, j = _string(expr, j)
            step: str | int = key
        else:
            m = _DECIMAL.match(expr, j)
            if m is None:
                break
            step = int(m.group())
            j = m.end()
        if j >= n or expr[j] != "]":
            break
        steps.append(step)
        i = j + 1
    return steps, i


# One pattern for every token but strings (decoded by `_string`): one regex call per token.
_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\n]+)"
    r"|(?P<quote>['\"])"
    rf"|(?P<float>{_FLOAT.pattern})"
    rf"|(?P<int>{_INT.pattern})"
    rf"|(?P<isnull>{_IS_NULL.pattern})"
    rf"|(?P<ident>{_IDENT.pattern})"
    r"|(?P<op>" + "|".join(re.escape(op) for op in _OPERATORS) + ")"
)


# A list of plain literals after `in` (`pk in [1, 2, ...]`, `name in ["a", 'b']`: what delete
# and get send, often with thousands of keys) is read whole — a regex finds it, numpy parses it —
# not token by token. Only what the token rules read the same way: decimal integers of at most 18
# digits (always inside int64; `010` is octal and `0x..` hex: token by token), optionally negated
# (the parser folds `-5` to the literal -5), and strings without escapes, all quoted alike.
# Anything else — an expression, a float, an escape, an empty list — is left to the token rules.
_INT_CHARS = re.compile(r"\[[0-9, \t\r\n-]*\]")  # the list's extent; numpy checks its shape
_WS = r"[ \t\r\n]*"
_DQ, _SQ = r'"[^"\\\r\n]*"', r"'[^'\\\r\n]*'"
_STR_LISTS = tuple(  # (the whole list, one item's value)
    (re.compile(rf"\[{_WS}{q}(?:{_WS},{_WS}{q})*{_WS},?{_WS}\]"), re.compile(f"{q[0]}({q[1:-1]}){q[-1]}"))
    for q in (_DQ, _SQ)
)
_INT_LIMIT = 10**18  # beyond 18 digits a literal may leave int64 (numpy then saturates)


def _int_list(body: str) -> np.ndarray | None:
    """`body` (digits, `-`, commas, whitespace) read as `-?<decimal>` items between commas (one
    trailing comma allowed), or None when it is not exactly that. numpy's reader is lenient
    (`-` alone reads as 0, `1, ` as 1, 0): every item must hold exactly one run of digits."""
    body = body.rstrip(" \t\r\n").removesuffix(",")
    try:
        keys = np.fromstring(body, dtype=np.int64, sep=",")
    except ValueError:  # a shape numpy does not read (`1 2`, `1-2`, `,1`, `1,,2`)
        return None
    raw = np.frombuffer(body.encode(), dtype=np.uint8)
    digit = (raw >= ord("0")) & (raw <= ord("9"))
    run_start = digit.copy()
    run_start[1:] &= ~digit[:-1]
    if len(keys) != body.count(",") + 1 or int(run_start.sum()) != len(keys):
        return None
    if np.any(run_start[:-1] & (raw[:-1] == ord("0")) & digit[1:]):
        return None  # `0` followed by digits: octal
    if np.any(keys >= _INT_LIMIT) or np.any(keys <= -_INT_LIMIT):
        return None
    return keys


def _list_literal(expr: str, i: int) -> tuple[ListValue, int] | None:
    """The list of plain literals starting at `expr[i]` ('['), read whole, and where it ends."""
    m = _INT_CHARS.match(expr, i)
    if m is not None:
        keys = _int_list(expr[i + 1 : m.end() - 1])
        return None if keys is None else (ListValue(tuple(keys.tolist()), keys), m.end())
    for whole, item in _STR_LISTS:
        m = whole.match(expr, i)
        if m is not None:
            strings = item.findall(expr, i, m.end())
            return ListValue(tuple(strings), pa.array(strings, pa.string())), m.end()
    return None


def tokenize(expr: str) -> list[Token]:
    """All tokens of `expr`, ending with an EOF token."""
    tokens: list[Token] = []
    append = tokens.append
    i, n = 0, len(expr)
    match = _TOKEN.match
    while i < n:
        m = match(expr, i)
        if m is None:
            raise LexError(i, f"token recognition error at: '{expr[i]}'")
        kind, text, end = m.lastgroup, m.group(), m.end()
        if kind == "ws":
            pass
        elif kind == "int":
            append(Token(INT, text, i, _int(text)))
        elif kind == "op":
            whole = None
            if text == "[" and tokens and tokens[-1].kind == KEYWORD and tokens[-1].value == "in":
                whole = _list_literal(expr, i)
            if whole is not None:
                listed, end = whole
                append(Token(LIST, expr[i:end], i, listed))
            else:
                append(Token(OP if text not in _CANONICAL_OP else KEYWORD, text, i, _CANONICAL_OP.get(text, text)))
        elif kind == "ident":
            if text in _KEYWORDS:
                append(Token(KEYWORD, text, i, _KEYWORDS[text]))
            elif text in _BOOLS:
                append(Token(BOOL, text, i, _BOOLS[text]))
            else:
                steps, path_end = _json_path(expr, end)
                if steps:
                    append(Token(JSON_IDENT, expr[i:path_end], i, (text, tuple(steps))))
                    end = path_end
                else:
                    append(Token(IDENT, text, i, text))
        elif kind == "quote":
            value, end = _string(expr, i)
            append(Token(STRING, expr[i:end], i, value))
        elif kind == "float":
            append(Token(FLOAT, text, i, float(text)))
        else:  # is null / is not null
            append(Token(KEYWORD, text, i, "is not null" if len(text.split()) == 3 else "is null"))
        i = end
    append(Token(EOF, "<EOF>", n))
    return tokens
