"""BM25 statistics and scores (kmilvus/querynode/bm25.py) against a plain reference computation
of Milvus' formula: IDF from the merged per-segment statistics, knowhere's document values."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from kmilvus.analyzer import build
from kmilvus.function.bm25 import term_frequencies, token_hash
from kmilvus.index.params import bm25_params
from kmilvus.index.sparse_index import SparseInvertedIndex
from kmilvus.index.vectors import SparseRows
from kmilvus.querynode.bm25 import BM25Stats, doc_scorer, stats_of
from kmilvus.util import merr

CORPUS = [
    "The quick brown fox jumps over the lazy dog",
    "A quick brown dog outpaces a quick fox",
    "Lazy dogs sleep all day long",
    "Foxes are quick and clever animals",
    "The dog barks; the fox runs",
    "",
]


def _sparse(texts):
    col = term_frequencies(build({"type": "english"}).analyze(pa.array(texts)), len(texts))
    indptr = col.offsets.to_numpy().astype(np.int64)
    return indptr, col.keys.to_numpy().astype(np.uint32), col.items.to_numpy().astype(np.float32)


def _reference(query: str, docs: list[str], k1: float, b: float) -> list[float]:
    """Milvus' BM25, written out: idf from document frequencies, knowhere's tf normalisation."""
    an = build({"type": "english"})
    toks = [an.analyze(pa.array([d])).text.to_pylist() for d in docs]
    n = len(docs)
    avgdl = max(sum(len(t) for t in toks) / n, 1.0)
    df = Counter(h for t in toks for h in {token_hash(x) for x in t})
    q = Counter(token_hash(t) for t in an.analyze(pa.array([query])).text.to_pylist())
    out = []
    for t in toks:
        tf = Counter(token_hash(x) for x in t)
        s = 0.0
        for h, qtf in q.items():
            if h in tf:
                idf = math.log(1 + (n - df[h] + 0.5) / (df[h] + 0.5))
                s += qtf * idf * tf[h] * (k1 + 1) / (tf[h] + k1 * (1 - b + b * len(t) / avgdl))
        out.append(s)
    return out


@pytest.mark.parametrize(("k1", "b"), [(1.2, 0.75), (2.0, 0.3), (0.5, 1.0)])
@pytest.mark.parametrize("query", ["quick fox", "lazy dogs sleeping", "the clever fox barks quick quick"])
def test_scores_equal_milvus_formula_with_stats_merged_from_segments(query, k1, b):
    # Two "segments": stats kept apart, merged at search.
    first, second = CORPUS[:3], CORPUS[3:]
    segments = [
        SparseInvertedIndex(SparseRows(*_sparse(part)), "SPARSE_INVERTED_INDEX", "BM25") for part in (first, second)
    ]
    stats = BM25Stats.merged([stats_of(s) for s in segments])
    assert stats.num_rows == len(CORPUS) and stats.avgdl == BM25Stats.of_rows(*_sparse(CORPUS)).avgdl
    q_indptr, q_dims, q_tf = _sparse([query])
    q = SparseRows(q_indptr, q_dims, stats.query_values(q_dims, q_tf))
    got = np.zeros(len(CORPUS))
    for offset, seg in ((0, segments[0]), (3, segments[1])):
        scores, rows = seg.search(q, seg.num_rows, scorer=doc_scorer(k1, b, stats.avgdl))
        hit = rows[0] >= 0
        got[offset + rows[0][hit]] = scores[0][hit]
    np.testing.assert_allclose(got, _reference(query, CORPUS, k1, b), rtol=2e-6, atol=1e-6)


def test_k1_and_b_ranges_are_knowheres():
    assert bm25_params({}, {}) == (1.2, 0.75)
    assert bm25_params({"bm25_k1": "1.5", "bm25_b": "0.5"}, {"bm25_b": 0.25}) == (1.5, 0.25)
    with pytest.raises(merr.MilvusError):
        bm25_params({"bm25_k1": "3.5"}, {})
    with pytest.raises(merr.MilvusError):
        bm25_params({}, {"bm25_b": -0.1})
