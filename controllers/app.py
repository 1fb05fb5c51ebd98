"""Assemble and run the operator: kopf handlers + the coordinators in one event loop."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import kopf

from controllers import collection, flush, leader
from controllers.runtime import Options, Runtime
from kmilvus.config import Config


def build_registry(opts: Options) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    collection.register(registry)
    flush.register(registry)
    leader.register(registry, peering=opts.peering, clusterwide=not opts.namespaces)
    return registry


def build_settings(opts: Options) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.level = logging.WARNING  # kopf's own log lines are not Events; ours are
    settings.persistence.finalizer = "kmilvus.io/finalizer"
    # kopf's own state in status.kopf (the CRDs preserve it): one status PATCH per handling cycle
    # carries it together with ours, instead of an extra PATCH of annotations.
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf.progress")
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(field="status.kopf.lastHandledConfiguration")
    settings.posting.reporting_component = "kmilvus-operator"
    settings.watching.connect_timeout = 30
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 1, 2, 3, 5]
    settings.background.cancellation_polling = 1.0  # exiting daemons are checked every second, not 60
    if opts.peering is not None:
        settings.peering.name = opts.peering
        settings.peering.priority = opts.priority if opts.priority is not None else int(time.time() * 1000) % 2**31
        settings.peering.lifetime = 30
        settings.peering.mandatory = True
    settings.peering.standalone = opts.peering is None
    if opts.namespaces:
        settings.scanning.disabled = True  # exactly the namespaces named; no listing
    return settings


async def run(
    cfg: Config,
    opts: Options,
    *,
    liveness: str | None = None,
    stop_flag: Any = None,
    ready_flag: Any = None,
    runtime: Runtime | None = None,
) -> None:
    """Run until `stop_flag` is set (or the task is cancelled); the coordinators stop last."""
    settings = build_settings(opts)
    if threading.current_thread() is not threading.main_thread():
        settings.process.ultimate_exiting_timeout = None  # not our process to SIGKILL (tests, embedding)
    rt = runtime or Runtime(cfg, opts, settings)
    rt.settings = settings
    registry = build_registry(opts)
    try:
        await kopf.operator(
            registry=registry,
            settings=settings,
            memo=kopf.Memo(runtime=rt),
            clusterwide=not opts.namespaces,
            namespaces=list(opts.namespaces),
            standalone=opts.peering is None,
            peering_name=opts.peering,
            priority=settings.peering.priority if opts.peering is not None else None,
            liveness_endpoint=liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        await rt.shutdown()
