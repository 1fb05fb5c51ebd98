"""SparkApplications as a cluster runs them (docs/architecture/jobs.md, the spark-operator part),
on the session's real API server: the spark-operator stand-in (tests/sparkstandin.py) makes each
application's driver pod, the node (tests/nodeagent.py) runs it with only what its spec gives, the
driver (tests/sparkimage.py) talks to the API server with its own service-account token. The
driver's service account, Role and RoleBinding are the chart's (the real helm renders them, the API
server enforces them), the operator's spark_* settings come from the rendered operator Deployment.
When the Secret or the service account is wrong, the application fails the way it does on a
cluster — and nothing runs. (A job that runs through all of it: tests/deploy/test_kubernetes.py.)"""

from __future__ import annotations

import base64
import os

import pytest
import yaml

from controllers.spark_runner import SparkApplicationRunner
from kmilvus.config import Config
from kmilvus.spark import application
from kmilvus.spark.runner import JobState
from tests.deploy.test_chart import CHART, RELEASE, helm, one
from tests.nodeagent import pod_logs
from tests.operator.test_spark_application_runner import make_collection_cr
from tests.sparkstandin import driver_pod_name
from tests.util import eventually

pytestmark = [pytest.mark.timeout(180)]


def rendered(ns: str) -> list[dict]:
    values = {
        "operator": {"watchNamespaces": [ns]},
        "storage": {
            "uri": "s3://b/data?endpoint=http://127.0.0.1:1",
            "existingSecret": "s3-creds",
            "accessKeyIdKey": "access",
            "secretAccessKeyKey": "secret",
        },
    }
    out = helm("template", RELEASE, str(CHART), "--namespace", "kmilvus", values=values).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def user_secret(ns: str, **data: str) -> dict:
    """A Secret as `kubectl create secret generic s3-creds` leaves it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s3-creds", "namespace": ns},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def operator_settings(docs: list[dict]) -> dict:
    """The spark_* settings exactly as the rendered operator container gets them."""
    c = one(docs, "Deployment", f"{RELEASE}-operator")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"] if e["name"].startswith("KMILVUS_SPARK_")}
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        cfg = Config.from_env()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return {f: getattr(cfg, f) for f in Config.model_fields if f.startswith("spark_")}


@pytest.mark.parametrize("broken", ["secret-missing", "secret-key-missing", "account-missing", "account-unbound"])
async def test_application_fails_when_the_secret_or_the_account_is_wrong(kns, spark_operator, kube_node, broken):
    ns = kns.name
    spark_operator.serve(ns)
    docs = rendered(ns)
    settings = operator_settings(docs)
    assert settings["spark_namespace"] == ns and settings["spark_s3_secret_name"] == "s3-creds"
    account = settings["spark_service_account"]
    spark_rbac = [
        d
        for d in docs
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")
        and d["metadata"]["name"] == account
        and d["metadata"].get("namespace") == ns
    ]
    assert {d["kind"] for d in spark_rbac} == {"ServiceAccount", "Role", "RoleBinding"}
    user = [user_secret(ns, access="AKIA", secret="s3cr3t")]
    if broken == "secret-missing":
        user = []
    elif broken == "secret-key-missing":
        user = [user_secret(ns, access="AKIA")]
    elif broken == "account-missing":
        spark_rbac = [d for d in spark_rbac if d["kind"] != "ServiceAccount"]
    else:
        spark_rbac = [d for d in spark_rbac if d["kind"] != "RoleBinding"]
    kns.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(spark_rbac + user))

    await make_collection_cr(kns.client, "docs", 7, ns)
    app = application.from_config(
        "import",
        {"job_id": 1, "collection_id": 7, "collection_name": "docs"},
        application.app_name("import", 7, 1),
        Config(**settings),
    )
    runner = SparkApplicationRunner(kns.client, (ns,))
    handle = await runner.submit(app)
    assert handle["namespace"] == ns

    async def terminal():
        st = await runner.state(handle)
        return st if st.state.terminal else None

    st = await eventually(terminal, 90, "the application to fail")
    logs = pod_logs(kube_node, ns, driver_pod_name(handle["name"]))
    want = {
        "secret-missing": (JobState.FAILED, 'secret "s3-creds" not found'),
        "secret-key-missing": (JobState.FAILED, f"couldn't find key secret in Secret {ns}/s3-creds"),
        "account-missing": (JobState.SUBMISSION_FAILED, f'serviceaccount "{account}" not found'),
        "account-unbound": (JobState.FAILED, "driver container failed with ExitCode: 1"),
    }[broken]
    assert st.state == want[0] and want[1] in st.message, (st, logs)
    if broken == "account-unbound":  # the driver's own token may not make its executors
        assert f'User "system:serviceaccount:{ns}:{account}" cannot get resource "pods"' in logs, logs
    assert "spark-submit" not in logs and "SparkContext" not in logs  # nothing ran
    assert spark_operator.errors == []
