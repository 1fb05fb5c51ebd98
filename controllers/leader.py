"""One active replica: kopf peering decides, the coordinators follow.

kopf pauses every replica but the highest-priority one (same priorities pause each other), and
stops all daemons of a paused replica. A daemon on the peering object itself therefore runs
exactly while this replica is active: it acquires the coordinators when it starts and releases
them when it is stopped. With `--standalone` there is no peering: the coordinators start with the
operator. Each replica gets a distinct default priority (its start time), so the newest replica
takes over and the others stand by, resuming when its keep-alives stop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from controllers import resources as R
from controllers.kube import Conflict, NotFound

log = logging.getLogger("kmilvus.operator.leader")


async def leadership(stopped, name, memo, logger, **_):
    rt = memo.runtime
    await rt.acquire(f"active in peering {name}")
    try:
        while not stopped:
            await stopped.wait(3600)
    finally:
        await asyncio.shield(rt.release(f"paused or stopping (peering {name})"))


async def ensure_peering_object(rt, clusterwide: bool) -> None:
    """Create the peering object when it is missing (kopf only patches it)."""
    name = rt.opts.peering
    targets = [(R.CLUSTER_PEERING, None)] if clusterwide else [(R.PEERING, ns) for ns in rt.opts.namespaces]
    for res, ns in targets:
        try:
            await rt.kube.get(res, ns, name)
        except NotFound:
            try:
                await rt.kube.create(
                    res, ns, {"metadata": {"name": name, **({"namespace": ns} if ns else {})}, "status": {}}
                )
                log.info("created %s %s", res.kind, name)
            except Conflict:
                pass
        except Exception as exc:  # noqa: BLE001 - no CRD or no RBAC: kopf reports the rest
            log.warning("cannot check the peering object %s: %s", name, exc)


def register(registry: kopf.OperatorRegistry, *, peering: str | None, clusterwide: bool) -> None:
    @kopf.on.login(registry=registry)
    async def login(memo, **_):
        return await memo.runtime.login()

    @kopf.on.startup(registry=registry)
    async def startup(memo: kopf.Memo, settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        rt = memo.runtime
        rt.settings = settings
        rt.collection_index = kwargs["collection_names"]  # the index of collection.py
        if peering is None:
            await rt.acquire("standalone")
        else:
            asyncio.get_running_loop().create_task(ensure_peering_object(rt, clusterwide))

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo, **_):
        await memo.runtime.shutdown()

    @kopf.on.probe(id="coordinators", registry=registry)
    def probe(memo, **_):
        rt = memo.runtime
        return {"active": rt.active, "cluster": rt.cfg.cluster}

    if peering is not None:
        plural = R.CLUSTER_PEERING.plural if clusterwide else R.PEERING.plural
        kopf.daemon(
            "kopf.dev",
            "v1",
            plural,
            id="leadership",
            registry=registry,
            backoff=2.0,
            cancellation_backoff=10.0,
            cancellation_timeout=10.0,
            when=lambda name, **_: name == peering,
        )(leadership)
