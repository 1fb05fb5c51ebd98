"""Collection spec (the custom resource) <-> Milvus collection schema.

What a spec must be is defined once, by the models of `controllers.v1alpha1`: the CRD's
openAPIV3Schema and CEL rules are generated from them (tools/gen_crds.py) and `check_spec`
validates a spec with them (`controllers.crd.validate`: the schema, then its CEL rules), then
with RootCoord's own rules (`kmilvus.schemautil.validate_schema`), so a spec that got
through anyway — no CEL support, an old CRD, a direct etcd write — is reported in conditions,
in the API server's words, before anything touches etcd.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

from pymilvus.grpc_gen import common_pb2, schema_pb2

from controllers import crd
from controllers.crd import short
from controllers.v1alpha1 import (
    DATA_TYPE_NAMES,
    DENSE_VECTOR_TYPES,
    ELEMENT_TYPES,
    MAX_CAPACITY,
    MAX_DESCRIPTION,
    MAX_FIELDS,
    MAX_INDEXES,
    MAX_PARTITIONS,
    VECTOR_TYPES,
    CollectionSpec,
    FieldSpec,
)
from kmilvus import schemautil
from kmilvus.index import params as index_params
from kmilvus.util.constants import DEFAULT_DB, MAX_DIM, MAX_VARCHAR_LENGTH
from kmilvus.util.merr import MilvusError

__all__ = [
    "DENSE_VECTOR_TYPES",
    "ELEMENT_TYPES",
    "MAX_CAPACITY",
    "MAX_DESCRIPTION",
    "MAX_FIELDS",
    "MAX_INDEXES",
    "MAX_PARTITIONS",
    "VECTOR_TYPES",
    "short",
]

DT = schema_pb2.DataType
DATA_TYPES = {name: DT.Value(name) for name in DATA_TYPE_NAMES}
TYPE_NAMES = {v: k for k, v in DATA_TYPES.items()}
# defaultValue → the ValueField member it is stored in.
_DEFAULT_SLOTS = {
    "Bool": "bool_data",
    "Int8": "int_data",
    "Int16": "int_data",
    "Int32": "int_data",
    "Int64": "long_data",
    "Float": "float_data",
    "Double": "double_data",
    "VarChar": "string_data",
}
CONSISTENCY = dict(common_pb2.ConsistencyLevel.items())
CONSISTENCY_NAMES = {v: k for k, v in CONSISTENCY.items()}
DEFAULT_CONSISTENCY = "Bounded"
MAX_VARCHAR = MAX_VARCHAR_LENGTH
INDEX_TYPES = index_params.INDEX_TYPES  # FLAT, IVF_FLAT, IVF_SQ8, HNSW, AUTOINDEX
METRIC_TYPES = index_params.METRICS  # L2, IP, COSINE
SPEC_PARAMS = {"dim": "dim", "max_length": "maxLength", "max_capacity": "maxCapacity"}  # type param → spec key
NAME_RE = re.compile(crd.NAME_PATTERN)
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SpecError(ValueError):
    """A spec Milvus would refuse; `reason` is a CamelCase condition reason."""

    def __init__(self, message: str, reason: str = "InvalidSpec"):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """Which Milvus collection a Collection resource stands for."""

    database: str
    name: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.database, self.name)


def default_name(meta_name: str) -> str:
    """spec.name defaults to metadata.name, with the '-' and '.' Kubernetes allows (and Milvus
    does not) turned into '_'."""
    return meta_name.replace("-", "_").replace(".", "_")


def target(spec: dict, meta_name: str) -> Target:
    return Target(spec.get("database") or DEFAULT_DB, spec.get("name") or default_name(meta_name))


_T = TypeVar("_T")


def is_type(value: object, typ: type[_T]) -> TypeGuard[_T]:
    """`value` is JSON of type `typ` (a bool is not an integer)."""
    return isinstance(value, typ) and (typ is bool or not isinstance(value, bool))


@dataclass(frozen=True)
class DeclaredIndex:
    """One entry of spec.indexes, checked against the schema as the Proxy checks CreateIndex."""

    name: str
    field: str
    params: dict[str, str]  # as DataCoord stores them: index_type, metric_type, dim, nlist / M ...

    @property
    def user_params(self) -> dict[str, str]:
        return index_params.user_params(self.params)


def index_name(ix: dict) -> str:
    """An index's name: spec.indexes[].name, else its field's name (as Milvus names it)."""
    return str(ix.get("name") or ix.get("fieldName") or "")


def _validated(spec, meta_name: str, *, indexes: bool) -> crd.Checked:
    """The spec checked against the CRD's model (its indexes left out unless `indexes`), and the
    name it gets from metadata.name when spec.name is not set."""
    if isinstance(spec, dict) and not indexes:
        spec = {k: v for k, v in spec.items() if k != "indexes"}
    checked = crd.validate(CollectionSpec, spec)
    if checked.model is not None and checked.model.name is None and not crd.valid_name(default_name(meta_name)):
        checked.problems.append(
            f"spec.name {short(default_name(meta_name))} (from metadata.name) {crd.PATTERN_HELP[crd.NAME_PATTERN]}; "
            "set spec.name"
        )
        checked.model = None
    return checked


def check_spec(spec, meta_name: str, *, indexes: bool = True) -> list[str]:
    """Every problem the CRD schema (incl. its CEL rules) would have caught, in the API server's
    terms (spec.indexes' too unless `indexes` is False)."""
    return _validated(spec, meta_name, indexes=indexes).problems


def declared_indexes(spec: dict, schema: schema_pb2.CollectionSchema) -> list[DeclaredIndex] | None:
    """spec.indexes checked against the CRD's model and then against the schema with the Proxy's
    CreateIndex checks (Milvus' messages); None when the spec declares none. Raises SpecError
    (reason InvalidIndex)."""
    if spec.get("indexes") is None:
        return None
    checked = crd.validate(CollectionSpec, spec)
    if checked.model is None:
        raise SpecError("; ".join(checked.problems), reason="InvalidIndex")
    out, problems = [], []
    for ix in checked.model.indexes:
        flat: dict[str, object] = dict(ix.params or {})
        if ix.index_type:
            flat[index_params.INDEX_TYPE] = ix.index_type
        if ix.metric_type:
            flat[index_params.METRIC_TYPE] = ix.metric_type
        try:
            field, params = index_params.check_field_index(schema, ix.field_name, flat)
        except MilvusError as exc:
            problems.append(f"index {ix.index_name} on field {ix.field_name}: {exc.message}")
            continue
        out.append(DeclaredIndex(name=ix.index_name, field=field.name, params=params))
    if problems:
        raise SpecError("; ".join(problems), reason="InvalidIndex")
    return out


def to_schema(spec: dict, meta_name: str) -> schema_pb2.CollectionSchema:
    """The Milvus schema a spec asks for; raises SpecError with every problem found (spec.indexes
    aside: `declared_indexes` checks them against the schema)."""
    checked = _validated(spec, meta_name, indexes=False)
    if checked.model is None:
        raise SpecError("; ".join(checked.problems))
    model: CollectionSpec = checked.model
    schema = schema_pb2.CollectionSchema(
        name=model.name or default_name(meta_name), description=model.description or ""
    )
    for f in model.fields:
        _add_field(schema, f)
    schema.autoID = any(f.autoID for f in schema.fields if f.is_primary_key)
    try:  # RootCoord's own rules, with Milvus' wording
        schemautil.validate_schema(schema, max_dim=MAX_DIM, max_varchar=MAX_VARCHAR)
    except MilvusError as exc:
        raise SpecError(exc.message) from None
    return schema


def _add_field(schema: schema_pb2.CollectionSchema, f: FieldSpec) -> None:
    fs = schema.fields.add(
        name=f.name,
        data_type=DATA_TYPES[f.data_type],
        is_primary_key=bool(f.is_primary_key),
        autoID=bool(f.auto_id),
        is_partition_key=bool(f.is_partition_key),
        description=f.description or "",
        nullable=bool(f.nullable),
    )
    for key, value in (("dim", f.dim), ("max_length", f.max_length), ("max_capacity", f.max_capacity)):
        if value is not None:
            fs.type_params.add(key=key, value=str(value))
    if f.element_type is not None:
        fs.element_type = DATA_TYPES[f.element_type]
    if "default_value" in f.model_fields_set:
        setattr(fs.default_value, _DEFAULT_SLOTS[f.data_type], f.default_value)


def representable(schema: schema_pb2.CollectionSchema) -> schema_pb2.CollectionSchema:
    """The part of a stored schema a Collection spec can express (so SDK extras don't conflict)."""
    out = schema_pb2.CollectionSchema(name=schema.name, description=schema.description)
    for f in schema.fields:
        fs = out.fields.add(
            name=f.name,
            data_type=f.data_type,
            is_primary_key=f.is_primary_key,
            autoID=f.autoID,
            is_partition_key=f.is_partition_key,
            description=f.description,
            element_type=f.element_type,
            nullable=f.nullable,
        )
        if f.HasField("default_value"):
            fs.default_value.CopyFrom(f.default_value)
        for kv in f.type_params:
            if kv.key in SPEC_PARAMS:
                fs.type_params.add(key=kv.key, value=kv.value)
    return out


def same_schema(spec_schema: schema_pb2.CollectionSchema, stored: schema_pb2.CollectionSchema) -> bool:
    return schemautil.same_schema(representable(spec_schema), representable(stored))


def schema_diff(spec_schema: schema_pb2.CollectionSchema, stored: schema_pb2.CollectionSchema) -> str:
    """A short human description of how two schemas differ."""

    def fields(s):
        return {
            f.name: (
                TYPE_NAMES.get(f.data_type, DT.Name(f.data_type)),
                f.is_primary_key,
                f.autoID,
                {kv.key: kv.value for kv in f.type_params if kv.key in SPEC_PARAMS},
            )
            for f in s.fields
        }

    a, b = fields(spec_schema), fields(stored)
    parts = []
    added = [n for n in a if n not in b]
    removed = [n for n in b if n not in a]
    changed = [n for n in a if n in b and a[n] != b[n]]
    if added:
        parts.append("added " + ", ".join(added))
    if removed:
        parts.append("removed " + ", ".join(removed))
    for n in changed:
        parts.append(f"changed {n} {_desc(b[n])} -> {_desc(a[n])}")
    if not parts and [f.name for f in spec_schema.fields] != [f.name for f in stored.fields]:
        parts.append("reordered fields")
    return "; ".join(parts) or "no field differs"


def _desc(d) -> str:
    dtype, pk, auto, params = d
    extra = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    return f"({dtype}{',pk' if pk else ''}{',autoID' if auto else ''}{',' + extra if extra else ''})"


def spec_from_collection(desc) -> dict:
    """A Collection spec for an existing collection (a milvus DescribeCollectionResponse)."""
    fields = []
    for f in desc.schema.fields:
        if f.data_type not in TYPE_NAMES:
            raise SpecError(
                f"field {f.name}: data type {DT.Name(f.data_type)} has no Collection spec form",
                reason="Unrepresentable",
            )
        out: dict = {"name": f.name, "dataType": TYPE_NAMES[f.data_type]}
        if f.is_primary_key:
            out["isPrimaryKey"] = True
        if f.autoID:
            out["autoID"] = True
        if f.is_partition_key:
            out["isPartitionKey"] = True
        if f.description:
            out["description"] = f.description
        for kv in f.type_params:
            if kv.key in SPEC_PARAMS:
                out[SPEC_PARAMS[kv.key]] = int(kv.value)
        if f.data_type == DT.Array:
            out["elementType"] = TYPE_NAMES[f.element_type]
        if f.nullable:
            out["nullable"] = True
        if f.HasField("default_value") and (which := f.default_value.WhichOneof("data")):
            out["defaultValue"] = getattr(f.default_value, which)
        fields.append(out)
    spec = {
        "name": desc.collection_name,
        "database": desc.db_name or DEFAULT_DB,
        "shardsNum": desc.shards_num or 1,
        "consistencyLevel": CONSISTENCY_NAMES.get(desc.consistency_level, DEFAULT_CONSISTENCY),
        "fields": fields,
        "deletionPolicy": "Delete",
    }
    if desc.schema.description:
        spec["description"] = desc.schema.description
    if any(f.is_partition_key for f in desc.schema.fields):
        spec["numPartitions"] = desc.num_partitions
    return spec


def k8s_name(database: str, name: str, hashed: bool = False) -> str:
    """A DNS-1123 name for a mirrored collection; a short hash keeps lossy mappings distinct
    (and `hashed=True` forces it, when the plain name is taken)."""
    base = name.lower().replace("_", "-")
    if database != DEFAULT_DB:
        base = f"{database.lower().replace('_', '-')}.{base}"
    base = re.sub(r"[^a-z0-9.-]", "-", base).strip("-.") or "collection"
    exact = base.replace("-", "_") == name and database == DEFAULT_DB and DNS_LABEL_RE.match(base)
    if exact and len(base) <= 200 and not hashed:
        return base
    digest = hashlib.sha1(f"{database}/{name}".encode()).hexdigest()[:8]
    return f"{base[:190].strip('-.')}-{digest}"


def label_value(value: str) -> str:
    """A valid label value (<= 63 characters) for a name; long names get a hash suffix."""
    v = re.sub(r"[^A-Za-z0-9_.-]", "-", value).strip("-_.")
    if len(v) <= 63:
        return v
    return f"{v[:54].strip('-_.')}-{hashlib.sha1(value.encode()).hexdigest()[:8]}"
