"""BM25 scoring of a BM25 function's sparse field (Milvus' idf oracle + knowhere's BM25 metric).

A stored row is the term frequencies of its text (kmilvus.function.bm25); a query is the term
frequencies of the query text. As in Milvus:

- statistics per segment (`BM25Stats`, Milvus' storage.BM25Stats): rows, tokens (the sum of all
  frequencies), and per dimension the number of rows holding it. A delegator merges the stats of
  every segment of its channel (sealed and growing) at search time — deletes count until
  compaction drops the rows, as in Milvus, whose stats logs are per segment too;
- the query's values become `tf × idf`, idf = ln(1 + (N - df + 0.5) / (df + 0.5)) (BuildIDF);
- a stored frequency tf of a row of length dl (its frequencies' sum) scores
  tf·(k1+1) / (tf + k1·(1 - b + b·dl/avgdl)) (knowhere's GetDocValueBM25Computer, avgdl at least
  1), and a row's score is the sum over the query's dimensions of query value × that.

`bm25_k1` (default 1.2, in [0, 3]) and `bm25_b` (default 0.75, in [0, 1]) are the index's
params; a search may override them (SPARSE_INVERTED_INDEX does; knowhere refuses it for WAND).
`doc_scorer` is the scoring hook the sparse inverted index (kmilvus/index/sparse_index.py)
applies to its postings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from kmilvus.index import params as P


@dataclass
class BM25Stats:
    num_rows: int = 0
    num_tokens: float = 0.0
    dims: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))  # sorted
    df: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # rows holding each dim

    @classmethod
    def of_rows(cls, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> BM25Stats:
        """Stats of sparse rows (each row's dimensions distinct, as Milvus' rows are)."""
        dims, df = np.unique(np.asarray(indices, np.uint32), return_counts=True)
        return cls(len(indptr) - 1, float(np.asarray(values, np.float64).sum()), dims, df.astype(np.int64))

    @classmethod
    def merged(cls, parts: Iterable[BM25Stats]) -> BM25Stats:
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return cls()
        if len(parts) == 1:
            return parts[0]
        dims = np.concatenate([p.dims for p in parts])
        df = np.concatenate([p.df for p in parts])
        uniq, inv = np.unique(dims, return_inverse=True)
        return cls(
            sum(p.num_rows for p in parts),
            sum(p.num_tokens for p in parts),
            uniq,
            np.bincount(inv, weights=df, minlength=len(uniq)).astype(np.int64),
        )

    @property
    def avgdl(self) -> float:
        if self.num_rows == 0 or self.num_tokens == 0:
            return 0.0
        return self.num_tokens / self.num_rows

    def doc_freq(self, dims: np.ndarray) -> np.ndarray:
        dims = np.asarray(dims, np.uint32)
        pos = np.searchsorted(self.dims, dims)
        found = pos < len(self.dims)
        found[found] = self.dims[pos[found]] == dims[found]
        out = np.zeros(len(dims), np.int64)
        out[found] = self.df[pos[found]]
        return out

    def idf(self, dims: np.ndarray) -> np.ndarray:
        """Milvus' float32(ln(1 + (N - df + 0.5) / (df + 0.5))), computed in float64."""
        df = self.doc_freq(dims).astype(np.float64)
        return np.log1p((self.num_rows - df + 0.5) / (df + 0.5)).astype(np.float32)

    def query_values(self, dims: np.ndarray, tf: np.ndarray) -> np.ndarray:
        """A query's term frequencies weighted by IDF (Milvus' BuildIDF)."""
        result: np.ndarray = (np.asarray(tf, np.float32) * self.idf(dims)).astype(np.float32)
        return result


def doc_values(tf: np.ndarray, doc_len: np.ndarray, k1: float, b: float, avgdl: float) -> np.ndarray:
    """knowhere's BM25 document value of stored frequencies `tf` in rows of length `doc_len`."""
    avgdl = max(avgdl, 1.0)
    tf = np.asarray(tf, np.float32)
    dl = np.asarray(doc_len, np.float32)
    norm = np.float32(1 - b) + np.float32(b) * (dl / np.float32(avgdl))
    result: np.ndarray = (tf * np.float32(k1 + 1) / (tf + np.float32(k1) * norm)).astype(np.float32)
    return result


def doc_scorer(k1: float, b: float, avgdl: float) -> Callable[..., np.ndarray]:
    """The scoring hook of a sparse inverted index (values of `rows`, the index's row sums)."""

    def score(values: np.ndarray, rows: np.ndarray, index) -> np.ndarray:
        return doc_values(values, index.row_sums[rows], k1, b, avgdl)

    return score


def stats_of(index) -> BM25Stats:
    """A segment's statistics from its sparse index (kmilvus/index/sparse_index.py): its rows,
    their lengths' sum, and per dimension the rows holding it (posting list lengths)."""
    return BM25Stats(
        index.num_rows, float(index.row_sums.astype(np.float64).sum()), index.dims, np.diff(index.postings.indptr)
    )


def search_channels(channels, req, plan):
    """A BM25 search on one QueryNode: per channel (Milvus' delegator), the statistics of every
    segment of the channel weigh the queries (tf × idf) and give avgdl, then its requested
    segments are searched through their sparse index with the BM25 document hook; the
    channels' hits are merged. `channels`: each requested channel's segments, as
    LoadedCollection.channel_segments took them on the event loop (this runs in a worker)."""
    from dataclasses import replace

    import pyarrow as pa

    from kmilvus import reduce as kreduce
    from kmilvus.querynode import reduce

    k1 = float(plan.params.get(P.BM25_K1, P.DEFAULT_BM25_K1))
    b = float(plan.params.get(P.BM25_B, P.DEFAULT_BM25_B))
    q = plan.queries  # term frequencies (SparseRows)
    parts = set(req.partitionIDs)
    tables = []
    for segs in channels:
        indexes = [s.index_for(plan.anns_field, P.BM25) for s, _, _ in segs]
        stats = BM25Stats.merged(stats_of(ix) for ix in indexes if ix is not None)
        weighted = type(q)(q.indptr, q.indices, stats.query_values(q.indices, q.values))
        wanted = [
            (s, d)
            for s, d, growing in segs
            if (not parts or s.partition_id in parts) and not (growing and req.ignore_growing)
        ]
        if wanted:
            sub = replace(plan, queries=weighted, scorer=doc_scorer(k1, b, stats.avgdl))
            tables.append(reduce.search_segments(wanted, sub))
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return kreduce.empty_search_result()
    if len(tables) == 1:
        return tables[0]
    return reduce.merge_search(pa.concat_tables(tables, promote_options="default"), plan)
