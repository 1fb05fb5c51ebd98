"""Milvus' tokenizers over a batch of texts, columnar: `standard` (tantivy's SimpleTokenizer:
runs of alphanumeric characters), `whitespace` (tantivy's WhitespaceTokenizer: runs between ASCII
whitespace) and `jieba` (jieba-rs, through rjieba: the library Milvus' tokenizer wraps).

`standard` and `whitespace` scan the batch's UTF-8 bytes with numpy: every character's code
point is decoded at once and looked up in a table of the characters that belong to a token. The
tables are tantivy's own answer (tantivy-py, the same tokenizers Milvus runs): at first use the
simple tokenizer is run once over every Unicode character, and the whitespace tokenizer over
every candidate separator, so a token boundary here is a token boundary in Milvus.

A token carries its row, its position (tantivy's: the n-th token of the tokenizer, before any
filter drops one; jieba's: the character index where the word starts, as Milvus' jieba
tokenizer sets it), its byte offsets in the row's text and its position length.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_MAX_CP = 0x110000


@dataclass
class Tokens:
    """Tokens of a batch of texts, in row order (then position order)."""

    row: np.ndarray  # int64: which text
    position: np.ndarray  # int64
    start: np.ndarray  # int64: byte offset in the text
    end: np.ndarray  # int64
    text: pa.Array  # string: the token
    position_length: np.ndarray | None = None  # int64; None: 1 each

    def __len__(self) -> int:
        return len(self.row)

    def lengths(self) -> np.ndarray:
        return np.ones(len(self.row), np.int64) if self.position_length is None else self.position_length

    @classmethod
    def empty(cls) -> Tokens:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z, pa.array([], pa.string()))


@functools.cache
def _alphanumeric() -> np.ndarray:
    """Characters tantivy's SimpleTokenizer keeps (Rust's `char::is_alphanumeric`), as a table."""
    from tantivy import TextAnalyzerBuilder, Tokenizer

    simple = TextAnalyzerBuilder(Tokenizer.simple()).build()
    chars = " ".join(chr(c) for c in range(_MAX_CP) if not 0xD800 <= c < 0xE000)
    table = np.zeros(_MAX_CP, dtype=bool)
    table[[ord(t) for t in simple.analyze(chars)]] = True
    return table


@functools.cache
def _not_whitespace() -> np.ndarray:
    """Characters tantivy's WhitespaceTokenizer keeps in a token: all but its separators."""
    from tantivy import TextAnalyzerBuilder, Tokenizer

    ws = TextAnalyzerBuilder(Tokenizer.whitespace()).build()
    candidates = [
        c
        for c in range(_MAX_CP)
        if not 0xD800 <= c < 0xE000 and (chr(c).isspace() or unicodedata.category(chr(c))[0] in "ZC")
    ]
    table = np.ones(_MAX_CP, dtype=bool)
    for c in candidates:
        if len(ws.analyze(f"a{chr(c)}b")) == 2:
            table[c] = False
    return table


def _text_buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes of every text one after another, offsets: text i is bytes[off[i]:off[i+1]])."""
    if texts.type != pa.large_string():
        texts = texts.cast(pa.large_string())
    if texts.null_count:
        texts = texts.fill_null("")
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64, count=len(texts) + 1, offset=texts.offset * 8)
    data = texts.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    lo, hi = int(offsets[0]), int(offsets[-1])
    return raw[lo:hi], offsets - lo


def _inside(b: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per byte of UTF-8 `b`: whether its character has `keep[code point]`. ASCII bytes look up
    the table directly; only the other characters are decoded (vectorised)."""
    inside: np.ndarray = keep[:128][np.minimum(b, 127)]
    high = np.flatnonzero(b >= 0x80)
    if not len(high):
        return inside
    hb = b[high].astype(np.uint32)
    leads = high[(hb & 0xC0) == 0xC0]
    padded = np.concatenate([b, np.zeros(3, np.uint8)]).astype(np.uint32)
    b0 = padded[leads]
    b1, b2, b3 = padded[leads + 1] & 0x3F, padded[leads + 2] & 0x3F, padded[leads + 3] & 0x3F
    cp = np.where(
        b0 < 0xE0,
        ((b0 & 0x1F) << 6) | b1,
        np.where(b0 < 0xF0, ((b0 & 0x0F) << 12) | (b1 << 6) | b2, ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3),
    )
    lead_in = keep[np.minimum(cp, _MAX_CP - 1)]
    # A continuation byte belongs to the last lead byte before it.
    owner = np.searchsorted(leads, high, side="right") - 1
    inside[high] = lead_in[np.maximum(owner, 0)] & (owner >= 0)
    return inside


def _gather_strings(b: np.ndarray, start: np.ndarray, end: np.ndarray) -> pa.Array:
    """The byte ranges [start, end) of `b` as a string array (one numpy gather, no Python loop)."""
    lens = end - start
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    idx = np.repeat(start - offsets[:-1], lens) + np.arange(int(offsets[-1]), dtype=np.int64)
    data = b[idx]
    return pa.LargeStringArray.from_buffers(len(lens), pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))


def runs(texts: pa.Array, keep: np.ndarray) -> Tokens:
    """Maximal runs of characters with `keep[code point]` inside each text: the tokens."""
    b, offsets = _text_buffers(texts)
    if not len(b):
        return Tokens.empty()
    inside = _inside(b, keep)
    cut = np.zeros(len(b) + 1, dtype=bool)  # a token never spans two texts
    cut[offsets] = True
    edge = np.concatenate([[False], inside, [False]])
    begins = edge[1:] & (~edge[:-1] | cut)
    ends = edge[:-1] & (~edge[1:] | cut)
    start = np.flatnonzero(begins[:-1])
    end = np.flatnonzero(ends[1:]) + 1
    tok_row = np.searchsorted(offsets, start, side="right") - 1
    text = _gather_strings(b, start, end)
    return Tokens(tok_row.astype(np.int64), positions(tok_row), start - offsets[tok_row], end - offsets[tok_row], text)


def positions(rows: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal (sorted) `rows`: a token's index in its text."""
    idx = np.arange(len(rows), dtype=np.int64)
    if not len(rows):
        return idx
    new = np.concatenate([[True], rows[1:] != rows[:-1]])
    return idx - np.maximum.accumulate(np.where(new, idx, 0))


def standard(texts: pa.Array) -> Tokens:
    return runs(texts, _alphanumeric())


def whitespace(texts: pa.Array) -> Tokens:
    return runs(texts, _not_whitespace())


class Jieba:
    """Milvus' jieba tokenizer: jieba-rs' `tokenize` in "search" (default) or "exact" mode, with
    the default dictionary and/or the given words (`_default_` in the list keeps the default)."""

    def __init__(self, mode: str = "search", hmm: bool = True, words: list[str] | None = None, default: bool = True):
        import rjieba

        self.mode = "search" if mode == "search" else "default"
        self.hmm = hmm
        if words is None and default:
            self.jieba = rjieba.Jieba()
        else:
            self.jieba = rjieba.Jieba() if default else rjieba.Jieba.empty()
            for w in words or ():
                self.jieba.add_word(w, None, None)

    def __call__(self, texts: pa.Array) -> Tokens:
        rows, pos, plen, starts, ends, words = [], [], [], [], [], []
        for i, text in enumerate(texts.to_pylist()):
            if not text:
                continue
            # Character offsets → byte offsets (Milvus reports bytes, as Rust strings index).
            byte_at = np.zeros(len(text) + 1, np.int64)
            np.cumsum([len(c.encode()) for c in text], out=byte_at[1:])
            for word, s, e in self.jieba.tokenize(text, self.mode, self.hmm):
                rows.append(i)
                pos.append(s)
                plen.append(e - s)
                starts.append(int(byte_at[s]))
                ends.append(int(byte_at[e]))
                words.append(word)
        if not rows:
            return Tokens.empty()
        return Tokens(
            np.asarray(rows, np.int64),
            np.asarray(pos, np.int64),
            np.asarray(starts, np.int64),
            np.asarray(ends, np.int64),
            pa.array(words, pa.large_string()),
            np.asarray(plen, np.int64),
        )
