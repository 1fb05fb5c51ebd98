"""Milvus' privilege model, shared by RootCoord (validating grants) and the Proxy (enforcing them).

The table that says which privilege an RPC needs comes from the Milvus API itself: milvus.proto
marks each request message with a `privilege_ext_obj` option (object type, privilege, and the
field number holding the object name), exactly what Milvus' PrivilegeInterceptor reads. An RPC
whose request carries no such option is listed in `AUTHENTICATED_ONLY` when Milvus lets any
authenticated user call it; any other RPC is denied to non-admin users (fail closed), so a new
RPC is either covered by milvus.proto or needs a row here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from google.protobuf.descriptor import Descriptor
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus.util import merr

ROOT_USER = "root"
ROLE_ADMIN = "admin"
ROLE_PUBLIC = "public"
BUILTIN_ROLES = (ROLE_ADMIN, ROLE_PUBLIC)
ANY = "*"
GLOBAL, COLLECTION, USER = "Global", "Collection", "User"
OBJECT_TYPES = (GLOBAL, COLLECTION, USER)
PRIVILEGE_ALL = "PrivilegeAll"
PREFIX = "Privilege"

# Milvus' RootCoord grants the public role these (object type, object name, privilege) at start.
DEFAULT_PUBLIC_GRANTS = (
    (GLOBAL, ANY, "PrivilegeDescribeCollection"),
    (GLOBAL, ANY, "PrivilegeShowCollections"),
    (COLLECTION, ANY, "PrivilegeIndexDetail"),
)

# Requests without a privilege_ext_obj that Milvus serves to any authenticated user.
AUTHENTICATED_ONLY = frozenset(
    {
        "Connect",
        "GetVersion",
        "CheckHealth",
        "GetComponentStates",
        "AllocTimestamp",
        "RunAnalyzer",  # Milvus checks no privilege on it (its request names no object)
        "ListDatabases",
        "HasCollection",
        "ShowCollections",
        "GetPersistentSegmentInfo",
        "GetQuerySegmentInfo",
        "GetReplicas",
        "GetMetrics",
        "GetCompactionState",
        "GetCompactionStateWithPlans",
        "GetImportState",
        "ListImportTasks",
        "GetFlushAllState",
        "DescribePrewarmTask",
    }
)


@dataclass(frozen=True, slots=True)
class Rule:
    """What one RPC needs: `privilege` on an object of `object_type` whose name is in request
    field `name_field` (one name), `names_field` (every listed name), or neither (`*`)."""

    object_type: str
    privilege: str
    name_field: str = ""
    names_field: str = ""


def _field_name(msg_desc: Descriptor, number: int) -> str:
    f = msg_desc.fields_by_number.get(number) if number > 0 else None
    return f.name if f is not None else ""


def _rule(msg_desc: Descriptor) -> Rule | None:
    ext = common_pb2.privilege_ext_obj
    opts = msg_desc.GetOptions()
    if not opts.HasExtension(ext):
        return None
    e = opts.Extensions[ext]
    return Rule(
        object_type=common_pb2.ObjectType.Name(e.object_type),
        privilege=common_pb2.ObjectPrivilege.Name(e.object_privilege),
        name_field=_field_name(msg_desc, e.object_name_index),
        names_field=_field_name(msg_desc, e.object_name_indexs),
    )


# The Proxy's bulk-import RPCs of the RESTful API are not MilvusService methods: Milvus checks
# them through milvus.proto's placeholder messages (same field names as their requests).
_PLACEHOLDERS = {
    "ImportV2": "ImportAuthPlaceholder",
    "GetImportProgress": "GetImportProgressAuthPlaceholder",
    "ListImports": "ListImportsAuthPlaceholder",
}


def _build_table() -> dict[str, Rule]:
    table: dict[str, Rule] = {}
    for method in milvus_pb2.DESCRIPTOR.services_by_name["MilvusService"].methods:
        if (rule := _rule(method.input_type)) is not None:
            table[method.name] = rule
    messages = milvus_pb2.DESCRIPTOR.message_types_by_name
    for method, placeholder in _PLACEHOLDERS.items():
        if placeholder in messages and (rule := _rule(messages[placeholder])) is not None:
            table[method] = rule
    return table


PRIVILEGE_TABLE: dict[str, Rule] = _build_table()

# Privileges a grant may name per object type (Milvus' ObjectPrivileges): every privilege some
# RPC checks on that type, plus All.
VALID_PRIVILEGES: dict[str, frozenset[str]] = {
    t: frozenset({r.privilege for r in PRIVILEGE_TABLE.values() if r.object_type == t} | {PRIVILEGE_ALL})
    for t in OBJECT_TYPES
}
VALID_PRIVILEGES[GLOBAL] |= {"PrivilegeDescribeCollection", "PrivilegeShowCollections", "PrivilegeListDatabases"}
VALID_PRIVILEGES[COLLECTION] |= {"PrivilegeIndexDetail", "PrivilegeGetLoadingProgress"}


def name_for_metastore(name: str) -> str:
    """`Insert` (what clients grant) → `PrivilegeInsert` (what Milvus stores and checks)."""
    if name in (ANY, "All"):
        return PRIVILEGE_ALL
    return name if name.startswith(PREFIX) else PREFIX + name


def name_for_api(name: str) -> str:
    """`PrivilegeInsert` → `Insert`, as SelectGrant answers it."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else name


# RPCs whose every call is an audit event (DDL and privilege changes); refusals always are.
AUDITED = frozenset(
    {
        "CreateCollection",
        "DropCollection",
        "AlterCollection",
        "AlterCollectionField",
        "AddCollectionField",
        "AddCollectionFunction",
        "AlterCollectionFunction",
        "DropCollectionFunction",
        "RenameCollection",
        "TruncateCollection",
        "CreatePartition",
        "DropPartition",
        "LoadCollection",
        "ReleaseCollection",
        "LoadPartitions",
        "ReleasePartitions",
        "CreateIndex",
        "AlterIndex",
        "DropIndex",
        "CreateAlias",
        "AlterAlias",
        "DropAlias",
        "CreateDatabase",
        "DropDatabase",
        "AlterDatabase",
        "Import",
        "ImportV2",
        "ManualCompaction",
        "CreateCredential",
        "UpdateCredential",
        "DeleteCredential",
        "CreateRole",
        "DropRole",
        "OperateUserRole",
        "OperatePrivilege",
        "OperatePrivilegeV2",
    }
)


# ------------------------------------------------------------------------ privilege groups (RBAC v2)
# Milvus' built-in privilege groups (pkg/util/constant.go), in API names; each level's groups
# widen the one before. A group grant is stored under its metastore name (`PrivilegeGroup<Name>`)
# and expanded into its privileges when the policy is listed, so a change to a custom group is in
# force for every role that holds it.
GROUP_PREFIX = "PrivilegeGroup"
_COLLECTION_RO = (
    "Query", "Search", "IndexDetail", "GetFlushState", "GetLoadState", "GetLoadingProgress", "HasPartition",
    "ShowPartitions", "DescribeCollection", "DescribeAlias", "GetStatistics", "ListAliases",
)  # fmt: skip
_COLLECTION_RW = (*_COLLECTION_RO, "Load", "Release", "Insert", "Delete", "Upsert", "Import", "Flush", "Compaction",
                  "LoadBalance", "CreateIndex", "DropIndex", "CreatePartition", "DropPartition")  # fmt: skip
_DATABASE_RO = ("ShowCollections", "DescribeDatabase")
_DATABASE_RW = (*_DATABASE_RO, "AlterDatabase")
_CLUSTER_RO = ("ListDatabases", "SelectOwnership", "SelectUser", "DescribeResourceGroup", "ListResourceGroups",
               "ListPrivilegeGroups")  # fmt: skip
_CLUSTER_RW = (*_CLUSTER_RO, "FlushAll", "TransferNode", "TransferReplica", "UpdateResourceGroups")
BUILTIN_PRIVILEGE_GROUPS: dict[str, tuple[str, ...]] = {
    "ClusterReadOnly": _CLUSTER_RO,
    "ClusterReadWrite": _CLUSTER_RW,
    "ClusterAdmin": (*_CLUSTER_RW, "BackupRBAC", "RestoreRBAC", "CreateDatabase", "DropDatabase", "CreateOwnership",
                     "DropOwnership", "ManageOwnership", "CreateResourceGroup", "DropResourceGroup", "UpdateUser",
                     "RenameCollection", "CreatePrivilegeGroup", "DropPrivilegeGroup", "OperatePrivilegeGroup"),
    "DatabaseReadOnly": _DATABASE_RO,
    "DatabaseReadWrite": _DATABASE_RW,
    "DatabaseAdmin": (*_DATABASE_RW, "CreateCollection", "DropCollection"),
    "CollectionReadOnly": _COLLECTION_RO,
    "CollectionReadWrite": _COLLECTION_RW,
    "CollectionAdmin": (*_COLLECTION_RW, "CreateAlias", "DropAlias"),
}  # fmt: skip
CLUSTER, DATABASE = "Cluster", "Database"  # Milvus' PrivilegeLevel names (Collection is COLLECTION)


def privilege_level(privilege: str) -> str:
    """Milvus' GetPrivilegeLevel: the narrowest admin group holding an API privilege name."""
    for level, group in ((CLUSTER, "ClusterAdmin"), (DATABASE, "DatabaseAdmin"), (COLLECTION, "CollectionAdmin")):
        if privilege in BUILTIN_PRIVILEGE_GROUPS[group]:
            return level
    return ""


def is_privilege(name: str) -> bool:
    """A single privilege Milvus defines (API name, e.g. `Insert`); groups are not."""
    return PREFIX + name in common_pb2.ObjectPrivilege.DESCRIPTOR.values_by_name and not name.startswith("Group")


def object_type_of(privilege: str) -> str:
    """Milvus' GetObjectType: the object type whose privileges include `privilege` (API name);
    Global for the rest (groups too)."""
    stored = name_for_metastore(privilege)
    for t in (COLLECTION, USER):
        if stored in VALID_PRIVILEGES[t] and stored != PRIVILEGE_ALL:
            return t
    return GLOBAL


def group_for_metastore(name: str) -> str:
    return GROUP_PREFIX + name


def privilege_name_for_api(stored: str) -> str:
    """A stored grant's privilege as SelectGrant answers it: `PrivilegeGroupX` → `X`, `PrivilegeInsert` → `Insert`."""
    return stored[len(GROUP_PREFIX) :] if stored.startswith(GROUP_PREFIX) else name_for_api(stored)


_ENTITY_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


def validate_entity_name(name: str, what: str) -> None:
    """Milvus' ValidateRoleName / ValidateUsername shape: a letter or _ first, then letters,
    digits, _ (also keeps `/` out of etcd keys)."""
    if not name:
        raise merr.invalid(f"the {what} name can not be empty")
    if not _ENTITY_NAME.match(name):
        raise merr.invalid(f"invalid {what} name {name!r}: use letters, digits and _ only, starting with a letter or _")
