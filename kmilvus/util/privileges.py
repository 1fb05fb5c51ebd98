"""Milvus' privilege model, shared by RootCoord (validating grants) and the Proxy (enforcing them).

The table that says which privilege an RPC needs comes from the Milvus API itself: milvus.proto
marks each request message with a `privilege_ext_obj` option (object type, privilege, and the
field number holding the object name), exactly what Milvus' PrivilegeInterceptor reads. An RPC
whose request carries no such option is listed in `AUTHENTICATED_ONLY` when Milvus lets any
authenticated user call it; any other RPC is denied to non-admin users (fail closed), so a new
RPC is either covered by milvus.proto or needs a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pymilvus.grpc_gen import common_pb2, milvus_pb2

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


def _field_name(msg_desc, number: int) -> str:
    f = msg_desc.fields_by_number.get(number) if number > 0 else None
    return f.name if f is not None else ""


def _rule(msg_desc) -> Rule | None:
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
