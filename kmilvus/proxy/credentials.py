"""The Proxy's credential RPCs and its cache of verified credentials (Milvus' passwordVerify).

pymilvus sends `authorization: base64(user:password)` on every call; checking a bcrypt hash
costs tens of milliseconds, so the Proxy keeps, per user, the hash it fetched from RootCoord and
a SHA-256 of the last password that matched it. RootCoord drops a user's entry on every Proxy
(`InvalidateCredentialCache`) before a credential change returns.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import time
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus.log import get_logger
from kmilvus.proto import security_pb2
from kmilvus.util import merr
from kmilvus.util.crypto import hash_password, verify_password
from kmilvus.util.privileges import ROOT_USER, validate_entity_name

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

log = get_logger(__name__)
EC = common_pb2.ErrorCode
MIN_PASSWORD, MAX_PASSWORD = 6, 256  # Milvus' proxy.minPasswordLength / maxPasswordLength


class CredentialCache:
    def __init__(self, rootcoord):
        self.rootcoord = rootcoord
        self._hashes: dict[str, str] = {}
        self._verified: dict[str, bytes] = {}

    def invalidate(self, username: str = "") -> None:
        if username:
            self._hashes.pop(username, None)
            self._verified.pop(username, None)
        else:
            self._hashes.clear()
            self._verified.clear()

    async def verify(self, username: str, password: str) -> bool:
        digest = hashlib.sha256(password.encode()).digest()
        seen = self._verified.get(username)
        if seen is not None and hmac.compare_digest(seen, digest):
            return True
        hashed = self._hashes.get(username)
        if hashed is None:
            resp = await self.rootcoord.GetCredential(security_pb2.GetCredentialRequest(username=username))
            if not merr.ok(resp.status):
                return False
            hashed = resp.info.encrypted_password
            self._hashes[username] = hashed
        ok = await asyncio.to_thread(verify_password, password, hashed)
        if ok:
            self._verified[username] = digest
        return ok


def decode_password(raw: str, field: str = "password") -> str:
    """pymilvus sends passwords base64-encoded (as Milvus' SDKs do)."""
    try:
        password = base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise merr.invalid(f"decode {field} fail") from None
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise merr.invalid(
            f"invalid password length: the length of password must be between {MIN_PASSWORD} and {MAX_PASSWORD}"
        )
    return password


class ProxyCredentialsMixin(ProxyHost):
    """The Proxy's credential RPCs."""

    @merr.rpc()
    async def CreateCredential(self, req: milvus_pb2.CreateCredentialRequest, context=None):
        validate_entity_name(req.username, "user")
        password = decode_password(req.password)
        now = int(time.time())
        info = security_pb2.CredentialInfo(
            username=req.username,
            encrypted_password=await asyncio.to_thread(hash_password, password),
            created_utc_timestamps=now,
            modified_utc_timestamps=now,
            description=req.description,
        )
        return await self.rootcoord.CreateCredential(info)

    @merr.rpc()
    async def UpdateCredential(self, req: milvus_pb2.UpdateCredentialRequest, context=None):
        validate_entity_name(req.username, "user")
        old = decode_password(req.oldPassword, "old password")
        new = decode_password(req.newPassword, "new password")
        if not await self.security.credentials.verify(req.username, old):
            raise merr.MilvusError((1100, EC.UpdateCredentialFailure), "old password not correct for " + req.username)
        info = security_pb2.CredentialInfo(
            username=req.username,
            encrypted_password=await asyncio.to_thread(hash_password, new),
            modified_utc_timestamps=int(time.time()),
        )
        return await self.rootcoord.UpdateCredential(info)

    @merr.rpc()
    async def DeleteCredential(self, req: milvus_pb2.DeleteCredentialRequest, context=None):
        validate_entity_name(req.username, "user")
        if req.username == ROOT_USER:
            raise merr.MilvusError((1100, EC.DeleteCredentialFailure), "root user cannot be deleted")
        return await self.rootcoord.DeleteCredential(req)

    @merr.rpc(milvus_pb2.ListCredUsersResponse)
    async def ListCredUsers(self, req, context=None):
        return await self.rootcoord.ListCredUsers(req)

    # Internal service (called by RootCoord) ---------------------------------------------
    @merr.rpc()
    async def InvalidateCredentialCache(self, req: security_pb2.InvalidateCredCacheRequest, context=None):
        self.security.credentials.invalidate(req.username)
        return merr.success()
