"""RootCoord's roles and privileges (Milvus' CreateRole / DropRole / OperateUserRole /
SelectRole / SelectUser / OperatePrivilege / SelectGrant / ListPolicy).

Meta lives under `root-coord/credential/` (kmilvus.meta.catalog); every change that touches
several keys (dropping a role with its grants and memberships) is one etcd transaction. Each
change makes every Proxy reload its policy (`RefreshPolicyInfoCache`) before the call returns,
so a revoke is in force on every Proxy when the client hears it succeeded — no polling.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import security_pb2
from kmilvus.rootcoord.credentials import _broadcast
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB
from kmilvus.util.privileges import (
    ANY,
    BUILTIN_ROLES,
    OBJECT_TYPES,
    VALID_PRIVILEGES,
    name_for_metastore,
    privilege_name_for_api,
    validate_entity_name,
)

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)
EC = common_pb2.ErrorCode
_OBJECT_NAME = re.compile(r"^(\*|[A-Za-z_][A-Za-z0-9_\-]{0,254})$")


def _split_grant_key(key: str) -> tuple[str, str, str, str, str]:
    role, obj_type, db, name, privilege = key[len(keys.GRANT_PREFIX) :].split("/", 4)
    return role, obj_type, db, name, privilege


class RbacMixin(RootCoordHost):
    """RootCoord's role and privilege RPCs (v2 grants and group expansion: PrivilegeGroupMixin)."""

    async def _notify_policy(self, op: str) -> None:
        await _broadcast(self.registry, "RefreshPolicyInfoCache", security_pb2.RefreshPolicyInfoCacheRequest(op=op))

    async def _roles(self) -> list[str]:
        return sorted(k[len(keys.ROLE_PREFIX) :] for k, _ in await self.kv.get_prefix(keys.ROLE_PREFIX))

    async def _user_roles(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for k, _ in await self.kv.get_prefix(keys.USER_ROLE_PREFIX):
            user, role = k[len(keys.USER_ROLE_PREFIX) :].split("/", 1)
            out.setdefault(user, []).append(role)
        return out

    @merr.rpc()
    async def CreateRole(self, req: milvus_pb2.CreateRoleRequest, context=None):
        validate_entity_name(req.entity.name, "role")
        key = keys.role_key(req.entity.name)
        if not await self.kv.txn([Op.put(key, req.entity.description.encode())], [Cmp.missing(key)]):
            raise merr.MilvusError((65535, EC.CreateRoleFailure), f"role [{req.entity.name}] already exists")
        await self._notify_policy("create_role")
        return merr.success()

    @merr.rpc()
    async def DropRole(self, req: milvus_pb2.DropRoleRequest, context=None):
        if req.role_name in BUILTIN_ROLES:
            raise merr.MilvusError(
                (65535, EC.DropRoleFailure), f"the role[{req.role_name}] is a default role, which can't be dropped"
            )
        key = keys.role_key(req.role_name)
        if await self.kv.get(key) is None:
            raise merr.MilvusError(
                (65535, EC.DropRoleFailure),
                f"not found the role, maybe the role isn't existed or internal system error: {req.role_name}",
            )
        grants = await self.kv.get_prefix(keys.grant_prefix(req.role_name))
        if grants and not req.force_drop:
            raise merr.MilvusError(
                (65535, EC.DropRoleFailure),
                f"fail to drop the role that it has privileges. Use REVOKE API to revoke privileges: {req.role_name}",
            )
        members = [u for u, rs in (await self._user_roles()).items() if req.role_name in rs]
        ops = [Op.delete(key), Op.delete_prefix(keys.grant_prefix(req.role_name))]
        ops += [Op.delete(keys.user_role_key(u, req.role_name)) for u in members]
        await self.kv.txn(ops, [Cmp.exists(key)])  # role, its grants and memberships: one txn
        await self._notify_policy("drop_role")
        return merr.success()

    @merr.rpc()
    async def OperateUserRole(self, req: milvus_pb2.OperateUserRoleRequest, context=None):
        validate_entity_name(req.username, "user")
        validate_entity_name(req.role_name, "role")
        key = keys.user_role_key(req.username, req.role_name)
        if req.type == milvus_pb2.AddUserToRole:
            user_key, role_key = keys.credential_user_key(req.username), keys.role_key(req.role_name)
            if await self.kv.get(role_key) is None:
                raise merr.MilvusError((65535, EC.OperateUserRoleFailure), f"not found the role: {req.role_name}")
            if await self.kv.get(user_key) is None:
                raise merr.MilvusError((65535, EC.OperateUserRoleFailure), f"not found the user: {req.username}")
            ok = await self.kv.txn([Op.put(key, b"")], [Cmp.exists(user_key), Cmp.exists(role_key)])
            if not ok:
                raise merr.MilvusError((65535, EC.OperateUserRoleFailure), "the user or the role changed concurrently")
        elif req.type == milvus_pb2.RemoveUserFromRole:
            await self.kv.txn([Op.delete(key)], [])
        else:
            raise merr.invalid(f"invalid operate user role type: {req.type}")
        await self._notify_policy("operate_user_role")
        return merr.success()

    @merr.rpc(milvus_pb2.SelectRoleResponse)
    async def SelectRole(self, req: milvus_pb2.SelectRoleRequest, context=None):
        all_roles = await self._roles()
        wanted = [req.role.name] if req.role.name else all_roles
        user_roles = await self._user_roles() if req.include_user_info else {}
        resp = milvus_pb2.SelectRoleResponse()
        for role in wanted:
            if role not in all_roles:
                continue
            r = resp.results.add()
            r.role.name = role
            for user in sorted(u for u, rs in user_roles.items() if role in rs):
                r.users.add(name=user)
        return resp

    @merr.rpc(milvus_pb2.SelectUserResponse)
    async def SelectUser(self, req: milvus_pb2.SelectUserRequest, context=None):
        users = [
            k[len(keys.CREDENTIAL_USER_PREFIX) :] for k, _ in await self.kv.get_prefix(keys.CREDENTIAL_USER_PREFIX)
        ]
        wanted = [req.user.name] if req.user.name else sorted(users)
        user_roles = await self._user_roles() if req.include_role_info else {}
        resp = milvus_pb2.SelectUserResponse()
        for user in wanted:
            if user not in users:
                continue
            r = resp.results.add()
            r.user.name = user
            for role in sorted(user_roles.get(user, [])):
                r.roles.add(name=role)
        return resp

    @merr.rpc()
    async def OperatePrivilege(self, req: milvus_pb2.OperatePrivilegeRequest, context=None):
        e = req.entity
        obj_type = e.object.name
        if obj_type not in OBJECT_TYPES:
            raise merr.invalid(
                f"not found the object type[name: {obj_type}], supported the object types: {list(OBJECT_TYPES)}"
            )
        if not _OBJECT_NAME.match(e.object_name):
            raise merr.invalid(f"invalid object name {e.object_name!r}")
        validate_entity_name(e.role.name, "role")
        db = e.db_name or DEFAULT_DB
        if req.version == "v2":  # a privilege or a group, on a database and collection (`*`: every one)
            obj_type, privilege = await self.resolve_v2_grant(e)
            if db != ANY:
                validate_entity_name(db, "database")
        else:
            privilege = name_for_metastore(e.grantor.privilege.name)
            if privilege not in VALID_PRIVILEGES[obj_type]:
                raise merr.invalid(
                    f"not found the privilege name[{e.grantor.privilege.name}] from the object[{obj_type}]"
                )
            validate_entity_name(db, "database")
        role_key = keys.role_key(e.role.name)
        key = keys.grant_key(e.role.name, obj_type, db, e.object_name, privilege)
        if req.type == milvus_pb2.Grant:
            ok = await self.kv.txn([Op.put(key, e.grantor.user.name.encode())], [Cmp.exists(role_key)])
            if not ok:
                raise merr.MilvusError((65535, EC.OperatePrivilegeFailure), f"not found the role: {e.role.name}")
        elif req.type == milvus_pb2.Revoke:
            await self.kv.txn([Op.delete(key)], [])
        else:
            raise merr.invalid(f"invalid operate privilege type: {req.type}")
        await self._notify_policy("grant" if req.type == milvus_pb2.Grant else "revoke")
        return merr.success()

    @merr.rpc(milvus_pb2.SelectGrantResponse)
    async def SelectGrant(self, req: milvus_pb2.SelectGrantRequest, context=None):
        e = req.entity
        if not e.role.name:
            raise merr.invalid("the role entity in the grant entity is invalid")
        validate_entity_name(e.role.name, "role")
        resp = milvus_pb2.SelectGrantResponse()
        db = e.db_name or DEFAULT_DB
        for key, raw in await self.kv.get_prefix(keys.grant_prefix(e.role.name)):
            role, obj_type, gdb, name, privilege = _split_grant_key(key)
            if e.object.name and obj_type != e.object.name:
                continue
            if e.object_name and name != e.object_name:
                continue
            if e.db_name and ANY not in (e.db_name, gdb) and gdb != db:
                continue  # `*` asked or granted matches every database (Milvus' ListGrant)
            g = resp.entities.add(object_name=name, db_name=gdb)
            g.role.name = role
            g.object.name = obj_type
            g.grantor.user.name = raw.decode()
            g.grantor.privilege.name = privilege_name_for_api(privilege)
        return resp

    @merr.rpc(security_pb2.ListPolicyResponse)
    async def ListPolicy(self, req, context=None):
        resp = security_pb2.ListPolicyResponse(roles=await self._roles())
        stored = [(*_split_grant_key(key), raw.decode()) for key, raw in await self.kv.get_prefix(keys.GRANT_PREFIX)]
        for role, obj_type, db, name, privilege, grantor in await self.expand_groups(stored):
            resp.grants.add(
                role=role, object_type=obj_type, db_name=db, object_name=name, privilege=privilege, grantor=grantor
            )
        for user, rs in (await self._user_roles()).items():
            resp.user_roles.add(username=user, roles=sorted(rs))
        return resp
