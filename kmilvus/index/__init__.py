"""Vector indexes (knowhere's role): build per segment, serialize, load, search.

A shared building block for the IndexNode (build), DataCoord (param checks) and the QueryNode
(load and search); it imports no component.
"""

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
    IndexFile,
    VectorIndex,
    abuild,
    aload,
    brute_force,
    build,
    create,
    load,
    normalize,
)

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
    "IndexFile",
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
