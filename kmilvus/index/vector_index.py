"""Vector indexes: build a segment's index, serialize it, load it, search it.

Dense vectors (float32, and float16 / bfloat16 widened to float32) are indexed with faiss
(`VectorIndex`: FLAT, IVF_FLAT, IVF_SQ8, IVF_PQ, SCANN, HNSW); binary vectors by
`binary_index.BinaryIndex` (BIN_FLAT, BIN_IVF_FLAT) and sparse vectors by
`sparse_index.SparseInvertedIndex` (SPARSE_INVERTED_INDEX, SPARSE_WAND). All three answer the same
calls: `search`, `range_search`, `holds_raw` / `raw_column`, `serialize`; `create` and `load`
pick the kind from the vectors or the file.

Milvus' semantics: L2 answers SQUARED L2 distances, ascending; IP and COSINE answer similarities,
descending (COSINE = IP over normalized vectors); HAMMING and JACCARD are distances, ascending.
A segment without an index (growing data) is searched brute force through the same classes (FLAT,
BIN_FLAT, SPARSE_INVERTED_INDEX over its raw vectors). Offsets are row positions in the segment
as built; a result slot with no row has offset -1. faiss and scipy release the GIL while they
build and search: the async variants run them in a thread.

SCANN is faiss' IVF with 4-bit fast-scan PQ over pairs of dimensions (knowhere's ScaNN: sub_dim
2), its candidates re-ranked on the raw vectors (`with_raw_data`, default true; `reorder_k`
candidates, default k). IVF_PQ is faiss' IndexIVFPQ (m sub-quantizers of nbits). A segment too
small to train a product quantizer (fewer rows than 2^nbits centroids) keeps its vectors in IVF
lists uncompressed: exact within the probed lists, never worse than the quantized index.

A filtered search (the `valid` mask: filter and deletes) walks the index with faiss' ID selector,
which skips the rows it drops; a walk reaches them all the same, so when the filter keeps few
rows the index ranks the kept ones exactly instead, as knowhere does (`base.exact_wins`), and
otherwise walks wider by the share it keeps (`base.widen_for_filter`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import faiss
import numpy as np
import pyarrow as pa

from kmilvus.index import base
from kmilvus.index import params as P
from kmilvus.index.base import AsyncSearch, IndexFile
from kmilvus.index.binary_index import BinaryIndex
from kmilvus.index.sparse_index import SparseInvertedIndex
from kmilvus.index.vectors import SparseRows, Vectors

# faiss-cpu's type stubs are generated from its SWIG interface: they miss what faiss' Python layer
# adds (the SearchParameters classes' keyword constructors, SearchParametersHNSW, DirectMap,
# HNSW.nb_neighbors). The lines that use those carry a targeted `type: ignore`.


# A search of at most this many queries runs on one OpenMP thread (the calling one), as knowhere's
# searches do (its ScopedOmpSetter(1)): faiss parallelises over queries, so a few queries gain
# little from a team, and the team's threads spin after each call on cores the event loop and
# the other segments' searches need (20k x 128 FLAT, nq=1: 2.3 ms with two threads, 0.7 ms with
# one). Larger batches keep faiss' parallel search. The setting is the calling thread's own
# (OpenMP's nthreads ICV), so an index build in another thread keeps every core.
SERIAL_MAX_NQ = 8
# Every thread's OpenMP team size outside `_serial_below` (changed only through `set_threads`):
# read once, not per search. Each faiss call through SWIG gives the GIL up and takes it back, which
# under concurrent searches is a wait of its own (docs/benchmarks/index.md, the read path at 1M).
_OMP_THREADS = faiss.omp_get_max_threads()


def set_threads(n: int) -> None:
    """faiss' OpenMP team size outside a serial search, from now on (a process embedding
    kmilvus' indexes that wants fewer threads than cores; `_serial_below` restores this)."""
    global _OMP_THREADS
    _OMP_THREADS = n
    faiss.omp_set_num_threads(n)


@contextlib.contextmanager
def _serial_below(nq: int) -> Iterator[None]:
    """One OpenMP thread for this thread's faiss calls while the batch is small (restored after)."""
    if nq > SERIAL_MAX_NQ:
        yield
        return
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(_OMP_THREADS)


def _search(index: Any, q: np.ndarray, k: int, sp: Any) -> tuple[np.ndarray, np.ndarray]:
    """faiss' top-k search (its Python layer), serial for a small batch (`_serial_below`)."""
    with _serial_below(len(q)):
        found: tuple[np.ndarray, np.ndarray] = index.search(q, k, params=sp)
    return found


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
        hnsw = faiss.IndexHNSWFlat(dim, int(params["M"]), metric)
        hnsw.hnsw.efConstruction = int(params["efConstruction"])
        return hnsw
    if index_type in (P.IVF_FLAT, P.IVF_SQ8, P.IVF_PQ, P.SCANN) and num_rows > 0:
        # A segment smaller than nlist is clustered into as many lists as it has rows.
        nlist = max(1, min(int(params["nlist"]), num_rows))
        quantizer = faiss.IndexFlat(dim, metric)
        nbits = int(params.get("nbits", P.DEFAULT_NBITS)) if index_type == P.IVF_PQ else 4
        index: faiss.IndexIVF
        if index_type == P.IVF_FLAT or (index_type in (P.IVF_PQ, P.SCANN) and num_rows < 1 << nbits):
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, metric)
        elif index_type == P.IVF_SQ8:
            index = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, metric)
        elif index_type == P.IVF_PQ:
            index = pq = faiss.IndexIVFPQ(quantizer, dim, nlist, int(params["m"]), nbits, metric)
            pq.pq.cp.min_points_per_centroid = 1
        else:
            return _scann(dim, nlist, metric, params)
        index.cp.min_points_per_centroid = 1  # no warning spam for small segments
        return index
    return faiss.IndexFlat(dim, metric)


def _selector(valid: np.ndarray | None) -> dict[str, Any]:
    """faiss search kwargs limiting a search to the `valid` rows (none: every row)."""
    if valid is None:
        return {}
    bits = np.packbits(np.asarray(valid, dtype=bool), bitorder="little")
    sel = faiss.IDSelectorBitmap(len(valid), faiss.swig_ptr(bits))
    # A Python attribute on the SWIG object: keeps the buffer alive as long as the selector.
    sel.referenced_bits = bits  # type: ignore[attr-defined]
    return {"sel": sel}


def _scann(dim: int, nlist: int, metric: int, params: Mapping[str, str]) -> Any:
    """IVF + 4-bit fast-scan PQ of dim/2 sub-quantizers, refined on the raw vectors."""
    base = faiss.IndexIVFPQFastScan(faiss.IndexFlat(dim, metric), dim, nlist, dim // 2, 4, metric)
    base.cp.min_points_per_centroid = 1
    base.pq.cp.min_points_per_centroid = 1
    if params.get("with_raw_data", "true").lower() == "false":
        return base
    return faiss.IndexRefineFlat(base)  # faiss' wrapper keeps a reference to the base


class VectorIndex(AsyncSearch):
    """A searchable faiss index over one segment's dense vectors (row offsets 0..num_rows-1)."""

    kind = P.DENSE

    def __init__(self, index: Any, index_type: str, metric_type: str, params: Mapping[str, str] | None = None):
        self.index = index
        self.index_type = index_type
        self.metric_type = metric_type
        self.params = dict(params or {})
        # Read on every search; a built index never changes (`_OMP_THREADS` says why they are
        # kept here rather than asked of faiss each time).
        self.num_rows = int(index.ntotal)
        self._neighbors = int(index.hnsw.nb_neighbors(1)) if isinstance(index, faiss.IndexHNSW) else 0  # type: ignore[attr-defined]

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def holds_raw(self) -> bool:
        """Whether the index stores the inserted vectors exactly (Milvus' "has raw data"): flat
        storage of float32 vectors, and not COSINE (whose index holds the vectors normalized).
        Then a loaded segment needs no raw copy of the column beside it. A float16 / bfloat16
        field's index holds them widened: its column stays, in its own type."""
        flat = isinstance(self.index, faiss.IndexFlat | faiss.IndexHNSWFlat | faiss.IndexIVFFlat)
        float32 = self.params.get(P.DATA_TYPE, "FloatVector") == "FloatVector"
        return flat and float32 and self.metric_type != P.COSINE

    def reconstruct(self, offsets: np.ndarray) -> np.ndarray:
        """The stored vectors of rows `offsets`, (n, dim) float32 (an IVF index needs its
        direct map: `load` makes it)."""
        keys = np.ascontiguousarray(offsets, dtype=np.int64)
        if not len(keys):
            return np.empty((0, self.dim), np.float32)
        result: np.ndarray = self.index.reconstruct_batch(keys)
        return result

    def raw_column(self, offsets: np.ndarray) -> pa.Array:
        """Rows `offsets` as the binlog's fixed_size_list<float32> column (`holds_raw` only)."""
        return pa.FixedSizeListArray.from_arrays(pa.array(self.reconstruct(offsets).reshape(-1)), self.dim)

    def _queries(self, queries: np.ndarray) -> np.ndarray:
        q = _as_matrix(queries, self.dim)
        if q.shape[1] != self.dim:
            raise ValueError(f"query dim {q.shape[1]} != index dim {self.dim}")
        return normalize(q) if self.metric_type == P.COSINE else q

    def _ivf(self) -> Any:
        """The IVF index the search probes (SCANN's base under its refinement), or None."""
        index = self.index
        if isinstance(index, faiss.IndexRefine):
            index = faiss.downcast_index(index.base_index)
        return index if isinstance(index, faiss.IndexIVF) else None

    def _work(self, knobs: Mapping[str, float]) -> float:
        """About how many stored vectors a walk with `knobs` scores: HNSW's ef times its M
        neighbours a node, an IVF index's nprobe lists (0: a flat index, exact already)."""
        ivf = self._ivf()
        if isinstance(self.index, faiss.IndexHNSW) and "ef" in knobs:
            return knobs["ef"] * self._neighbors
        if ivf is not None and "nprobe" in knobs:
            return knobs["nprobe"] * self.num_rows / max(1, int(ivf.nlist))
        return 0

    def _plan(
        self,
        k: int,
        search_params: Mapping[str, object],
        valid: np.ndarray | None,
        topk: int | None = None,
        range_search: bool = False,
    ) -> tuple[Any, Any]:
        """The faiss index to search and its SearchParameters, for `k` rows where the user asked
        for `topk` (default k; the knobs are checked against it, then widened: `base.widen`).
        When the filter leaves few rows (`base.exact_wins`), they are ranked exactly
        (`_exact`); otherwise the walk is widened by the share of rows it keeps
        (`base.widen_for_filter`)."""
        knobs = P.check_search_params(self.index_type, k if topk is None else topk, search_params)
        ivf = self._ivf()
        nlist = int(ivf.nlist) if ivf is not None else 0
        knobs = base.widen(knobs, k, k if topk is None else topk, nlist)
        kept = base.kept_rows(valid, self.num_rows)
        if base.exact_wins(kept, self.num_rows, k, self._work(knobs), range_search):
            return self._exact(valid)
        knobs = base.widen_for_filter(knobs, kept, self.num_rows, nlist)
        kwargs = _selector(valid)
        if isinstance(self.index, faiss.IndexHNSW) and "ef" in knobs:
            return self.index, faiss.SearchParametersHNSW(efSearch=int(knobs["ef"]), **kwargs)  # type: ignore[attr-defined]
        if isinstance(self.index, faiss.IndexRefine):
            # SCANN: `reorder_k` fast-scan candidates re-ranked on the raw vectors.
            probe = faiss.SearchParametersIVF(nprobe=int(knobs["nprobe"]), **kwargs)  # type: ignore[call-arg]
            ratio = max(1.0, knobs.get("reorder_k", k) / max(k, 1))
            params = faiss.IndexRefineSearchParameters(k_factor=ratio, base_index_params=probe, **kwargs)  # type: ignore[call-arg]
            # The SWIG object does not keep its base params alive: a Python attribute does.
            params.referenced_base = probe  # type: ignore[attr-defined]
            return self.index, params
        if ivf is not None and "nprobe" in knobs:
            return self.index, faiss.SearchParametersIVF(nprobe=int(knobs["nprobe"]), **kwargs)  # type: ignore[call-arg]
        return self.index, faiss.SearchParameters(**kwargs) if kwargs else None

    def _exact(self, valid: np.ndarray | None) -> tuple[Any, Any]:
        """The faiss index and SearchParameters that rank every `valid` stored vector exactly:
        an IVF index probes all its lists, an HNSW index is searched through its flat storage
        (the graph may not reach every row), SCANN through the raw vectors it refines with, a
        flat index is exhaustive already. Rows the mask drops are skipped, not scored."""
        kwargs = _selector(valid)
        if isinstance(self.index, faiss.IndexHNSW):
            return faiss.downcast_index(self.index.storage), faiss.SearchParameters(**kwargs)
        if isinstance(self.index, faiss.IndexRefine):
            return faiss.downcast_index(self.index.refine_index), faiss.SearchParameters(**kwargs)
        if isinstance(self.index, faiss.IndexIVF):
            return self.index, faiss.SearchParametersIVF(nprobe=int(self.index.nlist), **kwargs)  # type: ignore[call-arg]
        return self.index, faiss.SearchParameters(**kwargs) if kwargs else None

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
        index, sp = self._plan(k, search_params or {}, valid)
        if self.num_rows == 0:
            return np.full((len(q), k), np.nan, np.float32), np.full((len(q), k), -1, np.int64)
        return _search(index, q, k, sp)

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
        index, sp = self._plan(k, search_params or {}, valid, topk=topk)
        if self.num_rows == 0:
            return np.full((len(q), k), np.nan, np.float32), np.full((len(q), k), -1, np.int64)
        return _search(index, q, k, sp)

    def exhaustive(self, queries: np.ndarray, k: int, valid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k over every stored vector (a search iterator's pages: each row once, in order),
        ranked exactly (`_exact`)."""
        q = self._queries(queries)
        if self.num_rows == 0:
            return np.full((len(q), k), np.nan, np.float32), np.full((len(q), k), -1, np.int64)
        index, sp = self._exact(valid)
        return _search(index, q, k, sp)

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
        index, sp = self._plan(1, search_params or {}, valid, range_search=True)
        with _serial_below(len(q)):
            lims, distances, offsets = index.range_search(q, float(radius), params=sp)
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

    def serialize(self) -> IndexFile:
        meta = {"kind": P.DENSE, "index_type": self.index_type, "metric_type": self.metric_type, "params": self.params}
        data = base.pack(meta, faiss.serialize_index(self.index).tobytes())
        return IndexFile(data, self.index_type, self.metric_type, self.params, self.dim, self.num_rows)


AnyIndex = VectorIndex | BinaryIndex | SparseInvertedIndex


def kind_of(vectors: Vectors) -> str:
    if isinstance(vectors, SparseRows):
        return P.SPARSE
    return P.BINARY if vectors.dtype == np.uint8 else P.DENSE


def create(vectors: Vectors, index_type: str, metric_type: str, params: Mapping[str, str] | None = None) -> AnyIndex:
    """Build an in-memory index over `vectors` (row i = offset i): a dense float32 matrix, a
    packed binary (uint8) matrix or `SparseRows`. `params` are a FieldIndex's checked params
    (AUTOINDEX is resolved here for the vectors' kind); FLAT needs none."""
    kind = kind_of(vectors)
    flat = P.build_params({**(params or {}), P.INDEX_TYPE: index_type}, kind)
    index_type = flat[P.INDEX_TYPE]
    if isinstance(vectors, SparseRows):
        return SparseInvertedIndex.build(vectors, index_type, metric_type, flat)
    if kind == P.BINARY:
        return BinaryIndex.build(vectors, index_type, metric_type, flat)
    x = _as_matrix(vectors)
    if metric_type == P.COSINE:
        x = normalize(x)
    index = _new_index(index_type, metric_type, x.shape[1], len(x), flat)
    if not index.is_trained:
        index.train(x)
    if len(x):
        index.add(x)
    return VectorIndex(index, index_type, metric_type, flat)


_EXACT = {P.DENSE: P.FLAT, P.BINARY: P.BIN_FLAT, P.SPARSE: P.SPARSE_INVERTED_INDEX}


def brute_force(vectors: Vectors, metric_type: str, params: Mapping[str, str] | None = None) -> AnyIndex:
    """Raw vectors searched exactly (growing data, segments too small to index)."""
    return create(vectors, _EXACT[kind_of(vectors)], metric_type, params)


def build(vectors: Vectors, index_type: str, metric_type: str, params: Mapping[str, str] | None = None) -> IndexFile:
    """Build and serialize: the bytes an IndexNode writes to object storage."""
    return create(vectors, index_type, metric_type, params).serialize()


async def abuild(
    vectors: Vectors, index_type: str, metric_type: str, params: Mapping[str, str] | None = None
) -> IndexFile:
    return await asyncio.to_thread(build, vectors, index_type, metric_type, params)


def load(data: bytes | memoryview) -> AnyIndex:
    """Deserialize what `build` wrote."""
    meta, payload = base.unpack(data)
    kind = meta.get("kind", P.DENSE)
    if kind == P.BINARY:
        return BinaryIndex.from_arrays(meta, base.unpack_arrays(meta["arrays"], payload))
    if kind == P.SPARSE:
        return SparseInvertedIndex.from_arrays(meta, base.unpack_arrays(meta["arrays"], payload))
    index = faiss.deserialize_index(np.frombuffer(payload, dtype=np.uint8))
    vi = VectorIndex(index, meta["index_type"], meta["metric_type"], meta["params"])
    if vi.holds_raw and isinstance(index, faiss.IndexIVF) and index.direct_map.type == faiss.DirectMap.NoMap:  # type: ignore[attr-defined]
        index.make_direct_map()  # row → (list, slot), so that outputs can be read back (8 B/row)
    return vi


async def aload(data: bytes | memoryview) -> AnyIndex:
    return await asyncio.to_thread(load, data)
