"""Scalar index rules (Milvus 2.5's indexparamcheck scalar checkers and the Proxy's createIndexTask):
which field types each index takes, what AUTOINDEX means on a scalar field, and the refusals with
Milvus' codes and texts. The builder and the QueryNode trust what passed (kmilvus/index/scalar_index.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pymilvus.grpc_gen import schema_pb2

from kmilvus.util.merr import PARAMETER_INVALID, MilvusError

DT = schema_pb2.DataType

INDEX_TYPE = "index_type"
PARAMS = "params"
AUTOINDEX = "AUTOINDEX"
INVERTED, STL_SORT, TRIE, BITMAP, HYBRID = "INVERTED", "STL_SORT", "Trie", "BITMAP", "HYBRID"
# Every name Milvus 2.5's checker manager knows for a scalar index → the index built. HYBRID is
# Milvus-internal (what AUTOINDEX picks): a user naming it is refused.
SCALAR_INDEX_TYPES = {
    INVERTED: INVERTED,
    STL_SORT: STL_SORT,
    "Asceneding": STL_SORT,  # sic: Milvus registers this spelling too
    "TRIE": TRIE,
    TRIE: TRIE,
    "marisa-trie": TRIE,
    BITMAP: BITMAP,
}
USER_INDEX_TYPE = "user_index_type"  # kept in the build params when AUTOINDEX (or an alias) resolved
BITMAP_CARDINALITY_LIMIT = "bitmap_cardinality_limit"  # Milvus' common.BitmapCardinalityLimitKey
DEFAULT_BITMAP_CARDINALITY_LIMIT = 500  # common.bitmapIndexCardinalityBound
MAX_BITMAP_CARDINALITY_LIMIT = 1000  # indexparamcheck.MaxBitmapCardinalityLimit
# scalarAutoIndex.params.build: {"int": "HYBRID", "varchar": "HYBRID", "bool": "BITMAP", "float": "INVERTED"}
_INTS = (DT.Int8, DT.Int16, DT.Int32, DT.Int64)
_FLOATS = (DT.Float, DT.Double)
_STRINGS = (DT.VarChar, DT.String)


def _auto_type(data_type: int) -> str:
    if data_type == DT.Bool:
        return BITMAP
    if data_type in _INTS:
        return HYBRID
    if data_type in _FLOATS:
        return INVERTED
    return HYBRID  # varchar


def is_scalar_request(index_type: str | None, field: schema_pb2.FieldSchema) -> bool:
    """Whether CreateIndex on `field` with `index_type` takes the scalar path: a scalar index
    named, or AUTOINDEX / none on a field that is not a vector (any other name goes to the
    vector checks, which refuse it on a scalar field as Milvus does)."""
    from kmilvus.util.typeutil import is_vector

    if index_type in SCALAR_INDEX_TYPES or index_type == HYBRID:
        return True
    return not is_vector(field.data_type) and index_type in (None, AUTOINDEX)


def _invalid_params(reason: str) -> MilvusError:
    """merr.WrapErrParameterInvalid("valid index params", "invalid index params", reason)."""
    return MilvusError(
        PARAMETER_INVALID, f"{reason}: invalid parameter[expected=valid index params][actual=invalid index params]"
    )


def _check_data_type(index_type: str, field: schema_pb2.FieldSchema) -> None:
    """Each checker's CheckValidDataType."""
    dt, elem = field.data_type, field.element_type
    name = DT.Name(dt) if dt in DT.values() else str(dt)
    if index_type == INVERTED:
        if not (dt == DT.Bool or dt in _INTS or dt in _FLOATS or dt in _STRINGS or dt == DT.Array):
            raise _invalid_params(f"INVERTED are not supported on {name} field")
    elif index_type == STL_SORT:
        if dt not in _INTS and dt not in _FLOATS:
            raise _invalid_params("STL_SORT are only supported on numeric field")
    elif index_type == TRIE:
        if dt not in _STRINGS:
            raise _invalid_params("TRIE are only supported on varchar field")
    elif index_type in (BITMAP, HYBRID):
        kind = "bitmap" if index_type == BITMAP else "hybrid"
        if index_type == BITMAP and field.is_primary_key:
            raise _invalid_params("create bitmap index on primary key not supported")
        if not (dt == DT.Bool or dt in _INTS or dt in _STRINGS or dt == DT.Array):
            raise _invalid_params(f"{kind} index are only supported on bool, int, string and array field")
        if dt == DT.Array and not (elem == DT.Bool or elem in _INTS or elem in _STRINGS):
            raise _invalid_params(f"{kind} index are only supported on bool, int, string for array field")


def check_scalar_index(params: Mapping[str, str], field: schema_pb2.FieldSchema) -> dict[str, str]:
    """Validate a scalar index request; returns the build params (`user_params` gives back what
    DescribeIndex shows from them).

    AUTOINDEX (or no index_type) resolves as Milvus 2.5's scalarAutoIndex: bool → BITMAP, ints
    and varchar → HYBRID (BITMAP or STL_SORT / Trie per segment, by cardinality), floats →
    INVERTED, an Array field by its element type; DescribeIndex still shows what the user gave.
    """
    given = {k: str(v) for k, v in params.items()}
    index_type = given.get(INDEX_TYPE)
    if index_type == HYBRID:
        raise MilvusError(
            PARAMETER_INVALID, f"invalid parameter[expected=valid index][actual=invalid index type: {index_type}]"
        )
    build = dict(given)
    if index_type is None or index_type == AUTOINDEX:
        dt = field.data_type
        if dt == DT.Array:
            dt = field.element_type
        if not (dt == DT.Bool or dt in _INTS or dt in _FLOATS or dt in _STRINGS):
            name = DT.Name(field.data_type) if field.data_type in DT.values() else str(field.data_type)
            raise MilvusError(
                PARAMETER_INVALID,
                "invalid parameter[expected=supported field]"
                f"[actual=create auto index on type:{name} is not supported]",
            )
        build[INDEX_TYPE] = _auto_type(dt)
    else:
        build[INDEX_TYPE] = SCALAR_INDEX_TYPES[index_type]
    if build[INDEX_TYPE] == HYBRID:
        # Milvus fills the default (common.bitmapIndexCardinalityBound) when absent; the builder does.
        try:
            limit = int(build.get(BITMAP_CARDINALITY_LIMIT, DEFAULT_BITMAP_CARDINALITY_LIMIT))
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_BITMAP_CARDINALITY_LIMIT:
            raise _invalid_params(
                "failed to check bitmap cardinality limit, should be larger than 0 and smaller than "
                f"{MAX_BITMAP_CARDINALITY_LIMIT}"
            )
    _check_data_type(build[INDEX_TYPE], field)
    if index_type != build[INDEX_TYPE]:
        build[USER_INDEX_TYPE] = index_type or ""  # AUTOINDEX, an alias, or none at all
    return build


def user_params(build: Mapping[str, str]) -> dict[str, str]:
    """What DescribeIndex shows of a scalar index: the request's params as given (Milvus keeps the
    CreateIndex extra_params as the index's user params), the type-specific ones as `params`."""
    index_type = build.get(USER_INDEX_TYPE, build[INDEX_TYPE])
    out = {INDEX_TYPE: index_type} if index_type else {}
    rest = {k: v for k, v in build.items() if k not in (INDEX_TYPE, USER_INDEX_TYPE)}
    if rest:
        out[PARAMS] = json.dumps(rest)
    return out


def is_scalar_build(params: Mapping[str, str]) -> bool:
    """Whether a FieldIndex's build params name a scalar index (the builder's and loader's switch)."""
    return params.get(INDEX_TYPE) in (INVERTED, STL_SORT, TRIE, BITMAP, HYBRID)
