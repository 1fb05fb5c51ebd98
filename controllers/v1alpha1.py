"""kmilvus.io/v1alpha1: the Collection, FlushRequest and Segment custom resources, as models.

These classes are the one definition of the API: tools/gen_crds.py writes the
CustomResourceDefinitions in crds/ (and their copies in charts/kmilvus/crds/ and
operator/crds.yaml) from them, and the controllers validate what they read with them
(`controllers.crd.validate`). A rule is added here, in CEL, once; tests/unit/test_crds.py fails when
the committed CRDs differ from what these models generate.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from controllers.crd import (
    NAME_PATTERN,
    AnyJSON,
    Column,
    IntOrString,
    Kind,
    Model,
    OpenObject,
    Rule,
    extensions,
    immutable,
    short,
)
from kmilvus.index import params as index_params
from kmilvus.util.constants import MAX_DIM, MAX_VARCHAR_LENGTH


def one_of(*values: str) -> Any:
    """A string that must be one of `values` (an enum in the CRD)."""

    def check(value: str) -> str:
        if value not in values:
            raise PydanticCustomError("enum", "must be one of {expected}", {"expected": ", ".join(values)})
        return value

    return Annotated[str, AfterValidator(check), Field(json_schema_extra={"enum": list(values)})]


DATA_TYPE_NAMES = (
    "Bool",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "Float",
    "Double",
    "VarChar",
    "JSON",
    "Array",
    "FloatVector",
    "BinaryVector",
    "Float16Vector",
    "BFloat16Vector",
    "SparseFloatVector",
)
VECTOR_TYPES = ("FloatVector", "BinaryVector", "Float16Vector", "BFloat16Vector", "SparseFloatVector")
DENSE_VECTOR_TYPES = VECTOR_TYPES[:-1]
ELEMENT_TYPES = ("Bool", "Int8", "Int16", "Int32", "Int64", "Float", "Double", "VarChar")
CONSISTENCY_LEVELS = ("Strong", "Session", "Bounded", "Eventually", "Customized")  # Milvus' ConsistencyLevel
MAX_NAME_LENGTH = 255
MAX_FIELDS = 64
MAX_DESCRIPTION = 4096
MAX_PARTITIONS = 1023  # Milvus' default rootCoord.maxPartitionNum is 1024, _default included
MAX_INDEXES = 64
MAX_CAPACITY = 4096
MAX_FLUSH_NAMES = 256

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=NAME_PATTERN)]
Description = Annotated[str, Field(max_length=MAX_DESCRIPTION)]
Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]
Message = Annotated[str, Field(max_length=4096)]


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


VECTORS, DENSE = _cel_list(VECTOR_TYPES), _cel_list(DENSE_VECTOR_TYPES)
IS_PK = "(has(self.isPrimaryKey) && self.isPrimaryKey)"
STRINGY = (
    "self.dataType == 'VarChar' || (self.dataType == 'Array' && has(self.elementType) && self.elementType == 'VarChar')"
)
PK_COUNT = "self.fields.filter(f, has(f.isPrimaryKey) && f.isPrimaryKey).size()"
HAS_PARTITION_KEY = "self.fields.exists(f, has(f.isPartitionKey) && f.isPartitionKey)"
SAME_DATABASE = (
    "(has(self.database) ? self.database : 'default') == (has(oldSelf.database) ? oldSelf.database : 'default')"
)

# defaultValue (any JSON in the spec) → the JSON types it may be, and the range its protobuf slot holds.
DEFAULT_VALUE_TYPES: dict[str, tuple[type, ...]] = {
    "Bool": (bool,),
    "Int8": (int,),
    "Int16": (int,),
    "Int32": (int,),
    "Int64": (int,),
    "Float": (int, float),
    "Double": (int, float),
    "VarChar": (str,),
}
DEFAULT_VALUE_RANGES: dict[str, tuple[float, float]] = {
    "Int8": (-(2**7), 2**7 - 1),
    "Int16": (-(2**15), 2**15 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
    "Float": (-3.4028234663852886e38, 3.4028234663852886e38),
    "Double": (-1.7976931348623157e308, 1.7976931348623157e308),
}


# ------------------------------------------------------------------------------ Collection
class FieldSpec(Model):
    """A field of the collection's schema."""

    __rules__ = (
        Rule(f"!(self.dataType in {DENSE}) || has(self.dim)", "a dense vector field needs dim"),
        Rule(f"self.dataType in {DENSE} || !has(self.dim)", "dim only applies to dense vector fields"),
        Rule(f"!({STRINGY}) || has(self.maxLength)", "a VarChar field (or an Array of VarChar) needs maxLength"),
        Rule(f"{STRINGY} || !has(self.maxLength)", "maxLength only applies to VarChar fields and Arrays of VarChar"),
        Rule(
            "self.dataType != 'Array' || (has(self.elementType) && has(self.maxCapacity))",
            "an Array field needs elementType and maxCapacity",
        ),
        Rule(
            "self.dataType == 'Array' || (!has(self.elementType) && !has(self.maxCapacity))",
            "elementType and maxCapacity only apply to Array fields",
        ),
        Rule(
            f"!(has(self.nullable) && self.nullable) || (!(self.dataType in {VECTORS}) && !{IS_PK})",
            "a primary key or a vector field cannot be nullable",
        ),
        Rule(
            f"!{IS_PK} || self.dataType == 'Int64' || self.dataType == 'VarChar'",
            "a primary key must be Int64 or VarChar",
        ),
        Rule(f"!(has(self.autoID) && self.autoID) || {IS_PK}", "only the primary key can set autoID"),
        Rule(
            "!(has(self.isPartitionKey) && self.isPartitionKey) || ((self.dataType == 'Int64' || "
            f"self.dataType == 'VarChar') && !{IS_PK} && !(has(self.nullable) && self.nullable))",
            "a partition key must be a non-nullable Int64 or VarChar field other than the primary key",
        ),
    )

    name: Name
    data_type: one_of(*DATA_TYPE_NAMES) = Field(alias="dataType")  # type: ignore[valid-type]
    description: Description | None = None
    is_primary_key: bool | None = Field(None, alias="isPrimaryKey")
    auto_id: bool | None = Field(None, alias="autoID")
    is_partition_key: bool | None = Field(
        None,
        alias="isPartitionKey",
        description="Rows go to the partition their value hashes to, and a filter on it reads only those "
        "partitions (Milvus' partition key). A non-nullable Int64 or VarChar field.",
    )
    element_type: one_of(*ELEMENT_TYPES) | None = Field(  # type: ignore[valid-type]
        None, alias="elementType", description="The element type of an Array field."
    )
    max_capacity: Annotated[int, Field(ge=1, le=MAX_CAPACITY)] | None = Field(
        None, alias="maxCapacity", description="Maximum number of elements of an Array field."
    )
    nullable: bool | None = Field(
        None, description="Rows may leave the field out (null). Not for primary keys and vectors."
    )
    default_value: AnyJSON = Field(
        None,
        alias="defaultValue",
        description="The value of rows that leave the field out (scalar fields but JSON): a boolean, number "
        "or string of the field's type.",
    )
    dim: Annotated[int, Field(ge=1, le=MAX_DIM)] | None = Field(
        None, description="Vector dimension (dense vectors; a multiple of 8 for BinaryVector)."
    )
    max_length: Annotated[int, Field(ge=1, le=MAX_VARCHAR_LENGTH)] | None = Field(
        None,
        alias="maxLength",
        description="Maximum length in bytes (VarChar, or the elements of an Array of VarChar).",
    )

    @model_validator(mode="after")
    def _default_value_fits(self) -> FieldSpec:
        """defaultValue is checked by the operator only (RootCoord stores it in a typed slot)."""
        if "default_value" not in self.model_fields_set:
            return self
        value, kinds = self.default_value, DEFAULT_VALUE_TYPES.get(self.data_type)
        if kinds is None:
            raise ValueError(f"a {self.data_type} field cannot have a defaultValue")
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(f"defaultValue {short(value)} is not a {self.data_type}")
        bounds, number = DEFAULT_VALUE_RANGES.get(self.data_type), self.default_value  # a number if bounded
        if bounds is not None and not bounds[0] <= number <= bounds[1]:
            lo, hi = bounds
            raise ValueError(f"defaultValue {short(value)} is out of range for {self.data_type} [{lo:g}, {hi:g}]")
        return self


class IndexSpec(Model):
    """An index of the collection (created through DataCoord, as Milvus' CreateIndex)."""

    name: Name | None = Field(None, description="The index name in Milvus; defaults to fieldName.")
    field_name: Name = Field(alias="fieldName", description="The (FloatVector) field to index.")
    index_type: one_of(*index_params.INDEX_TYPES) | None = Field(  # type: ignore[valid-type]
        None,
        alias="indexType",
        description="Milvus' index type; AUTOINDEX (HNSW M=18, efConstruction=240) when left out.",
    )
    metric_type: one_of(*index_params.METRICS) | None = Field(  # type: ignore[valid-type]
        None, alias="metricType", description="The distance; COSINE when left out (Milvus' default)."
    )
    params: Annotated[dict[str, IntOrString], Field(max_length=16)] | None = Field(
        None,
        description="Build parameters, checked as Milvus checks them: nlist (IVF_FLAT, IVF_SQ8, 1..65536), "
        "M (HNSW, 4..64), efConstruction (HNSW, 8..512).",
    )

    @property
    def index_name(self) -> str:
        """name, else its field's name (as Milvus names it)."""
        return self.name or self.field_name


INDEX_NAME = "(has({0}.name) ? {0}.name : {0}.fieldName)"


class CollectionSpec(Model):
    """The collection: its Milvus name and database, schema, partitions, indexes and load state."""

    __rules__ = (
        Rule(
            f"self.fields.exists(f, {IS_PK.replace('self.', 'f.')})",
            "exactly one field must be the primary key (isPrimaryKey), found none",
            field_path=".fields",
        ),
        Rule(
            f"{PK_COUNT} <= 1",
            "exactly one field must be the primary key (isPrimaryKey), found several",
            field_path=".fields",
        ),
        Rule(
            f"self.fields.exists(f, f.dataType in {VECTORS})", "a collection needs a vector field", field_path=".fields"
        ),
        Rule(
            "has(self.name) == has(oldSelf.name) && (!has(self.name) || self.name == oldSelf.name)",
            "spec.name is immutable",
        ),
        Rule(
            SAME_DATABASE,
            "spec.database is immutable",
        ),
        Rule(
            "!has(self.indexes) || self.indexes.all(i, self.fields.exists(f, f.name == i.fieldName))",
            "an index's fieldName must name a field of spec.fields",
            field_path=".indexes",
        ),
        Rule(
            "self.fields.filter(f, has(f.isPartitionKey) && f.isPartitionKey).size() <= 1",
            "at most one field can be the partition key (isPartitionKey)",
            field_path=".fields",
        ),
        Rule(
            f"!has(self.numPartitions) || {HAS_PARTITION_KEY}",
            "numPartitions only applies with a partition key field",
            field_path=".numPartitions",
        ),
        Rule(
            f"!has(self.partitions) || !{HAS_PARTITION_KEY}",
            "a collection with a partition key declares no partitions (they are _default_0, _default_1, ...)",
            field_path=".partitions",
        ),
    )

    name: Name | None = Field(
        None,
        description="The Milvus collection name. Defaults to metadata.name with '-' and '.' replaced by '_'. "
        "Immutable.",
    )
    database: Name = Field("default", description="The Milvus database. Immutable.")
    description: Description | None = None
    partitions: Annotated[list[Name], Field(max_length=MAX_PARTITIONS)] | None = Field(
        None,
        description="The collection's partitions besides _default (declarative: a missing one is created; with "
        "deletionPolicy Delete, one removed from the list is dropped with its data). Leave it out to manage "
        "partitions through the Milvus API instead.",
        json_schema_extra=extensions(list_type="set"),
    )
    shards_num: Annotated[int, Field(ge=1, le=16)] = Field(
        1,
        alias="shardsNum",
        description="Number of shards (virtual channels). Immutable.",
        json_schema_extra=extensions(immutable("spec.shardsNum is immutable")),
    )
    num_partitions: Annotated[int, Field(ge=1, le=MAX_PARTITIONS + 1)] | None = Field(
        None,
        alias="numPartitions",
        description="With a partition key field: how many partitions its rows hash to (Milvus' num_partitions, "
        "default 16). Immutable.",
        json_schema_extra=extensions(immutable("spec.numPartitions is immutable")),
    )
    consistency_level: one_of(*CONSISTENCY_LEVELS) = Field("Bounded", alias="consistencyLevel")  # type: ignore[valid-type]
    deletion_policy: one_of("Delete", "Retain") = Field(  # type: ignore[valid-type]
        "Delete",
        alias="deletionPolicy",
        description="Delete drops the collection and its data with the resource; Retain keeps them.",
    )
    load: bool | None = Field(
        None,
        description="true loads the collection for search and query (QueryCoord; every vector field needs an "
        "index), false releases it. Absent, the load state is left as it is.",
    )
    indexes: Annotated[list[IndexSpec], Field(max_length=MAX_INDEXES)] | None = Field(
        None,
        description="The collection's indexes (declarative: a missing one is built through DataCoord, before "
        "the collection is loaded; one no longer listed is dropped, which Milvus allows only while the "
        "collection is released). This list is then the whole truth, indexes created through the Milvus API "
        "included; leave it out to manage indexes through the Milvus API instead. An index cannot change in "
        "place: the IndexesSynced condition says so until it is dropped and declared again.",
        json_schema_extra=extensions(
            Rule(
                f"self.all(i, self.exists_one(j, {INDEX_NAME.format('j')} == {INDEX_NAME.format('i')}))",
                "index names must be unique (name defaults to fieldName)",
            ),
            Rule(
                "self.all(i, self.exists_one(j, j.fieldName == i.fieldName))",
                "one index per field (Milvus builds one index per vector field)",
            ),
        ),
    )
    fields: Annotated[list[FieldSpec], Field(min_length=1, max_length=MAX_FIELDS)] = Field(
        description="The schema, in order. Immutable (Milvus cannot alter a collection schema).",
        json_schema_extra=extensions(
            immutable(
                "the schema (spec.fields) is immutable: Milvus does not support altering a collection schema; "
                "create a new Collection instead"
            ),
            list_type="map",
            list_map_keys=["name"],
        ),
    )


class Condition(Model):
    """A status condition (metav1.Condition)."""

    type: Annotated[str, Field(max_length=316)]
    status: one_of("True", "False", "Unknown")  # type: ignore[valid-type]
    reason: Annotated[str, Field(max_length=1024)]
    message: Annotated[str, Field(max_length=32768)] | None = None
    last_transition_time: str = Field(alias="lastTransitionTime", json_schema_extra={"format": "date-time"})
    observed_generation: Annotated[int, Field(ge=0, json_schema_extra={"format": "int64"})] | None = Field(
        None, alias="observedGeneration"
    )


Conditions = Annotated[list[Condition], Field(json_schema_extra=extensions(list_type="map", list_map_keys=["type"]))]
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class IndexStatus(Model):
    name: str | None = None
    field_name: str | None = Field(None, alias="fieldName")
    index_type: str | None = Field(None, alias="indexType")
    metric_type: str | None = Field(None, alias="metricType")
    state: str | None = Field(None, description="Milvus' IndexState: Unissued, InProgress, Finished, Failed.")
    indexed_rows: Int64 | None = Field(None, alias="indexedRows")
    total_rows: Int64 | None = Field(None, alias="totalRows", description="Rows of Flushed segments.")
    pending_rows: Int64 | None = Field(None, alias="pendingRows")
    message: Message | None = Field(None, description="Why a build failed.")


class LoadStatus(Model):
    """The load state (spec.load), as GetLoadState and GetLoadingProgress report it."""

    state: one_of("NotLoad", "Loading", "Loaded") | None = None  # type: ignore[valid-type]
    progress: int | None = Field(None, description="Percent of the collection's channels served.")
    replicas: int | None = None
    message: str | None = Field(None, description="Why a requested load did not happen.")


class SegmentCounts(Model):
    """Segment counts by state."""

    growing: int | None = None
    sealed: int | None = None
    flushing: int | None = None
    flushed: int | None = None
    total: int | None = None


class LastImport(Model):
    """The latest import."""

    job_id: Int64 | None = Field(None, alias="jobID")
    state: str | None = Field(
        None, description="Milvus' ImportState (ImportPending ... ImportCompleted, ImportFailed)."
    )
    rows: Int64 | None = None
    spark_application: str | None = Field(None, alias="sparkApplication")
    reason: Message | None = None


class ImportsStatus(Model):
    """Bulk imports of the collection (DataCoord's ListImportJobs)."""

    running: int | None = Field(None, description="Imports not finished yet.")
    total: int | None = None
    rows_imported: Int64 | None = Field(None, alias="rowsImported", description="Rows registered by completed imports.")
    last: LastImport | None = None


class LastCompaction(Model):
    """The latest compaction."""

    compaction_id: Int64 | None = Field(None, alias="compactionID")
    state: str | None = Field(None, description="Milvus' CompactionState (Executing, Completed).")
    plans: int | None = None
    spark_application: str | None = Field(None, alias="sparkApplication")
    reason: Message | None = None


class CompactionsStatus(Model):
    """Compactions of the collection (DataCoord's GetCompactionJobs)."""

    running: int | None = Field(None, description="Compactions executing.")
    total: int | None = None
    last: LastCompaction | None = None


class CollectionStatus(Model):
    """What the operator observed (the status subresource)."""

    phase: one_of("Pending", "Ready", "Failed", "Deleting") | None = None  # type: ignore[valid-type]
    collection_id: Int64 | None = Field(None, alias="collectionID")
    database: str | None = None
    partitions: list[str] | None = Field(None, description="The collection's partitions, _default first.")
    name: str | None = Field(None, description="The Milvus collection name in use.")
    vchannels: list[str] | None = None
    rows: Int64 | None = Field(None, description="Rows in Flushed segments (num_entities).")
    indexes: list[IndexStatus] | None = Field(
        None, description="The collection's indexes and their build progress (DataCoord's DescribeIndex)."
    )
    load: LoadStatus | None = None
    segments: SegmentCounts | None = None
    imports: ImportsStatus | None = None
    compactions: CompactionsStatus | None = None
    created_by: one_of("operator", "sdk") | None = Field(None, alias="createdBy")  # type: ignore[valid-type]
    observed_generation: Int64 | None = Field(None, alias="observedGeneration")
    conditions: Conditions | None = None
    kopf: OpenObject | None = None


# ------------------------------------------------------------------------------ FlushRequest
class FlushRequestSpec(Model):
    """Which collections to flush."""

    __rules__ = (
        Rule(
            SAME_DATABASE,
            "spec.database is immutable",
        ),
    )

    database: Name = "default"
    collection_names: Annotated[list[Name], Field(min_length=1, max_length=MAX_FLUSH_NAMES)] = Field(
        alias="collectionNames",
        description="Milvus collection names to flush. Immutable.",
        json_schema_extra=extensions(
            immutable("spec.collectionNames is immutable; create a new FlushRequest"), list_type="set"
        ),
    )
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] | None = Field(
        None,
        alias="ttlSecondsAfterFinished",
        description="Delete the FlushRequest this many seconds after it completed or failed.",
    )


class FlushedCollection(Model):
    name: str | None = None
    collection_id: Int64 | None = Field(None, alias="collectionID")
    flush_ts: Int64 | None = Field(None, alias="flushTs")
    sealed_segments: list[Int64] | None = Field(None, alias="sealedSegments")
    flushed: int | None = None
    total: int | None = None
    done: bool | None = None


class FlushRequestStatus(Model):
    """The flush's progress (the status subresource)."""

    phase: one_of("Pending", "Flushing", "Completed", "Failed") | None = None  # type: ignore[valid-type]
    flush_ts: Int64 | None = Field(
        None, alias="flushTs", description="The latest flush timestamp (hybrid TSO) of the collections flushed."
    )
    flushed: int | None = Field(None, description="Sealed segments flushed (or gone) so far.")
    total: int | None = Field(None, description="Segments sealed by this flush.")
    collections: list[FlushedCollection] | None = Field(
        None, description="Per collection, the segments this flush sealed and how far they are."
    )
    start_time: Timestamp | None = Field(None, alias="startTime")
    completion_time: Timestamp | None = Field(None, alias="completionTime")
    observed_generation: Int64 | None = Field(None, alias="observedGeneration")
    conditions: Conditions | None = None
    kopf: OpenObject | None = None


# ------------------------------------------------------------------------------ Segment
class Position(Model):
    channel: str | None = None
    seq: Int64 | None = None
    timestamp: Int64 | None = None


class SegmentSpec(Model):
    """The segment's identity."""

    __rules__ = (immutable("a Segment's identity is immutable"),)

    segment_id: Annotated[int, Field(ge=0, json_schema_extra={"format": "int64"})] = Field(alias="segmentID")
    collection: Annotated[str, Field(max_length=MAX_NAME_LENGTH)] | None = Field(
        None, description="The Milvus collection name."
    )
    collection_id: Annotated[int, Field(ge=0, json_schema_extra={"format": "int64"})] = Field(alias="collectionID")
    partition_id: Annotated[int, Field(ge=0, json_schema_extra={"format": "int64"})] | None = Field(
        None, alias="partitionID"
    )
    partition: Annotated[str, Field(max_length=MAX_NAME_LENGTH)] | None = Field(
        None, description="The Milvus partition name."
    )
    channel: str = Field(description="The virtual channel (insert channel) the segment belongs to.")


class SegmentStatus(Model):
    """What DataCoord reports of the segment."""

    state: one_of("Growing", "Sealed", "Flushing", "Flushed", "Dropped", "Importing") | None = None  # type: ignore[valid-type]
    rows: Int64 | None = Field(None, description="Rows persisted in binlogs.")
    assigned_rows: Int64 | None = Field(
        None, alias="assignedRows", description="Rows handed out as quota (Growing segments)."
    )
    binlogs: int | None = Field(None, description="Insert binlog files.")
    binlog_size: Int64 | None = Field(None, alias="binlogSize")
    start_position: Position | None = Field(
        None,
        alias="startPosition",
        description="Where the segment's data starts in the message stream (channel, JetStream sequence, hybrid "
        "timestamp).",
    )
    dml_position: Position | None = Field(
        None, alias="dmlPosition", description="The end of the data persisted so far."
    )
    last_update_time: Timestamp | None = Field(None, alias="lastUpdateTime")


# ------------------------------------------------------------------------------ the kinds
COLLECTION = Kind(
    kind="Collection",
    plural="collections",
    short_names=("mcol", "mcols"),
    spec=CollectionSpec,
    status=CollectionStatus,
    description="A Milvus collection. The operator creates it through RootCoord (or adopts an existing one with "
    "the same name and schema), mirrors its segments as Segment resources, and drops it when the resource is "
    "deleted (deletionPolicy Delete).",
    comment="A Milvus collection declared as a Kubernetes resource (docs/user-guide/kubernetes.md).\n"
    "The schema (fields, name, database, shardsNum) is immutable, as in Milvus.",
    columns=(
        Column("Milvus-Name", "string", ".status.name"),
        Column("ID", "integer", ".status.collectionID"),
        Column("Phase", "string", ".status.phase"),
        Column("Rows", "integer", ".status.rows"),
        Column("Segments", "integer", ".status.segments.total"),
        Column("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
        Column("Load", "string", ".status.load.state"),
        Column("Load-Progress", "integer", ".status.load.progress", priority=1),
        Column("Replicas", "integer", ".status.load.replicas", priority=1),
        Column("Created-By", "string", ".status.createdBy", priority=1),
        Column("Shards", "integer", ".spec.shardsNum", priority=1),
        Column("Age", "date", ".metadata.creationTimestamp"),
    ),
)
FLUSHREQUEST = Kind(
    kind="FlushRequest",
    plural="flushrequests",
    short_names=("mflush",),
    spec=FlushRequestSpec,
    status=FlushRequestStatus,
    description="A manual flush: DataCoord seals every Growing segment of each collection and the request "
    "completes when all of them are Flushed and every channel checkpoint has passed the flush timestamp.",
    comment="A Flush (docs/architecture/flush.md) as a resource: seal every Growing segment of the named\n"
    "collections and follow them until they are Flushed (GetFlushState).",
    columns=(
        Column("Collections", "string", ".spec.collectionNames"),
        Column("Phase", "string", ".status.phase"),
        Column("Flushed", "integer", ".status.flushed"),
        Column("Total", "integer", ".status.total"),
        Column("Flush-TS", "integer", ".status.flushTs", priority=1),
        Column("Completed", "date", ".status.completionTime"),
        Column("Age", "date", ".metadata.creationTimestamp"),
    ),
)
SEGMENT = Kind(
    kind="Segment",
    plural="segments",
    short_names=("mseg",),
    spec=SegmentSpec,
    status=SegmentStatus,
    description="A segment of a collection as DataCoord reports it (read-only; written by the operator).",
    comment="Read-only mirrors of DataCoord's segments, written by the operator and owned by their\n"
    "Collection (ownerReferences; label kmilvus.io/collection). Users only read them.\n"
    "spec is the segment's identity; the observed state lives in the status subresource (the\n"
    "operator creates the object, then writes /status).",
    columns=(
        Column("Collection", "string", ".spec.collection"),
        Column("Partition", "string", ".spec.partition"),
        Column("State", "string", ".status.state"),
        Column("Rows", "integer", ".status.rows"),
        Column("Channel", "string", ".spec.channel"),
        Column("Binlogs", "integer", ".status.binlogs", priority=1),
        Column("Age", "date", ".metadata.creationTimestamp"),
    ),
)
KINDS = (COLLECTION, FLUSHREQUEST, SEGMENT)
