"""Collection schema checks, with Milvus' error codes and wording (Milvus' schemautil and its
proxy's name checks).

RootCoord runs them (the authority) — the Proxy relies on it, so a client that skips pymilvus'
own checks still gets the same answers. The Proxy checks names with them before a DDL call, and
the operator checks a Collection's spec with them; so they live below the components.
"""

from __future__ import annotations

import re

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.function import schema as functions
from kmilvus.util import merr, typeutil
from kmilvus.util.merr import MilvusError
from kmilvus.util.typeutil import DYNAMIC_FIELD_NAME, SUPPORTED_TYPES, type_param

DT = schema_pb2.DataType
SUPPORTED = set(SUPPORTED_TYPES)
DIM_VECTORS = (DT.FloatVector, *typeutil.BYTE_VECTORS)
# A default value's ValueField member per data type (Milvus' checkDefaultValue).
_DEFAULT_SLOT = {
    DT.Bool: "bool_data",
    DT.Int8: "int_data",
    DT.Int16: "int_data",
    DT.Int32: "int_data",
    DT.Int64: "long_data",
    DT.Float: "float_data",
    DT.Double: "double_data",
    DT.VarChar: "string_data",
}
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
            if f.is_partition_key:  # Milvus' validatePartitionKey
                raise MilvusError(merr.UNEXPECTED, "the partition key field must not be primary field")
        if typeutil.is_vector(f.data_type):
            has_vector = True
        if f.data_type in DIM_VECTORS:
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
            if f.data_type == DT.BinaryVector and dim % 8:
                raise MilvusError(
                    merr.DIMENSION_INVALID,
                    f"invalid dimension: {dim} of field {f.name}. binary vector dimension should be multiple of 8.",
                )
        if f.data_type == DT.Array:
            _check_array(f, max_varchar)
        if f.data_type == DT.VarChar:
            _check_max_length(f, max_varchar, schema.name)
        _check_nullable_and_default(f, max_varchar)
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
    functions.validate_functions(schema)


def _check_max_length(f: schema_pb2.FieldSchema, max_varchar: int, collection: str = "") -> None:
    raw = type_param(f, "max_length")
    if raw is None:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"type param(max_length) should be specified for varChar field({f.name}) of collection {collection}",
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
            f"the maximum length specified for field({f.name}) should be in (0, {max_varchar}], but got {n} instead",
        )


def _check_array(f: schema_pb2.FieldSchema, max_varchar: int) -> None:
    """Milvus' array rules: a scalar element type (no JSON, no nested arrays), a max_capacity in
    (0, 4096], and a max_length for VarChar elements."""
    if f.element_type not in typeutil.ARRAY_ELEMENTS:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"element type {DT.Name(f.element_type) if f.element_type in DT.values() else f.element_type} "
            f"is not supported for array field {f.name}",
        )
    raw = type_param(f, "max_capacity")
    if raw is None:
        raise MilvusError(
            merr.PARAMETER_INVALID, f"type param(max_capacity) should be specified for array field {f.name}"
        )
    try:
        cap = int(raw)
    except ValueError:
        raise MilvusError(
            merr.PARAMETER_INVALID, "the maximum capacity specified for a Array should be an integer"
        ) from None
    if not 0 < cap <= typeutil.MAX_CAPACITY_LIMIT:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"the maximum capacity specified for a Array should be in (0, {typeutil.MAX_CAPACITY_LIMIT}]",
        )
    if f.element_type == DT.VarChar:
        _check_max_length(f, max_varchar)
    if f.is_primary_key:
        raise MilvusError(
            merr.PARAMETER_INVALID, f"the data type of primary key should be Int64 or VarChar, field name = {f.name}"
        )


def _check_nullable_and_default(f: schema_pb2.FieldSchema, max_varchar: int) -> None:
    """Milvus 2.5: no null primary key or vector, a default only for scalars and of the field's type."""
    if f.nullable and f.is_primary_key:
        raise MilvusError(merr.PARAMETER_INVALID, f"primary field not support null, field name = {f.name}")
    if f.nullable and typeutil.is_vector(f.data_type):
        raise MilvusError(merr.PARAMETER_INVALID, f"vector type not support null, field name = {f.name}")
    if not f.HasField("default_value") or f.default_value.WhichOneof("data") is None:
        return
    if f.is_primary_key:
        raise MilvusError(merr.PARAMETER_INVALID, f"primary field not support default_value, field name = {f.name}")
    want = _DEFAULT_SLOT.get(f.data_type)
    if want is None:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"{DT.Name(f.data_type)} field {f.name} does not support default_value",
        )
    got = f.default_value.WhichOneof("data")
    if got != want:
        raise MilvusError(
            merr.PARAMETER_INVALID,
            f"type ({got}) of field ({f.name}) is not equal to the type({DT.Name(f.data_type)}) of default_value",
        )
    if f.data_type == DT.VarChar:
        limit = int(type_param(f, "max_length") or max_varchar)
        if len(f.default_value.string_data.encode()) > limit:
            raise MilvusError(
                merr.PARAMETER_INVALID,
                f"the length ({len(f.default_value.string_data)}) of string exceeds max length ({limit})",
            )
    if f.data_type in (DT.Int8, DT.Int16):
        bits = 8 if f.data_type == DT.Int8 else 16
        v = f.default_value.int_data
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise MilvusError(merr.PARAMETER_INVALID, f"the default value ({v}) of field ({f.name}) out of range")


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
    functions.bind(out)
    return out


def same_schema(a: schema_pb2.CollectionSchema, b: schema_pb2.CollectionSchema) -> bool:
    """Equal as a user would judge: names, types, keys, autoID and type params, in order."""

    def key(s):
        return [
            (
                f.name,
                f.data_type,
                f.is_primary_key,
                f.autoID,
                f.is_partition_key,
                sorted((kv.key, kv.value) for kv in f.type_params),
                f.element_type,
                f.nullable,
                f.default_value.SerializeToString(),
            )
            for f in s.fields
        ]

    return bool(key(a) == key(b))


def consistency_level_name(level: int) -> str:
    return str(common_pb2.ConsistencyLevel.Name(level))


DEFAULT_PARTITIONS_WITH_PARTITION_KEY = 16  # Milvus 2.5's common.DefaultPartitionsWithPartitionKey


def check_partition_key(schema: schema_pb2.CollectionSchema, num_partitions: int, max_partitions: int) -> int:
    """Milvus' validatePartitionKey (the key on the primary key: `validate_schema`): at most one
    partition key, not nullable, Int64 or VarChar; `num_partitions` only with a key, 1..max (default 16). Returns
    how many partitions the collection gets (0: no partition key, one `_default` partition)."""
    key = None
    for f in schema.fields:
        if not f.is_partition_key:
            continue
        if key is not None:
            raise MilvusError(
                merr.UNEXPECTED, f"there are more than one partition key, field name = {key.name}, {f.name}"
            )
        if f.nullable:
            raise MilvusError(merr.PARAMETER_INVALID, "partition key field not support nullable: invalid parameter")
        if f.data_type not in (DT.Int64, DT.VarChar):
            raise MilvusError(merr.UNEXPECTED, "the data type of partition key should be Int64 or VarChar")
        if num_partitions < 0:
            raise MilvusError(
                merr.UNEXPECTED, "the specified partitions should be greater than 0 if partition key is used"
            )
        if num_partitions > max_partitions:
            raise MilvusError(
                merr.PARAMETER_INVALID,
                f"partition number ({num_partitions}) exceeds max configuration ({max_partitions}): invalid parameter",
            )
        key = f
    if key is None:
        if num_partitions:
            raise MilvusError(
                merr.UNEXPECTED, "num_partitions should only be specified with partition key field enabled"
            )
        return 0
    return num_partitions or min(DEFAULT_PARTITIONS_WITH_PARTITION_KEY, max_partitions)


MAX_FIELD_NUM = 64  # Milvus' proxy.maxFieldNum default
_SYSTEM_FIELD_NAMES = (typeutil.ROW_ID_NAME, typeutil.TIMESTAMP_NAME, DYNAMIC_FIELD_NAME)


def refuse(message: str) -> MilvusError:
    """Milvus' WrapErrParameterInvalidMsg: code 1100, the message and ": invalid parameter"."""
    return MilvusError(merr.PARAMETER_INVALID, f"{message}: invalid parameter")


def validate_added_field(
    schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema, *, max_dim: int, max_varchar: int
) -> None:
    """Milvus' AddCollectionField checks (proxy validateAddFieldRequest, addCollectionFieldTask,
    ValidateField), in its order and words. The field must be nullable: rows written before it
    read as null (or as its default value)."""
    if len(schema.fields) >= MAX_FIELD_NUM:
        raise refuse(f"The number of fields has reached the maximum value {MAX_FIELD_NUM}")
    if any(f.name == field.name for f in schema.fields):
        raise refuse(f"duplicated field name {field.name}")
    if field.data_type not in SUPPORTED:
        shown = DT.Name(field.data_type) if field.data_type in DT.values() else str(field.data_type)
        raise refuse(f"field data type: {shown} is not supported")
    if field.name in _SYSTEM_FIELD_NAMES:
        raise refuse(f"not support to add system field, field name = {field.name}")
    if field.is_primary_key:
        raise refuse(f"not support to add pk field, field name = {field.name}")
    if field.autoID:
        raise refuse(f"only primary field can speficy AutoID with true, field name = {field.name}")
    if field.is_partition_key:
        raise refuse(f"not support to add partition key field, field name  = {field.name}")
    if field.is_clustering_key and any(f.is_clustering_key for f in schema.fields):
        raise refuse(f"already has another clustering key field, field name: {field.name}")
    if typeutil.is_vector(field.data_type):
        raise refuse(f"not support to add vector field, field name = {field.name}")
    if not field.nullable:
        raise refuse(f"added field must be nullable, please check it, field name = {field.name}")
    if field.is_dynamic:
        raise refuse("cannot explicitly set a field as a dynamic field")
    validate_name(field.name, "field")
    if field.data_type == DT.VarChar:
        _check_max_length(field, max_varchar, schema.name)
    if field.data_type == DT.Array:
        _check_array(field, max_varchar)
    _check_nullable_and_default(field, max_varchar)
    merged = schema_pb2.CollectionSchema()
    merged.CopyFrom(schema)
    merged.fields.append(field)
    functions.validate_analyzer(merged, field)


def add_field(schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema) -> schema_pb2.CollectionSchema:
    """The schema with `field` appended under the next field ID (Milvus: the largest assigned
    + 1) and its version one higher (the version consumers compare)."""
    out = schema_pb2.CollectionSchema()
    out.CopyFrom(schema)
    added = out.fields.add()
    added.CopyFrom(field)
    added.fieldID = max((f.fieldID for f in schema.fields), default=START_FIELD_ID - 1) + 1
    out.version = schema.version + 1
    functions.bind(out)  # no function outputs to it (a client's is_function_output is not kept)
    return out
