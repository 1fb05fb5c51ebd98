"""Index and search parameter rules (Milvus' pkg/util/indexparamcheck, its proxy's createIndexTask
and search checks, and knowhere's config checks).

The Proxy validates CreateIndex with `check_index_params` before anything is stored, and the
QueryNode validates a search's params with `check_search_params`; the builder and the searcher
trust what passed. Messages are Milvus': an indexparamcheck checker's plain error answers code
65535; the proxy's own checks (metric of a sparse index, an index type for another data type,
range search bounds) answer 1100 with Milvus' ": invalid parameter" suffix.

Which index takes which vector type and metric (Milvus 2.5 with knowhere 2.5):

| data type | index types | metrics |
|---|---|---|
| FloatVector, Float16Vector, BFloat16Vector | FLAT, IVF_FLAT, IVF_SQ8, IVF_PQ, SCANN, HNSW | L2, IP, COSINE |
| BinaryVector | BIN_FLAT | HAMMING, JACCARD, SUBSTRUCTURE, SUPERSTRUCTURE |
| BinaryVector | BIN_IVF_FLAT | HAMMING, JACCARD |
| SparseFloatVector | SPARSE_INVERTED_INDEX, SPARSE_WAND | IP |

AUTOINDEX resolves per data type as Milvus' autoIndex.params: HNSW (M 18, efConstruction 240)
for dense vectors, BIN_IVF_FLAT (nlist 1024) for binary, SPARSE_INVERTED_INDEX for sparse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from pymilvus.grpc_gen import schema_pb2

from kmilvus.index import scalar_params
from kmilvus.util import typeutil
from kmilvus.util.merr import METRIC_NOT_FOUND, PARAMETER_INVALID, UNEXPECTED, MilvusError

DT = schema_pb2.DataType

# Keys of a FieldIndex's params (Milvus' common.IndexTypeKey, MetricTypeKey, DimKey).
INDEX_TYPE = "index_type"
METRIC_TYPE = "metric_type"
DIM = "dim"
# The field's vector type, kept with the index's params when it is not FloatVector (the builder
# reads the vectors by it: float16 and bfloat16 share one binlog layout).
DATA_TYPE = "data_type"
PARAMS = "params"  # pymilvus sends the type-specific params as one JSON object under this key

FLAT, IVF_FLAT, IVF_SQ8, HNSW, AUTOINDEX = "FLAT", "IVF_FLAT", "IVF_SQ8", "HNSW", "AUTOINDEX"
IVF_PQ, SCANN = "IVF_PQ", "SCANN"
BIN_FLAT, BIN_IVF_FLAT = "BIN_FLAT", "BIN_IVF_FLAT"
SPARSE_INVERTED_INDEX, SPARSE_WAND = "SPARSE_INVERTED_INDEX", "SPARSE_WAND"
# The float-vector index types a Collection custom resource enumerates (crds/).
INDEX_TYPES = (FLAT, IVF_FLAT, IVF_SQ8, HNSW, AUTOINDEX)
L2, IP, COSINE = "L2", "IP", "COSINE"
HAMMING, JACCARD, SUBSTRUCTURE, SUPERSTRUCTURE = "HAMMING", "JACCARD", "SUBSTRUCTURE", "SUPERSTRUCTURE"
BM25 = "BM25"
METRICS = (L2, IP, COSINE)  # dense float vectors (Milvus' METRICS)
BIN_FLAT_METRICS = (HAMMING, JACCARD, SUBSTRUCTURE, SUPERSTRUCTURE)  # Milvus' BinIDMapMetrics
BIN_IVF_METRICS = (HAMMING, JACCARD)  # Milvus' BinIvfMetrics
SPARSE_METRICS = (IP,)
ALL_METRICS = (*METRICS, *BIN_FLAT_METRICS, BM25)
POSITIVELY_RELATED = (IP, COSINE, BM25)  # larger is closer (Milvus' metric.PositivelyRelated)
DEFAULT_METRIC = COSINE  # Milvus' FloatVectorDefaultMetricType
# knowhere's BM25 params: on the index, overridable per search.
BM25_K1, BM25_B = "bm25_k1", "bm25_b"
DEFAULT_BM25_K1, DEFAULT_BM25_B = 1.2, 0.75

DENSE_TYPES = (DT.FloatVector, DT.Float16Vector, DT.BFloat16Vector)
DENSE_INDEXES = (FLAT, IVF_FLAT, IVF_SQ8, IVF_PQ, SCANN, HNSW)
BINARY_INDEXES = (BIN_FLAT, BIN_IVF_FLAT)
SPARSE_INDEXES = (SPARSE_INVERTED_INDEX, SPARSE_WAND)
VECTOR_INDEX_TYPES = (*DENSE_INDEXES, *BINARY_INDEXES, *SPARSE_INDEXES, AUTOINDEX)

MIN_NLIST, MAX_NLIST = 1, 65536
MIN_NBITS, MAX_NBITS, DEFAULT_NBITS = 1, 16, 8
HNSW_MIN_M, HNSW_MAX_M = 4, 64
HNSW_MIN_EF_CONSTRUCTION, HNSW_MAX_EF_CONSTRUCTION = 8, 512
MIN_DIM, MAX_DIM = 1, 32768
MAX_TOPK = 16384  # Milvus' quota topK limit
MAX_NPROBE = 65536
MAX_EF = 32768
# AUTOINDEX resolves to these (Milvus' autoIndex.params.build / .binary.build / .sparse.build).
AUTOINDEX_BUILD = {INDEX_TYPE: HNSW, "M": "18", "efConstruction": "240"}
AUTOINDEX_BINARY = {INDEX_TYPE: BIN_IVF_FLAT, "nlist": "1024"}
AUTOINDEX_SPARSE = {INDEX_TYPE: SPARSE_INVERTED_INDEX}
DEFAULT_NPROBE = 8  # knowhere's default nprobe
DEFAULT_EF_MIN = 16  # knowhere: ef defaults to max(k, 16)
DEFAULT_REFINE_FACTOR = 10  # knowhere's sparse refine_factor (used when drop_ratio_search > 0)

# Which data type an index is built from: "dense" (float32 matrix), "binary" (packed bits),
# "sparse" (rows of (dimension, value) pairs).
DENSE, BINARY, SPARSE = "dense", "binary", "sparse"


def vector_kind(data_type: int) -> str | None:
    if data_type in DENSE_TYPES:
        return DENSE
    if data_type == DT.BinaryVector:
        return BINARY
    if data_type == DT.SparseFloatVector:
        return SPARSE
    return None


def default_metric(data_type: int) -> str:
    """The metric of an index (or a search without one) that names none (Milvus' defaults)."""
    kind = vector_kind(data_type)
    return HAMMING if kind == BINARY else IP if kind == SPARSE else DEFAULT_METRIC


def check_search_metric(data_type: int, metric: str) -> str:
    """A search's metric must be one the field's vector type has."""
    kind = vector_kind(data_type)
    allowed = {DENSE: METRICS, BINARY: BIN_FLAT_METRICS, SPARSE: SPARSE_METRICS}.get(kind or DENSE, METRICS)
    if metric not in allowed:
        raise _unexpected(f"metric type {metric} not found or not supported, supported: [{' '.join(allowed)}]")
    return metric


def larger_is_closer(metric: str) -> bool:
    return metric.upper() in POSITIVELY_RELATED


def check_metric(metric: str) -> str:
    """A search's metric, upper-cased (L2 when none is named); one of the metrics there are."""
    m = (metric or "L2").upper()
    if m not in ALL_METRICS:
        raise MilvusError(METRIC_NOT_FOUND, f"metric type not found or not supported, supported: {ALL_METRICS}")
    return m


def bm25_params(index_params: Mapping[str, object], search_params: Mapping[str, object]) -> tuple[float, float]:
    """(k1, b): the search's, else the index's, else Milvus' defaults; checked as knowhere does."""
    out = []
    for key, default, hi in ((BM25_K1, DEFAULT_BM25_K1, 3.0), (BM25_B, DEFAULT_BM25_B, 1.0)):
        raw = search_params.get(key, index_params.get(key, default))
        try:
            value = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise MilvusError(PARAMETER_INVALID, f"param '{key}' ({raw}) should be a number") from None
        if not 0.0 <= value <= hi or math.isnan(value):
            raise MilvusError(PARAMETER_INVALID, f"param '{key}' ({raw}) should be in range [0.000000, {hi:.6f}]")
        out.append(value)
    return out[0], out[1]


def _unexpected(message: str) -> MilvusError:
    return MilvusError(UNEXPECTED, message)


def _invalid(message: str) -> MilvusError:
    """Milvus' merr.WrapErrParameterInvalidMsg: code 1100, the message then ': invalid parameter'."""
    return MilvusError(PARAMETER_INVALID, f"{message}: invalid parameter")


def _index_params_invalid(message: str) -> MilvusError:
    """Milvus' createIndexTask wrapping a check's error (WrapErrParameterInvalid)."""
    return MilvusError(
        PARAMETER_INVALID, f"{message}: invalid parameter[expected=valid index params][actual=invalid index params]"
    )


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
    return index_type in VECTOR_INDEX_TYPES


def build_params(params: Mapping[str, str], kind: str = DENSE) -> dict[str, str]:
    """The params the builder uses: AUTOINDEX replaced by its defaults for the vector kind (what
    Milvus stores as the index's build params while DescribeIndex still shows AUTOINDEX)."""
    out = dict(params)
    if out.get(INDEX_TYPE) == AUTOINDEX:
        out.update(AUTOINDEX_BINARY if kind == BINARY else AUTOINDEX_SPARSE if kind == SPARSE else AUTOINDEX_BUILD)
    return out


def _allowed(kind: str) -> tuple[str, ...]:
    return {DENSE: DENSE_INDEXES, BINARY: BINARY_INDEXES, SPARSE: SPARSE_INDEXES}[kind]


def check_index_params(
    params: Mapping[str, str], field: schema_pb2.FieldSchema, dim: int, bm25: bool = False
) -> dict[str, str]:
    """Validate a vector index's flat params (index_type, metric_type, nlist, M, ...) for `field`.

    Returns the params as stored: metric defaulted per data type, `dim` filled from the schema
    (none for a sparse field, which has no dim).
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
    if index_type not in VECTOR_INDEX_TYPES:
        raise _unexpected(f"invalid index type: {index_type}")
    kind = vector_kind(field.data_type)
    if kind is None:
        raise _unexpected(f"can't build {index_type.lower()} in not vector type.")
    if index_type != AUTOINDEX and index_type not in _allowed(kind):
        raise _index_params_invalid(
            f"data type {typeutil.type_name(field.data_type)} can't build with this index {index_type}"
        )
    if field.data_type != DT.FloatVector:
        out[DATA_TYPE] = typeutil.type_name(field.data_type)
    out.setdefault(METRIC_TYPE, BM25 if bm25 else default_metric(field.data_type))
    out[METRIC_TYPE] = metric = out[METRIC_TYPE].upper()
    checked = build_params(out, kind)
    if kind == SPARSE:
        _check_sparse(field, metric, checked, bm25)
        return out
    out[DIM] = str(dim)
    checked[DIM] = str(dim)
    {DENSE: _check_dense, BINARY: _check_binary}[kind](checked, metric)
    _int_in(out, DIM, MIN_DIM, MAX_DIM)
    return out


def _check_dense(checked: dict[str, str], metric: str) -> None:
    index_type = checked[INDEX_TYPE]
    if index_type == HNSW:
        _int_in(checked, "efConstruction", HNSW_MIN_EF_CONSTRUCTION, HNSW_MAX_EF_CONSTRUCTION)
        _int_in(checked, "M", HNSW_MIN_M, HNSW_MAX_M)
    elif index_type in (IVF_FLAT, IVF_SQ8, IVF_PQ, SCANN):
        _int_in(checked, "nlist", MIN_NLIST, MAX_NLIST)
    if index_type == IVF_PQ:
        _check_pq(checked)
    elif index_type == SCANN:
        dim = int(checked[DIM])
        if dim % 2:
            raise _unexpected(f"dimension must be able to be divided by 2, dimension: {dim}")
        _check_bool(checked, "with_raw_data")
    if metric not in METRICS:
        raise _unexpected(f"metric type {metric} not found or not supported, supported: [{' '.join(METRICS)}]")


def _check_pq(checked: dict[str, str]) -> None:
    """Milvus' ivfPQChecker: `m` required and a divisor of dim; `nbits` an integer (default 8)."""
    if "nbits" in checked:
        try:
            int(checked["nbits"])
        except ValueError:
            raise _unexpected(f"invalid nbits: {checked['nbits']}") from None
        _int_in(checked, "nbits", MIN_NBITS, MAX_NBITS)
    if "m" not in checked:
        raise _unexpected("parameter `m` not found")
    try:
        m = int(checked["m"])
    except ValueError:
        m = 0
    if m <= 0:
        raise _unexpected(f"invalid `m`: {checked['m']}")
    dim = int(checked[DIM])
    if dim % m:
        raise _unexpected(f"dimension must be abled to be divided by `m`, dimension: {dim}, m: {m}")


def _check_bool(checked: Mapping[str, str], key: str) -> None:
    if key in checked and checked[key].lower() not in ("true", "false"):
        raise _unexpected(f"invalid {key}: {checked[key]}, must be true or false")


def _check_binary(checked: dict[str, str], metric: str) -> None:
    if metric not in BIN_FLAT_METRICS:
        raise _unexpected(f"metric type {metric} not found or not supported, supported: [{' '.join(BIN_FLAT_METRICS)}]")
    if checked[INDEX_TYPE] == BIN_IVF_FLAT:
        if metric not in BIN_IVF_METRICS:
            raise _unexpected(
                f"metric type {metric} not found or not supported, supported: [{' '.join(BIN_IVF_METRICS)}]"
            )
        _int_in(checked, "nlist", MIN_NLIST, MAX_NLIST)


def _check_sparse(field: schema_pb2.FieldSchema, metric: str, checked: Mapping[str, str], bm25: bool) -> None:
    """Milvus 2.5's createIndexTask and sparseFloatVectorBaseChecker; a BM25 function's output
    field (`bm25`) scores with BM25 only, with knowhere's bm25_k1 in [0, 3] and bm25_b in [0, 1]."""
    if metric == BM25 and not bm25:
        # A BM25 function's output field scores with BM25; no other field may.
        raise _invalid("only BM25 Function output field support BM25 metric type")
    if bm25:
        if metric != BM25:
            raise _invalid(f"BM25 function output field only supports the BM25 metric type, got {metric}")
        for key, hi in (("bm25_k1", 3.0), ("bm25_b", 1.0)):
            _float_in(checked, key, 0.0, hi)
    elif metric not in SPARSE_METRICS:
        raise _index_params_invalid("only IP is the supported metric type for sparse index")
    raw = checked.get("drop_ratio_build")
    if raw is not None:
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0 <= ratio < 1:
            raise _index_params_invalid(f"invalid drop_ratio_build: {raw}, must be in range [0, 1)")


def check_field_index(
    schema: schema_pb2.CollectionSchema, field_name: str, params: Mapping[str, object]
) -> tuple[schema_pb2.FieldSchema, dict[str, str]]:
    """CreateIndex's checks against a schema, as the Proxy makes them: the field must exist
    (`field not found[field=x]`), then `check_index_params`. Returns (field, params as stored)."""
    field = typeutil.field_by_name(schema, field_name)
    flat = {k: str(v) for k, v in params.items()}
    if scalar_params.is_scalar_request(flat.get(INDEX_TYPE), field):  # kmilvus/index/scalar_params.py
        return field, scalar_params.check_scalar_index(flat, field)
    kind = vector_kind(field.data_type)
    dim = typeutil.dim_of(field) if kind in (DENSE, BINARY) else 0
    bm25 = is_bm25_output(schema, field)
    return field, check_index_params({k: str(v) for k, v in params.items()}, field, dim, bm25)


def is_bm25_output(schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema) -> bool:
    """The output field of one of the schema's BM25 functions (kmilvus/function)."""
    return field.data_type == DT.SparseFloatVector and any(
        fn.type == schema_pb2.FunctionType.BM25 and field.name in fn.output_field_names for fn in schema.functions
    )


def _float_in(params: Mapping[str, str], key: str, lo: float, hi: float) -> None:
    if key not in params:
        return
    try:
        value = float(params[key])
    except ValueError:
        value = float("nan")
    if not lo <= value <= hi:
        raise _index_params_invalid(f"param '{key}' ({params[key]}) should be in range [{lo:f}, {hi:f}]")


def user_params(checked: Mapping[str, str]) -> dict[str, str]:
    """What DescribeIndex shows: index_type, metric_type and the rest as a `params` JSON object."""
    if scalar_params.is_scalar_build(checked):
        return scalar_params.user_params(checked)
    rest = {k: _num(v) for k, v in checked.items() if k not in (INDEX_TYPE, METRIC_TYPE, DIM, DATA_TYPE)}
    return {INDEX_TYPE: checked[INDEX_TYPE], METRIC_TYPE: checked[METRIC_TYPE], PARAMS: json.dumps(rest)}


def _num(v: str) -> object:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            continue
    return v


def check_search_params(index_type: str, k: int, search_params: Mapping[str, object]) -> dict[str, float]:
    """Validate a search's knobs (knowhere's checks) and fill defaults: {"nprobe"}, {"ef"},
    {"nprobe", "reorder_k"} or {"drop_ratio_search", "refine_factor"}. `index_type` is the
    concrete type (AUTOINDEX of a dense field resolves to HNSW)."""
    if not 1 <= k <= MAX_TOPK:
        raise MilvusError(PARAMETER_INVALID, f"topk [{k}] is invalid, it should be in range [1, {MAX_TOPK}]")
    index_type = build_params({INDEX_TYPE: index_type})[INDEX_TYPE]
    if index_type == HNSW:
        ef = _int_param(search_params, "ef", max(k, DEFAULT_EF_MIN), 1, MAX_EF)
        if ef < k:
            raise MilvusError(PARAMETER_INVALID, f"ef({ef}) should be larger than k({k})")
        return {"ef": ef}
    if index_type in (IVF_FLAT, IVF_SQ8, IVF_PQ, BIN_IVF_FLAT):
        return {"nprobe": _int_param(search_params, "nprobe", DEFAULT_NPROBE, 1, MAX_NPROBE)}
    if index_type == SCANN:
        nprobe = _int_param(search_params, "nprobe", DEFAULT_NPROBE, 1, MAX_NPROBE)
        reorder_k = _int_param(search_params, "reorder_k", k, 1, 2**31 - 1)
        if reorder_k < k:
            raise MilvusError(PARAMETER_INVALID, f"reorder_k({reorder_k}) should be larger than k({k})")
        return {"nprobe": nprobe, "reorder_k": reorder_k}
    if index_type in SPARSE_INDEXES:
        return {
            "drop_ratio_search": _ratio_param(search_params, "drop_ratio_search"),
            "refine_factor": _int_param(search_params, "refine_factor", DEFAULT_REFINE_FACTOR, 1, 2**31 - 1),
        }
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


def _ratio_param(params: Mapping[str, object], key: str) -> float:
    """A float in [0, 1) (knowhere's drop ratios), 0 when not given."""
    raw = params.get(key)
    if raw is None:
        return 0.0
    try:
        value = float(str(raw))
    except ValueError:
        raise MilvusError(PARAMETER_INVALID, f"param '{key}' ({raw}) should be a number") from None
    if not 0 <= value < 1:
        raise MilvusError(PARAMETER_INVALID, f"param '{key}' ({value}) should be in range [0.000000, 1.000000)")
    return value


def check_range_params(metric: str, params: Mapping[str, object]) -> tuple[float, float | None] | None:
    """Milvus' proxy checkRangeSearchParams: (radius, range_filter) of a range search, or None.

    IP / COSINE (larger is closer) need radius < range_filter; the distances (L2, HAMMING,
    JACCARD) need range_filter < radius. SUBSTRUCTURE / SUPERSTRUCTURE have no range search
    (knowhere's faiss refuses it)."""
    if "radius" not in params:
        return None
    radius = _number(params["radius"], "radius")
    metric = metric.upper()
    if metric in (SUBSTRUCTURE, SUPERSTRUCTURE):
        raise _unexpected(f"{metric.capitalize()} not support range_search")
    if "range_filter" not in params:
        return radius, None
    range_filter = _number(params["range_filter"], "range_filter")
    if larger_is_closer(metric):
        if radius >= range_filter:
            raise _invalid(
                f"range_filter must be greater than radius for IP/COSINE, range_filter:{range_filter:f}, "
                f"radius:{radius:f}"
            )
    elif radius <= range_filter:
        raise _invalid(
            f"range_filter must be less than radius for L2/HAMMING/JACCARD, range_filter:{range_filter:f}, "
            f"radius:{radius:f}"
        )
    return radius, range_filter


def _number(raw: object, key: str) -> float:
    if raw is None:
        raise _invalid(f"pass invalid type for {key}")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _invalid(f"must pass numpy type for {key}")  # JSON numbers only, as Milvus' json.Unmarshal
    return float(raw)
