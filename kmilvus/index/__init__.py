"""Vector indexes (knowhere's role): build per segment, serialize, load, search.

A shared building block for the IndexNode (build), DataCoord (param checks) and the QueryNode
(load and search); it imports no component. Dense vectors go to faiss (vector_index), binary
vectors to binary_index, sparse vectors to sparse_index; vectors converts stored and wire forms.
"""

from kmilvus.index.base import IndexFile
from kmilvus.index.params import (
    AUTOINDEX,
    COSINE,
    FLAT,
    HNSW,
    INDEX_TYPES,
    IP,
    IVF_FLAT,
    IVF_SQ8,
    L2,
    METRICS,
    check_index_params,
    check_search_params,
)
from kmilvus.index.vector_index import (
    AnyIndex,
    VectorIndex,
    abuild,
    aload,
    brute_force,
    build,
    create,
    load,
    normalize,
)
from kmilvus.index.vectors import SparseRows

__all__ = [
    "AUTOINDEX",
    "COSINE",
    "FLAT",
    "HNSW",
    "INDEX_TYPES",
    "IP",
    "IVF_FLAT",
    "IVF_SQ8",
    "L2",
    "METRICS",
    "AnyIndex",
    "IndexFile",
    "SparseRows",
    "VectorIndex",
    "abuild",
    "aload",
    "brute_force",
    "build",
    "check_index_params",
    "check_search_params",
    "create",
    "load",
    "normalize",
]
