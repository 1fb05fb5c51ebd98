"""The `kmilvus` command (the operator is `kmilvus-operator`, in `controllers.main`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kmilvus import __version__, log
from kmilvus.config import Config, ConfigError
from kmilvus.util.embedded import MissingBinaryError


def _common(f):
    f = click.option("--tls-ca", default=None, help="PEM CA: require client certificates it signed (mutual TLS).")(f)
    f = click.option("--tls-key", default=None, help="PEM private key of --tls-cert.")(f)
    f = click.option("--tls-cert", default=None, help="PEM certificate: serve the Milvus API over TLS.")(f)
    f = click.option(
        "--auth/--no-auth",
        default=None,
        help="Authenticate every call and check privileges (env KMILVUS_AUTH; root's password: KMILVUS_ROOT_PASSWORD).",
    )(f)
    f = click.option(
        "--log-level", default=None, help="debug|info|warning|error (default: warning; env KMILVUS_LOG_LEVEL)"
    )(f)
    f = click.option("--cluster", default=None, help="Cluster name: etcd prefix, stream and channel names.")(f)
    f = click.option(
        "--http-port",
        type=int,
        default=None,
        help="Port of the RESTful API v2 (default 19531, env KMILVUS_HTTP_PORT; 0 = any free port, -1 = off).",
    )(f)
    return f


@click.group()
@click.version_option(__version__, prog_name="kmilvus")
def main() -> None:
    """kmilvus: Milvus' data path in Python — run it standalone or per component.

    The Kubernetes operator is its own command, `kmilvus-operator` (package `controllers`).
    """


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path("data"),
    show_default=True,
    help="etcd, NATS and (by default) storage live here.",
)
@click.option("--port", type=int, default=19530, show_default=True, help="Milvus API port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Milvus API address.")
@click.option("--etcd-endpoint", default=None, help="HOST:PORT of an etcd to use instead of starting one.")
@click.option("--nats-url", default=None, help="nats://HOST:PORT of a JetStream server to use instead of starting one.")
@click.option(
    "--storage-uri", default=None, help="file:///PATH or s3://BUCKET/PREFIX?endpoint=URL (default DATA_DIR/storage)."
)
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus metrics on this port.")
@_common
def standalone(
    data_dir,
    port,
    host,
    etcd_endpoint,
    nats_url,
    storage_uri,
    metrics_port,
    log_level,
    cluster,
    auth,
    tls_cert,
    tls_key,
    tls_ca,
    http_port,
):
    """Run every component in one process (etcd and nats-server as children unless given)."""
    from kmilvus.standalone import run_standalone

    log.setup(log_level)
    cfg = _config(
        proxy_port=port,
        proxy_host=host,
        metrics_port=metrics_port,
        cluster=cluster,
        auth=auth,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        http_port=http_port,
    )
    _check_security(cfg, runs_rootcoord=True)
    _serve_metrics(cfg)
    try:
        sys.exit(run_standalone(cfg, data_dir, etcd_endpoint=etcd_endpoint, nats_url=nats_url, storage_uri=storage_uri))
    except MissingBinaryError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.argument(
    "roles",
    nargs=-1,
    required=True,
    type=click.Choice(["proxy", "rootcoord", "datacoord", "querycoord", "datanode", "indexnode", "querynode"]),
)
@click.option("--etcd-endpoint", required=True, envvar="KMILVUS_ETCD_ENDPOINT", help="HOST:PORT of etcd.")
@click.option("--nats-url", required=True, envvar="KMILVUS_NATS_URL", help="nats://HOST:PORT of JetStream.")
@click.option(
    "--storage-uri", required=True, envvar="KMILVUS_STORAGE_URI", help="file:///PATH or s3://BUCKET/PREFIX?endpoint=URL"
)
@click.option("--port", type=int, default=19530, show_default=True, help="Milvus API port (proxy).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve the Milvus API on.")
@click.option(
    "--internal-host",
    default=None,
    envvar="KMILVUS_INTERNAL_HOST",
    help="Address other components reach this process at (in Kubernetes: the pod IP). "
    "Default: --host, or 127.0.0.1 when --host is a wildcard.",
)
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus metrics on this port.")
@_common
def run(
    roles,
    etcd_endpoint,
    nats_url,
    storage_uri,
    port,
    host,
    internal_host,
    metrics_port,
    log_level,
    cluster,
    auth,
    tls_cert,
    tls_key,
    tls_ca,
    http_port,
):
    """Run one or more components; they find the others through sessions in etcd."""
    from kmilvus.standalone import run_role

    log.setup(log_level)
    cfg = _config(
        etcd_endpoints=[etcd_endpoint],
        nats_url=nats_url,
        storage_uri=storage_uri,
        proxy_port=port,
        proxy_host=host,
        metrics_port=metrics_port,
        internal_host=internal_host or (host if host not in ("0.0.0.0", "::") else "127.0.0.1"),
        cluster=cluster,
        auth=auth,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        http_port=http_port,
    )
    _check_security(cfg, runs_rootcoord="rootcoord" in roles)
    _serve_metrics(cfg)
    sys.exit(run_role(cfg, tuple(roles)))


def _config(**flags) -> Config:
    """Config.from_env with the command's flags; an invalid setting is a usage error."""
    try:
        return Config.from_env(**flags)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _check_security(cfg: Config, runs_rootcoord: bool) -> None:
    try:
        cfg.check_security(runs_rootcoord)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _serve_metrics(cfg: Config) -> None:
    if cfg.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(cfg.metrics_port, addr=cfg.proxy_host)


if __name__ == "__main__":
    main()
