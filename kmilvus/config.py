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
    # Where things live.
    cluster: str = "kmilvus"  # etcd key prefix, stream name and channel prefix
    etcd_endpoints: list[str] = field(default_factory=lambda: ["127.0.0.1:2379"])
    nats_url: str = "nats://127.0.0.1:4222"
    storage_uri: str = "file:///var/lib/kmilvus/storage"
    # The Milvus API.
    proxy_host: str = "127.0.0.1"
    proxy_port: int = 19530
    # Internal gRPC services bind here (port 0 = any free port; sessions publish the address).
    internal_host: str = "127.0.0.1"
    metrics_port: int = 0  # 0 = no metrics endpoint
    # RootCoord.
    dml_channel_num: int = 16  # physical channels
    default_shards_num: int = 1
    max_dim: int = MAX_DIM
    max_varchar_length: int = MAX_VARCHAR_LENGTH
    max_insert_bytes: int = 64 * 1024 * 1024  # Milvus' proxy.maxInsertSize... checked per request
    max_pending_insert_mb: int = 256  # inserts queued or running in one Proxy; past it: rate limit
    max_database_num: int = 64  # Milvus' rootCoord.maxDatabaseNum (`default` included)
    max_partition_num: int = 1024  # Milvus' rootCoord.maxPartitionNum per collection
    # Time ticks.
    time_tick_interval: float = 0.1  # seconds; Milvus' proxy.timeTickInterval is 200 ms
    # A vchannel nothing was published on for a second is ticked only this often (reads and
    # flushes that wait for its tick ask for one); 0: every vchannel at every tick.
    time_tick_idle_interval: float = 10.0
    # A DataNode or QueryNode hands a pchannel's tick to a vchannel with no message of its own
    # for a second only this often (its checkpoint then moves on; the DataNode reports it): at
    # 1,000 collections every 10 s was 200 reports a second. A flush or a read that waits on a
    # vchannel names it in the tick it asks for, and gets it at once.
    vchannel_idle_tick_interval: float = 60.0
    # DataCoord: segments and seal policies.
    segment_max_size_mb: int = 512
    # Milvus' dataCoord.segment.sealProportion (0.23 in 2.3.5): a growing segment is sealed (then
    # flushed and indexed) at this share of segment_max_size_mb; compaction merges them later.
    segment_seal_proportion: float = 0.23
    segment_max_idle_time: float = 600.0  # seal a Growing segment with no insert for this long
    segment_max_lifetime: float = 86400.0
    flush_state_wait: float = 0.45  # GetFlushState waits up to this long for `true`
    gc_interval: float = 60.0  # seconds between garbage-collection passes
    gc_tolerance: float = 600.0  # an unreferenced binlog is deleted after this long
    # `kmilvus standalone`'s own nats-server: its soft memory limit (GOMEMLIMIT). Under a bulk
    # insert JetStream's block caches hold hundreds of MB for seconds; below that live data the Go
    # collector runs without pause. One pymilvus client, 1M rows (bench/bench_flush.py): 256 MiB
    # 106k rows/s, peak RSS of all processes 1,021 MiB; 512: 110k, 1,008 MiB; 1,024: 114k,
    # 1,464 MiB. At a server's full rate (prebuilt requests) 256 MiB halves what nats-server takes.
    embedded_nats_memory_mb: int = 512
    # DataNode.
    insert_buffer_size_mb: int = 64  # write binlogs of the largest segment past this
    # Sessions.
    session_ttl: int = 10  # seconds; a dead component's lease expires after this
    # Messages.
    max_message_bytes: int = 4 * 1024 * 1024  # split insert payloads below NATS max_payload
    # A pchannel's messages stay this long after every vchannel's checkpoint passed them (Milvus
    # keeps messages by retention): a QueryNode reading that far behind the DataNodes, or starting
    # to read that long after it listed a channel's logs, still reads every message. Past it, it
    # is told (StreamGapError) and reloads the channel from storage.
    stream_retention_seconds: float = 60.0
    # Spark jobs (bulk import, compaction): how DataCoord runs SparkApplications.
    spark_runner: str = "local"  # "local": spark-submit --master spark_master
    spark_master: str = "local[2]"
    spark_submit: str = ""  # path of spark-submit ("" = the venv's / pyspark's)
    spark_work_dir: str = ""  # local runs' work dirs ("" = $TMPDIR/kmilvus-spark)
    spark_image: str = "kmilvus/kmilvus-spark:0.1.0"
    spark_image_pull_policy: str = "IfNotPresent"
    spark_version: str = ""  # Spark of spark_image ("" = application.SPARK_VERSION)
    # SparkApplications go to their Collection resource's namespace; this one when none owns them.
    spark_namespace: str = "default"
    spark_service_account: str = "kmilvus-spark"  # the driver's (creates executor pods)
    # S3 credentials of Spark drivers and executors: a Secret in the application's namespace,
    # referenced by secretKeyRef ("" = ambient credentials: IRSA / workload identity).
    spark_s3_secret_name: str = ""
    spark_s3_access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    spark_s3_secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"
    spark_driver_memory: str = "1g"
    spark_executor_memory: str = "1g"
    spark_executor_instances: int = 1
    spark_max_concurrent_jobs: int = 2  # applications running at once; more wait (Pending)
    spark_job_timeout: float = 3600.0  # seconds before a running application is cancelled
    spark_poll_interval: float = 0.5  # seconds between application state checks
    # Local jobs above the in-process limit run on one long-lived Spark driver (started on the
    # first, stopped after this many idle seconds) instead of one spark-submit (a JVM start) each.
    spark_warm: bool = True
    spark_warm_idle_timeout: float = 300.0
    # Jobs reading at most this many MiB (Parquet imports, compactions) run in the DataCoord
    # process, without Spark: no JVM to start (a 1M × 128 import, 524 MB, takes ≈1.5 s there and
    # ≈14 s on a Spark driver that must start first). They stream a batch of ≈64 MiB at a time, so
    # the limit bounds the CPU time lent to a job, not its memory. 0 = every job on Spark.
    inprocess_job_max_mb: int = 1024
    etcd_max_txn_ops: int = 128  # etcd's --max-txn-ops: a job's commit must fit
    # Compaction: merge small flushed segments (policy: enough small ones in a partition/channel).
    auto_compaction: bool = True
    compaction_check_interval: float = 60.0  # seconds between policy checks
    compaction_min_segments: int = 8  # small flushed segments that trigger a compaction
    compaction_small_proportion: float = 0.5  # "small": fewer rows than this × the target's
    compaction_target_size_mb: int = 0  # target segment size (0 = segment_max_size_mb)
    compaction_max_sources: int = 32  # source segments per plan at most
    # Security (Milvus' common.security.authorizationEnabled, tls.*).
    auth: bool = False  # authenticate every Milvus API call and check its privilege
    root_password: str = ""  # root's password on first start; required when auth is on
    tls_cert: str = ""  # PEM certificate of the Milvus API (one-way TLS when set with tls_key)
    tls_key: str = ""
    tls_ca: str = ""  # PEM CA: clients must present a certificate it signed (mutual TLS)
    audit_log: bool = False  # log audit events at any log level (always on with auth)
    # Mutual TLS between components (PEM paths; every component presents internal_tls_cert and
    # accepts only peers signed by internal_tls_ca; the certificate must carry internal_tls_server_name).
    internal_tls_cert: str = ""
    internal_tls_key: str = ""
    internal_tls_ca: str = ""
    internal_tls_server_name: str = ""
    # Credentials and TLS of kmilvus' own connections to etcd and NATS (PEM paths).
    etcd_user: str = ""
    etcd_password: str = ""
    etcd_tls_cert: str = ""  # client certificate (etcd --client-cert-auth)
    etcd_tls_key: str = ""
    etcd_tls_ca: str = ""  # set to talk TLS to etcd
    nats_user: str = ""
    nats_password: str = ""
    nats_tls_cert: str = ""
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
