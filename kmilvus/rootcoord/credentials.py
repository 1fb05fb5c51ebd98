"""RootCoord's credentials (Milvus' CreateCredential / UpdateCredential / DeleteCredential /
GetCredential / ListCredUsers).

The Proxy hashes passwords (bcrypt, salted) before they reach RootCoord, so a plaintext password
is never stored or sent on. Every change tells each Proxy to drop its cached credential of the
user before it answers, so a changed or deleted password stops working everywhere at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import security_pb2
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB
from kmilvus.util.crypto import hash_password
from kmilvus.util.privileges import BUILTIN_ROLES, DEFAULT_PUBLIC_GRANTS, ROLE_PUBLIC, ROOT_USER

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)
EC = common_pb2.ErrorCode


class CredentialMixin(RootCoordHost):
    """RootCoord's credential RPCs."""

    async def _init_credentials(self) -> None:
        """Milvus' initRbac: the built-in roles and the public role's default grants (always, as
        Milvus), and the root user (password from KMILVUS_ROOT_PASSWORD, set on first start
        only; with auth off and no password there is no root: kmilvus has no default password),
        in one txn."""
        ops: list[Op] = []
        root_key = keys.credential_user_key(ROOT_USER)
        if (self.cfg.auth or self.cfg.root_password) and await self.kv.get(root_key) is None:
            if not self.cfg.root_password:
                raise RuntimeError("KMILVUS_ROOT_PASSWORD is required when auth is on")
            hashed = await asyncio.to_thread(hash_password, self.cfg.root_password.get_secret_value())
            now = int(time.time())
            info = security_pb2.CredentialInfo(
                username=ROOT_USER, encrypted_password=hashed, created_utc_timestamps=now, modified_utc_timestamps=now
            )
            ops.append(Op.put(root_key, info.SerializeToString()))
        for role in BUILTIN_ROLES:
            if await self.kv.get(keys.role_key(role)) is None:
                ops.append(Op.put(keys.role_key(role), b""))
        for obj_type, name, privilege in DEFAULT_PUBLIC_GRANTS:
            key = keys.grant_key(ROLE_PUBLIC, obj_type, DEFAULT_DB, name, privilege)
            if await self.kv.get(key) is None:
                ops.append(Op.put(key, ROOT_USER.encode()))
        if ops:
            await self.kv.txn(ops, [Cmp.missing(op.key) for op in ops])

    async def _notify_credential(self, username: str) -> None:
        req = security_pb2.InvalidateCredCacheRequest(username=username)
        await _broadcast(self.registry, "InvalidateCredentialCache", req)

    @merr.rpc()
    async def CreateCredential(self, req: security_pb2.CredentialInfo, context=None):
        key = keys.credential_user_key(req.username)
        ok = await self.kv.txn([Op.put(key, req.SerializeToString())], [Cmp.missing(key)])
        if not ok:
            raise merr.MilvusError((65535, EC.CreateCredentialFailure), f"user already exists:{req.username}")
        await self._notify_credential(req.username)
        return merr.success()

    @merr.rpc()
    async def UpdateCredential(self, req: security_pb2.CredentialInfo, context=None):
        key = keys.credential_user_key(req.username)
        old = await self.kv.get(key)
        if old is None:
            raise merr.MilvusError((65535, EC.UpdateCredentialFailure), f"user not found: {req.username}")
        info = security_pb2.CredentialInfo.FromString(old)
        info.encrypted_password = req.encrypted_password
        info.modified_utc_timestamps = req.modified_utc_timestamps
        ok = await self.kv.txn([Op.put(key, info.SerializeToString())], [Cmp.value_eq(key, old)])
        if not ok:
            raise merr.MilvusError((65535, EC.UpdateCredentialFailure), f"user {req.username} changed concurrently")
        await self._notify_credential(req.username)
        return merr.success()

    @merr.rpc()
    async def DeleteCredential(self, req: milvus_pb2.DeleteCredentialRequest, context=None):
        if req.username == ROOT_USER:
            raise merr.MilvusError((1100, EC.DeleteCredentialFailure), "root user cannot be deleted")
        key = keys.credential_user_key(req.username)
        # The user and its role memberships go together.
        await self.kv.txn([Op.delete(key), Op.delete_prefix(keys.USER_ROLE_PREFIX + req.username + "/")], [])
        await self._notify_credential(req.username)
        await self._notify_policy("delete_user")
        return merr.success()

    @merr.rpc(security_pb2.GetCredentialResponse)
    async def GetCredential(self, req: security_pb2.GetCredentialRequest, context=None):
        raw = await self.kv.get(keys.credential_user_key(req.username))
        if raw is None:
            raise merr.MilvusError((65535, EC.GetCredentialFailure), f"user not found: {req.username}")
        return security_pb2.GetCredentialResponse(info=security_pb2.CredentialInfo.FromString(raw))

    @merr.rpc(milvus_pb2.ListCredUsersResponse)
    async def ListCredUsers(self, req, context=None):
        users = [
            k[len(keys.CREDENTIAL_USER_PREFIX) :] for k, _ in await self.kv.get_prefix(keys.CREDENTIAL_USER_PREFIX)
        ]
        return milvus_pb2.ListCredUsersResponse(usernames=sorted(users))


async def _broadcast(registry: roles.Registry, method: str, req) -> None:
    """Call `method` on every live Proxy before answering (as InvalidateCollectionMetaCache):
    the change is in force everywhere when the client hears it is done."""
    proxies = await registry.clients(roles.PROXY)
    results = await asyncio.gather(*(getattr(p, method)(req) for p in proxies.values()), return_exceptions=True)
    for sid, r in zip(proxies, results, strict=True):
        if isinstance(r, BaseException):
            log.warning("security cache invalidation failed", proxy=sid, rpc=method, error=str(r))
