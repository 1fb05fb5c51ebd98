"""The text-match index of one segment's field (Milvus' TextMatchIndex, a tantivy index per
segment): every token the field's analyzer gives, with the rows and positions it occurs at.

Layout (numpy, term-major): `vocab` (the distinct tokens, Arrow strings), `doc_indptr` / `docs`
(term t's distinct rows are docs[doc_indptr[t]:doc_indptr[t+1]], ascending) and `occ_indptr` /
`occ_row` / `occ_pos` (all its occurrences, by row then position). A query looks up its tokens
and touches only their postings: `text_match` counts, per row, the query tokens it holds (at
least `minimum_should_match`; one by default); `phrase_match` needs every token, at positions
that fit the query's — exactly (slop 0) or with tantivy's sloppy phrase rule.

The file is the envelope of kmilvus' index files (magic, JSON meta, body) with the vocabulary as
one Arrow IPC stream and the arrays after it. Sealed segments have one, built with the
segment's other indexes; growing data is indexed on the fly when a filter needs it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kmilvus.analyzer import Analyzer, Tokens
from kmilvus.index import fileformat
from kmilvus.index.base import pack_arrays, unpack_arrays

MAGIC = b"KMTEXT1\0"
_ARRAYS = ("doc_indptr", "docs", "occ_indptr", "occ_row", "occ_pos")


class TextIndex:
    kind = "text"

    def __init__(self, num_rows: int, vocab: pa.Array, arrays: dict[str, np.ndarray]):
        self.num_rows = num_rows
        self.vocab = vocab
        self.doc_indptr, self.docs = arrays["doc_indptr"], arrays["docs"]
        self.occ_indptr, self.occ_row, self.occ_pos = arrays["occ_indptr"], arrays["occ_row"], arrays["occ_pos"]
        self._ids: dict[str, int] | None = None

    # Build --------------------------------------------------------------------------------
    @classmethod
    def from_tokens(cls, tokens: Tokens, num_rows: int) -> TextIndex:
        if not len(tokens):
            z = np.zeros(1, np.int64)
            e = np.zeros(0, np.int32)
            arrays: dict[str, np.ndarray] = {"doc_indptr": z, "docs": e, "occ_indptr": z, "occ_row": e, "occ_pos": e}
            return cls(num_rows, pa.array([], pa.large_string()), arrays)
        enc = pc.dictionary_encode(tokens.text)
        term = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.lexsort((tokens.position, tokens.row, term))
        term, row, pos = term[order], tokens.row[order], tokens.position[order]
        nterms = len(enc.dictionary)
        occ_indptr = np.zeros(nterms + 1, np.int64)
        np.cumsum(np.bincount(term, minlength=nterms), out=occ_indptr[1:])
        first = np.concatenate([[True], (term[1:] != term[:-1]) | (row[1:] != row[:-1])])
        doc_term, docs = term[first], row[first]
        doc_indptr = np.zeros(nterms + 1, np.int64)
        np.cumsum(np.bincount(doc_term, minlength=nterms), out=doc_indptr[1:])
        arrays = {
            "doc_indptr": doc_indptr,
            "docs": docs.astype(np.int32),
            "occ_indptr": occ_indptr,
            "occ_row": row.astype(np.int32),
            "occ_pos": pos.astype(np.int32),
        }
        return cls(num_rows, enc.dictionary.cast(pa.large_string()), arrays)

    @classmethod
    def build(cls, texts: pa.Array | pa.ChunkedArray, analyzer: Analyzer) -> TextIndex:
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        return cls.from_tokens(analyzer.analyze(texts), len(texts))

    # Lookups ------------------------------------------------------------------------------
    def term_id(self, token: str) -> int | None:
        if self._ids is None:
            self._ids = {t: i for i, t in enumerate(self.vocab.to_pylist())}
        return self._ids.get(token)

    def rows_of(self, t: int) -> np.ndarray:
        return self.docs[self.doc_indptr[t] : self.doc_indptr[t + 1]]

    def match(self, tokens: Sequence[str], min_should_match: int = 1) -> np.ndarray:
        """Rows holding at least `min_should_match` of `tokens` (each query token one clause)."""
        need = max(1, min_should_match)
        if len(tokens) < need:
            return np.zeros(self.num_rows, bool)
        postings = [self.rows_of(t) for t in map(self.term_id, tokens) if t is not None]
        if not postings:
            return np.zeros(self.num_rows, bool)
        counts = np.bincount(np.concatenate(postings), minlength=self.num_rows)
        return counts >= need

    def phrase(self, tokens: Sequence[tuple[str, int]], slop: int = 0) -> np.ndarray:
        """Rows where the tokens occur in order at their query offsets (within `slop`)."""
        if len(tokens) <= 1:
            return self.match([t for t, _ in tokens])
        ids = [i for i in (self.term_id(t) for t, _ in tokens) if i is not None]
        if len(ids) < len(tokens):  # a token no row holds
            return np.zeros(self.num_rows, bool)
        cand = self.rows_of(ids[0])
        for i in ids[1:]:
            cand = np.intersect1d(cand, self.rows_of(i), assume_unique=True)
        out = np.zeros(self.num_rows, bool)
        if not len(cand):
            return out
        # Each term's occurrences in the candidate rows, shifted by its query offset.
        occ = []
        for i, (_, q) in zip(ids, tokens, strict=True):
            lo, hi = self.occ_indptr[i], self.occ_indptr[i + 1]
            rows, pos = self.occ_row[lo:hi], self.occ_pos[lo:hi].astype(np.int64) - q
            keep = np.isin(rows, cand)
            occ.append((rows[keep], pos[keep]))
        if slop == 0:
            keys: np.ndarray | None = None
            for rows, pos in occ:
                k = np.unique(rows.astype(np.int64) << 32 | (pos + (1 << 31)))
                keys = k if keys is None else np.intersect1d(keys, k, assume_unique=True)
            assert keys is not None  # one entry per query token, and there are several
            out[(keys >> 32).astype(np.int64)] = True
            return out
        for r in cand.tolist():
            lists = [np.sort(pos[rows == r]) for rows, pos in occ]
            left = lists[0]
            for right in lists[1:]:
                left = _intersection_with_slop(left, right, slop)
                if not len(left):
                    break
            out[r] = len(left) > 0
        return out

    # Files --------------------------------------------------------------------------------
    def serialize(self) -> bytes:
        sink = pa.BufferOutputStream()
        batch = pa.record_batch([self.vocab], names=["token"])
        with pa.ipc.new_stream(sink, batch.schema) as w:
            w.write_batch(batch)
        vocab = sink.getvalue().to_pybytes()
        spec, payload = pack_arrays({n: getattr(self, n) for n in _ARRAYS})
        meta = {"kind": self.kind, "num_rows": self.num_rows, "vocab_bytes": len(vocab), "arrays": spec}
        result: bytes = fileformat.pack(MAGIC, meta) + vocab + payload
        return result

    @classmethod
    def load(cls, data: bytes | memoryview) -> TextIndex:
        meta, body = fileformat.unpack(data, MAGIC, "text index")
        end = meta["vocab_bytes"]
        vocab = pa.ipc.open_stream(pa.py_buffer(bytes(body[:end]))).read_all().column(0).combine_chunks()
        return cls(int(meta["num_rows"]), vocab, unpack_arrays(meta["arrays"], body[end:]))

    @property
    def nbytes(self) -> int:
        result: int = self.vocab.nbytes + sum(getattr(self, n).nbytes for n in _ARRAYS)
        return result


def is_text_index(data: bytes | memoryview) -> bool:
    return fileformat.has_magic(data, MAGIC)


def _intersection_with_slop(left: np.ndarray, right: np.ndarray, slop: int) -> np.ndarray:
    """tantivy's sloppy phrase step: each right position with a left position in
    [right - slop, right] continues the phrase (as that right position)."""
    out = []
    li = ri = 0
    while li < len(left) and ri < len(right):
        lv, rv = int(left[li]), int(right[ri])
        if lv < rv - slop:
            li += 1
        elif lv <= rv:
            while li + 1 < len(left) and int(left[li + 1]) <= rv:
                li += 1
            out.append(rv)
            li += 1
            ri += 1
        else:
            ri += 1
    return np.asarray(out, np.int64)
