"""`controllers.spark_runner.SparkApplicationRunner` against KMock (tests/kmock_compat.py):
the SparkApplication resources it creates, the states it reads back, cancel / release; then a
real bulk import through pymilvus and DataCoord where the test plays Kubeflow's spark-operator:
it runs every new SparkApplication's spec through `LocalSparkRunner` (real local Spark) and
mirrors its states into the resource's status."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid

import kmock as kmock_lib
import kopf
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections, utility
from pymilvus.client.types import BulkInsertState

from controllers import resources as R
from controllers.kube import KubeClient
from controllers.spark_runner import SPARK_APPLICATION, SparkApplicationRunner, status_of
from kmilvus.spark import application
from kmilvus.spark.runner import JobState, LocalSparkRunner
from tests.kmock_compat import KMockCompat, declare_crds
from tests.util import eventually, kmock_object

pytestmark = [pytest.mark.kmock(cls=KMockCompat), pytest.mark.timeout(120)]
NS = "default"
APPS = "sparkoperator.k8s.io/v1beta2/sparkapplications"
COLL = "kmilvus.io/v1alpha1/collections"
DIM = 8


def obj(kmock, res: str, name: str, ns: str | None = NS):
    return kmock_object(kmock, res, name, ns)


def apps(kmock) -> list[dict]:
    return [
        dict(o.raw)
        for (res, _, _), o in kmock.objects.items()
        if str(res.plural) == "sparkapplications" and not o.deleted
    ]


def declare(kmock) -> None:
    declare_crds(kmock)
    kmock.resources[APPS] = kmock_lib.ResourceInfo(
        kind="SparkApplication",
        singular="sparkapplication",
        namespaced=True,
        shortnames=["sparkapp"],
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        subresources={"status"},
    )


def client_for(kmock) -> KubeClient:
    async def login():
        return kopf.ConnectionInfo(server=str(kmock.url), insecure=True)

    return KubeClient(login)


@pytest.fixture
async def kube(kmock):
    declare(kmock)
    client = client_for(kmock)
    yield client
    await client.close()


async def make_collection_cr(kube: KubeClient, name: str, collection_id: int, ns: str = NS) -> dict:
    """A Collection resource as the operator leaves it (status.collectionID set)."""
    body = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "fields": [
                {"name": "id", "dataType": "Int64", "isPrimaryKey": True},
                {"name": "vec", "dataType": "FloatVector", "dim": DIM},
                {"name": "tag", "dataType": "VarChar", "maxLength": 32},
            ]
        },
    }
    await kube.create(R.COLLECTION, ns, body)
    await kube.patch(
        R.COLLECTION, ns, name, {"status": {"phase": "Ready", "collectionID": collection_id, "name": name}}, status=True
    )
    return await kube.get(R.COLLECTION, ns, name)


def import_app(coll_id: int, job_id: int, coll_name: str = "docs") -> dict:
    spec = {
        "kind": "import",
        "version": 1,
        "job_id": job_id,
        "collection_id": coll_id,
        "collection_name": coll_name,
        "files": [],
    }
    return application.build_application(
        "import", spec, name=application.app_name("import", coll_id, job_id), namespace=NS
    )


async def set_state(kube: KubeClient, name: str, state: str, error: str = "") -> None:
    st = {"state": state, **({"errorMessage": error} if error else {})}
    await kube.patch(SPARK_APPLICATION, NS, name, {"status": {"applicationState": st}}, status=True)


# ----------------------------------------------------------------------------------------------
async def test_submit_state_cancel_release(kmock, kube):
    cr = await make_collection_cr(kube, "docs", 4242)
    runner = SparkApplicationRunner(kube, NS)
    app = import_app(4242, 7)
    sent = json.loads(json.dumps(app))

    handle = await runner.submit(app)
    assert app == sent  # the caller's dict is left alone
    assert json.loads(json.dumps(handle)) == handle  # JSON-able: DataCoord keeps it in etcd
    assert handle["name"] == app["metadata"]["name"] and handle["namespace"] == NS
    o = obj(kmock, APPS, app["metadata"]["name"])
    assert o is not None and o["spec"] == app["spec"]  # spec unchanged
    assert o["spec"]["type"] == "Python" and o["spec"]["mainApplicationFile"].endswith("/import_job.py")
    assert application.job_spec_of(o) == application.job_spec_of(app)
    ref = o["metadata"]["ownerReferences"]
    assert ref == [application.collection_owner("docs", cr["metadata"]["uid"])]
    assert ref[0]["apiVersion"] == "kmilvus.io/v1alpha1" and ref[0]["kind"] == "Collection"
    labels = o["metadata"]["labels"]
    assert labels[R.LABEL_COLLECTION] == "docs" and labels["kmilvus.io/collection-id"] == "4242"
    assert labels["kmilvus.io/job-kind"] == "import" and labels["kmilvus.io/job-id"] == "7"

    # Idempotent: a second submit (409) adopts the same object.
    again = await runner.submit(app)
    assert again == handle and len(apps(kmock)) == 1

    # The spark-operator's states.
    assert (await runner.state(handle)).state == JobState.NEW
    for s in ("SUBMITTED", "RUNNING", "SUCCEEDING"):
        await set_state(kube, handle["name"], s)
        st = await runner.state(handle)
        assert st.state == JobState(s) and not st.state.terminal and st.message == ""
    await set_state(kube, handle["name"], "COMPLETED")
    st = await runner.state(handle)
    assert st.state == JobState.COMPLETED and st.state.terminal

    # release deletes a finished application.
    await runner.release(handle)
    assert obj(kmock, APPS, handle["name"]) is None
    await runner.release(handle)  # twice: nothing left, fine
    st = await runner.state(handle)
    assert st.state == JobState.FAILED and "deleted" in st.message

    # FAILED with the operator's error message; a running one is not released, but cancelled.
    h2 = await runner.submit(import_app(4242, 8))
    await set_state(kube, h2["name"], "RUNNING")
    await runner.release(h2)
    assert obj(kmock, APPS, h2["name"]) is not None
    await set_state(kube, h2["name"], "FAILED", "driver pod failed: OOMKilled")
    st = await runner.state(h2)
    assert st.state == JobState.FAILED and st.message == "driver pod failed: OOMKilled"
    await set_state(kube, h2["name"], "RUNNING")
    await runner.cancel(h2)
    assert obj(kmock, APPS, h2["name"]) is None
    await runner.cancel(h2)  # NotFound is fine


async def test_every_state_and_unowned(kmock, kube):
    for s in (
        "",
        "SUBMITTED",
        "RUNNING",
        "COMPLETED",
        "FAILED",
        "SUBMISSION_FAILED",
        "PENDING_RERUN",
        "INVALIDATING",
        "SUCCEEDING",
        "FAILING",
        "UNKNOWN",
    ):
        st = status_of({"metadata": {}, "status": {"applicationState": {"state": s, "errorMessage": "m"}}})
        assert st.state == JobState(s) and st.state.value == s and st.message == "m"
    assert status_of({"metadata": {}}).state == JobState.NEW
    deleting = {"metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}}
    assert status_of({**deleting, "status": {"applicationState": {"state": "RUNNING"}}}).state == JobState.FAILING
    assert status_of({**deleting, "status": {"applicationState": {"state": "COMPLETED"}}}).state == JobState.COMPLETED
    st = status_of({"metadata": {}, "status": {"applicationState": {"state": "WEIRD"}}})
    assert st.state == JobState.UNKNOWN and "WEIRD" in st.message
    assert {s for s in JobState if s.terminal} == {JobState.COMPLETED, JobState.FAILED, JobState.SUBMISSION_FAILED}

    # No Collection resource: created unowned, labelled with the collection's name.
    runner = SparkApplicationRunner(kube, NS)
    h = await runner.submit(import_app(99, 1, coll_name="orphan"))
    o = obj(kmock, APPS, h["name"])
    assert "ownerReferences" not in o["metadata"] and o["metadata"]["labels"][R.LABEL_COLLECTION] == "orphan"

    # An owner lookup of one's own.
    async def owner_for(app):
        return {"metadata": {"name": "mine", "uid": "u-1"}}

    h = await SparkApplicationRunner(kube, NS, owner_for=owner_for).submit(import_app(99, 2))
    o = obj(kmock, APPS, h["name"])
    assert o["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert o["metadata"]["labels"][R.LABEL_COLLECTION] == "mine"


async def test_application_goes_to_its_collections_namespace(kmock, kube):
    """Several served namespaces: each application is created next to its Collection (where the
    chart put the driver's service account, Role and S3 Secret), owned by it; one without a
    Collection resource stays in its own namespace (the SDK namespace)."""
    cr_a = await make_collection_cr(kube, "docs", 501, ns="team-a")
    cr_b = await make_collection_cr(kube, "docs", 502, ns="team-b")
    runner = SparkApplicationRunner(kube, ("team-a", "team-b"))

    def app_in_sdk_ns(coll_id: int, job_id: int) -> dict:
        app = import_app(coll_id, job_id)
        app["metadata"]["namespace"] = "kmilvus"
        return app

    for cr, cid in ((cr_a, 501), (cr_b, 502)):
        ns = cr["metadata"]["namespace"]
        h = await runner.submit(app_in_sdk_ns(cid, 1))
        assert h["namespace"] == ns
        o = obj(kmock, APPS, h["name"], ns)
        assert o["metadata"]["namespace"] == ns
        assert o["metadata"]["ownerReferences"] == [application.collection_owner("docs", cr["metadata"]["uid"])]
        assert obj(kmock, APPS, h["name"], "kmilvus") is None
    h = await runner.submit(app_in_sdk_ns(503, 1))
    assert h["namespace"] == "kmilvus" and "ownerReferences" not in obj(kmock, APPS, h["name"], "kmilvus")["metadata"]


# ---------------------------------------------------------------------------------------------- e2e
class FakeSparkOperator:
    """Plays Kubeflow's spark-operator: every new SparkApplication runs through LocalSparkRunner
    (its spec as it is in the cluster) and its states are written to status.applicationState."""

    def __init__(self, kmock, work_dir):
        self.kmock = kmock
        self.kube = client_for(kmock)
        self.local = LocalSparkRunner(master="local[2]", work_dir=str(work_dir))
        self.seen: dict[str, dict] = {}  # name -> the resource as first seen
        self.states: dict[str, list[str]] = {}
        self.tasks: list[asyncio.Task] = []

    async def run(self) -> None:
        while True:
            for a in apps(self.kmock):
                name = a["metadata"]["name"]
                if name not in self.seen:
                    self.seen[name] = a
                    self.tasks.append(asyncio.create_task(self._drive(a)))
            await asyncio.sleep(0.1)

    async def _drive(self, app: dict) -> None:
        name = app["metadata"]["name"]
        handle = await self.local.submit(app)
        last = None
        try:
            while True:
                st = await self.local.state(handle)
                if st.state != last:
                    last = st.state
                    self.states.setdefault(name, []).append(st.state.value)
                    await set_state(self.kube, name, st.state.value, st.message)
                if st.state.terminal:
                    return
                await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            await self.local.cancel(handle)
            raise

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(BaseException):
                await t
        await self.kube.close()


def _wait_import(task_id: int, alias: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        st = utility.get_bulk_insert_state(task_id, using=alias)
        if st.state in (
            BulkInsertState.ImportCompleted,
            BulkInsertState.ImportFailed,
            BulkInsertState.ImportFailedAndCleaned,
        ):
            return st
        assert time.monotonic() < deadline, f"import {task_id} still {st.state_name}: {st.infos}"
        time.sleep(0.3)


@pytest.mark.spark
@pytest.mark.timeout(300)  # a Spark job on a loaded 2-core machine can take minutes
async def test_bulk_import_through_spark_applications(kmock, kube, node_factory, tmp_path):
    n = 1000
    rng = np.random.default_rng(0)
    vec = rng.random((n, DIM), dtype=np.float32)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.arange(n, dtype=np.int64)),
                "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM),
                "tag": pa.array([f"t{i % 7}" for i in range(n)]),
            }
        ),
        tmp_path / "rows.parquet",
    )

    # A job this small would run in-process: this test follows the SparkApplication route.
    node = await asyncio.to_thread(node_factory, inprocess_job_max_mb=0)
    runner = SparkApplicationRunner(client_for(kmock), NS)  # used on the node's loop only

    async def plug():
        node.component("datacoord").set_job_runner(runner)

    await asyncio.to_thread(node.call, plug())
    operator = FakeSparkOperator(kmock, tmp_path / "spark")
    op_task = asyncio.create_task(operator.run())
    alias = "a" + uuid.uuid4().hex[:8]
    try:

        def create() -> int:
            connections.connect(alias, uri=node.uri)
            schema = CollectionSchema(
                [
                    FieldSchema("id", DataType.INT64, is_primary=True),
                    FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM),
                    FieldSchema("tag", DataType.VARCHAR, max_length=32),
                ]
            )
            return Collection("docs", schema, using=alias).describe()["collection_id"]

        cid = await asyncio.to_thread(create)
        cr = await make_collection_cr(kube, "docs", cid)
        task = await asyncio.to_thread(
            utility.do_bulk_insert, "docs", files=[str(tmp_path / "rows.parquet")], using=alias
        )
        st = await asyncio.to_thread(_wait_import, task, alias, 240)
        assert st.state == BulkInsertState.ImportCompleted, st.infos
        assert st.row_count == n
        assert await asyncio.to_thread(lambda: Collection("docs", using=alias).num_entities) == n

        # One SparkApplication, owned by the Collection, ran the application DataCoord built.
        assert len(operator.seen) == 1
        ((name, app),) = operator.seen.items()
        assert name == application.app_name("import", cid, application.job_spec_of(app)["job_id"])
        assert app["metadata"]["ownerReferences"] == [application.collection_owner("docs", cr["metadata"]["uid"])]
        assert app["metadata"]["labels"][R.LABEL_COLLECTION] == "docs"
        assert app["spec"]["type"] == "Python" and application.job_spec_of(app)["collection_id"] == cid
        assert operator.states[name][-1] == "COMPLETED" and "RUNNING" in operator.states[name]
        # DataCoord released it once the import was done.
        await eventually(lambda: obj(kmock, APPS, name) is None, 10, "the SparkApplication to be released")
    finally:
        op_task.cancel()
        with contextlib.suppress(BaseException):
            await op_task
        await operator.close()
        with contextlib.suppress(Exception):
            connections.disconnect(alias)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(node.call, runner.kube.close())
