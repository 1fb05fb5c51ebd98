"""RootCoord's privilege groups (Milvus' RBAC v2: CreatePrivilegeGroup / DropPrivilegeGroup /
ListPrivilegeGroups / OperatePrivilegeGroup, and OperatePrivilege with version "v2").

A custom group is one etcd key (`root-coord/credential/privilege-groups/{name}`, its privileges as
a JSON list). A grant of a group is stored like any grant, its privilege named
`PrivilegeGroup<Name>`; ListPolicy expands it into the group's privileges (Milvus'
expandPrivilegeGroups), so adding a privilege to a group is in force at once for every role that
holds the group. Each change makes every Proxy reload its policy before the call returns.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import orjson
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.util import merr
from kmilvus.util.privileges import (
    ANY,
    BUILTIN_PRIVILEGE_GROUPS,
    CLUSTER,
    COLLECTION,
    DATABASE,
    GLOBAL,
    GROUP_PREFIX,
    group_for_metastore,
    is_privilege,
    name_for_metastore,
    object_type_of,
    privilege_level,
)

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

EC = common_pb2.ErrorCode
_GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 255


def _failure(kind: int, message: str) -> merr.MilvusError:
    return merr.MilvusError((65535, kind), message)


def validate_group_name(name: str) -> None:
    """Milvus' ValidatePrivilegeGroupName."""
    if not name:
        raise merr.invalid("privilege group name should not be empty")
    if len(name) > MAX_NAME:
        raise merr.invalid(f"the length of a privilege group name {name} must be less than {MAX_NAME} characters")
    if not _GROUP_NAME.match(name):
        raise merr.invalid(
            f"privilege group name {name} can only contain numbers, letters and underscores, "
            "and the first character must be a letter or an underscore"
        )


class PrivilegeGroupMixin(RootCoordHost):
    """RootCoord's privilege group RPCs."""

    async def custom_privilege_groups(self) -> dict[str, list[str]]:
        out = {}
        for key, raw in await self.kv.get_prefix(keys.PRIVILEGE_GROUP_PREFIX):
            out[key[len(keys.PRIVILEGE_GROUP_PREFIX) :]] = orjson.loads(raw)
        return out

    async def all_privilege_groups(self) -> dict[str, list[str]]:
        """Custom groups, then the built-in ones (Milvus' getDefaultAndCustomPrivilegeGroups)."""
        return {**await self.custom_privilege_groups(), **{k: list(v) for k, v in BUILTIN_PRIVILEGE_GROUPS.items()}}

    @merr.rpc()
    async def CreatePrivilegeGroup(self, req: milvus_pb2.CreatePrivilegeGroupRequest, context=None):
        name = req.group_name
        validate_group_name(name)
        if name in BUILTIN_PRIVILEGE_GROUPS or is_privilege(name):
            raise _failure(
                EC.CreatePrivilegeGroupFailure,
                f"privilege group name [{name}] is defined by built in privileges or privilege groups in system",
            )
        key = keys.privilege_group_key(name)
        if not await self.kv.txn([Op.put(key, b"[]")], [Cmp.missing(key)]):
            raise _failure(EC.CreatePrivilegeGroupFailure, f"privilege group [{name}] already exists")
        return merr.success()

    @merr.rpc()
    async def DropPrivilegeGroup(self, req: milvus_pb2.DropPrivilegeGroupRequest, context=None):
        name = req.group_name
        validate_group_name(name)
        if name in BUILTIN_PRIVILEGE_GROUPS:
            raise _failure(EC.DropPrivilegeGroupFailure, f"the privilege group [{name}] is built in, can't be dropped")
        stored = group_for_metastore(name)
        for key, _ in await self.kv.get_prefix(keys.GRANT_PREFIX):
            role, _, _, _, privilege = key[len(keys.GRANT_PREFIX) :].split("/", 4)
            if privilege == stored:
                raise _failure(
                    EC.DropPrivilegeGroupFailure,
                    f"privilege group [{name}] is used by role [{role}], Use REVOKE API to revoke it first",
                )
        await self.kv.txn([Op.delete(keys.privilege_group_key(name))], [])  # none: nothing to do, as Milvus
        await self._notify_policy("drop_privilege_group")
        return merr.success()

    @merr.rpc(milvus_pb2.ListPrivilegeGroupsResponse)
    async def ListPrivilegeGroups(self, req, context=None):
        resp = milvus_pb2.ListPrivilegeGroupsResponse()
        for name, privileges in (await self.all_privilege_groups()).items():
            group = resp.privilege_groups.add(group_name=name)
            for p in privileges:
                group.privileges.add(name=p)
        return resp

    @merr.rpc()
    async def OperatePrivilegeGroup(self, req: milvus_pb2.OperatePrivilegeGroupRequest, context=None):
        name = req.group_name
        validate_group_name(name)
        fail = EC.OperatePrivilegeGroupFailure
        if name in BUILTIN_PRIVILEGE_GROUPS:
            raise _failure(fail, f"the privilege group [{name}] is built in, can't be changed")
        wanted = [p.name for p in req.privileges]
        for p in wanted:
            if not is_privilege(p):
                raise _failure(fail, f"privilege name [{p}] is not defined in system")
        key = keys.privilege_group_key(name)
        raw = await self.kv.get(key)
        if raw is None:
            raise _failure(fail, f"there is no privilege group name [{name}] defined in system to operate")
        current: list[str] = orjson.loads(raw)
        if req.type == milvus_pb2.AddPrivilegesToGroup:
            levels = {privilege_level(p) for p in [*current, *wanted]}
            if len(levels) > 1:
                raise _failure(fail, f"privileges of a group must be of one level, got {sorted(levels)}")
            updated = current + [p for p in dict.fromkeys(wanted) if p not in current]
        elif req.type == milvus_pb2.RemovePrivilegesFromGroup:
            updated = [p for p in current if p not in wanted]
        else:
            raise merr.invalid(f"invalid operate privilege group type: {req.type}")
        if not await self.kv.txn([Op.put(key, orjson.dumps(updated))], [Cmp.value_eq(key, raw)]):
            raise _failure(fail, f"privilege group [{name}] changed concurrently, retry")
        await self._notify_policy("operate_privilege_group")
        return merr.success()

    async def resolve_v2_grant(self, e: milvus_pb2.GrantEntity) -> tuple[str, str]:
        """OperatePrivilege version "v2" (Milvus' isValidPrivilegeV2 + validatePrivilegeGroupParams):
        (object type, metastore privilege name) of a grant naming a privilege or a group on
        `db_name` / `object_name` (a collection), both `*` for every one."""
        name = e.grantor.privilege.name
        if name == ANY:
            return GLOBAL, name_for_metastore(ANY)
        groups = await self.all_privilege_groups()
        if name in groups:
            privileges = groups[name]
            level = privilege_level(privileges[0]) if privileges else ""
            db, coll = e.db_name, e.object_name
            if level == CLUSTER and (db != ANY or coll != ANY):
                raise merr.invalid(f"dbName and collectionName should be * for the cluster level privilege: {name}")
            if level == DATABASE and coll not in ("", ANY):
                raise merr.invalid(f"collectionName should be * for the database level privilege: {name}")
            if level == COLLECTION and db == ANY and coll not in ("", ANY):
                raise merr.invalid(f"please specify database name for the collection level privilege: {name}")
            stored = name if name.startswith(GROUP_PREFIX) else group_for_metastore(name)
            return GLOBAL, stored
        if is_privilege(name):
            return object_type_of(name), name_for_metastore(name)
        raise _failure(EC.OperatePrivilegeFailure, f"not found the privilege name[{name}]")

    async def expand_groups(self, grants: list[tuple[str, str, str, str, str, str]]) -> list:
        """Milvus' expandPrivilegeGroups: a group grant becomes one grant per privilege of the
        group (object type by privilege; `*` as the name of a Global one)."""
        groups = {group_for_metastore(k): v for k, v in (await self.all_privilege_groups()).items()}
        out = []
        for role, obj_type, db, obj_name, privilege, grantor in grants:
            if privilege not in groups:
                out.append((role, obj_type, db, obj_name, privilege, grantor))
                continue
            for p in groups[privilege]:
                t = object_type_of(p)
                out.append((role, t, db, ANY if t == GLOBAL else obj_name, name_for_metastore(p), grantor))
        return list(dict.fromkeys(out))
