"""Vector indexes on faiss: build a segment's index, serialize it, load it, search it.

Milvus' semantics: L2 answers SQUARED L2 distances, ascending; IP and COSINE answer similarities,
descending (COSINE = IP over normalized vectors). A segment without an index (growing data) is
searched brute force through the same `VectorIndex` (a FLAT one over its raw vectors).
Offsets are row positions in the segment as built; a result slot with no row has offset -1.
faiss releases the GIL while it builds and searches: the async variants run it in a thread.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import faiss
import numpy as np

from kmilvus.index import params as P

MAGIC = b"KMIDX1\0\0"
_HEADER = struct.Struct("<8sI")  # magic, meta JSON length


@dataclass
class IndexFile:
    """A built index: the bytes to store (header + faiss serialization) and its meta."""

    data: bytes
    index_type: str
    metric_type: str
    params: dict[str, str] = field(default_factory=dict)
    dim: int = 0
    num_rows: int = 0

    @property
    def serialized_size(self) -> int:
        return len(self.data)


def _metric(metric_type: str) -> int:
    return faiss.METRIC_L2 if metric_type == P.L2 else faiss.METRIC_INNER_PRODUCT


def _as_matrix(vectors: np.ndarray, dim: int | None = None) -> np.ndarray:
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    if x.ndim == 1:
        x = x.reshape(-1, dim or x.shape[0])
    return x


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), for COSINE."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.where(norms == 0, 1, norms), dtype=np.float32)


def _new_index(index_type: str, metric_type: str, dim: int, num_rows: int, params: Mapping[str, str]) -> Any:
    metric = _metric(metric_type)
    if index_type == P.HNSW:
        index = faiss.IndexHNSWFlat(dim, int(params["M"]), metric)
        index.hnsw.efConstruction = int(params["efConstruction"])
        return index
    if index_type in (P.IVF_FLAT, P.IVF_SQ8) and num_rows > 0:
        # A segment smaller than nlist is clustered into as many lists as it has rows.
        nlist = max(1, min(int(params["nlist"]), num_rows))
        quantizer = faiss.IndexFlat(dim, metric)
        if index_type == P.IVF_FLAT:
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, metric)
        else:
            index = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, metric)
        index.cp.min_points_per_centroid = 1  # no warning spam for small segments
        return index
    return faiss.IndexFlat(dim, metric)


def _selector(valid: np.ndarray | None) -> dict[str, Any]:
    """faiss search kwargs limiting a search to the `valid` rows (none: every row)."""
    if valid is None:
        return {}
    bits = np.packbits(np.asarray(valid, dtype=bool), bitorder="little")
    sel = faiss.IDSelectorBitmap(len(valid), faiss.swig_ptr(bits))
    sel.referenced_bits = bits  # keep the buffer alive as long as the selector
    return {"sel": sel}


class VectorIndex:
    """A searchable index over one segment's vectors (row offsets 0..num_rows-1)."""

    def __init__(self, index: Any, index_type: str, metric_type: str, params: Mapping[str, str] | None = None):
        self.index = index
        self.index_type = index_type
        self.metric_type = metric_type
        self.params = dict(params or {})

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def num_rows(self) -> int:
        return int(self.index.ntotal)

    @property
    def holds_raw(self) -> bool:
        """Whether the index stores the inserted vectors exactly (Milvus' "has raw data"): flat
        storage, and not COSINE (whose index holds the vectors normalized). Then a loaded
        segment needs no raw copy of the column beside it."""
        flat = isinstance(self.index, faiss.IndexFlat | faiss.IndexHNSWFlat | faiss.IndexIVFFlat)
        return flat and self.metric_type != P.COSINE

    def reconstruct(self, offsets: np.ndarray) -> np.ndarray:
        """The stored vectors of rows `offsets`, (n, dim) float32 (an IVF index needs its
        direct map: `load` makes it)."""
        keys = np.ascontiguousarray(offsets, dtype=np.int64)
        if not len(keys):
            return np.empty((0, self.dim), np.float32)
        return self.index.reconstruct_batch(keys)

    def _queries(self, queries: np.ndarray) -> np.ndarray:
        q = _as_matrix(queries, self.dim)
        if q.shape[1] != self.dim:
            raise ValueError(f"query dim {q.shape[1]} != index dim {self.dim}")
        return normalize(q) if self.metric_type == P.COSINE else q

    def _search_parameters(
        self, k: int, search_params: Mapping[str, object], valid: np.ndarray | None, widen: int = 0
    ) -> Any:
        knobs = P.check_search_params(self.index_type, k, search_params)
        if widen > k:  # more candidates than the user's top-k: search as wide as they need
            if "ef" in knobs:
                knobs["ef"] = max(knobs["ef"], widen)
            if "nprobe" in knobs and isinstance(self.index, faiss.IndexIVF):
                knobs["nprobe"] = min(int(self.index.nlist), knobs["nprobe"] * -(-widen // k))
        kwargs = _selector(valid)
        if isinstance(self.index, faiss.IndexHNSW) and "ef" in knobs:
            return faiss.SearchParametersHNSW(efSearch=knobs["ef"], **kwargs)
        if isinstance(self.index, faiss.IndexIVF) and "nprobe" in knobs:
            return faiss.SearchParametersIVF(nprobe=knobs["nprobe"], **kwargs)
        return faiss.SearchParameters(**kwargs) if kwargs else None

    def search(
        self,
        queries: np.ndarray,
        k: int,
        search_params: Mapping[str, object] | None = None,
        valid: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k per query: (distances [nq, k] float32, offsets [nq, k] int64; -1 = no row).

        `valid` is a bool per row: False rows (deleted, filtered out) are never returned.
        """
        q = self._queries(queries)
        sp = self._search_parameters(k, search_params or {}, valid)
        if self.num_rows == 0:
            return np.full((len(q), k), np.nan, np.float32), np.full((len(q), k), -1, np.int64)
        distances, offsets = self.index.search(q, k, params=sp)
        return distances, offsets

    def candidates(
        self,
        queries: np.ndarray,
        k: int,
        topk: int,
        search_params: Mapping[str, object] | None = None,
        valid: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`search` for `k` candidates where the user asked for `topk` (a group-by or an iterator
        page walks past its top-k): the knobs are checked against `topk`, then widened so the
        index can reach `k` rows (HNSW's ef, IVF's nprobe), as a knowhere iterator goes on."""
        q = self._queries(queries)
        sp = self._search_parameters(topk, search_params or {}, valid, widen=k)
        if self.num_rows == 0:
            return np.full((len(q), k), np.nan, np.float32), np.full((len(q), k), -1, np.int64)
        return self.index.search(q, k, params=sp)

    def exhaustive(self, queries: np.ndarray, k: int, valid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k over every stored vector (a search iterator's pages: each row once, in order):
        an IVF index probes all its lists, an HNSW index is searched through its flat storage
        (the graph may not reach every row), a flat index is exhaustive already."""
        q = self._queries(queries)
        if self.num_rows == 0:
            return np.full((len(q), k), np.nan, np.float32), np.full((len(q), k), -1, np.int64)
        kwargs = _selector(valid)
        if isinstance(self.index, faiss.IndexHNSW):
            return faiss.downcast_index(self.index.storage).search(q, k, params=faiss.SearchParameters(**kwargs))
        if isinstance(self.index, faiss.IndexIVF):
            return self.index.search(q, k, params=faiss.SearchParametersIVF(nprobe=int(self.index.nlist), **kwargs))
        return self.index.search(q, k, params=faiss.SearchParameters(**kwargs) if kwargs else None)

    def range_search(
        self,
        queries: np.ndarray,
        radius: float,
        range_filter: float | None = None,
        search_params: Mapping[str, object] | None = None,
        valid: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row within `radius` (and not past `range_filter`), as Milvus' range search.

        L2: range_filter <= distance < radius; IP/COSINE: radius < similarity <= range_filter.
        Returns (lims [nq+1], distances, offsets): query i's hits are [lims[i], lims[i+1]),
        best first.
        """
        q = self._queries(queries)
        sp = self._search_parameters(1, search_params or {}, valid)
        lims, distances, offsets = self.index.range_search(q, float(radius), params=sp)
        lims = lims.astype(np.int64)
        keep = np.ones(len(offsets), dtype=bool)
        if range_filter is not None:
            keep = distances >= range_filter if self.metric_type == P.L2 else distances <= range_filter
        # Order each query's hits best first: sort by (query, distance) in one lexsort.
        qid = np.repeat(np.arange(len(q)), np.diff(lims))[keep]
        d, o = distances[keep], offsets[keep]
        order = np.lexsort((d if self.metric_type == P.L2 else -d, qid))
        counts = np.bincount(qid, minlength=len(q))
        new_lims = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return new_lims, d[order], o[order].astype(np.int64)

    async def asearch(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        return await asyncio.to_thread(self.search, *args, **kwargs)

    async def arange_search(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return await asyncio.to_thread(self.range_search, *args, **kwargs)

    def serialize(self) -> IndexFile:
        meta = {"index_type": self.index_type, "metric_type": self.metric_type, "params": self.params}
        blob = json.dumps(meta).encode()
        data = _HEADER.pack(MAGIC, len(blob)) + blob + faiss.serialize_index(self.index).tobytes()
        return IndexFile(data, self.index_type, self.metric_type, self.params, self.dim, self.num_rows)


def create(
    vectors: np.ndarray, index_type: str, metric_type: str, params: Mapping[str, str] | None = None
) -> VectorIndex:
    """Build an in-memory index over `vectors` (row i = offset i). `params` are a FieldIndex's
    checked params (AUTOINDEX is resolved here); FLAT needs none."""
    flat = P.build_params({**(params or {}), P.INDEX_TYPE: index_type})
    index_type = flat[P.INDEX_TYPE]
    x = _as_matrix(vectors)
    if metric_type == P.COSINE:
        x = normalize(x)
    index = _new_index(index_type, metric_type, x.shape[1], len(x), flat)
    if not index.is_trained:
        index.train(x)
    if len(x):
        index.add(x)
    return VectorIndex(index, index_type, metric_type, flat)


def brute_force(vectors: np.ndarray, metric_type: str) -> VectorIndex:
    """Raw vectors searched exactly (growing data, segments too small to index)."""
    return create(vectors, P.FLAT, metric_type)


def build(vectors: np.ndarray, index_type: str, metric_type: str, params: Mapping[str, str] | None = None) -> IndexFile:
    """Build and serialize: the bytes an IndexNode writes to object storage."""
    return create(vectors, index_type, metric_type, params).serialize()


async def abuild(
    vectors: np.ndarray, index_type: str, metric_type: str, params: Mapping[str, str] | None = None
) -> IndexFile:
    return await asyncio.to_thread(build, vectors, index_type, metric_type, params)


def load(data: bytes | memoryview) -> VectorIndex:
    """Deserialize what `build` wrote."""
    buf = memoryview(data)
    magic, n = _HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise ValueError("not a kmilvus index file")
    meta = json.loads(bytes(buf[_HEADER.size : _HEADER.size + n]))
    raw = np.frombuffer(buf[_HEADER.size + n :], dtype=np.uint8)
    index = faiss.deserialize_index(raw)
    vi = VectorIndex(index, meta["index_type"], meta["metric_type"], meta["params"])
    if vi.holds_raw and isinstance(index, faiss.IndexIVF) and index.direct_map.type == faiss.DirectMap.NoMap:
        index.make_direct_map()  # row → (list, slot), so that outputs can be read back (8 B/row)
    return vi


async def aload(data: bytes | memoryview) -> VectorIndex:
    return await asyncio.to_thread(load, data)
