"""Configuration: one typed, validated object, built from defaults, then KMILVUS_* environment
variables, then command-line flags. Names follow Milvus' milvus.yaml where one exists.

`Config` is made of sections (`Etcd`, `Nats`, `Storage`, `Spark`, `Security`, ...), one class each
with its own docstring and ranges; `Config` inherits them all, so a setting keeps its one flat
name — `cfg.spark_image`, `KMILVUS_SPARK_IMAGE`, `Config(spark_image=...)` — whatever section it
is in. Every value is validated where it is set (environment, flags, `Config(...)`, assignment):
`KMILVUS_AUTH=ture` is an error, not false; a port is in [0, 65535]. Passwords are `SecretStr`:
`repr`, logs and the docs print `**********` (`.get_secret_value()` reads one).

The configuration page of the docs (docs/operations/configuration.md) is generated from these
classes: a section's docstring is its title and introduction, a field's docstring its meaning.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationError,
)

from kmilvus import __version__
from kmilvus.util.constants import MAX_DIM, MAX_VARCHAR_LENGTH

ENV_PREFIX = "KMILVUS_"


def _comma_list(value: Any) -> Any:
    """A list from the environment is comma-separated: `a:2379, b:2379` → ["a:2379", "b:2379"]."""
    if isinstance(value, str):
        return [s.strip() for s in value.split(",") if s.strip()]
    return value


CommaList = Annotated[list[str], BeforeValidator(_comma_list)]
Port = Annotated[int, Field(ge=0, le=65535)]
Proportion = Annotated[float, Field(gt=0, le=1)]


class ConfigError(ValueError):
    """A setting that is not valid: names the variable (or field) and what is wrong with it,
    never a secret's value."""


class Section(BaseModel):
    """A group of settings. Fields are validated on construction and on assignment; an unknown
    name is an error (a typo never silently does nothing)."""

    model_config = ConfigDict(
        validate_assignment=True,
        extra="forbid",
        use_attribute_docstrings=True,
        hide_input_in_errors=True,
    )


class Cluster(Section):
    """Cluster

    What every process of one kmilvus shares, and how its components find each other."""

    cluster: str = "kmilvus"
    """etcd key prefix, stream name and channel prefix (distinct per kmilvus sharing etcd or NATS)."""
    internal_host: str = "127.0.0.1"
    """Internal gRPC services bind here (port 0 = any free port; sessions publish the address)."""
    session_ttl: PositiveInt = 10
    """Seconds; a dead component's lease expires after this."""
    metrics_port: Port = 0
    """Prometheus metrics port (0 = no metrics endpoint)."""
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    """The process' event loop: uvloop (libuv; about 16 % more searches per second from 8 clients
    on 2 cores) or Python's own asyncio loop."""


class Etcd(Section):
    """etcd

    Where the metadata lives, and kmilvus' own connection to it (Milvus' etcd.*; PEM paths)."""

    etcd_endpoints: CommaList = Field(default_factory=lambda: ["127.0.0.1:2379"])
    """etcd client endpoints, HOST:PORT."""
    etcd_user: str = ""
    """etcd authentication."""
    etcd_password: SecretStr = SecretStr("")
    """etcd_user's password."""
    etcd_tls_cert: str = ""
    """Client certificate (etcd --client-cert-auth)."""
    etcd_tls_key: str = ""
    """Private key of etcd_tls_cert."""
    etcd_tls_ca: str = ""
    """Set to talk TLS to etcd."""
    etcd_max_txn_ops: PositiveInt = 128
    """etcd's --max-txn-ops: a job's commit must fit."""


class Nats(Section):
    """NATS

    The message stream (NATS JetStream), and kmilvus' own connection to it (PEM paths)."""

    nats_url: str = "nats://127.0.0.1:4222"
    """NATS server with JetStream."""
    nats_user: str = ""
    """NATS user / password authentication."""
    nats_password: SecretStr = SecretStr("")
    """nats_user's password."""
    nats_tls_cert: str = ""
    """Client certificate."""
    nats_tls_key: str = ""
    """Private key of nats_tls_cert."""
    nats_tls_ca: str = ""
    """Set to talk TLS to NATS."""
    max_message_bytes: PositiveInt = 4 * 1024 * 1024
    """Split insert payloads below NATS max_payload."""
    stream_retention_seconds: NonNegativeFloat = 60.0
    """A pchannel's messages stay this long after every vchannel's checkpoint passed them (Milvus
    keeps messages by retention): a QueryNode reading that far behind the DataNodes, or starting to
    read that long after it listed a channel's logs, still reads every message. Past it, it is told
    (StreamGapError) and reloads the channel from storage."""
    embedded_nats_memory_mb: PositiveInt = 512
    """`kmilvus standalone`'s own nats-server: its soft memory limit (GOMEMLIMIT). Under a bulk
    insert JetStream's block caches hold hundreds of MB for seconds; below that live data the Go
    collector runs without pause and slows inserts, above it the peak memory grows for little gain
    (the measurements behind 512: docs/benchmarks/index.md)."""


class Storage(Section):
    """Storage

    The object storage of binlogs, indexes and import files."""

    storage_uri: str = "file:///var/lib/kmilvus/storage"
    """file:///PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R."""


class Proxy(Section):
    """Proxy

    The Milvus API (gRPC)."""

    proxy_host: str = "127.0.0.1"
    """Address the Milvus API listens on."""
    proxy_port: Port = 19530
    """The Milvus API's port."""
    max_insert_bytes: PositiveInt = 64 * 1024 * 1024
    """Milvus' proxy.maxInsertSize... checked per request."""
    max_pending_insert_mb: PositiveInt = 256
    """Inserts queued or running in one Proxy; past it: rate limit."""


class Http(Section):
    """RESTful API

    Milvus' RESTful API v2 (proxy.http.*)."""

    http_port: Annotated[int, Field(ge=-1, le=65535)] = 19531
    """The RESTful API v2 on its own port beside the gRPC one: one shared listener would relay every
    gRPC byte through Python (docs/user-guide/rest.md). 0 = a free port, -1 = off."""
    http_request_timeout: PositiveFloat = 30.0
    """Seconds (Milvus' http.requestTimeoutMs); Request-Timeout overrides."""
    http_accept_type_allow_int64: bool = True
    """Milvus' http.acceptTypeAllowInt64: int64 as JSON numbers."""


class RootCoord(Section):
    """RootCoord

    Collections, databases and their limits (Milvus' rootCoord.*)."""

    dml_channel_num: PositiveInt = 16
    """Physical channels."""
    default_shards_num: PositiveInt = 1
    """Shards of a collection created without shards_num."""
    max_dim: PositiveInt = MAX_DIM
    """Largest vector dim a schema may declare."""
    max_varchar_length: PositiveInt = MAX_VARCHAR_LENGTH
    """Largest VarChar max_length a schema may declare."""
    max_database_num: PositiveInt = 64
    """Milvus' rootCoord.maxDatabaseNum (`default` included)."""
    max_partition_num: PositiveInt = 1024
    """Milvus' rootCoord.maxPartitionNum per collection."""


class TimeTick(Section):
    """Time ticks

    How often channels are ticked (the DataNodes' and QueryNodes' clocks)."""

    time_tick_interval: PositiveFloat = 0.1
    """Seconds; Milvus' proxy.timeTickInterval is 200 ms."""
    time_tick_idle_interval: NonNegativeFloat = 10.0
    """A vchannel nothing was published on for a second is ticked only this often (reads and
    flushes that wait for its tick ask for one); 0: every vchannel at every tick."""
    vchannel_idle_tick_interval: NonNegativeFloat = 60.0
    """A DataNode or QueryNode hands a pchannel's tick to a vchannel with no message of its own for a
    second only this often (its checkpoint then moves on; the DataNode reports it): each such tick
    costs a flowgraph report, so with many idle collections a short interval is a steady load. A
    flush or a read that waits on a vchannel names it in the tick it asks for, and gets it at once;
    0: every tick to every vchannel."""


class DataCoord(Section):
    """DataCoord

    Segments, seal policies, garbage collection (Milvus' dataCoord.*)."""

    segment_max_size_mb: PositiveInt = 512
    """A segment's size target (Milvus' dataCoord.segment.maxSize)."""
    segment_seal_proportion: Proportion = 0.23
    """Milvus' dataCoord.segment.sealProportion (0.23 in 2.3.5): a growing segment is sealed (then
    flushed and indexed) at this share of segment_max_size_mb; compaction merges them later."""
    segment_max_idle_time: PositiveFloat = 600.0
    """Seal a Growing segment with no insert for this long."""
    segment_max_lifetime: PositiveFloat = 86400.0
    """Seconds before a Growing segment is sealed even if busy."""
    flush_state_wait: NonNegativeFloat = 0.45
    """GetFlushState waits up to this long for `true`."""
    gc_interval: PositiveFloat = 60.0
    """Seconds between garbage-collection passes."""
    gc_tolerance: NonNegativeFloat = 600.0
    """An unreferenced binlog is deleted after this long."""


class DataNode(Section):
    """DataNode

    Buffering inserts into binlogs."""

    insert_buffer_size_mb: PositiveInt = 64
    """Write binlogs of the largest segment past this."""


class IndexNode(Section):
    """IndexNode

    Building segment indexes (Milvus' indexNode.*)."""

    index_build_slots: PositiveInt = 1
    """Builds an IndexNode runs at once; the rest wait in its queue. faiss uses every core within
    one build, so more only helps on a node with idle cores (Milvus' indexNode.scheduler.buildParallel)."""


class Compaction(Section):
    """Compaction

    Merge small flushed segments (policy: enough small ones in a partition/channel)."""

    auto_compaction: bool = True
    """Run the compaction policy (manual compaction works either way)."""
    compaction_check_interval: PositiveFloat = 60.0
    """Seconds between policy checks."""
    compaction_min_segments: Annotated[int, Field(ge=2)] = 8
    """Small flushed segments that trigger a compaction."""
    compaction_small_proportion: Proportion = 0.5
    """"Small": fewer rows than this × the target's."""
    compaction_target_size_mb: NonNegativeInt = 0
    """Target segment size (0 = segment_max_size_mb)."""
    compaction_max_sources: Annotated[int, Field(ge=2)] = 32
    """Source segments per plan at most."""


class Spark(Section):
    """Spark jobs

    Bulk import and compaction: how DataCoord runs its jobs (in process, on a warm local Spark, by
    spark-submit, or as SparkApplications)."""

    spark_runner: Literal["local", "sparkapplication"] = "local"
    """"local": spark-submit --master spark_master (or the warm driver); "sparkapplication":
    SparkApplications through the Kubernetes API (the operator)."""
    spark_master: str = "local[2]"
    """--master of local runs."""
    spark_submit: str = ""
    """Path of spark-submit ("" = the venv's / pyspark's)."""
    spark_work_dir: str = ""
    """Local runs' work dirs ("" = $TMPDIR/kmilvus-spark)."""
    spark_image: str = f"kmilvus/kmilvus-spark:{__version__}"
    """Image of SparkApplications' driver and executors."""
    spark_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """imagePullPolicy of spark_image."""
    spark_version: str = ""
    """Spark of spark_image ("" = application.SPARK_VERSION)."""
    spark_namespace: str = "default"
    """SparkApplications go to their Collection resource's namespace; this one when none owns them."""
    spark_service_account: str = "kmilvus-spark"
    """The driver's (creates executor pods)."""
    spark_s3_secret_name: str = ""
    """S3 credentials of Spark drivers and executors: a Secret in the application's namespace,
    referenced by secretKeyRef ("" = ambient credentials: IRSA / workload identity)."""
    spark_s3_access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    """The Secret's key holding the access key ID."""
    spark_s3_secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"
    """The Secret's key holding the secret key."""
    spark_driver_memory: str = "1g"
    """Memory of a SparkApplication's driver (Spark's spark.driver.memory)."""
    spark_executor_memory: str = "1g"
    """Memory of each executor (spark.executor.memory)."""
    spark_executor_instances: PositiveInt = 1
    """Executors of a SparkApplication."""
    spark_max_concurrent_jobs: PositiveInt = 2
    """Applications running at once; more wait (Pending)."""
    spark_job_timeout: PositiveFloat = 3600.0
    """Seconds before a running application is cancelled."""
    spark_poll_interval: PositiveFloat = 0.5
    """Seconds between application state checks."""
    spark_warm: bool = True
    """Local jobs above the in-process limit run on one long-lived Spark driver (started on the
    first, stopped after spark_warm_idle_timeout idle seconds) instead of one spark-submit (a JVM
    start) each."""
    spark_warm_idle_timeout: PositiveFloat = 300.0
    """Seconds."""
    inprocess_job_max_mb: NonNegativeInt = 1024
    """Jobs reading at most this many MiB (Parquet imports, compactions) run in the DataCoord
    process, without Spark: no JVM to start (docs/architecture/jobs.md). They stream batches of
    about 32 MiB, so the limit bounds the CPU time lent to a job, not its memory. A job still running
    when its coordinator stops is failed and cleaned up after the restart. 0 = every job on Spark."""


class Security(Section):
    """Security

    Authentication, authorization and TLS of the Milvus API (Milvus'
    common.security.authorizationEnabled, tls.*), and mutual TLS between components (PEM paths:
    every component presents internal_tls_cert and accepts only peers signed by internal_tls_ca)."""

    auth: bool = False
    """Authenticate every Milvus API call and check its privilege."""
    root_password: SecretStr = SecretStr("")
    """Root's password on first start; required when auth is on."""
    tls_cert: str = ""
    """PEM certificate of the Milvus API (one-way TLS when set with tls_key)."""
    tls_key: str = ""
    """PEM private key of tls_cert."""
    tls_ca: str = ""
    """PEM CA: clients must present a certificate it signed (mutual TLS)."""
    audit_log: bool = False
    """Log audit events at any log level (always on with auth)."""
    internal_tls_cert: str = ""
    """The certificate every component presents to the others."""
    internal_tls_key: str = ""
    """Private key of internal_tls_cert."""
    internal_tls_ca: str = ""
    """The CA a peer's certificate must be signed by."""
    internal_tls_server_name: str = ""
    """The DNS name internal_tls_cert must carry (pod IPs change)."""


# The sections in the order the docs list them (`Config`'s bases, reversed: the first section
# listed last would otherwise be first in `Config.model_fields`).
SECTIONS: tuple[type[Section], ...] = (
    Cluster,
    Etcd,
    Nats,
    Storage,
    Proxy,
    Http,
    RootCoord,
    TimeTick,
    DataCoord,
    DataNode,
    IndexNode,
    Compaction,
    Spark,
    Security,
)


class Config(
    Security,
    Spark,
    Compaction,
    IndexNode,
    DataNode,
    DataCoord,
    TimeTick,
    RootCoord,
    Http,
    Proxy,
    Storage,
    Nats,
    Etcd,
    Cluster,
):
    """Every setting of a kmilvus process (its sections: `SECTIONS`)."""

    sections: ClassVar[tuple[type[Section], ...]] = SECTIONS

    @staticmethod
    def env_name(field: str) -> str:
        """The environment variable of a setting: KMILVUS_<FIELD>."""
        return ENV_PREFIX + field.upper()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Config:
        """Defaults, then KMILVUS_<FIELD> variables, then `overrides` (command-line flags; None =
        not given). Raises ConfigError naming every invalid variable."""
        env = os.environ if environ is None else environ
        values = {name: raw for name in cls.model_fields if (raw := env.get(cls.env_name(name))) is not None}
        given = {k: v for k, v in overrides.items() if v is not None}
        try:
            return cls.model_validate({**values, **given})
        except ValidationError as exc:
            raise ConfigError(_describe(exc, set(values) - set(given))) from None

    def check_security(self, runs_rootcoord: bool = True) -> None:
        """Refuse settings that would start an unprotected or half-configured API. Only the
        process running RootCoord (which creates root) needs root's password."""
        if self.auth and runs_rootcoord and not self.root_password:
            raise ValueError("KMILVUS_ROOT_PASSWORD is required when auth is on (there is no default root password)")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        if self.tls_ca and not self.tls_cert:
            raise ValueError("mutual TLS (--tls-ca) needs --tls-cert and --tls-key")
        internal = (self.internal_tls_cert, self.internal_tls_key, self.internal_tls_ca)
        if any(internal) and not all(internal):
            raise ValueError("internal TLS needs KMILVUS_INTERNAL_TLS_CERT, _KEY and _CA together")

    def etcd_options(self) -> dict[str, Any]:
        """EtcdKV.connect's security arguments."""
        tls = (self.etcd_tls_cert, self.etcd_tls_key, self.etcd_tls_ca)
        password = self.etcd_password.get_secret_value()
        return {"user": self.etcd_user, "password": password, "tls": tls if any(tls) else None}

    def nats_options(self) -> dict[str, Any]:
        """MsgStream.connect's security arguments."""
        tls = (self.nats_tls_cert, self.nats_tls_key, self.nats_tls_ca)
        password = self.nats_password.get_secret_value()
        return {"user": self.nats_user, "password": password, "tls": tls if any(tls) else None}

    def replace(self, **changes: Any) -> Config:
        """A copy with `changes`, validated like any other setting."""
        try:
            return type(self).model_validate({**dict(self), **changes})
        except ValidationError as exc:
            raise ConfigError(_describe(exc, set())) from None


def _describe(exc: ValidationError, from_env: set[str]) -> str:
    """`KMILVUS_AUTH='ture': Input should be a valid boolean` — the variable for a value read from
    the environment, the field otherwise; a secret's value is never repeated."""
    lines = []
    for err in exc.errors(include_url=False):
        name = str(err["loc"][0]) if err["loc"] else ""
        where = Config.env_name(name) if name in from_env else name
        field = Config.model_fields.get(name)
        if field is not None and field.annotation is not SecretStr and isinstance(err.get("input"), str | int | float):
            where += f"={err['input']!r}"
        lines.append(f"{where}: {err['msg']}")
    return "invalid configuration: " + "; ".join(lines)
