"""Index and search parameter rules (Milvus 2.3's pkg/util/indexparamcheck and knowhere's checks).

The Proxy validates CreateIndex with `check_index_params` before anything is stored, and the
QueryNode validates a search's params with `check_search_params`; the builder and the searcher
trust what passed. Messages are Milvus' (a plain checker error answers code 65535, as in Milvus).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pymilvus.grpc_gen import schema_pb2

from kmilvus.util import typeutil
from kmilvus.util.merr import PARAMETER_INVALID, UNEXPECTED, MilvusError

DT = schema_pb2.DataType

# Keys of a FieldIndex's params (Milvus' common.IndexTypeKey, MetricTypeKey, DimKey).
INDEX_TYPE = "index_type"
METRIC_TYPE = "metric_type"
DIM = "dim"
PARAMS = "params"  # pymilvus sends the type-specific params as one JSON object under this key

FLAT, IVF_FLAT, IVF_SQ8, HNSW, AUTOINDEX = "FLAT", "IVF_FLAT", "IVF_SQ8", "HNSW", "AUTOINDEX"
INDEX_TYPES = (FLAT, IVF_FLAT, IVF_SQ8, HNSW, AUTOINDEX)
L2, IP, COSINE = "L2", "IP", "COSINE"
METRICS = (L2, IP, COSINE)
DEFAULT_METRIC = COSINE  # Milvus' FloatVectorDefaultMetricType
# Scalar index types Milvus knows: not built here yet (answered as not supported).
SCALAR_INDEX_TYPES = ("STL_SORT", "Trie", "TRIE", "INVERTED", "SORT", "BITMAP")

MIN_NLIST, MAX_NLIST = 1, 65536
HNSW_MIN_M, HNSW_MAX_M = 4, 64
HNSW_MIN_EF_CONSTRUCTION, HNSW_MAX_EF_CONSTRUCTION = 8, 512
MIN_DIM, MAX_DIM = 1, 32768
MAX_TOPK = 16384  # Milvus' quota topK limit
MAX_NPROBE = 65536
MAX_EF = 32768
# AUTOINDEX resolves to HNSW with Milvus' autoIndex.params.build defaults.
AUTOINDEX_BUILD = {INDEX_TYPE: HNSW, "M": "18", "efConstruction": "240"}
DEFAULT_NPROBE = 8  # knowhere's default nprobe
DEFAULT_EF_MIN = 16  # knowhere: ef defaults to max(k, 16)


def _unexpected(message: str) -> MilvusError:
    return MilvusError(UNEXPECTED, message)


def _out_of_range(name: str, lo: int, hi: int) -> MilvusError:
    return _unexpected(f"{name} out of range: [{lo}, {hi}]")


def _int_in(params: Mapping[str, str], key: str, lo: int, hi: int) -> int:
    """Milvus' CheckIntByRange: missing, not an integer, or outside [lo, hi] is out of range."""
    raw = params.get(key)
    try:
        value = int(str(raw))
    except (TypeError, ValueError):
        raise _out_of_range(key, lo, hi) from None
    if not lo <= value <= hi:
        raise _out_of_range(key, lo, hi)
    return value


def is_vector_index(index_type: str) -> bool:
    return index_type in INDEX_TYPES


def build_params(params: Mapping[str, str]) -> dict[str, str]:
    """The params the builder uses: AUTOINDEX replaced by its HNSW defaults (what Milvus stores
    as the index's build params while DescribeIndex still shows AUTOINDEX)."""
    out = dict(params)
    if out.get(INDEX_TYPE) == AUTOINDEX:
        out.update(AUTOINDEX_BUILD)
    return out


def check_index_params(params: Mapping[str, str], field: schema_pb2.FieldSchema, dim: int) -> dict[str, str]:
    """Validate a vector index's flat params (index_type, metric_type, nlist, M, ...) for `field`.

    Returns the params as stored: metric defaulted to COSINE, `dim` filled from the schema.
    """
    out = {k: str(v) for k, v in params.items()}
    if out.get(INDEX_TYPE) == "":  # given, but empty (absent is AUTOINDEX): Milvus' checkTrain
        raise MilvusError(
            PARAMETER_INVALID,
            "invalid index type: : invalid parameter[expected=valid index params][actual=invalid index params]",
        )
    index_type = out.get(INDEX_TYPE, "")
    if not index_type:
        out[INDEX_TYPE] = index_type = AUTOINDEX  # Milvus builds AUTOINDEX when none is named
    if index_type == AUTOINDEX and set(out) - {INDEX_TYPE, METRIC_TYPE, DIM}:
        raise _unexpected("only metric type can be passed when use AutoIndex")
    if index_type in SCALAR_INDEX_TYPES:
        raise MilvusError(PARAMETER_INVALID, f"scalar index {index_type} is not supported by kmilvus yet")
    if index_type not in INDEX_TYPES:
        raise _unexpected(f"invalid index type: {index_type}")
    if field.data_type != DT.FloatVector:
        raise _unexpected(f"can't build {index_type.lower()} in not vector type.")
    out.setdefault(METRIC_TYPE, DEFAULT_METRIC)
    out[METRIC_TYPE] = out[METRIC_TYPE].upper()
    out[DIM] = str(dim)
    checked = build_params(out)
    if checked[INDEX_TYPE] == HNSW:
        _int_in(checked, "efConstruction", HNSW_MIN_EF_CONSTRUCTION, HNSW_MAX_EF_CONSTRUCTION)
        _int_in(checked, "M", HNSW_MIN_M, HNSW_MAX_M)
    elif checked[INDEX_TYPE] in (IVF_FLAT, IVF_SQ8):
        _int_in(checked, "nlist", MIN_NLIST, MAX_NLIST)
    if out[METRIC_TYPE] not in METRICS:
        raise _unexpected(
            f"metric type {out[METRIC_TYPE]} not found or not supported, supported: [{' '.join(METRICS)}]"
        )
    _int_in(out, DIM, MIN_DIM, MAX_DIM)
    return out


def check_field_index(
    schema: schema_pb2.CollectionSchema, field_name: str, params: Mapping[str, object]
) -> tuple[schema_pb2.FieldSchema, dict[str, str]]:
    """CreateIndex's checks against a schema, as the Proxy makes them: the field must exist
    (`field not found[field=x]`), then `check_index_params`. Returns (field, params as stored)."""
    field = typeutil.field_by_name(schema, field_name)
    dim = typeutil.dim_of(field) if field.data_type == DT.FloatVector else 0
    return field, check_index_params({k: str(v) for k, v in params.items()}, field, dim)


def user_params(checked: Mapping[str, str]) -> dict[str, str]:
    """What DescribeIndex shows: index_type, metric_type and the rest as a `params` JSON object."""
    rest = {k: _num(v) for k, v in checked.items() if k not in (INDEX_TYPE, METRIC_TYPE, DIM)}
    return {INDEX_TYPE: checked[INDEX_TYPE], METRIC_TYPE: checked[METRIC_TYPE], PARAMS: json.dumps(rest)}


def _num(v: str) -> object:
    try:
        return int(v)
    except ValueError:
        return v


def check_search_params(index_type: str, k: int, search_params: Mapping[str, object]) -> dict[str, int]:
    """Validate a search's knobs (knowhere's checks) and fill defaults: {"nprobe"} or {"ef"}."""
    if not 1 <= k <= MAX_TOPK:
        raise MilvusError(PARAMETER_INVALID, f"topk [{k}] is invalid, it should be in range [1, {MAX_TOPK}]")
    index_type = build_params({INDEX_TYPE: index_type})[INDEX_TYPE]
    if index_type == HNSW:
        ef = _int_param(search_params, "ef", max(k, DEFAULT_EF_MIN), 1, MAX_EF)
        if ef < k:
            raise MilvusError(PARAMETER_INVALID, f"ef({ef}) should be larger than k({k})")
        return {"ef": ef}
    if index_type in (IVF_FLAT, IVF_SQ8):
        return {"nprobe": _int_param(search_params, "nprobe", DEFAULT_NPROBE, 1, MAX_NPROBE)}
    return {}


def _int_param(params: Mapping[str, object], key: str, default: int, lo: int, hi: int) -> int:
    raw = params.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw))
    except ValueError:
        raise MilvusError(PARAMETER_INVALID, f"param '{key}' ({raw}) should be an integer") from None
    if not lo <= value <= hi:
        raise MilvusError(PARAMETER_INVALID, f"param '{key}' ({value}) should be in range [{lo}, {hi}]")
    return value
