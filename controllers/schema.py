"""Collection spec (the custom resource) <-> Milvus collection schema.

The CRD's openAPIV3Schema and CEL rules reject bad specs at the API server; `check_spec` repeats
every one of those rules (and RootCoord's own, through `kmilvus.rootcoord.schema.validate_schema`)
so a spec that got through anyway — no CEL support, an old CRD, a direct etcd write — is reported
in conditions before anything touches etcd.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.index import params as index_params
from kmilvus.rootcoord import schema as schemautil
from kmilvus.util.constants import DEFAULT_DB, MAX_DIM, MAX_VARCHAR_LENGTH
from kmilvus.util.merr import MilvusError

DT = schema_pb2.DataType
DATA_TYPES = {
    "Bool": DT.Bool,
    "Int8": DT.Int8,
    "Int16": DT.Int16,
    "Int32": DT.Int32,
    "Int64": DT.Int64,
    "Float": DT.Float,
    "Double": DT.Double,
    "VarChar": DT.VarChar,
    "JSON": DT.JSON,
    "Array": DT.Array,
    "FloatVector": DT.FloatVector,
    "BinaryVector": DT.BinaryVector,
    "Float16Vector": DT.Float16Vector,
    "BFloat16Vector": DT.BFloat16Vector,
    "SparseFloatVector": DT.SparseFloatVector,
}
TYPE_NAMES = {v: k for k, v in DATA_TYPES.items()}
VECTOR_TYPES = ("FloatVector", "BinaryVector", "Float16Vector", "BFloat16Vector", "SparseFloatVector")
DENSE_VECTOR_TYPES = VECTOR_TYPES[:-1]
ELEMENT_TYPES = ("Bool", "Int8", "Int16", "Int32", "Int64", "Float", "Double", "VarChar")
MAX_CAPACITY = 4096
# defaultValue (JSON in the spec) → the ValueField member and the JSON types it may be.
_DEFAULT_SLOTS = {
    "Bool": ("bool_data", (bool,)),
    "Int8": ("int_data", (int,)),
    "Int16": ("int_data", (int,)),
    "Int32": ("int_data", (int,)),
    "Int64": ("long_data", (int,)),
    "Float": ("float_data", (int, float)),
    "Double": ("double_data", (int, float)),
    "VarChar": ("string_data", (str,)),
}
CONSISTENCY = dict(common_pb2.ConsistencyLevel.items())
CONSISTENCY_NAMES = {v: k for k, v in CONSISTENCY.items()}
DEFAULT_CONSISTENCY = "Bounded"
MAX_VARCHAR = MAX_VARCHAR_LENGTH
MAX_FIELDS = 64
MAX_DESCRIPTION = 4096  # the CRD's maxLength of a collection's and a field's description
MAX_PARTITIONS = 1023  # the CRD's maxItems (Milvus' default rootCoord.maxPartitionNum is 1024, _default included)
MAX_INDEXES = 64
INDEX_TYPES = index_params.INDEX_TYPES  # FLAT, IVF_FLAT, IVF_SQ8, HNSW, AUTOINDEX
METRIC_TYPES = index_params.METRICS  # L2, IP, COSINE
SPEC_PARAMS = {"dim": "dim", "max_length": "maxLength", "max_capacity": "maxCapacity"}  # type param → spec key
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


def _partition_key_problems(spec: dict, fields: list) -> list[str]:
    """The CRD's partition key rules (RootCoord checks Milvus' own ones again on create)."""
    problems = []
    keys = [f for f in fields if isinstance(f, dict) and f.get("isPartitionKey")]
    if len(keys) > 1:
        problems.append("at most one field can be the partition key (isPartitionKey)")
    for f in keys:
        if f.get("dataType") not in ("Int64", "VarChar") or f.get("isPrimaryKey") or f.get("nullable"):
            problems.append(
                f"field {short(f.get('name'))}: a partition key must be a non-nullable Int64 or VarChar field "
                "other than the primary key"
            )
    n = spec.get("numPartitions")
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PARTITIONS + 1:
            problems.append(f"spec.numPartitions must be an integer in [1, {MAX_PARTITIONS + 1}], got {short(n)}")
        if not keys:
            problems.append("numPartitions only applies with a partition key field")
    if keys and spec.get("partitions"):
        problems.append(
            "a collection with a partition key declares no partitions (they are _default_0, _default_1, ...)"
        )
    return problems


def _partition_problems(parts) -> list[str]:
    if not isinstance(parts, list):
        return ["spec.partitions must be a list of partition names"]
    if len(parts) > MAX_PARTITIONS:
        return [f"spec.partitions lists {len(parts)} partitions; at most {MAX_PARTITIONS} are allowed"]
    bad = [p for p in parts if not isinstance(p, str) or not NAME_RE.match(p) or len(p) > schemautil.MAX_NAME_LENGTH]
    problems = [f"spec.partitions: {short(p)} is not a valid Milvus partition name" for p in bad]
    if len(set(map(str, parts))) != len(parts):
        problems.append("spec.partitions lists a partition twice")
    return problems


# The JSON type of every spec key (the CRD's openAPIV3Schema): checked first, so the rules below
# only ever see the types they expect (a list where a string belongs is a clear problem, not a
# TypeError in the controller). A null is a wrong type too (an API server would have pruned it).
_JSON_TYPES = {str: "a string", int: "an integer", bool: "a boolean", list: "a list", dict: "an object"}
SPEC_TYPES = {
    "name": str,
    "database": str,
    "description": str,
    "partitions": list,
    "shardsNum": int,
    "numPartitions": int,
    "consistencyLevel": str,
    "deletionPolicy": str,
    "load": bool,
    "fields": list,
}
FIELD_TYPES = {
    "name": str,
    "dataType": str,
    "description": str,
    "isPrimaryKey": bool,
    "autoID": bool,
    "isPartitionKey": bool,
    "elementType": str,
    "maxCapacity": int,
    "nullable": bool,
    "dim": int,
    "maxLength": int,
}
# defaultValue: the range its protobuf slot can hold.
_DEFAULT_RANGES = {
    "Int8": (-(2**7), 2**7 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "Float": (-3.4028234663852886e38, 3.4028234663852886e38),
    "Double": (-1.7976931348623157e308, 1.7976931348623157e308),
}


def is_type(value, typ: type) -> bool:
    """`value` is JSON of type `typ` (a bool is not an integer)."""
    return isinstance(value, typ) and (typ is bool or not isinstance(value, bool))


def type_problems(obj: dict, types: dict[str, type], where: str) -> list[str]:
    return [
        f"{where}.{key} must be {_JSON_TYPES[typ]}, got {short(obj[key])}"
        for key, typ in types.items()
        if key in obj and not is_type(obj[key], typ)
    ]


def short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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


def index_problems(spec: dict) -> list[str]:
    """What the CRD schema and its CEL rules catch in spec.indexes, in plain words."""
    indexes = spec.get("indexes")
    if indexes is None:
        return []
    if not isinstance(indexes, list):
        return ["spec.indexes must be a list of indexes"]
    problems: list[str] = []
    if len(indexes) > MAX_INDEXES:
        problems.append(f"spec.indexes has {len(indexes)} indexes; at most {MAX_INDEXES} are allowed")
    fields = {f.get("name") for f in spec.get("fields") or [] if isinstance(f, dict)}
    names: list[str] = []
    on: list[str] = []
    for i, ix in enumerate(indexes):
        where = f"spec.indexes[{i}]"
        if not isinstance(ix, dict):
            problems.append(f"{where} must be an object")
            continue
        for key in ("name", "fieldName"):
            v = ix.get(key)
            if (v is not None or key == "fieldName") and (
                not isinstance(v, str) or not NAME_RE.match(v) or len(v) > schemautil.MAX_NAME_LENGTH
            ):
                problems.append(f"{where}.{key} {v!r} is not a valid Milvus name")
        if ix.get("indexType", index_params.AUTOINDEX) not in INDEX_TYPES:
            problems.append(f"{where}.indexType must be one of {', '.join(INDEX_TYPES)}, got {ix.get('indexType')!r}")
        if ix.get("metricType", index_params.DEFAULT_METRIC) not in METRIC_TYPES:
            problems.append(
                f"{where}.metricType must be one of {', '.join(METRIC_TYPES)}, got {ix.get('metricType')!r}"
            )
        params = ix.get("params", {})
        if not isinstance(params, dict) or any(
            not isinstance(v, (int, str)) or isinstance(v, bool) for v in params.values()
        ):
            problems.append(f"{where}.params must map names to integers or strings")
        names.append(index_name(ix))
        on.append(str(ix.get("fieldName")))
        if isinstance(ix.get("fieldName"), str) and ix["fieldName"] not in fields:
            problems.append(f"{where}: an index's fieldName must name a field of spec.fields, got {ix['fieldName']!r}")
    if len(set(names)) != len(names):
        problems.append("spec.indexes: index names must be unique (name defaults to fieldName)")
    if len(set(on)) != len(on):
        problems.append("spec.indexes: one index per field (Milvus builds one index per vector field)")
    return problems


def declared_indexes(spec: dict, schema: schema_pb2.CollectionSchema) -> list[DeclaredIndex] | None:
    """spec.indexes checked against the schema with the Proxy's CreateIndex checks (Milvus'
    messages); None when the spec declares none. Raises SpecError (reason InvalidIndex)."""
    if spec.get("indexes") is None:
        return None
    problems = index_problems(spec)
    if problems:
        raise SpecError("; ".join(problems), reason="InvalidIndex")
    out = []
    for ix in spec["indexes"]:
        flat: dict[str, object] = dict(ix.get("params") or {})
        if ix.get("indexType"):
            flat[index_params.INDEX_TYPE] = ix["indexType"]
        if ix.get("metricType"):
            flat[index_params.METRIC_TYPE] = ix["metricType"]
        name = index_name(ix)
        try:
            field, checked = index_params.check_field_index(schema, ix["fieldName"], flat)
        except MilvusError as exc:
            problems.append(f"index {name} on field {ix['fieldName']}: {exc.message}")
            continue
        out.append(DeclaredIndex(name=name, field=field.name, params=checked))
    if problems:
        raise SpecError("; ".join(problems), reason="InvalidIndex")
    return out


def check_spec(spec: dict, meta_name: str, *, indexes: bool = True) -> list[str]:
    """Every problem the CRD schema (incl. its CEL rules) would have caught, in plain words
    (spec.indexes' too unless `indexes` is False)."""
    if not isinstance(spec, dict):
        return [f"spec must be an object, got {short(spec)}"]
    problems = type_problems(spec, SPEC_TYPES, "spec")
    for i, f in enumerate(spec.get("fields") if isinstance(spec.get("fields"), list) else []):
        if isinstance(f, dict):
            problems += type_problems(f, FIELD_TYPES, f"spec.fields[{i}]")
    if problems:
        return problems  # the rules below assume the right types
    if indexes:  # index_problems checks types itself (a bad index is InvalidIndex, not InvalidSpec)
        problems += index_problems(spec)
    for where, obj in [("spec", spec)] + [
        (f"spec.fields[{i}]", f) for i, f in enumerate(spec.get("fields") or []) if isinstance(f, dict)
    ]:
        if len(obj.get("description", "")) > MAX_DESCRIPTION:
            problems.append(f"{where}.description has {len(obj['description'])} characters; at most {MAX_DESCRIPTION}")
    t = target(spec, meta_name)
    named = (  # an empty name is not "unset" (the CRD's minLength is 1)
        ("spec.name", "" if spec.get("name") == "" else t.name),
        ("spec.database", "" if spec.get("database") == "" else t.database),
    )
    for what, value in named:
        if not NAME_RE.match(value) or len(value) > schemautil.MAX_NAME_LENGTH:
            problems.append(
                f"{what} {short(value)} is not a valid Milvus name: 1-255 characters, a letter or "
                "underscore first, then letters, digits and underscores"
            )
    shards = spec.get("shardsNum", 1)
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 16:
        problems.append(f"spec.shardsNum must be an integer in [1, 16], got {short(shards)}")
    level = spec.get("consistencyLevel", DEFAULT_CONSISTENCY)
    if level not in CONSISTENCY:
        problems.append(f"spec.consistencyLevel must be one of {', '.join(CONSISTENCY)}, got {short(level)}")
    policy = spec.get("deletionPolicy", "Delete")
    if policy not in ("Delete", "Retain"):
        problems.append(f"spec.deletionPolicy must be Delete or Retain, got {short(policy)}")
    problems += _partition_problems(spec.get("partitions", []))
    fields = spec.get("fields")
    if not isinstance(fields, list) or not fields:
        return [*problems, "spec.fields must list at least one field"]
    problems += _partition_key_problems(spec, fields)
    if len(fields) > MAX_FIELDS:
        problems.append(f"spec.fields has {len(fields)} fields; at most {MAX_FIELDS} are allowed")
    names: list[str] = []
    pks: list[str] = []
    vectors = 0
    for i, f in enumerate(fields):
        where = f"spec.fields[{i}]"
        if not isinstance(f, dict):
            problems.append(f"{where} must be an object")
            continue
        name = f.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > schemautil.MAX_NAME_LENGTH:
            problems.append(f"{where}.name {short(name)} is not a valid Milvus field name")
        else:
            where = f"field {short(name)}"
            names.append(name)
        dtype = f.get("dataType")
        if dtype not in DATA_TYPES:
            problems.append(f"{where}: dataType must be one of {', '.join(DATA_TYPES)}, got {short(dtype)}")
        if f.get("isPrimaryKey"):
            pks.append(str(name))
            if dtype not in ("Int64", "VarChar"):
                problems.append(f"{where}: a primary key must be Int64 or VarChar, got {dtype}")
        if f.get("autoID") and not f.get("isPrimaryKey"):
            problems.append(f"{where}: only the primary key can set autoID")
        dim = f.get("dim")
        vectors += dtype in VECTOR_TYPES
        if dtype in DENSE_VECTOR_TYPES:
            if dim is None:
                problems.append(f"{where}: a dense vector field needs dim")
            elif not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= MAX_DIM:
                problems.append(f"{where}: dim must be in [1, {MAX_DIM}], got {short(dim)}")
        elif dim is not None:
            problems.append(f"{where}: dim only applies to dense vector fields")
        element = f.get("elementType")
        stringy = dtype == "VarChar" or (dtype == "Array" and element == "VarChar")
        max_length = f.get("maxLength")
        if stringy:
            if max_length is None:
                problems.append(f"{where}: a VarChar field (or an Array of VarChar) needs maxLength")
            elif not isinstance(max_length, int) or isinstance(max_length, bool) or not 1 <= max_length <= MAX_VARCHAR:
                problems.append(f"{where}: maxLength must be in [1, {MAX_VARCHAR}], got {short(max_length)}")
        elif max_length is not None:
            problems.append(f"{where}: maxLength only applies to VarChar fields and Arrays of VarChar")
        problems += _array_and_null_problems(where, f, dtype)
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        problems.append(f"duplicated field name(s): {', '.join(dups)}")
    if len(pks) != 1:
        problems.append(
            f"exactly one field must be the primary key, found {len(pks)}" + (f" ({', '.join(pks)})" if pks else "")
        )
    if not vectors:
        problems.append("a collection needs a vector field")
    return problems


def _array_and_null_problems(where: str, f: dict, dtype: str) -> list[str]:
    problems = []
    element, capacity = f.get("elementType"), f.get("maxCapacity")
    if dtype == "Array":
        if element is None or capacity is None:
            problems.append(f"{where}: an Array field needs elementType and maxCapacity")
        if element is not None and element not in ELEMENT_TYPES:
            problems.append(f"{where}: elementType must be one of {', '.join(ELEMENT_TYPES)}, got {short(element)}")
        if capacity is not None and (
            not isinstance(capacity, int) or isinstance(capacity, bool) or not 1 <= capacity <= MAX_CAPACITY
        ):
            problems.append(f"{where}: maxCapacity must be in [1, {MAX_CAPACITY}], got {short(capacity)}")
    elif element is not None or capacity is not None:
        problems.append(f"{where}: elementType and maxCapacity only apply to Array fields")
    if f.get("nullable") and (dtype in VECTOR_TYPES or f.get("isPrimaryKey")):
        problems.append(f"{where}: a primary key or a vector field cannot be nullable")
    if "defaultValue" in f:
        slot = _DEFAULT_SLOTS.get(dtype)
        value = f["defaultValue"]
        if slot is None:
            problems.append(f"{where}: a {dtype} field cannot have a defaultValue")
        elif not isinstance(value, slot[1]) or (isinstance(value, bool) and bool not in slot[1]):
            problems.append(f"{where}: defaultValue {short(value)} is not a {dtype}")
        elif dtype in _DEFAULT_RANGES and not _DEFAULT_RANGES[dtype][0] <= value <= _DEFAULT_RANGES[dtype][1]:
            lo, hi = _DEFAULT_RANGES[dtype]
            problems.append(f"{where}: defaultValue {short(value)} is out of range for {dtype} [{lo:g}, {hi:g}]")
    return problems


def to_schema(spec: dict, meta_name: str) -> schema_pb2.CollectionSchema:
    """The Milvus schema a spec asks for; raises SpecError with every problem found (spec.indexes
    aside: `declared_indexes` checks them against the schema)."""
    problems = check_spec(spec, meta_name, indexes=False)
    if problems:
        raise SpecError("; ".join(problems))
    t = target(spec, meta_name)
    schema = schema_pb2.CollectionSchema(name=t.name, description=spec.get("description", ""))
    for f in spec["fields"]:
        fs = schema.fields.add(
            name=f["name"],
            data_type=DATA_TYPES[f["dataType"]],
            is_primary_key=bool(f.get("isPrimaryKey")),
            autoID=bool(f.get("autoID")),
            is_partition_key=bool(f.get("isPartitionKey")),
            description=f.get("description", ""),
        )
        if "dim" in f:
            fs.type_params.add(key="dim", value=str(f["dim"]))
        if "maxLength" in f:
            fs.type_params.add(key="max_length", value=str(f["maxLength"]))
        if "elementType" in f:
            fs.element_type = DATA_TYPES[f["elementType"]]
        if "maxCapacity" in f:
            fs.type_params.add(key="max_capacity", value=str(f["maxCapacity"]))
        fs.nullable = bool(f.get("nullable"))
        if "defaultValue" in f:
            slot, _ = _DEFAULT_SLOTS[f["dataType"]]
            setattr(fs.default_value, slot, f["defaultValue"])
    schema.autoID = any(f.autoID for f in schema.fields if f.is_primary_key)
    try:  # RootCoord's own rules, with Milvus' wording
        schemautil.validate_schema(schema, max_dim=MAX_DIM, max_varchar=MAX_VARCHAR)
    except MilvusError as exc:
        raise SpecError(exc.message) from None
    return schema


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
