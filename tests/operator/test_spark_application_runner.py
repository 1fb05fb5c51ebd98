"""`controllers.spark_runner.SparkApplicationRunner` against the session's real API server with
the SparkApplication CRD (tests/sparkcrd.py): the SparkApplication resources it creates (their
spec as the CRD keeps it), the states it reads back, cancel / release. Applications that run:
tests/deploy/test_kubernetes.py (the spark-operator stand-in) and tests/operator/test_spark_cluster_standin.py."""

from __future__ import annotations

import json

import pytest

from controllers import resources as R
from controllers.kube import KubeClient
from controllers.spark_runner import SPARK_APPLICATION, SparkApplicationRunner, status_of
from kmilvus.spark import application
from kmilvus.spark.runner import JobState

pytestmark = [pytest.mark.timeout(120)]
DIM = 8


async def make_collection_cr(kube: KubeClient, name: str, collection_id: int, ns: str) -> dict:
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


def import_app(coll_id: int, job_id: int, ns: str, coll_name: str = "docs") -> dict:
    spec = {
        "kind": "import",
        "version": 1,
        "job_id": job_id,
        "collection_id": coll_id,
        "collection_name": coll_name,
        "files": [],
    }
    return application.build_application(
        "import", spec, name=application.app_name("import", coll_id, job_id), namespace=ns
    )


async def set_state(kns, name: str, state: str, error: str = "") -> None:
    """The spark-operator's status write (its CRD requires status.driverInfo, empty or not)."""
    st = {"state": state, **({"errorMessage": error} if error else {})}
    await kns.patch(SPARK_APPLICATION, name, {"status": {"applicationState": st, "driverInfo": {}}}, status=True)


# ----------------------------------------------------------------------------------------------
async def test_submit_state_cancel_release(kns):
    cr = await make_collection_cr(kns.client, "docs", 4242, kns.name)
    runner = SparkApplicationRunner(kns.client, kns.name)
    app = import_app(4242, 7, kns.name)
    sent = json.loads(json.dumps(app))

    handle = await runner.submit(app)
    assert app == sent  # the caller's dict is left alone
    assert json.loads(json.dumps(handle)) == handle  # JSON-able: DataCoord keeps it in etcd
    assert handle["name"] == app["metadata"]["name"] and handle["namespace"] == kns.name
    o = kns.obj(SPARK_APPLICATION, app["metadata"]["name"])
    assert o is not None and o["spec"] == app["spec"]  # spec unchanged: nothing pruned by the CRD
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
    assert again == handle and len(kns.items(SPARK_APPLICATION)) == 1

    # The spark-operator's states.
    assert (await runner.state(handle)).state == JobState.NEW
    for s in ("SUBMITTED", "RUNNING", "SUCCEEDING"):
        await set_state(kns, handle["name"], s)
        st = await runner.state(handle)
        assert st.state == JobState(s) and not st.state.terminal and st.message == ""
    await set_state(kns, handle["name"], "COMPLETED")
    st = await runner.state(handle)
    assert st.state == JobState.COMPLETED and st.state.terminal

    # release deletes a finished application.
    await runner.release(handle)
    assert kns.obj(SPARK_APPLICATION, handle["name"]) is None
    await runner.release(handle)  # twice: nothing left, fine
    st = await runner.state(handle)
    assert st.state == JobState.FAILED and "deleted" in st.message

    # FAILED with the operator's error message; a running one is not released, but cancelled.
    h2 = await runner.submit(import_app(4242, 8, kns.name))
    await set_state(kns, h2["name"], "RUNNING")
    await runner.release(h2)
    assert kns.obj(SPARK_APPLICATION, h2["name"]) is not None
    await set_state(kns, h2["name"], "FAILED", "driver pod failed: OOMKilled")
    st = await runner.state(h2)
    assert st.state == JobState.FAILED and st.message == "driver pod failed: OOMKilled"
    await set_state(kns, h2["name"], "RUNNING")
    await runner.cancel(h2)
    assert kns.obj(SPARK_APPLICATION, h2["name"]) is None
    await runner.cancel(h2)  # NotFound is fine


async def test_every_state_and_unowned(kns):
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
    runner = SparkApplicationRunner(kns.client, kns.name)
    h = await runner.submit(import_app(99, 1, kns.name, coll_name="orphan"))
    o = kns.obj(SPARK_APPLICATION, h["name"])
    assert "ownerReferences" not in o["metadata"] and o["metadata"]["labels"][R.LABEL_COLLECTION] == "orphan"

    # An owner lookup of one's own. (It names an object that exists: the garbage collector
    # deletes an object whose owner is not there.)
    mine = await make_collection_cr(kns.client, "mine", 98, kns.name)

    async def owner_for(app):
        return mine

    h = await SparkApplicationRunner(kns.client, kns.name, owner_for=owner_for).submit(import_app(99, 2, kns.name))
    o = kns.obj(SPARK_APPLICATION, h["name"])
    assert o["metadata"]["ownerReferences"][0]["uid"] == mine["metadata"]["uid"]
    assert o["metadata"]["labels"][R.LABEL_COLLECTION] == "mine"


async def test_application_goes_to_its_collections_namespace(kns, more_namespaces):
    """Several served namespaces: each application is created next to its Collection (where the
    chart put the driver's service account, Role and S3 Secret), owned by it; one without a
    Collection resource stays in its own namespace (the SDK namespace)."""
    team_a, team_b = more_namespaces(2)
    cr_a = await make_collection_cr(kns.client, "docs", 501, team_a)
    cr_b = await make_collection_cr(kns.client, "docs", 502, team_b)
    runner = SparkApplicationRunner(kns.client, (team_a, team_b))

    def app_in_sdk_ns(coll_id: int, job_id: int) -> dict:
        return import_app(coll_id, job_id, kns.name)

    for cr, cid in ((cr_a, 501), (cr_b, 502)):
        ns = cr["metadata"]["namespace"]
        h = await runner.submit(app_in_sdk_ns(cid, 1))
        assert h["namespace"] == ns
        o = kns.obj(SPARK_APPLICATION, h["name"], ns)
        assert o["metadata"]["namespace"] == ns
        assert o["metadata"]["ownerReferences"] == [application.collection_owner("docs", cr["metadata"]["uid"])]
        assert kns.obj(SPARK_APPLICATION, h["name"]) is None
    h = await runner.submit(app_in_sdk_ns(503, 1))
    assert h["namespace"] == kns.name and "ownerReferences" not in kns.obj(SPARK_APPLICATION, h["name"])["metadata"]
