"""Collections created through the Milvus API (pymilvus) appear as Collection resources.

While this replica is active, a loop compares RootCoord's collections with the Collection
resources (kopf's index of (database, name) -> resource, re-checked with one LIST before anything
is created) and creates a resource for each collection nobody declared: annotated
`kmilvus.io/created-by: sdk`, `deletionPolicy: Delete` (deleting it drops the collection). The
Collection reconciler adopts it and records `status.createdBy: sdk`. Collections the operator
created for a resource (property `kmilvus.io/managed-by: operator`) are never mirrored — e.g. one
kept by `deletionPolicy: Retain` after its resource was deleted.
"""

from __future__ import annotations

import asyncio
import logging
import time

from controllers import resources as R
from controllers.kube import Conflict
from controllers.schema import DEFAULT_DB, SpecError, k8s_name, spec_from_collection, target

log = logging.getLogger("kmilvus.operator.sdk")
RECENT = 30.0  # seconds a mirrored collection is not considered again (the index catches up)


def _indexed(rt) -> set[tuple[str, str]]:
    idx = rt.collection_index
    return set(idx.keys()) if idx is not None else set()


async def _declared(rt) -> set[tuple[str, str]]:
    """(database, name) of every Collection resource, from the API (the index may lag)."""
    keys = set()
    namespaces = rt.opts.namespaces or (None,)
    for ns in namespaces:
        for item in await rt.kube.list(R.COLLECTION, ns):
            spec = item.get("spec")
            if isinstance(spec, dict):
                keys.add(target(spec, item["metadata"]["name"]).key)
    return keys


async def mirror_once(rt, recent: dict[tuple[str, str], float]) -> int:
    co = await rt.coordinators()
    now = time.monotonic()
    for k in [k for k, t in recent.items() if now - t > RECENT]:
        recent.pop(k)
    indexed = _indexed(rt)
    candidates = []
    for desc in await co.list_collections():
        key = (desc.db_name or DEFAULT_DB, desc.collection_name)
        if key in indexed or key in recent:
            continue
        props = {kv.key: kv.value for kv in desc.properties}
        if props.get(R.PROP_MANAGED_BY) == "operator":
            continue
        candidates.append((key, desc))
    if not candidates:
        return 0
    declared = await _declared(rt)
    made = 0
    ns = rt.opts.home_namespace
    for (db, name), rsp in candidates:
        if (db, name) in declared:
            recent[(db, name)] = now
            continue
        try:
            spec = spec_from_collection(rsp)
        except SpecError as exc:
            log.warning("collection %s/%s cannot be mirrored: %s", db, name, exc)
            recent[(db, name)] = now
            continue
        for k8s in (k8s_name(db, name), k8s_name(db, name, hashed=True)):
            body = {
                "metadata": {
                    "name": k8s,
                    "namespace": ns,
                    "annotations": {R.ANN_CREATED_BY: "sdk"},
                    "labels": {R.LABEL_MANAGED_BY: R.MANAGED_BY},
                },
                "spec": spec,
            }
            try:
                await rt.kube.create(R.COLLECTION, ns, body)
            except Conflict:
                continue  # the name is taken (by another resource): try the hashed form
            made += 1
            rt.stats.inc("sdk_mirrored")
            log.info("mirrored SDK-created collection %s/%s as Collection %s/%s", db, name, ns, k8s)
            break
        recent[(db, name)] = now
    return made


async def mirror_loop(rt) -> None:
    recent: dict[tuple[str, str], float] = {}
    while True:
        try:
            await mirror_once(rt, recent)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.warning("SDK collection mirror pass failed: %s", exc)
        await asyncio.sleep(rt.opts.sdk_poll_interval)
