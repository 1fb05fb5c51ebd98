"""Collection schema checks, with Milvus' error codes and wording.

Runs in RootCoord (the authority) — the Proxy relies on it, so a client that skips pymilvus'
own checks still gets the same answers.
"""

from __future__ import annotations

import re

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.util import merr
from kmilvus.util.merr import MilvusError
from kmilvus.util.typeutil import DYNAMIC_FIELD_NAME, type_param

DT = schema_pb2.DataType
SUPPORTED = {DT.Bool, DT.Int8, DT.Int16, DT.Int32, DT.Int64, DT.Float, DT.Double, DT.VarChar, DT.JSON, DT.FloatVector}
START_FIELD_ID = 100
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME_LENGTH = 255


def validate_name(name: str, what: str = "collection") -> None:
    """Milvus' rule: 1-255 characters, a letter or underscore first, then letters, digits, underscores."""
    cap = what.capitalize()
    if not name or not name.strip():
        raise MilvusError(merr.PARAMETER_INVALID, f"{cap} name should not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            # The name is cut: echoing a hostile multi-megabyte name would make the answer huge.
            f"Invalid {what} name: {name[:MAX_NAME_LENGTH]}... The length of a {what} name must be less than "
            f"{MAX_NAME_LENGTH} characters.",
        )
    if not (name[0] == "_" or (name[0].isascii() and name[0].isalpha())):
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"Invalid {what} name: {name}. The first character of a {what} name must be an underscore or letter.",
        )
    if not _NAME.match(name):
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"Invalid {what} name: {name}. {cap} name can only contain numbers, letters and underscores.",
        )


def validate_schema(schema: schema_pb2.CollectionSchema, *, max_dim: int, max_varchar: int) -> None:
    validate_name(schema.name, "collection")
    if not schema.fields:
        raise MilvusError(merr.COLLECTION_ILLEGAL_SCHEMA, "schema does not contain any field")
    seen: set[str] = set()
    pks = []
    has_vector = False
    for f in schema.fields:
        validate_name(f.name, "field")
        if f.name in seen:
            raise MilvusError(merr.PARAMETER_INVALID, f"duplicated field name {f.name} found")
        seen.add(f.name)
        if f.data_type not in SUPPORTED:
            raise MilvusError(
                merr.PARAMETER_INVALID, f"field {f.name}: data type {DT.Name(f.data_type)} is not supported"
            )
        if f.is_primary_key:
            pks.append(f)
        if f.data_type == DT.FloatVector:
            has_vector = True
            raw = type_param(f, "dim")
            if raw is None:
                raise MilvusError(
                    merr.PARAMETER_INVALID,
                    f"dimension is not defined in field type params of field {f.name}, "
                    "check type param `dim` for vector field",
                )
            try:
                dim = int(raw)
            except ValueError:
                raise MilvusError(
                    merr.PARAMETER_INVALID, f"invalid dimension: {raw} of field {f.name}. dimension must be an integer"
                ) from None
            if not 1 <= dim <= max_dim:
                raise MilvusError(
                    merr.DIMENSION_INVALID,
                    f"invalid dimension: {dim} of field {f.name}. should be in range 1 ~ {max_dim}",
                )
        if f.data_type == DT.VarChar:
            raw = type_param(f, "max_length")
            if raw is None:
                raise MilvusError(
                    merr.PARAMETER_INVALID,
                    f"type param(max_length) should be specified for varChar field({f.name}) "
                    f"of collection {schema.name}",
                )
            try:
                n = int(raw)
            except ValueError:
                raise MilvusError(
                    merr.PARAMETER_INVALID, f"the maximum length of field {f.name} must be an integer, got {raw}"
                ) from None
            if not 0 < n <= max_varchar:
                raise MilvusError(
                    merr.PARAMETER_INVALID,
                    f"the maximum length specified for field({f.name}) should be in (0, {max_varchar}], "
                    f"but got {n} instead",
                )
        if f.is_dynamic:
            raise MilvusError(merr.PARAMETER_INVALID, "cannot explicitly set a field as a dynamic field")
        if f.autoID and not f.is_primary_key:
            raise MilvusError(
                merr.PARAMETER_INVALID, f"only primary field can speficy AutoID with True, field name = {f.name}"
            )
    if not pks:
        raise MilvusError(merr.PARAMETER_INVALID, "primary key is not specified")
    if len(pks) > 1:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            "there are more than one primary key, field name = " + ", ".join(f.name for f in pks),
        )
    if pks[0].data_type not in (DT.Int64, DT.VarChar):
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"the data type of primary key should be Int64 or VarChar, field name = {pks[0].name}",
        )
    if not has_vector:
        raise MilvusError(merr.PARAMETER_INVALID, "schema does not contain vector field")


def normalize(schema: schema_pb2.CollectionSchema, autoid_hint: bool = False) -> schema_pb2.CollectionSchema:
    """Assign field IDs (100, 101, ... in declaration order), fill the collection-level autoID,
    and append the `$meta` JSON field that holds a row's extra keys when the dynamic field is
    enabled (Milvus' appendDynamicField: it is stored, but DescribeCollection hides it)."""
    out = schema_pb2.CollectionSchema()
    out.CopyFrom(schema)
    if out.enable_dynamic_field and not any(f.is_dynamic for f in out.fields):
        out.fields.add(name=DYNAMIC_FIELD_NAME, data_type=DT.JSON, is_dynamic=True, description="dynamic schema")
    for i, f in enumerate(out.fields):
        f.fieldID = START_FIELD_ID + i
        if f.is_primary_key and (schema.autoID or autoid_hint):
            f.autoID = True
    out.autoID = any(f.autoID for f in out.fields if f.is_primary_key)
    return out


def same_schema(a: schema_pb2.CollectionSchema, b: schema_pb2.CollectionSchema) -> bool:
    """Equal as a user would judge: names, types, keys, autoID and type params, in order."""

    def key(s):
        return [
            (f.name, f.data_type, f.is_primary_key, f.autoID, sorted((kv.key, kv.value) for kv in f.type_params))
            for f in s.fields
        ]

    return key(a) == key(b)


def consistency_level_name(level: int) -> str:
    return common_pb2.ConsistencyLevel.Name(level)
