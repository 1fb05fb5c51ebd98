"""`kmilvus-operator`: the coordinators (RootCoord, DataCoord, QueryCoord) and the kopf
controllers in one process and one event loop.

- liveness / readiness: kopf's health endpoint on :8080/healthz (the `coordinators` probe says
  whether this replica is the active one);
- Prometheus metrics on --metrics-port (default 9091): the core's and the operator's;
- one active replica at a time through kopf peering (--peering NAME, default "kmilvus";
  --standalone disables it); standby replicas keep watching and take over when the active one's
  keep-alives stop.

Its own console script (not a `kmilvus` sub-command) so that the core (`kmilvus/`) never imports
the operator, kopf or the Kubernetes client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

import click

from kmilvus import __version__
from kmilvus import log as klog
from kmilvus.config import Config, ConfigError


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
    overrides: dict[str, Any] = {
        "cluster": args.cluster,
        "nats_url": args.nats_url,
        "storage_uri": args.storage_uri,
        "etcd_endpoints": [args.etcd_endpoint] if args.etcd_endpoint else None,
    }
    cfg = Config.from_env(**overrides)
    if not args.etcd_endpoint:
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
    try:
        cfg = make_config(args)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_host)
    opts = Options(
        namespaces=tuple(args.namespaces),
        peering=None if args.standalone else args.peering,
        priority=args.priority,
        sdk_namespace=args.sdk_namespace,
        mirror_sdk=args.mirror_sdk,
    )
    liveness = f"http://{args.health_host}:{args.health_port}/healthz" if args.health_port else None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(controllers.app.run(cfg, opts, liveness=liveness))
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kmilvus-operator")
@click.option("--etcd-endpoint", default=None, envvar="KMILVUS_ETCD_ENDPOINT", help="HOST:PORT of etcd.")
@click.option("--nats-url", default=None, envvar="KMILVUS_NATS_URL", help="nats://HOST:PORT of JetStream.")
@click.option(
    "--storage-uri", default=None, envvar="KMILVUS_STORAGE_URI", help="file:///PATH or s3://BUCKET/PREFIX?endpoint=URL"
)
@click.option(
    "--namespace", "namespaces", multiple=True, help="Serve this namespace (repeatable; default: cluster-wide)."
)
@click.option(
    "--peering", default="kmilvus", show_default=True, help="kopf peering name: one active replica at a time."
)
@click.option("--standalone", is_flag=True, help="No peering: this replica is always active.")
@click.option("--priority", type=int, default=None, help="Peering priority (default: start time, newest wins).")
@click.option("--metrics-port", type=int, default=9091, show_default=True, help="Prometheus metrics port (0: off).")
@click.option(
    "--health-port", type=int, default=8080, show_default=True, help="Liveness/readiness /healthz port (0: off)."
)
@click.option(
    "--sdk-namespace",
    default=None,
    help="Namespace for Collections created through the SDK (default: first --namespace or default).",
)
@click.option("--cluster", default=None, help="Cluster name: etcd prefix, stream and channel names.")
@click.option("--log-level", default=None, help="debug|info|warning|error (default: warning; env KMILVUS_LOG_LEVEL)")
def main(
    etcd_endpoint,
    nats_url,
    storage_uri,
    namespaces,
    peering,
    standalone,
    priority,
    metrics_port,
    health_port,
    sdk_namespace,
    cluster,
    log_level,
) -> None:
    """Run the coordinators and the Kubernetes controllers (kopf) in one process."""
    sys.exit(
        run(
            OperatorArgs(
                etcd_endpoint=etcd_endpoint,
                nats_url=nats_url,
                storage_uri=storage_uri,
                namespaces=tuple(namespaces),
                cluster=cluster,
                peering=peering,
                standalone=standalone,
                priority=priority,
                metrics_port=metrics_port,
                health_port=health_port,
                sdk_namespace=sdk_namespace,
                log_level=log_level,
            )
        )
    )


if __name__ == "__main__":
    main()
