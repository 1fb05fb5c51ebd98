"""Names, defaults and the error form of Milvus' RESTful API v2 (httpserver/constant.go)."""

from __future__ import annotations

from typing import Any

from kmilvus.util import merr

V2_PREFIX = "/v2/vectordb"

HEADER_DB_NAME = "db-name"  # DB-Name: the database when the body names none
HEADER_REQUEST_TIMEOUT = "request-timeout"  # Request-Timeout: seconds
HEADER_ALLOW_INT64 = "accept-type-allow-int64"  # Accept-Type-Allow-Int64: int64 as JSON numbers

DEFAULT_DB = "default"
DEFAULT_PRIMARY_FIELD = "id"  # quick-setup primary key; also the key search rows carry it under
DEFAULT_VECTOR_FIELD = "vector"
DEFAULT_METRIC_TYPE = "COSINE"  # Milvus 2.5's quick setup (metric.COSINE)
DEFAULT_PARTITIONS_WITH_KEY = 64
SHARDS_DEFAULT = 1
DISTANCE = "distance"

# Search parameter keys as the Proxy reads them (milvus.proto's search_params).
PARAMS = "params"
ROUND_DECIMAL = "round_decimal"
TOPK = "topk"
OFFSET = "offset"
LIMIT = "limit"
ANNS_FIELD = "anns_field"
METRIC_TYPE = "metric_type"
IGNORE_GROWING = "ignore_growing"
GROUP_BY_FIELD = "group_by_field"
GROUP_SIZE = "group_size"
STRICT_GROUP_SIZE = "strict_group_size"
RANK_TYPE = "strategy"
RANK_PARAMS = "params"
INDEX_TYPE = "index_type"
INDEX_PARAMS = "params"
MAX_LENGTH = "max_length"
DIM = "dim"
COLLECTION_TTL = "collection.ttl.seconds"
PARTITION_KEY_ISOLATION = "partitionkey.isolation"
CONSISTENCY_LEVELS = "[Strong, Session, Bounded, Eventually, Customized]"


class RestError(Exception):
    """A refusal: `code` and `message` as Milvus' body carries them, `http_status` as its answer."""

    def __init__(self, kind: tuple[int, int] | int, message: str, http_status: int = 200):
        super().__init__(message)
        self.code = kind[0] if isinstance(kind, tuple) else kind
        self.message = message
        self.http_status = http_status

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


def ok(data: Any = None, **extra: Any) -> dict[str, Any]:
    """Milvus' success body: code 0 and `data` ({} when an operation returns nothing)."""
    return {"code": 0, "data": {} if data is None else data, **extra}


def invalid(message: str) -> RestError:
    """merr.WrapErrParameterInvalidMsg: "<message>: invalid parameter" (1100)."""
    return RestError(merr.PARAMETER_INVALID, f"{message}: invalid parameter")


def invalid_value(expected: Any, actual: Any, message: str) -> RestError:
    """merr.WrapErrParameterInvalid(expected, actual, message)."""
    return RestError(merr.PARAMETER_INVALID, f"{message}: invalid parameter[expected={expected}][actual={actual}]")
