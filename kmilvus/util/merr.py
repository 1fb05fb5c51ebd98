"""Milvus error codes (pkg/util/merr) and their mapping to common.Status.

Every failure a client can see is a `MilvusError`: components raise it, servicers turn it into
a `common.Status` with Milvus' `code`, the legacy `error_code` and a message naming the problem,
exactly as pymilvus expects to show it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus.log import get_logger
from kmilvus.util.tasks import stopping

log = get_logger(__name__)
EC = common_pb2.ErrorCode
# The Milvus API's methods: those calls are counted under Milvus' metric names (kmilvus.metrics).
MILVUS_METHODS = frozenset(milvus_pb2.DESCRIPTOR.services_by_name["MilvusService"].methods_by_name)

# (merr code, legacy ErrorCode)
SERVICE_NOT_READY = (1, EC.NotReadyServe)
SERVICE_UNAVAILABLE = (2, EC.UnexpectedError)
SERVICE_INTERNAL = (5, EC.UnexpectedError)
RATE_LIMIT = (8, EC.RateLimit)
SERVICE_UNIMPLEMENTED = (10, EC.UnexpectedError)
COLLECTION_NOT_FOUND = (100, EC.CollectionNotExists)
COLLECTION_NOT_LOADED = (101, EC.UnexpectedError)
COLLECTION_LOADED = (104, EC.UnexpectedError)
COLLECTION_ILLEGAL_SCHEMA = (105, EC.IllegalArgument)
COLLECTION_MISMATCH = (106, EC.IllegalArgument)
PARTITION_NOT_FOUND = (200, EC.UnexpectedError)
PARTITION_NOT_LOADED = (201, EC.UnexpectedError)
CHANNEL_NOT_FOUND = (500, EC.UnexpectedError)
CHANNEL_NOT_AVAILABLE = (503, EC.UnexpectedError)
DATABASE_NOT_FOUND = (800, EC.UnexpectedError)
DATABASE_NUM_LIMIT_EXCEEDED = (801, EC.UnexpectedError)
SEGMENT_NOT_FOUND = (600, EC.SegmentNotFound)
INDEX_NOT_FOUND = (700, EC.IndexNotExist)
NODE_NOT_FOUND = (901, EC.UnexpectedError)
IO_FAILED = (1000, EC.UnexpectedError)
ALIAS_NOT_FOUND = (1600, EC.UnexpectedError)
ALIAS_COLLECTION_NAME_CONFLICT = (1601, EC.UnexpectedError)
ALIAS_ALREADY_EXIST = (1602, EC.UnexpectedError)
MAX_REASON = 8192  # characters of an error message a client gets back
UNEXPECTED = (65535, EC.UnexpectedError)  # what Milvus answers for a plain (unclassified) error
PARAMETER_INVALID = (1100, EC.IllegalArgument)
PARAMETER_MISSING = (1101, EC.IllegalArgument)
PARAMETER_TOO_LARGE = (1106, EC.IllegalArgument)
METRIC_NOT_FOUND = (1200, EC.UnexpectedError)
FIELD_NOT_FOUND = (1700, EC.IllegalArgument)
FIELD_INVALID_NAME = (1701, EC.IllegalArgument)
DIMENSION_INVALID = (1100, EC.IllegalDimension)
COLLECTION_NAME_INVALID = (1100, EC.IllegalCollectionName)
IMPORT_FAILED = (2100, EC.UnexpectedError)
# The RESTful API's own (Milvus' "high-level restful api related" errors, 1800-1806).
NEED_AUTHENTICATE = (1800, EC.UnexpectedError)
INCORRECT_PARAMETER_FORMAT = (1801, EC.UnexpectedError)
MISSING_REQUIRED_PARAMETERS = (1802, EC.UnexpectedError)
MARSHAL_COLLECTION_SCHEMA = (1803, EC.UnexpectedError)
INVALID_INSERT_DATA = (1804, EC.UnexpectedError)
INVALID_SEARCH_RESULT = (1805, EC.UnexpectedError)
CHECK_PRIMARY_KEY = (1806, EC.UnexpectedError)
TIMEOUT = (10001, EC.UnexpectedError)  # Milvus' TimeoutCode: a request past its deadline
COMPACTION_FAILED = (2300, EC.UnexpectedError)
SEGCORE_UNSUPPORTED = (2003, EC.UnexpectedError)  # segcore's ErrorCode::Unsupported, passed through

# SaveBinlogPaths' answers on which a DataNode gives its data up: the segment or collection is
# gone (its files are deleted), the channel is watched elsewhere (its buffers are dropped).
# DataCoord sends them only as the leader (docs/architecture/fencing.md).
BINLOGS_DROPPED = frozenset({SEGMENT_NOT_FOUND[0], COLLECTION_NOT_FOUND[0]})
DATANODE_GIVES_UP = BINLOGS_DROPPED | {CHANNEL_NOT_FOUND[0]}


class MilvusError(Exception):
    """An error with Milvus' code; `str()` is the message the client sees."""

    def __init__(self, kind: tuple[int, int], message: str):
        super().__init__(message)
        self.code, self.error_code = kind
        self.message = message

    def status(self) -> common_pb2.Status:
        # A message quoting client input is capped, so no request can make its answer huge.
        reason = self.message if len(self.message) <= MAX_REASON else self.message[:MAX_REASON] + "...(truncated)"
        return common_pb2.Status(code=self.code, error_code=self.error_code, reason=reason)


def success() -> common_pb2.Status:
    return common_pb2.Status()


def ok(status: common_pb2.Status) -> bool:
    return bool(status.code == 0 and status.error_code == 0)


def check(status: common_pb2.Status) -> None:
    """Raise the status as a MilvusError when it is not a success (internal RPC results)."""
    if not ok(status):
        err = MilvusError((status.code or 5, status.error_code or EC.UnexpectedError), status.reason)
        raise err


def status_of(exc: BaseException) -> common_pb2.Status:
    if isinstance(exc, MilvusError):
        return exc.status()
    return MilvusError(SERVICE_INTERNAL, f"{type(exc).__name__}: {exc}").status()


def collection_not_found(name: str | int) -> MilvusError:
    return MilvusError(COLLECTION_NOT_FOUND, f"collection not found[collection={name}]")


def invalid(message: str) -> MilvusError:
    return MilvusError(PARAMETER_INVALID, message)


_Self = TypeVar("_Self")
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Rest = ParamSpec("_Rest")
# A servicer method: (self, request, context=None) -> response. `rpc` keeps its exact signature, so
# a caller in-process and the Protocols of kmilvus.types see the handler's own request/response types.
_Handler = Callable[Concatenate[_Self, _Req, _Rest], Awaitable[_Resp]]
_Wrapped = Callable[Concatenate[_Self, _Req, _Rest], Coroutine[Any, Any, _Resp]]


def rpc(
    response_type: Callable[[], Any] | None = None, *, status_field: str = "status"
) -> Callable[[_Handler[_Self, _Req, _Rest, _Resp]], _Wrapped[_Self, _Req, _Rest, _Resp]]:
    """Decorate a servicer method so any exception becomes a failed status in its response.

    `response_type=None` means the RPC returns a bare common.Status.
    The wrapped method may be called in-process (`context` omitted) or by gRPC.
    A `MilvusError` is an answer (bad input, missing collection); any other exception is a
    defect and is logged with its traceback before it goes back as SERVICE_INTERNAL — a
    CancelledError from below too (an awaited future someone else cancelled), as gRPC's server
    answers it: only the caller's own cancellation goes on up (`util.tasks.stopping`).
    """

    def wrap(fn: _Handler[_Self, _Req, _Rest, _Resp]) -> _Wrapped[_Self, _Req, _Rest, _Resp]:
        from kmilvus import metrics

        method = fn.__name__
        latency: dict[str, Any] = {}

        @functools.wraps(fn)
        async def inner(self: _Self, request: _Req, /, *args: _Rest.args, **kwargs: _Rest.kwargs) -> _Resp:
            started = time.perf_counter()
            role: str = getattr(self, "role", "?")
            counted = method in MILVUS_METHODS and role in ("proxy", "rootcoord")
            try:
                resp = await fn(self, request, *args, **kwargs)
                if response_type is not None and resp is not None:
                    # Milvus answers merr.Success() — a status that is present, not absent:
                    # clients other than pymilvus (the Node.js SDK) read `status.error_code`.
                    getattr(resp, status_field).SetInParent()
                if counted:
                    st = resp if response_type is None else getattr(resp, status_field)
                    metrics.observe_milvus_rpc(
                        role, getattr(self, "server_id", 0), method, request, ok(st), time.perf_counter() - started
                    )
                return resp
            except (Exception, asyncio.CancelledError) as exc:  # every failure goes back as a status
                if stopping(exc):  # the caller's own cancellation; one from below is the call's failure
                    raise
                if counted:
                    metrics.observe_milvus_rpc(
                        role, getattr(self, "server_id", 0), method, request, False, time.perf_counter() - started
                    )
                status = status_of(exc)
                metrics.RPC_FAILURES.labels(role, method, str(status.code)).inc()
                if not isinstance(exc, MilvusError):
                    log.error("rpc failed", role=role, rpc=method, exc_info=True)
                # The handler's declared response (pymilvus' messages carry no types: see merr's callers).
                if response_type is None:
                    return cast(_Resp, status)
                failed = response_type()
                getattr(failed, status_field).CopyFrom(status)
                return cast(_Resp, failed)
            finally:
                timer = latency.get(role)
                if timer is None:  # labels() takes a lock and builds a key: once per role, not per call
                    timer = latency[role] = metrics.RPC_LATENCY.labels(role, method)
                timer.observe(time.perf_counter() - started)

        return inner

    return wrap
