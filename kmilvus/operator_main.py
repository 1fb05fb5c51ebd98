"""`kmilvus operator`: the coordinators (RootCoord, DataCoord, QueryCoord) and the kopf
controllers in one process and one event loop.

- liveness / readiness: kopf's health endpoint on :8080/healthz (the `coordinators` probe says
  whether this replica is the active one);
- Prometheus metrics on --metrics-port (default 9091): the core's and the operator's;
- one active replica at a time through kopf peering (--peering NAME, default "kmilvus";
  --standalone disables it); standby replicas keep watching and take over when the active one's
  keep-alives stop.

kopf and the Kubernetes client are imported here lazily, from the `controllers` package: the core
(`kmilvus/`) does not depend on them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kmilvus import log as klog
from kmilvus.config import Config


@dataclass
class OperatorArgs:
    etcd_endpoint: str | None = None
    nats_url: str | None = None
    storage_uri: str | None = None
    namespaces: tuple[str, ...] = ()
    cluster: str | None = None
    peering: str = "kmilvus"
    standalone: bool = False
    priority: int | None = None
    metrics_port: int = 9091
    health_port: int = 8080
    health_host: str = "0.0.0.0"
    metrics_host: str = "0.0.0.0"
    sdk_namespace: str | None = None
    mirror_sdk: bool = True
    log_level: str | None = None


def make_config(args: OperatorArgs) -> Config:
    """Flags first, then KMILVUS_* environment variables (Config.from_env), then defaults."""
    overrides = {"cluster": args.cluster, "nats_url": args.nats_url, "storage_uri": args.storage_uri,
                 "etcd_endpoints": [args.etcd_endpoint] if args.etcd_endpoint else None}
    cfg = Config.from_env(**overrides)
    if not args.etcd_endpoint:
        import os
        env = os.environ.get("KMILVUS_ETCD_ENDPOINT")
        if env:
            cfg.etcd_endpoints = [e.strip() for e in env.split(",") if e.strip()]
    return cfg


def run(args: OperatorArgs) -> int:
    from prometheus_client import start_http_server

    import controllers.app
    from controllers.runtime import Options

    klog.setup(args.log_level)
    logging.getLogger("kopf").setLevel(logging.getLogger().level or logging.WARNING)
    cfg = make_config(args)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_host)
    opts = Options(namespaces=tuple(args.namespaces), peering=None if args.standalone else args.peering,
                   priority=args.priority, sdk_namespace=args.sdk_namespace, mirror_sdk=args.mirror_sdk)
    liveness = f"http://{args.health_host}:{args.health_port}/healthz" if args.health_port else None
    try:
        asyncio.run(controllers.app.run(cfg, opts, liveness=liveness))
    except KeyboardInterrupt:
        pass
    return 0
