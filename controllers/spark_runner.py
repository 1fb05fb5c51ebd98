"""`SparkApplicationRunner`: DataCoord's `JobRunner` on Kubernetes.

It hands the SparkApplication that `kmilvus.spark.application` builds to Kubeflow's
spark-operator by creating the custom resource (`sparkoperator.k8s.io/v1beta2`), owned by the
Collection resource (ownerReferences + the `kmilvus.io/collection` label, like Segments), and
reads back what the spark-operator writes in `status.applicationState`. Same contract as
`LocalSparkRunner`: JSON-able handles (DataCoord keeps them in etcd and asks again after a
restart), `state` → `JobStatus`, `cancel` stops the application (deletes the resource: the
spark-operator then deletes the driver and executor pods), `release` forgets a finished one.

The job's files (binlogs, manifest) are DataCoord's business; nothing here touches them.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from controllers import resources as R
from controllers.kube import Conflict, KubeClient, NotFound, Resource
from controllers.schema import label_value
from kmilvus.spark import application
from kmilvus.spark.runner import JobRunner, JobState, JobStatus

log = logging.getLogger(__name__)

SPARK_APPLICATION = Resource("sparkoperator.k8s.io", "v1beta2", "sparkapplications", "SparkApplication")
RUNNER = "sparkapplication"

# `owner_for(app)` → the owning Collection resource's body (or just its metadata), or None.
OwnerLookup = Callable[[dict], Awaitable[dict | None]]


class SparkApplicationRunner(JobRunner):
    """Runs applications as SparkApplication resources through `kube` (a `KubeClient`).

    An application goes to the namespace of the Collection resource that owns it (ownerReferences
    cannot cross namespaces, and the chart gives the driver's service account, Role and S3 Secret
    to every served namespace). The owner is the Collection whose `status.collectionID` is the
    job's collection ID, looked up in `namespaces` (the served ones; None = cluster-wide), unless
    `owner_for(app)` is given. No Collection resource → the application is created unowned in
    its own `metadata.namespace` (`cfg.spark_namespace`).
    `cancel_wait`: how long `cancel` waits for the resource to disappear.
    """

    def __init__(
        self,
        kube: KubeClient,
        namespaces: str | Sequence[str] | None = None,
        *,
        owner_for: OwnerLookup | None = None,
        cancel_wait: float = 30.0,
        poll: float = 0.2,
    ):
        self.kube = kube
        self.namespaces: tuple[str, ...] | None = (
            (namespaces,) if isinstance(namespaces, str) else tuple(namespaces) if namespaces else None
        )
        self.owner_for = owner_for or self._find_collection
        self.cancel_wait = cancel_wait
        self.poll = poll

    # ------------------------------------------------------------------------------- submit
    async def _find_collection(self, app: dict) -> dict | None:
        coll_id = _collection_id(app)
        if coll_id is None:
            return None
        items: list[dict] = []
        for ns in self.namespaces or (None,):
            items += await self.kube.list(R.COLLECTION, ns)
        for item in items:
            cid = (item.get("status") or {}).get("collectionID")
            if cid is not None and str(cid) == str(coll_id) and not item["metadata"].get("deletionTimestamp"):
                return item
        return None

    def _handle(self, obj: dict) -> dict:
        m = obj.get("metadata") or {}
        return {
            "runner": RUNNER,
            "apiVersion": SPARK_APPLICATION.api_version,
            "namespace": m.get("namespace") or "",
            "name": m["name"],
            "uid": m.get("uid", ""),
        }

    async def submit(self, app: dict) -> dict:
        app = copy.deepcopy(app)
        application.validate_application(app)
        meta = app["metadata"]
        ns = meta.get("namespace") or "default"
        labels = meta.setdefault("labels", {})
        owner = await self.owner_for(app)
        if owner:
            om = owner.get("metadata", owner)
            ns = om.get("namespace") or ns
            meta["ownerReferences"] = [application.collection_owner(om["name"], om["uid"])]
            labels[R.LABEL_COLLECTION] = label_value(om["name"])
        else:
            name = application.job_spec_of(app).get("collection_name") if app["spec"].get("arguments") else ""
            if name:
                labels[R.LABEL_COLLECTION] = label_value(str(name))
            log.warning(
                "no Collection resource owns SparkApplication %s/%s (collection %s): created unowned",
                ns,
                meta["name"],
                _collection_id(app),
            )
        meta["namespace"] = ns
        labels.setdefault(R.LABEL_MANAGED_BY, R.MANAGED_BY)
        app.pop("status", None)
        try:
            created = await self.kube.create(SPARK_APPLICATION, ns, app)
            log.info("SparkApplication %s/%s created", ns, meta["name"])
        except Conflict:
            # Submitted before (a crash between submit and DataCoord saving the handle): adopt it.
            # The name is unique per job (kmilvus-<kind>-<collection>-<job>), so it is this job.
            created = await self.kube.get(SPARK_APPLICATION, ns, meta["name"])
            log.info("SparkApplication %s/%s exists already: adopted", ns, meta["name"])
        return self._handle(created or app)

    # -------------------------------------------------------------------------------- state
    async def state(self, handle: dict) -> JobStatus:
        ns, name = handle["namespace"], handle["name"]
        try:
            obj = await self.kube.get(SPARK_APPLICATION, ns, name)
        except NotFound:
            return JobStatus(JobState.FAILED, f"SparkApplication {ns}/{name} was deleted before it finished")
        return status_of(obj)

    # ------------------------------------------------------------------------------- cancel
    async def cancel(self, handle: dict) -> None:
        ns, name = handle["namespace"], handle["name"]
        await self.kube.delete(SPARK_APPLICATION, ns, name)  # NotFound is fine
        deadline = time.monotonic() + self.cancel_wait
        while time.monotonic() < deadline:  # finalizers: wait until it is gone
            try:
                await self.kube.get(SPARK_APPLICATION, ns, name)
            except NotFound:
                break
            await asyncio.sleep(self.poll)
        else:
            log.warning("SparkApplication %s/%s still exists %.0fs after its deletion", ns, name, self.cancel_wait)
        log.info("SparkApplication %s/%s cancelled", ns, name)

    async def release(self, handle: dict) -> None:
        """Delete a finished application's resource (a running one is left alone: cancel it)."""
        ns, name = handle["namespace"], handle["name"]
        try:
            obj = await self.kube.get(SPARK_APPLICATION, ns, name)
        except NotFound:
            return
        st = status_of(obj)
        if not st.state.terminal:
            log.warning("not releasing SparkApplication %s/%s: it is %s", ns, name, st.state.value or "NEW")
            return
        await self.kube.delete(SPARK_APPLICATION, ns, name)


def status_of(obj: dict) -> JobStatus:
    """`status.applicationState` → JobStatus ("" = NEW: not yet picked up by the spark-operator)."""
    app_state = (obj.get("status") or {}).get("applicationState") or {}
    raw = str(app_state.get("state") or "")
    msg = str(app_state.get("errorMessage") or "")
    try:
        state = JobState(raw)
    except ValueError:
        state, msg = JobState.UNKNOWN, msg or f"unknown SparkApplication state {raw!r}"
    if obj.get("metadata", {}).get("deletionTimestamp") and not state.terminal:
        return JobStatus(JobState.FAILING, msg or "the SparkApplication is being deleted")
    return JobStatus(state, msg)


def _collection_id(app: dict) -> str | None:
    cid = (app.get("metadata", {}).get("labels") or {}).get("kmilvus.io/collection-id")
    if not cid and app.get("spec", {}).get("arguments"):
        cid = application.job_spec_of(app).get("collection_id")
    return str(cid) if cid not in (None, "") else None
