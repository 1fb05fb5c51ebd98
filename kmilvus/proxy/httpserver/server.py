"""The Proxy's HTTP server: Milvus' RESTful API v2 (`POST /v2/vectordb/<category>/<action>`) as a
Starlette app served by uvicorn on the Proxy's event loop.

Per request, as Milvus' gin stack does: the body is bound to its typed request (1801 / 1802 on a
bad one); the `Authorization` header (`Bearer user:password`, or HTTP Basic) is checked when auth
is on (401, 1800); the whole call runs under the `Request-Timeout` header's seconds (408, 10001);
the database is the body's `dbName`, else the `DB-Name` header, else `default`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kmilvus.config import Config
from kmilvus.log import get_logger
from kmilvus.proxy.httpserver import request_v2 as r
from kmilvus.proxy.httpserver.constant import (
    DEFAULT_DB,
    HEADER_ALLOW_INT64,
    HEADER_DB_NAME,
    HEADER_REQUEST_TIMEOUT,
    V2_PREFIX,
    RestError,
)
from kmilvus.proxy.httpserver.handler_v2 import Call, HandlersV2, metadata
from kmilvus.util import merr

log = get_logger(__name__)
H = HandlersV2


@dataclass(frozen=True)
class Endpoint:
    path: str
    model: type[r.Req]
    # An unbound HandlersV2 method: (handlers, call, body of `model`) -> the answer's JSON.
    handler: Callable[[HandlersV2, Call, Any], Awaitable[dict[str, Any]]]


# Milvus' RegisterRoutesToV2, route by route (the body model is its request_v2.go struct).
ENDPOINTS = [
    Endpoint("/collections/list", r.DatabaseReq, H.list_collections),
    Endpoint("/collections/has", r.CollectionNameReq, H.has_collection),
    Endpoint("/collections/describe", r.CollectionNameReq, H.describe_collection),
    Endpoint("/collections/get_stats", r.CollectionNameReq, H.collection_stats),
    Endpoint("/collections/get_load_state", r.CollectionNameReq, H.load_state),
    Endpoint("/collections/create", r.CollectionReq, H.create_collection),
    Endpoint("/collections/drop", r.CollectionNameReq, H.drop_collection),
    Endpoint("/collections/rename", r.RenameCollectionReq, H.rename_collection),
    Endpoint("/collections/load", r.CollectionNameReq, H.load_collection),
    Endpoint("/collections/release", r.CollectionNameReq, H.release_collection),
    Endpoint("/collections/flush", r.CollectionNameReq, H.flush),
    Endpoint("/collections/compact", r.CompactReq, H.compact),
    Endpoint("/collections/get_compaction_state", r.CompactionStateReq, H.compaction_state),
    Endpoint("/databases/create", r.DatabaseReqWithProperties, H.create_database),
    Endpoint("/databases/drop", r.DatabaseReqRequiredName, H.drop_database),
    Endpoint("/databases/list", r.EmptyReq, H.list_databases),
    Endpoint("/databases/describe", r.DatabaseReqRequiredName, H.describe_database),
    Endpoint("/databases/alter", r.DatabaseReqWithProperties, H.alter_database),
    Endpoint("/entities/query", r.QueryReqV2, H.query),
    Endpoint("/entities/get", r.CollectionIDReq, H.get),
    Endpoint("/entities/delete", r.CollectionFilterReq, H.delete),
    Endpoint("/entities/insert", r.CollectionDataReq, H.insert),
    Endpoint("/entities/upsert", r.CollectionDataReq, H.upsert),
    Endpoint("/entities/search", r.SearchReqV2, H.search),
    Endpoint("/entities/advanced_search", r.HybridSearchReq, H.hybrid_search),  # Milvus' older name
    Endpoint("/entities/hybrid_search", r.HybridSearchReq, H.hybrid_search),
    Endpoint("/partitions/list", r.CollectionNameReq, H.list_partitions),
    Endpoint("/partitions/has", r.PartitionReq, H.has_partition),
    Endpoint("/partitions/get_stats", r.PartitionReq, H.partition_stats),
    Endpoint("/partitions/create", r.PartitionReq, H.create_partition),
    Endpoint("/partitions/drop", r.PartitionReq, H.drop_partition),
    Endpoint("/partitions/load", r.PartitionsReq, H.load_partitions),
    Endpoint("/partitions/release", r.PartitionsReq, H.release_partitions),
    Endpoint("/users/list", r.DatabaseReq, H.list_users),
    Endpoint("/users/describe", r.UserReq, H.describe_user),
    Endpoint("/users/create", r.PasswordReq, H.create_user),
    Endpoint("/users/update_password", r.NewPasswordReq, H.update_password),
    Endpoint("/users/drop", r.UserReq, H.drop_user),
    Endpoint("/users/grant_role", r.UserRoleReq, H.grant_role),
    Endpoint("/users/revoke_role", r.UserRoleReq, H.revoke_role),
    Endpoint("/roles/list", r.DatabaseReq, H.list_roles),
    Endpoint("/roles/describe", r.RoleReq, H.describe_role),
    Endpoint("/roles/create", r.RoleReq, H.create_role),
    Endpoint("/roles/drop", r.RoleReq, H.drop_role),
    Endpoint("/roles/grant_privilege", r.GrantReq, H.grant_privilege),
    Endpoint("/roles/revoke_privilege", r.GrantReq, H.revoke_privilege),
    Endpoint("/roles/grant_privilege_v2", r.GrantV2Req, H.grant_privilege_v2),
    Endpoint("/roles/revoke_privilege_v2", r.GrantV2Req, H.revoke_privilege_v2),
    Endpoint("/indexes/list", r.CollectionNameReq, H.list_indexes),
    Endpoint("/indexes/describe", r.IndexReq, H.describe_index),
    Endpoint("/indexes/create", r.IndexParamReq, H.create_index),
    Endpoint("/indexes/drop", r.IndexReq, H.drop_index),
    Endpoint("/aliases/list", r.OptionalCollectionNameReq, H.list_aliases),
    Endpoint("/aliases/describe", r.AliasReq, H.describe_alias),
    Endpoint("/aliases/create", r.AliasCollectionReq, H.create_alias),
    Endpoint("/aliases/drop", r.AliasReq, H.drop_alias),
    Endpoint("/aliases/alter", r.AliasCollectionReq, H.alter_alias),
    Endpoint("/jobs/import/list", r.OptionalCollectionNameReq, H.list_import_jobs),
    Endpoint("/jobs/import/create", r.ImportReq, H.create_import_job),
    Endpoint("/jobs/import/get_progress", r.JobIDReq, H.import_job_progress),
    Endpoint("/jobs/import/describe", r.JobIDReq, H.import_job_progress),
]


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    """float32 values print as Go prints them (orjson writes numpy float32 at float32 precision)."""
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS),
        status_code=status,
        media_type="application/json; charset=utf-8",
    )


def credentials(authorization: str) -> tuple[str, str]:
    """`Basic base64(user:password)` or `Bearer user:password` → (user, password) (Milvus'
    ParseUsernamePassword); ("", "") when there are none."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "basic":
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return "", ""
        return (user, password) if sep else ("", "")
    token = value if scheme == "Bearer" else authorization
    user, sep, password = token.partition(":")
    return (user, password) if sep and user and password else ("", "")


class RestfulServer:
    """The RESTful API of one Proxy: a Starlette app and the uvicorn server that serves it."""

    def __init__(self, proxy, cfg: Config):
        self.cfg = cfg
        self.security = proxy.security
        self.handlers = HandlersV2(proxy, proxy.security)
        self.app = Starlette(routes=[self._route(e) for e in ENDPOINTS])
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None

    def _route(self, ep: Endpoint) -> Route:
        async def endpoint(request: Request) -> Response:
            return await self.serve(ep, request)

        return Route(V2_PREFIX + ep.path, endpoint, methods=["POST"], name=ep.path)

    async def serve(self, ep: Endpoint, request: Request) -> Response:
        timeout = self.cfg.http_request_timeout
        raw = request.headers.get(HEADER_REQUEST_TIMEOUT, "")
        with contextlib.suppress(ValueError):
            timeout = int(raw)
        try:
            # A Request-Timeout of 0 or less has passed already (Milvus: time.After(0)).
            async with asyncio.timeout(timeout):
                body = await self._answer(ep, request)
            return json_response(body)
        except TimeoutError:
            return json_response({"code": merr.TIMEOUT[0], "message": "request timeout"}, 408)
        except RestError as e:
            return json_response(e.body(), e.http_status)
        except Exception as exc:  # a defect: logged, answered as the gRPC path answers it
            log.error("restful request failed", path=ep.path, exc_info=True)
            status = merr.status_of(exc)
            return json_response({"code": status.code, "message": status.reason}, 500)

    async def _answer(self, ep: Endpoint, request: Request) -> dict[str, Any]:
        req = r.bind(ep.model, await request.body())
        db = req.db() or request.headers.get(HEADER_DB_NAME, "") or DEFAULT_DB
        md = metadata(db)
        if self.cfg.auth:
            user, password = credentials(request.headers.get("authorization", ""))
            if not user or not await self.security.credentials.verify(user, password):
                raise RestError(merr.NEED_AUTHENTICATE, "user hasn't authenticated", 401)
            md = metadata(db, user, password)
        allow = request.headers.get(HEADER_ALLOW_INT64, "").lower()
        allow_int64 = {"true": True, "1": True, "false": False, "0": False}.get(
            allow, self.cfg.http_accept_type_allow_int64
        )
        return await ep.handler(self.handlers, Call(db, md, allow_int64), req)

    # ------------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> int:
        sock = socket.create_server((host, port), reuse_port=False)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        tls: dict[str, Any] = {}
        if self.cfg.tls_cert:
            tls = {"ssl_certfile": self.cfg.tls_cert, "ssl_keyfile": self.cfg.tls_key}
            if self.cfg.tls_ca:
                tls |= {"ssl_ca_certs": self.cfg.tls_ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            access_log=False,
            log_config=None,
            server_header=False,
            timeout_graceful_shutdown=1,
            **tls,
        )
        self._server = _EmbeddedServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="restful-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start
                raise OSError(f"the RESTful API did not start on {host}:{port}")
            await asyncio.sleep(0.01)
        log.info("restful api listening", host=host, port=self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside a process that owns its signals: the Node stops it, not SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
