"""Search iterator v2 (Milvus 2.5's search_iter_v2): each page is a search for the best
`batch_size` hits past the previous page's last score (`search_iter_last_bound`, which pymilvus
sends back), at the snapshot the first page pinned; the answer carries the iterator's token and
the page's last score.

Milvus' bound alone skips the rows that tie with the last score of a page, and a compaction
between pages can move a score by a rounding step (another index, another summation order). So
this Proxy remembers, per token, the primary keys it returned within a small tolerance of the
bound; the next page admits rows within the tolerance unless they are among those. A page served
by a Proxy that does not know the token (restarted, or another replica) falls back to Milvus'
strict bound.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kmilvus.proto import query_node_pb2
from kmilvus.proxy.search_util import IteratorV2

MAX_ITERATORS = 4096  # tokens remembered (least recently used forgotten first)
RELATIVE_TOLERANCE = 1e-5  # of the bound's magnitude: above float32 rounding of a distance


def tolerance(bound: float) -> float:
    return RELATIVE_TOLERANCE * max(1.0, abs(bound))


@dataclass
class _Page:
    bound: float
    pks: np.ndarray  # returned so far with a score within 2 × tolerance of `bound`


class SearchIterators:
    def __init__(self) -> None:
        self._pages: OrderedDict[str, _Page] = OrderedDict()

    def bound(self, it: IteratorV2 | None, larger_is_closer: bool) -> query_node_pb2.IteratorBound | None:
        """The QueryNodes' bound for this page (None: the first page, no bound)."""
        if it is None or it.last_bound is None:
            return None
        page = self._pages.get(it.token)
        if page is not None and np.float32(page.bound) == np.float32(it.last_bound):
            self._pages.move_to_end(it.token)
            b = query_node_pb2.IteratorBound(bound=page.bound, tolerance=tolerance(page.bound))
            if page.pks.dtype.kind in "iu":
                b.excluded_int_pks.extend(page.pks)
            else:
                b.excluded_str_pks.extend(page.pks.tolist())
            return b
        # Milvus' strict bound: the next representable score past it, no tolerance.
        step = np.float32(np.inf) if not larger_is_closer else np.float32(-np.inf)
        return query_node_pb2.IteratorBound(bound=float(np.nextafter(np.float32(it.last_bound), step)))

    def advance(self, it: IteratorV2, page: pa.Table) -> tuple[str, float]:
        """Remember the page; (token, last bound) for the answer."""
        if page.num_rows == 0:
            return it.token, float(it.last_bound or 0.0)
        score = page.column("score").to_numpy().astype(np.float64)
        pks = page.column("pk").to_numpy(zero_copy_only=False)
        last = float(score[-1])
        near = np.abs(score - last) <= 2 * tolerance(last)
        keep = pks[near]
        prev = self._pages.get(it.token)
        if prev is not None and abs(last - prev.bound) <= 4 * tolerance(last):
            keep = np.concatenate([prev.pks.astype(keep.dtype, copy=False), keep]) if len(prev.pks) else keep
        self._pages[it.token] = _Page(last, keep)
        self._pages.move_to_end(it.token)
        while len(self._pages) > MAX_ITERATORS:
            self._pages.popitem(last=False)
        return it.token, last
