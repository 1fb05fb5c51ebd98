"""What every index kind shares: the index file's layout, the async search calls, and how a
search widens its knobs or ranks the rows a filter keeps exactly.

An index file is fileformat's envelope (`MAGIC`, the meta: kind, index type, metric, build
params), then the payload: faiss' serialization for a dense index, or numpy arrays one after
another (named, typed and shaped in the meta) for the binary and sparse indexes. A file written
before the kind was recorded is a dense one.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kmilvus.index import fileformat

MAGIC = b"KMIDX1\0\0"  # kmilvus/index/fileformat.py's envelope


@dataclass
class IndexFile:
    """A built index: the bytes to store (header + payload) and its meta."""

    data: bytes
    index_type: str
    metric_type: str
    params: dict[str, str] = field(default_factory=dict)
    dim: int = 0
    num_rows: int = 0

    @property
    def serialized_size(self) -> int:
        return len(self.data)


def pack(meta: Mapping[str, Any], payload: bytes) -> bytes:
    return fileformat.pack(MAGIC, dict(meta)) + payload


def unpack(data: bytes | memoryview) -> tuple[dict[str, Any], memoryview]:
    return fileformat.unpack(data, MAGIC, "index")


def pack_arrays(arrays: Mapping[str, np.ndarray]) -> tuple[list[list[Any]], bytes]:
    """Arrays → (their [name, dtype, shape] list, their bytes one after another)."""
    spec = [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()]
    return spec, b"".join(np.ascontiguousarray(a).tobytes() for a in arrays.values())


def unpack_arrays(spec: list[list[Any]], buf: memoryview) -> dict[str, np.ndarray]:
    """What `pack_arrays` wrote, as read-only views of `buf` (no copy)."""
    out, pos = {}, 0
    for name, dtype, shape in spec:
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(buf, dtype=dt, count=count, offset=pos).reshape(shape)
        pos += count * dt.itemsize
    return out


def serialize_arrays(index: Any) -> IndexFile:
    """An index kept as numpy arrays (`index.arrays()`), with its kind and params in the meta."""
    spec, payload = pack_arrays(index.arrays())
    meta = {
        "kind": index.kind,
        "index_type": index.index_type,
        "metric_type": index.metric_type,
        "params": index.params,
        "arrays": spec,
    }
    return IndexFile(pack(meta, payload), index.index_type, index.metric_type, index.params, index.dim, index.num_rows)


def widen(knobs: dict[str, float], k: int, topk: int, nlist: int = 0) -> dict[str, float]:
    """Search knobs checked against the user's `topk`, widened so the index can reach `k` rows
    (a group-by or an iterator page walks past its top-k, as a knowhere iterator goes on):
    HNSW's ef up to k, an IVF index's nprobe by k/topk, at most its `nlist` lists."""
    if k <= topk:
        return knobs
    if "ef" in knobs:
        knobs["ef"] = max(knobs["ef"], k)
    if "nprobe" in knobs and nlist:
        knobs["nprobe"] = min(nlist, int(knobs["nprobe"]) * -(-k // topk))
    return knobs


# knowhere's switch from the index to brute force over the rows a search may return (its HNSW
# thresholds, applied here to every index kind that walks part of its rows).
KNN_BF_FILTER_THRESHOLD = 0.93  # share of rows filtered out from which a top-k search is exact
RANGE_BF_FILTER_THRESHOLD = 0.97  # the same for a range search
BF_TOPK_THRESHOLD = 0.5  # a top-k search of k >= this share of the rows left is exact


def kept_rows(valid: np.ndarray | None, n: int) -> int:
    """How many of the `n` rows the `valid` mask (filter and deletes) leaves."""
    return n if valid is None else int(np.count_nonzero(valid))


def exact_wins(kept: int, n: int, k: int, work: float = 0, range_search: bool = False) -> bool:
    """Whether a search of the `kept` rows a filter and deletes leave of an index's `n` ranks
    those rows exactly rather than walking the index. A walk (an HNSW graph, the probed IVF
    lists) reaches rows whether the filter keeps them or not, so under a selective filter it
    finds few kept rows, and the exact ranking of so few costs less than the walk. As knowhere:
    when at least 93 % of the rows are filtered out (97 % for a range search), or k reaches half
    the rows left; and when no more rows are left than the walk would score anyway (`work`)."""
    if n == 0:
        return False
    share = RANGE_BF_FILTER_THRESHOLD if range_search else KNN_BF_FILTER_THRESHOLD
    if n - kept >= share * n or kept <= work:
        return True
    return not range_search and k >= BF_TOPK_THRESHOLD * kept


def widen_for_filter(knobs: dict[str, float], kept: int, n: int, nlist: int = 0) -> dict[str, float]:
    """Knobs for a walk of an index of `n` rows of which a filter keeps `kept` (too many to rank
    them exactly, `exact_wins`), so that it finds about as many kept rows as an unfiltered walk
    finds rows. IVF: nprobe / (kept share), at most `nlist` lists — the probed lists then hold
    as many kept rows as an unfiltered search scans (knowhere's ensure_topk_full). HNSW: ef /
    √(kept share) — faiss' walk scores the same nodes with a filter as without and keeps the
    kept ones; a wider walk makes up the recall the filter costs (measured on random vectors)."""
    if kept >= n or n == 0:
        return knobs
    share = max(kept, 1) / n
    if "ef" in knobs:
        knobs["ef"] = min(max(n, int(knobs["ef"])), math.ceil(knobs["ef"] / math.sqrt(share)))
    if "nprobe" in knobs and nlist:
        knobs["nprobe"] = min(nlist, math.ceil(knobs["nprobe"] / share))
    return knobs


class AsyncSearch:
    """`asearch` / `arange_search`: the blocking calls in a thread (faiss, numpy and scipy
    release the GIL while they work)."""

    def search(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def range_search(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    async def asearch(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        return await asyncio.to_thread(self.search, *args, **kwargs)

    async def arange_search(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return await asyncio.to_thread(self.range_search, *args, **kwargs)
