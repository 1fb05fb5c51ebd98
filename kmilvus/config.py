"""Configuration: one typed object, built from defaults, then KMILVUS_* environment variables,
then command-line flags. Names follow Milvus' milvus.yaml where one exists."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from kmilvus.util.constants import MAX_DIM, MAX_VARCHAR_LENGTH


@dataclass
class Config:
    # --- Where things live ---
    cluster: str = "kmilvus"  # etcd key prefix, stream name and channel prefix
    etcd_endpoints: list[str] = field(default_factory=lambda: ["127.0.0.1:2379"])  # etcd client endpoints, HOST:PORT
    nats_url: str = "nats://127.0.0.1:4222"  # NATS server with JetStream
    storage_uri: str = "file:///var/lib/kmilvus/storage"  # file:///PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R
    # --- The Milvus API ---
    proxy_host: str = "127.0.0.1"  # address the Milvus API listens on
    proxy_port: int = 19530  # the Milvus API's port
    # The RESTful API v2 (Milvus' proxy.http.*) on its own port beside the gRPC one: one shared
    # listener would relay every gRPC byte through Python (docs/user-guide/rest.md). 0 = a free
    # port, -1 = off.
    http_port: int = 19531
    http_request_timeout: float = 30.0  # seconds (Milvus' http.requestTimeoutMs); Request-Timeout overrides
    http_accept_type_allow_int64: bool = True  # Milvus' http.acceptTypeAllowInt64: int64 as JSON numbers
    # Internal gRPC services bind here (port 0 = any free port; sessions publish the address).
    internal_host: str = "127.0.0.1"
    metrics_port: int = 0  # 0 = no metrics endpoint
    # --- RootCoord ---
    dml_channel_num: int = 16  # physical channels
    default_shards_num: int = 1  # shards of a collection created without shards_num
    max_dim: int = MAX_DIM  # largest vector dim a schema may declare
    max_varchar_length: int = MAX_VARCHAR_LENGTH  # largest VarChar max_length a schema may declare
    max_insert_bytes: int = 64 * 1024 * 1024  # Milvus' proxy.maxInsertSize... checked per request
    max_pending_insert_mb: int = 256  # inserts queued or running in one Proxy; past it: rate limit
    max_database_num: int = 64  # Milvus' rootCoord.maxDatabaseNum (`default` included)
    max_partition_num: int = 1024  # Milvus' rootCoord.maxPartitionNum per collection
    # --- Time ticks ---
    time_tick_interval: float = 0.1  # seconds; Milvus' proxy.timeTickInterval is 200 ms
    # A vchannel nothing was published on for a second is ticked only this often (reads and
    # flushes that wait for its tick ask for one); 0: every vchannel at every tick.
    time_tick_idle_interval: float = 10.0
    # A DataNode or QueryNode hands a pchannel's tick to a vchannel with no message of its own
    # for a second only this often (its checkpoint then moves on; the DataNode reports it): each
    # such tick costs a flowgraph report, so with many idle collections a short interval is a
    # steady load. A flush or a read that waits on a vchannel names it in the tick it asks for,
    # and gets it at once.
    vchannel_idle_tick_interval: float = 60.0
    # --- DataCoord: segments, seal policies, garbage collection ---
    segment_max_size_mb: int = 512  # a segment's size target (Milvus' dataCoord.segment.maxSize)
    # Milvus' dataCoord.segment.sealProportion (0.23 in 2.3.5): a growing segment is sealed (then
    # flushed and indexed) at this share of segment_max_size_mb; compaction merges them later.
    segment_seal_proportion: float = 0.23
    segment_max_idle_time: float = 600.0  # seal a Growing segment with no insert for this long
    segment_max_lifetime: float = 86400.0  # seconds before a Growing segment is sealed even if busy
    flush_state_wait: float = 0.45  # GetFlushState waits up to this long for `true`
    gc_interval: float = 60.0  # seconds between garbage-collection passes
    gc_tolerance: float = 600.0  # an unreferenced binlog is deleted after this long
    # --- kmilvus standalone ---
    # `kmilvus standalone`'s own nats-server: its soft memory limit (GOMEMLIMIT). Under a bulk
    # insert JetStream's block caches hold hundreds of MB for seconds; below that live data the Go
    # collector runs without pause and slows inserts, above it the peak memory grows for little
    # gain (the measurements behind 512: docs/benchmarks/index.md).
    embedded_nats_memory_mb: int = 512
    # --- DataNode ---
    insert_buffer_size_mb: int = 64  # write binlogs of the largest segment past this
    # --- Sessions ---
    session_ttl: int = 10  # seconds; a dead component's lease expires after this
    # --- Messages ---
    max_message_bytes: int = 4 * 1024 * 1024  # split insert payloads below NATS max_payload
    # A pchannel's messages stay this long after every vchannel's checkpoint passed them (Milvus
    # keeps messages by retention): a QueryNode reading that far behind the DataNodes, or starting
    # to read that long after it listed a channel's logs, still reads every message. Past it, it
    # is told (StreamGapError) and reloads the channel from storage.
    stream_retention_seconds: float = 60.0
    # --- Spark jobs (bulk import, compaction): how DataCoord runs SparkApplications ---
    spark_runner: str = "local"  # "local": spark-submit --master spark_master
    spark_master: str = "local[2]"  # --master of local runs
    spark_submit: str = ""  # path of spark-submit ("" = the venv's / pyspark's)
    spark_work_dir: str = ""  # local runs' work dirs ("" = $TMPDIR/kmilvus-spark)
    spark_image: str = "kmilvus/kmilvus-spark:0.1.0"  # image of SparkApplications' driver and executors
    spark_image_pull_policy: str = "IfNotPresent"
    spark_version: str = ""  # Spark of spark_image ("" = application.SPARK_VERSION)
    # SparkApplications go to their Collection resource's namespace; this one when none owns them.
    spark_namespace: str = "default"
    spark_service_account: str = "kmilvus-spark"  # the driver's (creates executor pods)
    # S3 credentials of Spark drivers and executors: a Secret in the application's namespace,
    # referenced by secretKeyRef ("" = ambient credentials: IRSA / workload identity).
    spark_s3_secret_name: str = ""
    spark_s3_access_key_id_key: str = "AWS_ACCESS_KEY_ID"  # the Secret's key holding the access key ID
    spark_s3_secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"  # the Secret's key holding the secret key
    spark_driver_memory: str = "1g"
    spark_executor_memory: str = "1g"
    spark_executor_instances: int = 1
    spark_max_concurrent_jobs: int = 2  # applications running at once; more wait (Pending)
    spark_job_timeout: float = 3600.0  # seconds before a running application is cancelled
    spark_poll_interval: float = 0.5  # seconds between application state checks
    # Local jobs above the in-process limit run on one long-lived Spark driver (started on the
    # first, stopped after this many idle seconds) instead of one spark-submit (a JVM start) each.
    spark_warm: bool = True
    spark_warm_idle_timeout: float = 300.0  # seconds
    # Jobs reading at most this many MiB (Parquet imports, compactions) run in the DataCoord
    # process, without Spark: no JVM to start (docs/architecture/jobs.md). They stream batches of
    # about 32 MiB, so the limit bounds the CPU time lent to a job, not its memory. A job still
    # running when its coordinator stops is failed and cleaned up after the restart.
    # 0 = every job on Spark.
    inprocess_job_max_mb: int = 1024
    etcd_max_txn_ops: int = 128  # etcd's --max-txn-ops: a job's commit must fit
    # --- Compaction: merge small flushed segments (policy: enough small ones in a partition/channel) ---
    auto_compaction: bool = True  # run the compaction policy (manual compaction works either way)
    compaction_check_interval: float = 60.0  # seconds between policy checks
    compaction_min_segments: int = 8  # small flushed segments that trigger a compaction
    compaction_small_proportion: float = 0.5  # "small": fewer rows than this × the target's
    compaction_target_size_mb: int = 0  # target segment size (0 = segment_max_size_mb)
    compaction_max_sources: int = 32  # source segments per plan at most
    # --- Security (Milvus' common.security.authorizationEnabled, tls.*) ---
    auth: bool = False  # authenticate every Milvus API call and check its privilege
    root_password: str = ""  # root's password on first start; required when auth is on
    tls_cert: str = ""  # PEM certificate of the Milvus API (one-way TLS when set with tls_key)
    tls_key: str = ""  # PEM private key of tls_cert
    tls_ca: str = ""  # PEM CA: clients must present a certificate it signed (mutual TLS)
    audit_log: bool = False  # log audit events at any log level (always on with auth)
    # --- Mutual TLS between components ---
    # PEM paths: every component presents internal_tls_cert and accepts only peers signed by
    # internal_tls_ca; the certificate must carry internal_tls_server_name (its DNS name: pod IPs change).
    internal_tls_cert: str = ""
    internal_tls_key: str = ""
    internal_tls_ca: str = ""
    internal_tls_server_name: str = ""
    # --- Credentials and TLS of kmilvus' own connections to etcd and NATS (PEM paths) ---
    etcd_user: str = ""  # etcd authentication
    etcd_password: str = ""
    etcd_tls_cert: str = ""  # client certificate (etcd --client-cert-auth)
    etcd_tls_key: str = ""
    etcd_tls_ca: str = ""  # set to talk TLS to etcd
    nats_user: str = ""  # NATS user / password authentication
    nats_password: str = ""
    nats_tls_cert: str = ""  # client certificate
    nats_tls_key: str = ""
    nats_tls_ca: str = ""  # set to talk TLS to NATS

    @classmethod
    def from_env(cls, **overrides: Any) -> Config:
        cfg = cls()
        for f in dataclasses.fields(cls):
            raw = os.environ.get("KMILVUS_" + f.name.upper())
            if raw is not None:
                setattr(cfg, f.name, _parse(f.type, raw))
        for k, v in overrides.items():
            if v is not None:
                setattr(cfg, k, v)
        return cfg

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
        return {"user": self.etcd_user, "password": self.etcd_password, "tls": tls if any(tls) else None}

    def nats_options(self) -> dict[str, Any]:
        """MsgStream.connect's security arguments."""
        tls = (self.nats_tls_cert, self.nats_tls_key, self.nats_tls_ca)
        return {"user": self.nats_user, "password": self.nats_password, "tls": tls if any(tls) else None}

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


def _parse(typ: Any, raw: str) -> Any:
    t = str(typ)
    if "list" in t:
        return [s.strip() for s in raw.split(",") if s.strip()]
    if t == "int":
        return int(raw)
    if t == "float":
        return float(raw)
    if t == "bool":
        return raw.lower() in ("1", "true", "yes", "on")
    return raw
