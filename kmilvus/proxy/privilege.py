"""Authentication and privilege checks on the Milvus API, in one place: a gRPC server
interceptor in front of every MilvusService RPC (Milvus' AuthenticationInterceptor +
PrivilegeInterceptor).

What an RPC needs comes from `kmilvus.util.privileges.PRIVILEGE_TABLE` (derived from
milvus.proto's own privilege options); an RPC absent from it and from `AUTHENTICATED_ONLY` is
refused to everyone but root and admin (fail closed). A refused call never reaches the servicer,
so it changes nothing. The policy (user → roles, role → grants) is cached per Proxy and reloaded
when RootCoord says it changed (`RefreshPolicyInfoCache`), before the change is acknowledged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Iterable
from typing import TYPE_CHECKING

import grpc
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import metrics
from kmilvus.config import Config
from kmilvus.log import audit, get_logger
from kmilvus.proto import security_pb2
from kmilvus.proxy.credentials import CredentialCache
from kmilvus.schemautil import validate_name
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB
from kmilvus.util.privileges import (
    ANY,
    AUDITED,
    AUTHENTICATED_ONLY,
    GLOBAL,
    PRIVILEGE_ALL,
    PRIVILEGE_TABLE,
    ROLE_ADMIN,
    ROLE_PUBLIC,
    ROOT_USER,
    USER,
    Rule,
)

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

log = get_logger(__name__)
AUTH_FAILURE = "auth check failure, please check username and password are correct"


def _cut(value: str, limit: int = 128) -> str:
    """Client-supplied names quoted in a refusal or an audit event are cut: gRPC refuses status
    details past 16 KB, and a log line must stay a line."""
    return value if len(value) <= limit else value[:limit] + "..."


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, reason: str):
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason


class PolicyCache:
    """User → roles and the set of grants, as RootCoord's ListPolicy returns them."""

    def __init__(self, rootcoord):
        self.rootcoord = rootcoord
        self.user_roles: dict[str, set[str]] = {}
        self.grants: set[tuple[str, str, str, str, str]] = set()
        self._loaded = False
        self._lock = asyncio.Lock()

    async def ensure(self) -> None:
        if not self._loaded:
            await self.reload()

    async def reload(self) -> None:
        self._loaded = False  # a failed reload leaves it marked stale: the next check retries
        async with self._lock:
            resp = await self.rootcoord.ListPolicy(security_pb2.ListPolicyRequest())
            merr.check(resp.status)
            self.user_roles = {u.username: set(u.roles) for u in resp.user_roles}
            self.grants = {(g.role, g.object_type, g.db_name, g.object_name, g.privilege) for g in resp.grants}
            self._loaded = True

    def roles_of(self, user: str) -> set[str]:
        return self.user_roles.get(user, set()) | {ROLE_PUBLIC}

    def permitted(self, roles: Iterable[str], object_type: str, db: str, name: str, privilege: str) -> bool:
        g = self.grants
        for role in roles:
            for d in (db, ANY):  # a grant on database `*` holds in every database (RBAC v2)
                if (role, GLOBAL, d, ANY, PRIVILEGE_ALL) in g:
                    return True
                for n in (name, ANY):
                    if (role, object_type, d, n, privilege) in g or (role, object_type, d, n, PRIVILEGE_ALL) in g:
                        return True
        return False


def _object_names(rule: Rule, request) -> list[str]:
    if rule.names_field:
        return [str(n) for n in getattr(request, rule.names_field, [])]
    if not rule.name_field:
        return [ANY]
    value = getattr(request, rule.name_field, "")
    return [value.name if hasattr(value, "name") else str(value)]


def _metadata(context) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in context.invocation_metadata() or ():
        out[k.lower()] = v.decode(errors="replace") if isinstance(v, bytes) else v
    return out


def parse_authorization(value: str) -> tuple[str, str]:
    """`authorization: base64(user:password)` → (user, password); ("", "") if malformed."""
    try:
        raw = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return "", ""
    user, sep, password = raw.partition(":")
    return (user, password) if sep else ("", "")


class ProxySecurity:
    """One Proxy's authentication and authorization state."""

    def __init__(self, cfg: Config, rootcoord):
        self.cfg = cfg
        self.credentials = CredentialCache(rootcoord)
        self.policy = PolicyCache(rootcoord)

    async def authenticate(self, md: dict[str, str]) -> str:
        token = md.get("authorization")
        if not token:
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, "missing authorization in header", "unauthenticated")
        user, password = parse_authorization(token)
        if not user or not await self.credentials.verify(user, password):
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, AUTH_FAILURE, "unauthenticated")
        return user

    async def authorize(self, user: str, method: str, request, md: dict[str, str]) -> None:
        if user == ROOT_USER or method in AUTHENTICATED_ONLY:
            return
        await self.policy.ensure()
        roles = self.policy.roles_of(user)
        if ROLE_ADMIN in roles:
            return
        rule = PRIVILEGE_TABLE.get(method)
        db = getattr(request, "db_name", "") or md.get("dbname", "") or DEFAULT_DB
        if rule is None:
            raise Denied(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{method}: permission deny to {_cut(user)} in the `{_cut(db)}` database",
                "not_in_table",
            )
        names = _object_names(rule, request)
        if rule.object_type == USER and names == [user]:
            return  # users may read and change their own user (Milvus' isCurUserObject)
        if method == "SelectGrant" and request.entity.role.name in roles:
            return  # and see the grants of their own roles
        if names and all(self.policy.permitted(roles, rule.object_type, db, n, rule.privilege) for n in names):
            return
        raise Denied(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{rule.privilege}: permission deny to {_cut(user)} in the `{_cut(db)}` database",
            "permission",
        )

    async def admit(self, method: str, request, md: dict[str, str]) -> str:
        """Authenticate and authorize one call of `method` (auth on) — the one check the gRPC
        interceptor and the RESTful API both run. A refusal is counted and audited, then raised
        as `Denied`; a check that fails inside is refused as UNAVAILABLE."""
        user = ""
        try:
            user = await self.authenticate(md)
            await self.authorize(user, method, request, md)
        except Denied as d:
            metrics.SECURITY_DENIED.labels(method, d.reason).inc()
            audit("denied", user=_cut(user) or "-", rpc=method, object=_object_of(method, request), result=d.reason)
            raise
        except Exception:
            log.warning("security check failed", rpc=method, exc_info=True)
            metrics.SECURITY_DENIED.labels(method, "check_failed").inc()
            raise Denied(
                grpc.StatusCode.UNAVAILABLE, "auth check failure, due to occurs inner error", "check_failed"
            ) from None
        return user

    @staticmethod
    def audit_call(method: str, request, user: str, resp) -> None:
        """Record a call of an AUDITED method with its result."""
        if method in AUDITED:
            code = _result_code(resp)
            audit(
                "call",
                user=_cut(user) or "-",
                rpc=method,
                object=_object_of(method, request),
                result="ok" if code == 0 else f"error:{code}",
            )


def _result_code(resp) -> int:
    status = resp if isinstance(resp, common_pb2.Status) else getattr(resp, "status", None)
    return getattr(status, "code", 0) or getattr(status, "error_code", 0) if status is not None else 0


def _object_of(method: str, request) -> str:
    rule = PRIVILEGE_TABLE.get(method)
    for field in ("collection_name", "role_name", "username", "alias", "db_name"):
        if hasattr(request, field) and getattr(request, field):
            return _cut(str(getattr(request, field)))
    if rule is not None:
        return _cut(",".join(_object_names(rule, request)))
    return ""


class SecurityInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates (when auth is on), checks the RPC's privilege, and audits DDL, privilege
    changes and every refusal — before the servicer sees the request."""

    def __init__(self, security: ProxySecurity):
        self.security = security

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method.rsplit("/", 1)[-1]
        sec = self.security
        if not sec.cfg.auth and method not in AUDITED:
            return handler  # nothing to check or record: the hot path (Insert) is untouched
        if handler.request_streaming or handler.response_streaming:
            return handler if not sec.cfg.auth else _refuse_stream(handler, method)
        inner = handler.unary_unary

        async def guarded(request, context):
            user = ""
            if sec.cfg.auth:
                try:
                    user = await sec.admit(method, request, _metadata(context))
                except Denied as d:
                    await context.abort(d.code, d.message)
            resp = await inner(request, context)
            sec.audit_call(method, request, user, resp)
            return resp

        return grpc.unary_unary_rpc_method_handler(
            guarded, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )


def _refuse_stream(handler, method: str):
    async def refuse(request_or_iterator, context):
        metrics.SECURITY_DENIED.labels(method, "streaming").inc()
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{method}: not served when auth is on")

    kinds = {
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    make = kinds[(handler.request_streaming, handler.response_streaming)]
    return make(
        refuse, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )


def current_user(context) -> str:
    if context is None:
        return ""
    return parse_authorization(_metadata(context).get("authorization", ""))[0]


def _to_rootcoord(name: str, response_type=None):
    """A Proxy RPC that RootCoord answers as it is: the interceptor has checked the caller."""

    async def forward(self, req, context=None):
        return await getattr(self.rootcoord, name)(req)

    forward.__name__ = forward.__qualname__ = name
    return merr.rpc(response_type)(forward)


class ProxyRbacMixin(ProxyHost):
    """The role and privilege RPCs: checked by the interceptor, executed by RootCoord."""

    CreateRole = _to_rootcoord("CreateRole")
    DropRole = _to_rootcoord("DropRole")
    OperateUserRole = _to_rootcoord("OperateUserRole")
    SelectRole = _to_rootcoord("SelectRole", milvus_pb2.SelectRoleResponse)
    SelectUser = _to_rootcoord("SelectUser", milvus_pb2.SelectUserResponse)
    SelectGrant = _to_rootcoord("SelectGrant", milvus_pb2.SelectGrantResponse)
    CreatePrivilegeGroup = _to_rootcoord("CreatePrivilegeGroup")
    DropPrivilegeGroup = _to_rootcoord("DropPrivilegeGroup")
    ListPrivilegeGroups = _to_rootcoord("ListPrivilegeGroups", milvus_pb2.ListPrivilegeGroupsResponse)
    OperatePrivilegeGroup = _to_rootcoord("OperatePrivilegeGroup")

    @merr.rpc()
    async def OperatePrivilege(self, req: milvus_pb2.OperatePrivilegeRequest, context=None):
        req.entity.grantor.user.name = current_user(context) or req.entity.grantor.user.name or ROOT_USER
        return await self.rootcoord.OperatePrivilege(req)

    @merr.rpc()
    async def OperatePrivilegeV2(self, req: milvus_pb2.OperatePrivilegeV2Request, context=None):
        """Milvus' proxy: check the names (`*` = every database / collection), then RootCoord's
        OperatePrivilege with version "v2" on object Global, the collection as object name."""
        if req.type not in (milvus_pb2.Grant, milvus_pb2.Revoke):
            raise merr.invalid(f"invalid operate privilege type: {req.type}")
        if not req.grantor.privilege.name:
            raise merr.invalid("the privilege name is empty")
        req.db_name = req.db_name or DEFAULT_DB  # Milvus' fillDatabase: the client's database or default
        for value, what in ((req.db_name, "database"), (req.collection_name, "collection")):
            if value != ANY:
                validate_name(value, what)
        v1 = milvus_pb2.OperatePrivilegeRequest(type=req.type, version="v2")
        e = v1.entity
        e.role.name = req.role.name
        e.object.name = GLOBAL
        e.object_name = req.collection_name
        e.db_name = req.db_name
        e.grantor.privilege.name = req.grantor.privilege.name
        e.grantor.user.name = current_user(context) or req.grantor.user.name or ROOT_USER
        return await self.rootcoord.OperatePrivilege(v1)

    # Internal service (called by RootCoord) ---------------------------------------------
    @merr.rpc()
    async def RefreshPolicyInfoCache(self, req: security_pb2.RefreshPolicyInfoCacheRequest, context=None):
        await self.security.policy.reload()
        return merr.success()
