"""Configuration: one typed object, built from defaults, then KMILVUS_* environment variables,
then command-line flags. Names follow Milvus' milvus.yaml where one exists."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Config:
    # Where things live.
    cluster: str = "kmilvus"                 # etcd key prefix, stream name and channel prefix
    etcd_endpoints: list[str] = field(default_factory=lambda: ["127.0.0.1:2379"])
    nats_url: str = "nats://127.0.0.1:4222"
    storage_uri: str = "file:///var/lib/kmilvus/storage"
    # The Milvus API.
    proxy_host: str = "127.0.0.1"
    proxy_port: int = 19530
    # Internal gRPC services bind here (port 0 = any free port; sessions publish the address).
    internal_host: str = "127.0.0.1"
    metrics_port: int = 0                    # 0 = no metrics endpoint
    # RootCoord.
    dml_channel_num: int = 16                # physical channels
    default_shards_num: int = 1
    max_dim: int = 32768
    max_varchar_length: int = 65535
    max_insert_bytes: int = 64 * 1024 * 1024  # Milvus' proxy.maxInsertSize... checked per request
    # Time ticks.
    time_tick_interval: float = 0.1          # seconds; Milvus' proxy.timeTickInterval is 200 ms
    # DataCoord: segments and seal policies.
    segment_max_size_mb: int = 512
    segment_seal_proportion: float = 1.0
    segment_max_idle_time: float = 600.0     # seal a Growing segment with no insert for this long
    segment_max_lifetime: float = 86400.0
    segment_assignment_expire: float = 2.0   # seconds a row quota stays reserved
    flush_state_wait: float = 0.45           # GetFlushState waits up to this long for `true`
    gc_interval: float = 60.0                # seconds between garbage-collection passes
    gc_tolerance: float = 600.0              # an unreferenced binlog is deleted after this long
    # DataNode.
    insert_buffer_size_mb: int = 64          # write binlogs of the largest segment past this
    flush_chunk_rows: int = 1 << 20
    # Sessions.
    session_ttl: int = 10                    # seconds; a dead component's lease expires after this
    # Messages.
    max_message_bytes: int = 4 * 1024 * 1024  # split insert payloads below NATS max_payload

    @classmethod
    def from_env(cls, **overrides: Any) -> "Config":
        cfg = cls()
        for f in dataclasses.fields(cls):
            raw = os.environ.get("KMILVUS_" + f.name.upper())
            if raw is not None:
                setattr(cfg, f.name, _parse(f.type, raw))
        for k, v in overrides.items():
            if v is not None:
                setattr(cfg, k, v)
        return cfg

    def replace(self, **changes: Any) -> "Config":
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
