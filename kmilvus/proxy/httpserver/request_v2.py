"""The RESTful API v2's request bodies, typed: Milvus' request_v2.go structs, field for field
(JSON names, defaults, which fields are required).

Go's JSON binding has two failure kinds and Milvus answers each with its own code: a body that
does not decode into the struct (not JSON, a string where a number belongs) is 1801
`IncorrectParameterFormat`; a decoded body whose `binding:"required"` field holds its zero value
("" / 0 / empty list / missing) is 1802 `MissingRequiredParameters`. The models decode strictly
(no "10" for a number) and list their required fields in `REQUIRED`; `bind()` does both checks.
Unknown keys are ignored, as Go ignores them (pymilvus' bulk_import sends cloud-only keys).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from kmilvus.util import merr

DEFAULT_OUTPUT_FIELDS = ["*"]
DEFAULT_LIMIT = 100


class Req(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    def db(self) -> str:
        return str(getattr(self, "dbName", "") or "")


# ------------------------------------------------------------------------------- databases
class EmptyReq(Req):
    pass


class DatabaseReq(Req):
    dbName: str = ""


class DatabaseReqRequiredName(Req):
    REQUIRED = ("dbName",)
    dbName: str = ""


class DatabaseReqWithProperties(Req):
    REQUIRED = ("dbName",)
    dbName: str = ""
    properties: dict[str, Any] = Field(default_factory=dict)


# ----------------------------------------------------------------------------- collections
class CollectionNameReq(Req):
    REQUIRED = ("collectionName",)
    dbName: str = ""
    collectionName: str = ""
    partitionNames: list[str] = Field(default_factory=list)


class OptionalCollectionNameReq(Req):
    dbName: str = ""
    collectionName: str = ""


class RenameCollectionReq(Req):
    REQUIRED = ("collectionName", "newCollectionName")
    dbName: str = ""
    collectionName: str = ""
    newCollectionName: str = ""
    newDbName: str = ""


class FieldSchema(Req):
    REQUIRED = ("fieldName", "dataType")
    fieldName: str = ""
    dataType: str = ""
    elementDataType: str = ""
    isPrimary: bool = False
    isPartitionKey: bool = False
    isClusteringKey: bool = False
    elementTypeParams: dict[str, Any] = Field(default_factory=dict)
    nullable: bool = False
    defaultValue: Any = None


class FunctionSchema(Req):
    REQUIRED = ("name", "type", "inputFieldNames", "outputFieldNames")
    name: str = ""
    description: str = ""
    type: str = ""
    inputFieldNames: list[str] = Field(default_factory=list)
    outputFieldNames: list[str] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)


class CollectionSchema(Req):
    fields: list[FieldSchema] = Field(default_factory=list)
    functions: list[FunctionSchema] = Field(default_factory=list)
    autoID: bool = False
    enableDynamicField: bool = False


class IndexParam(Req):
    REQUIRED = ("fieldName",)
    fieldName: str = ""
    indexName: str = ""
    metricType: str = ""
    indexType: str = ""
    params: dict[str, Any] = Field(default_factory=dict)


class CollectionReq(Req):
    REQUIRED = ("collectionName",)
    dbName: str = ""
    collectionName: str = ""
    dimension: int = 0
    idType: str = ""
    autoID: bool = False
    metricType: str = ""
    primaryFieldName: str = ""
    vectorFieldName: str = ""
    schema_: CollectionSchema = Field(default_factory=CollectionSchema, alias="schema")
    indexParams: list[IndexParam] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    description: str = ""


# ------------------------------------------------------------------------------ partitions
class PartitionReq(Req):
    REQUIRED = ("collectionName", "partitionName")
    dbName: str = ""
    collectionName: str = ""
    partitionName: str = ""


class PartitionsReq(Req):
    REQUIRED = ("collectionName", "partitionNames")
    dbName: str = ""
    collectionName: str = ""
    partitionNames: list[str] = Field(default_factory=list)


# -------------------------------------------------------------------------------- entities
class QueryReqV2(Req):
    REQUIRED = ("collectionName",)
    dbName: str = ""
    collectionName: str = ""
    partitionNames: list[str] = Field(default_factory=list)
    outputFields: list[str] = Field(default_factory=lambda: list(DEFAULT_OUTPUT_FIELDS))
    filter: str = ""
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    exprParams: dict[str, Any] = Field(default_factory=dict)


class CollectionIDReq(Req):
    REQUIRED = ("collectionName", "id")
    dbName: str = ""
    collectionName: str = ""
    partitionName: str = ""
    partitionNames: list[str] = Field(default_factory=list)
    outputFields: list[str] = Field(default_factory=lambda: list(DEFAULT_OUTPUT_FIELDS))
    id: Any = None


class CollectionFilterReq(Req):
    REQUIRED = ("collectionName", "filter")
    dbName: str = ""
    collectionName: str = ""
    partitionName: str = ""
    filter: str = ""
    exprParams: dict[str, Any] = Field(default_factory=dict)


class CollectionDataReq(Req):
    REQUIRED = ("collectionName", "data")
    dbName: str = ""
    collectionName: str = ""
    partitionName: str = ""
    data: list[Any] = Field(default_factory=list)


class SearchReqV2(Req):
    REQUIRED = ("collectionName", "data")
    dbName: str = ""
    collectionName: str = ""
    data: list[Any] = Field(default_factory=list)
    annsField: str = ""
    partitionNames: list[str] = Field(default_factory=list)
    filter: str = ""
    groupingField: str = ""
    groupSize: int = 0
    strictGroupSize: bool = False
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    outputFields: list[str] = Field(default_factory=list)
    searchParams: dict[str, Any] = Field(default_factory=dict)
    consistencyLevel: str = ""
    exprParams: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, float] = Field(default_factory=dict)  # Milvus: "not used any more"


class SubSearchReq(Req):
    REQUIRED = ("data",)
    data: list[Any] = Field(default_factory=list)
    annsField: str = ""
    filter: str = ""
    groupingField: str = ""
    metricType: str = ""
    limit: int = 0
    offset: int = 0
    params: dict[str, Any] = Field(default_factory=dict)  # the sub-search's searchParams
    exprParams: dict[str, Any] = Field(default_factory=dict)


class Rerank(Req):
    strategy: str = ""
    params: dict[str, Any] = Field(default_factory=dict)


class HybridSearchReq(Req):
    REQUIRED = ("collectionName",)
    dbName: str = ""
    collectionName: str = ""
    partitionNames: list[str] = Field(default_factory=list)
    search: list[SubSearchReq] = Field(default_factory=list)
    rerank: Rerank = Field(default_factory=Rerank)
    limit: int = DEFAULT_LIMIT
    groupingField: str = ""
    groupSize: int = 0
    strictGroupSize: bool = False
    outputFields: list[str] = Field(default_factory=list)
    consistencyLevel: str = ""


# --------------------------------------------------------------------------------- indexes
class IndexParamReq(Req):
    REQUIRED = ("collectionName", "indexParams")
    dbName: str = ""
    collectionName: str = ""
    indexParams: list[IndexParam] = Field(default_factory=list)


class IndexReq(Req):
    REQUIRED = ("collectionName", "indexName")
    dbName: str = ""
    collectionName: str = ""
    indexName: str = ""


# --------------------------------------------------------------------------------- aliases
class AliasReq(Req):
    REQUIRED = ("aliasName",)
    dbName: str = ""
    aliasName: str = ""


class AliasCollectionReq(Req):
    REQUIRED = ("collectionName", "aliasName")
    dbName: str = ""
    collectionName: str = ""
    aliasName: str = ""


# --------------------------------------------------------------------------- users, roles
class UserReq(Req):
    REQUIRED = ("userName",)
    userName: str = ""


class PasswordReq(Req):
    REQUIRED = ("userName", "password")
    userName: str = ""
    password: str = ""


class NewPasswordReq(Req):
    REQUIRED = ("userName", "password", "newPassword")
    userName: str = ""
    password: str = ""
    newPassword: str = ""


class UserRoleReq(Req):
    REQUIRED = ("userName", "roleName")
    userName: str = ""
    roleName: str = ""


class RoleReq(Req):
    REQUIRED = ("roleName",)
    dbName: str = ""
    roleName: str = ""


class GrantReq(Req):
    REQUIRED = ("roleName", "objectType", "objectName", "privilege")
    roleName: str = ""
    objectType: str = ""
    objectName: str = ""
    privilege: str = ""
    dbName: str = ""


class GrantV2Req(Req):
    REQUIRED = ("roleName", "privilege")
    roleName: str = ""
    dbName: str = ""
    collectionName: str = ""
    privilege: str = ""


class PrivilegeGroupReq(Req):
    REQUIRED = ("privilegeGroupName",)
    privilegeGroupName: str = ""
    privileges: list[str] = Field(default_factory=list)


# ------------------------------------------------------------------------------ jobs/import
class ImportReq(Req):
    REQUIRED = ("collectionName", "files")
    dbName: str = ""
    collectionName: str = ""
    partitionName: str = ""
    files: list[list[str]] = Field(default_factory=list)
    options: dict[str, str] = Field(default_factory=dict)


class CompactReq(Req):
    REQUIRED = ("collectionName",)
    dbName: str = ""
    collectionName: str = ""
    isClustering: bool = False


class CompactionStateReq(Req):
    REQUIRED = ("jobID",)
    jobID: int = 0

    def db(self) -> str:
        return ""


class JobIDReq(Req):
    REQUIRED = ("jobId",)
    jobId: str = ""

    def db(self) -> str:
        return ""


# ------------------------------------------------------------------------------- binding
def _go_name(json_name: str) -> str:
    """The Go struct field behind a JSON key (Milvus' validator names it in its message)."""
    return {"jobId": "JobID", "id": "ID", "autoID": "AutoID"}.get(json_name, json_name[:1].upper() + json_name[1:])


def _missing(model: Req, prefix: str = "") -> str | None:
    cls = type(model)
    for name in cls.REQUIRED:
        value = getattr(model, name)
        # Go's `required` fails a zero value; `id` is an interface{}, where only a missing one fails.
        zero = value is None or (name != "id" and (value in ("", 0) or (isinstance(value, list | dict) and not value)))
        if zero:
            go = _go_name(name)
            return (
                f"Key: '{prefix or cls.__name__}.{go}' Error:Field validation for '{go}' failed on the 'required' tag"
            )
    for name in cls.model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, Req) and (found := _missing(item, f"{prefix or cls.__name__}.{type(item).__name__}")):
                return found
    return None


def bind(cls: type[Req], body: bytes) -> Req:
    """Decode and check a request body as Milvus' wrapperPost does; a refusal raises RestError."""
    from kmilvus.proxy.httpserver.constant import RestError

    if not body.strip():
        raise RestError(
            merr.INCORRECT_PARAMETER_FORMAT,
            "can only accept json format request, the request body should be nil, however {} is valid",
        )
    try:
        model = cls.model_validate_json(body)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise RestError(
            merr.INCORRECT_PARAMETER_FORMAT,
            f"can only accept json format request, error: {first.get('msg', 'invalid')}"
            + (f" (field {where})" if where else ""),
        ) from None
    if problem := _missing(model):
        raise RestError(merr.MISSING_REQUIRED_PARAMETERS, f"missing required parameters, error: {problem}")
    return model
