"""Search, hybrid search and query parameters as Milvus' proxy reads them (search_util.go,
task_query.go): parsed and checked with Milvus' error codes and texts.

Every parameter a client can send is classified here: HONOURED (kmilvus does what Milvus does
with it) or REFUSED (a later Milvus feature kmilvus does not build: answered with Milvus'
"service unimplemented"). A key in neither list is refused too — no parameter is ever dropped
silently. The audit test (tests/system/test_request_params.py) lists what pymilvus can send and fails
on any key or request field missing from these tables.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus.util import merr, typeutil

DT = schema_pb2.DataType
TOPK_LIMIT = 16384  # Milvus' quotaAndLimits.limits.topK
MAX_QUERY_RESULT_WINDOW = 16384  # quotaAndLimits.limits.maxQueryResultWindow
MAX_GROUP_SIZE = 10  # quotaAndLimits.limits.maxGroupSize
NQ_LIMIT = 16384  # quotaAndLimits.limits.nq
MAX_SEARCH_REQUESTS = 1024  # Milvus' defaultMaxSearchRequest: sub-requests of a hybrid search
GROUPABLE = (DT.Bool, DT.Int8, DT.Int16, DT.Int32, DT.Int64, DT.VarChar)  # segcore's SearchGroupBy

# search_params keys (MilvusService.Search and each hybrid sub-request)
SEARCH_HONOURED = frozenset(
    {
        "topk",
        "offset",
        "round_decimal",
        "ignore_growing",
        "metric_type",
        "anns_field",
        "params",
        "hints",  # a filter-strategy hint: it never changes which rows match, nothing to do
        "group_by_field",
        "group_size",
        "strict_group_size",
        "iterator",
        "collection_id",
        "search_iter_v2",
        "search_iter_batch_size",
        "search_iter_last_bound",
        "search_iter_id",
        "analyzer_name",  # a multi-analyzer BM25 field's analyzer for the query text
    }
)
SEARCH_REFUSED = {
    "group_by_fields": "search group by several fields",
    "order_by_fields": "search ordered by fields",
    "json_path": "search group by a JSON path",
    "json_type": "search group by a JSON path",
    "strict_cast": "search group by a JSON path",
    "timezone": "Timestamptz fields",
    "time_fields": "Timestamptz fields",
    "cluster_id": "cross-cluster routing",
}
# keys inside "params" that pymilvus itself sets (index knobs are checked by kmilvus.index)
SEARCH_PARAMS_HONOURED = frozenset({"radius", "range_filter", "page_retain_order"})
# rank_params keys of HybridSearch
RANK_HONOURED = frozenset(
    {
        "limit",
        "offset",
        "round_decimal",
        "strategy",
        "params",
        "rank_group_scorer",
        "group_by_field",
        "group_size",
        "strict_group_size",
    }
)
RANK_REFUSED = {"cluster_id": "cross-cluster routing"}
# query_params keys of MilvusService.Query
QUERY_HONOURED = frozenset(
    {"limit", "offset", "collection_id", "iterator", "reduce_stop_for_best", "ignore_growing", "order_by_fields"}
)
QUERY_REFUSED = {
    "group_by_fields": "query group by and aggregation",
    "timezone": "Timestamptz fields",
    "time_fields": "Timestamptz fields",
    "query_iter_last_pk": "element-level query iterators",
    "query_iter_last_element_offset": "element-level query iterators",
    "cluster_id": "cross-cluster routing",
}

# Request message fields: honoured, or refused when set (a later Milvus' feature).
SEARCH_FIELDS_HONOURED = frozenset(
    {
        "base",
        "db_name",
        "collection_name",
        "partition_names",
        "dsl",
        "placeholder_group",
        "dsl_type",
        "output_fields",
        "search_params",
        "guarantee_timestamp",
        "nq",
        "not_return_all_meta",
        "consistency_level",
        "use_default_consistency",
        "expr_template_values",
        "function_score",
    }
)
SEARCH_FIELDS_REFUSED = {
    "travel_timestamp": "time travel",
    "ids": "search by primary keys",
    "search_by_primary_keys": "search by primary keys",
    "sub_reqs": "advanced search through Search (use HybridSearch)",
    "namespace": "namespaces",
    "highlighter": "search result highlighting",
    "search_aggregation": "search aggregation",
    "function_chains": "function chains",
}
HYBRID_FIELDS_HONOURED = frozenset(
    {
        "base",
        "db_name",
        "collection_name",
        "partition_names",
        "requests",
        "rank_params",
        "guarantee_timestamp",
        "not_return_all_meta",
        "output_fields",
        "consistency_level",
        "use_default_consistency",
        "function_score",
    }
)
HYBRID_FIELDS_REFUSED = {
    "travel_timestamp": "time travel",
    "namespace": "namespaces",
    "function_chains": "function chains",
}
SUB_FIELDS_HONOURED = frozenset({"dsl", "placeholder_group", "dsl_type", "search_params", "nq", "expr_template_values"})
SUB_FIELDS_REFUSED = {"namespace": "namespaces"}
QUERY_FIELDS_HONOURED = frozenset(
    {
        "base",
        "db_name",
        "collection_name",
        "expr",
        "output_fields",
        "partition_names",
        "guarantee_timestamp",
        "query_params",
        "not_return_all_meta",
        "consistency_level",
        "use_default_consistency",
        "expr_template_values",
    }
)
QUERY_FIELDS_REFUSED = {"travel_timestamp": "time travel", "namespace": "namespaces"}


def unimplemented(what: str) -> merr.MilvusError:
    return merr.MilvusError(merr.SERVICE_UNIMPLEMENTED, f"{what} is not supported by kmilvus: service unimplemented")


def check_fields(msg, honoured: frozenset, refused: Mapping[str, str]) -> None:
    """Refuse a request that sets a field kmilvus does not honour; a field in neither table (a
    newer client's) is refused as well, by name."""
    for f, _value in msg.ListFields():
        if f.name in honoured:
            continue
        if f.name in refused:
            raise unimplemented(refused[f.name])
        raise unimplemented(f"request field {f.name}")


def check_keys(params: Mapping[str, str], honoured: frozenset, refused: Mapping[str, str], where: str) -> None:
    inner = _inner_params(params) if where == SEARCH else {}
    for key in params:
        if key in honoured:
            continue
        if key in refused:
            raise unimplemented(f"{refused[key]} ({where} key {key})")
        if key in inner:
            continue  # an index knob also given in `params` (Milvus 2.5.2+ clients send both)
        raise merr.invalid(f"unknown {where} key: {key}")


def _inner_params(params: Mapping[str, str]) -> dict:
    try:
        inner = json.loads(params.get("params") or "{}")
    except ValueError:
        return {}
    return inner if isinstance(inner, dict) else {}


def kv(pairs) -> dict[str, str]:
    return {p.key: p.value for p in pairs}


SEARCH = "search_params"
RANK = "rank_params"
QUERY = "query_params"
_TABLES = {
    SEARCH: (SEARCH_HONOURED, SEARCH_REFUSED),
    RANK: (RANK_HONOURED, RANK_REFUSED),
    QUERY: (QUERY_HONOURED, QUERY_REFUSED),
}
_FIELDS = {
    "SearchRequest": (SEARCH_FIELDS_HONOURED, SEARCH_FIELDS_REFUSED),
    "HybridSearchRequest": (HYBRID_FIELDS_HONOURED, HYBRID_FIELDS_REFUSED),
    "SubSearchRequest": (SUB_FIELDS_HONOURED, SUB_FIELDS_REFUSED),
    "QueryRequest": (QUERY_FIELDS_HONOURED, QUERY_FIELDS_REFUSED),
}


def request_params(req, where: str) -> dict[str, str]:
    """The request's `where` params (search, rank or query params) as a dict, after refusing any
    request field or key kmilvus does not honour (the tables above)."""
    check_fields(req, *_FIELDS[req.DESCRIPTOR.name])
    params = kv(getattr(req, where))
    check_keys(params, *_TABLES[where], where)
    return params


# Go's strconv.ParseBool, which Milvus applies to boolean params (pymilvus sends str(value))
GO_BOOLS = dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True)
GO_BOOLS |= dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)


def parse_int(params: Mapping[str, str], key: str, default: int, message: str | None = None) -> int:
    """An integer param (Go's strconv.ParseInt(s, 0, 64)); Milvus' "<key> [<v>] is invalid"."""
    raw = params.get(key)
    if raw is None:
        return default
    try:
        return int(raw.strip(), 0)
    except ValueError:
        raise merr.MilvusError(merr.UNEXPECTED, message or f"{key} [{raw}] is invalid") from None


def parse_bool(params: Mapping[str, str], key: str) -> bool:
    """A boolean param; a value ParseBool refuses reads as false, as Milvus does for these."""
    return GO_BOOLS.get(params.get(key, ""), False)


def _validate_limit(n: int) -> str | None:
    if n <= 0 or n > TOPK_LIMIT:
        return f"it should be in range [1, {TOPK_LIMIT}], but got {n}"
    return None


def check_query_window(offset: int, limit: int) -> None:
    """Milvus' validateMaxQueryResultWindow (query and hybrid search)."""
    if offset < 0:
        why = f"offset [{offset}] is invalid, should be gte than 0"
    elif limit <= 0:
        why = f"limit [{limit}] is invalid, should be greater than 0"
    elif offset + limit > MAX_QUERY_RESULT_WINDOW:
        why = f"(offset+limit) should be in range [1, {MAX_QUERY_RESULT_WINDOW}], but got {offset + limit}"
    else:
        return
    raise merr.MilvusError(merr.UNEXPECTED, f"invalid max query result window, {why}")


@dataclass
class GroupByInfo:
    field: schema_pb2.FieldSchema | None = None
    size: int = 1
    strict: bool = False


def parse_group_by(params: Mapping[str, str], schema: schema_pb2.CollectionSchema) -> GroupByInfo:
    """Milvus' parseGroupByInfo (search params or a hybrid search's rank params)."""
    info = GroupByInfo()
    name = params.get("group_by_field")
    if name is not None and name != "":
        info.field = next((f for f in schema.fields if f.name == name), None)
        if info.field is None:
            raise merr.MilvusError(
                merr.FIELD_NOT_FOUND, f"groupBy field not found in schema: field not found[field={name}]"
            )
        if info.field.data_type not in GROUPABLE:
            raise merr.MilvusError(
                merr.SEGCORE_UNSUPPORTED,
                f"unsupported data type {DT.Name(info.field.data_type)} for group by operator",
            )
    raw = params.get("group_size")
    if raw is not None:
        try:
            value = int(raw, 0)
        except ValueError:
            raise merr.invalid(f"failed to parse input group size:{raw}: invalid parameter") from None
        if value <= 0:
            raise merr.invalid(f"input group size:{value} is negative, failed to do search_groupby: invalid parameter")
        info.size = value
    if info.size > MAX_GROUP_SIZE:
        raise merr.invalid(
            f"input group size:{info.size} exceeds configured max group size:{MAX_GROUP_SIZE}: invalid parameter"
        )
    info.strict = parse_bool(params, "strict_group_size")
    return info


@dataclass
class RankParams:
    """A hybrid search's rank params (Milvus' parseRankParams)."""

    limit: int
    offset: int
    round_decimal: int
    group: GroupByInfo


def _round_decimal(params: Mapping[str, str]) -> int:
    raw = params.get("round_decimal", "-1")
    msg = f"round_decimal [{raw}] is invalid, should be -1 or an integer in range [0, 6]"
    value = parse_int(params, "round_decimal", -1, msg)
    if value != -1 and not 0 <= value <= 6:
        raise merr.MilvusError(merr.UNEXPECTED, msg)
    return value


def parse_rank_params(params: Mapping[str, str], schema: schema_pb2.CollectionSchema) -> RankParams:
    if "limit" not in params:
        raise merr.MilvusError(merr.UNEXPECTED, "limit not found in rank_params")
    limit = parse_int(params, "limit", 0)
    offset = parse_int(params, "offset", 0)
    check_query_window(offset, limit)
    return RankParams(limit, offset, _round_decimal(params), parse_group_by(params, schema))


@dataclass
class IteratorV2:
    """Search iterator v2 (Milvus' parseSearchIteratorV2Info)."""

    token: str
    batch_size: int
    last_bound: float | None = None


@dataclass
class SearchInfo:
    """One search's query info (Milvus' planpb.QueryInfo and friends)."""

    field: schema_pb2.FieldSchema
    topk: int  # offset + limit: what the QueryNodes are asked for
    offset: int
    metric: str  # as requested ("" = the index's)
    params: dict = field(default_factory=dict)  # the "params" JSON: index knobs, radius, range_filter
    round_decimal: int = -1
    group: GroupByInfo = field(default_factory=GroupByInfo)
    ignore_growing: bool = False
    iterator: bool = False
    iterator_v2: IteratorV2 | None = None
    collection_id: int = 0

    @property
    def limit(self) -> int:
        return self.topk - self.offset

    @property
    def range_search(self) -> bool:
        return "radius" in self.params


def _ignore_growing(params: Mapping[str, str]) -> bool:
    raw = params.get("ignore_growing")
    if raw is not None and raw not in GO_BOOLS:
        raise merr.invalid("parse search growing failed: invalid parameter")
    return GO_BOOLS.get(raw or "false", False)


def anns_field(schema: schema_pb2.CollectionSchema, params: Mapping[str, str]) -> schema_pb2.FieldSchema:
    vectors = [f for f in schema.fields if typeutil.is_vector(f.data_type)]
    name = params.get("anns_field", "")
    if name:
        f = next((f for f in vectors if f.name == name), None)
        if f is None:
            raise merr.MilvusError(
                merr.FIELD_NOT_FOUND, f"failed to get field schema by name: fieldName({name}) not found"
            )
        return f
    if not vectors:
        raise merr.MilvusError(merr.UNEXPECTED, "anns_field not found in schema")
    if len(vectors) != 1:
        raise merr.MilvusError(
            merr.UNEXPECTED, "multiple anns_fields exist, please specify a anns_field in search_params"
        )
    return vectors[0]


def _iterator_v2(params: Mapping[str, str], info: SearchInfo) -> IteratorV2 | None:
    if not parse_bool(params, "search_iter_v2"):
        return None

    def fail(why: str, code=merr.UNEXPECTED) -> merr.MilvusError:
        return merr.MilvusError(code, f"parse iterator v2 info failed: {why}")

    if not info.iterator:
        raise fail("both iterator and search_iter_v2 must be set in the SDK")
    if info.group.field is not None:
        raise fail("GroupBy is not permitted when using a search iterator: invalid parameter", merr.PARAMETER_INVALID)
    if info.offset > 0:
        raise fail(
            "Setting an offset is not permitted when using a search iterator v2: invalid parameter",
            merr.PARAMETER_INVALID,
        )
    token = params.get("search_iter_id", "")
    if token:
        try:
            uuid.UUID(token)
        except ValueError:
            raise fail("invalid token format") from None
    else:
        token = str(uuid.uuid4())
    if "search_iter_batch_size" not in params:
        raise fail("batch size is required")
    raw = params["search_iter_batch_size"]
    batch = parse_int(
        params, "search_iter_batch_size", 0, f"parse iterator v2 info failed: batch size is invalid, {raw}"
    )
    why = _validate_limit(batch)
    if why:
        raise fail(f"batch size is invalid, {why}")
    bound = None
    if "search_iter_last_bound" in params:
        try:
            bound = float(params["search_iter_last_bound"])
        except ValueError:
            raise fail(f"failed to parse input last bound, {params['search_iter_last_bound']}") from None
    return IteratorV2(token, batch, bound)


def parse_search_info(
    schema: schema_pb2.CollectionSchema, params: Mapping[str, str], rank: RankParams | None = None
) -> SearchInfo:
    """Milvus' parseSearchInfo: `rank` set for a hybrid search's sub-request (its offset is the
    rank params', its group-by too)."""
    field_ = anns_field(schema, params)
    external = (rank.limit + rank.offset) if rank else 0
    if "topk" not in params:
        if external <= 0:
            raise merr.MilvusError(merr.UNEXPECTED, "topk is required")
        topk = external
    else:
        try:
            topk = parse_int(params, "topk", 0)
        except merr.MilvusError:
            if external <= 0:
                raise
            topk = external
    iterator = params.get("iterator") in ("True", "true")  # Milvus compares the text
    why = _validate_limit(topk)
    if why:
        if iterator:
            topk = TOPK_LIMIT  # an iterator resolves a large topk itself
        else:
            raise merr.MilvusError(merr.UNEXPECTED, f"topk [{topk}] is invalid, {why}")
    offset = 0
    if rank is None and "offset" in params:
        offset = parse_int(params, "offset", 0)
        why = _validate_limit(offset) if offset != 0 else None
        if why:
            raise merr.MilvusError(merr.UNEXPECTED, f"offset [{offset}] is invalid, {why}")
    why = _validate_limit(topk + offset)
    if why:
        raise merr.MilvusError(merr.UNEXPECTED, f"offset+topk [{topk + offset}] is invalid, {why}")
    metric = params.get("metric_type", "")
    round_decimal = _round_decimal(params)
    raw_params = params.get("params") or "{}"
    try:
        extra = json.loads(raw_params)
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise merr.invalid(f"search params must be a JSON object, got {raw_params}")
    group = rank.group if rank is not None else parse_group_by(params, schema)
    info = SearchInfo(
        field=field_,
        topk=topk + offset,
        offset=offset,
        metric=metric,
        params=extra,
        round_decimal=round_decimal,
        group=group,
        ignore_growing=_ignore_growing(params),
        iterator=iterator,
        collection_id=parse_int(params, "collection_id", 0),
    )
    if iterator and group.field is not None:
        raise merr.invalid("Not allowed to do groupBy when doing iteration: invalid parameter")
    if info.range_search and group.field is not None:
        raise merr.invalid("Not allowed to do range-search when doing search-group-by: invalid parameter")
    info.iterator_v2 = _iterator_v2(params, info)
    if info.iterator_v2 is not None:
        info.topk = info.iterator_v2.batch_size
    return info


def search_request_nq(req: milvus_pb2.SearchRequest | milvus_pb2.SubSearchRequest, placeholders: int) -> int:
    """Milvus' checkNq: the request's nq (or its vectors' count), within quotaAndLimits.limits.nq."""
    nq = req.nq or placeholders
    if nq <= 0 or nq > NQ_LIMIT:
        raise merr.MilvusError(
            merr.UNEXPECTED,
            f"nq [{nq}] is invalid, nq (number of search vector per search request) should be in range "
            f"[1, {NQ_LIMIT}], but got {nq}",
        )
    return nq
