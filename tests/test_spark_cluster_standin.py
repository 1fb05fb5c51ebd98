"""SparkApplications run as a cluster would run them (docs/architecture/jobs.md, the spark-operator part):
a stand-in for Kubeflow's spark-operator that starts an application with ONLY what its spec and
the rendered chart give it — the driver's service account must exist in the application's
namespace with a Role that lets it create pods, env entries are resolved from the cluster's
Secrets by `secretKeyRef`, and the process gets none of the test's own environment (its AWS
credentials included) — through local spark-submit. The operator's settings come from the
rendered operator Deployment. When the Secret or the service account is wrong, the application
fails the way it would on a cluster."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, connections, utility
from pymilvus.client.types import BulkInsertState

from controllers.spark_runner import SPARK_APPLICATION, SparkApplicationRunner
from kmilvus.config import Config
from kmilvus.spark import application
from kmilvus.spark.runner import EVENTS_ENV, JobState, LocalSparkRunner
from tests.kmock_compat import KMockCompat
from tests.test_chart import RELEASE, _allows, by_kind, one, render
from tests.test_spark_application_runner import _wait_import, apps, client_for, declare, make_collection_cr
from tests.util import eventually

pytestmark = [pytest.mark.kmock(cls=KMockCompat), pytest.mark.timeout(300)]
NS = "team-a"
DIM = 8
# What a container gets from its image, not from the spec (the Spark image sets the rest).
IMAGE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "JAVA_HOME")


def chart_values(storage_uri: str) -> dict:
    return {
        "operator": {"watchNamespaces": [NS]},
        "storage": {
            "uri": storage_uri,
            "existingSecret": "s3-creds",
            "accessKeyIdKey": "access",
            "secretAccessKeyKey": "secret",
        },
    }


def user_secret(name: str = "s3-creds", ns: str = NS, **data: str) -> dict:
    """A Secret as `kubectl create secret generic` leaves it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
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


class PodStartError(Exception):
    """What keeps a driver pod from starting (CreateContainerConfigError, 403 Forbidden)."""


class ClusterObjects:
    """The cluster's built-in objects the stand-in consults: the rendered chart + what users add."""

    def __init__(self, docs: list[dict]):
        self.docs = list(docs)

    def secret_value(self, ns: str, name: str, key: str) -> str:
        for s in by_kind(self.docs, "Secret"):
            if s["metadata"]["name"] == name and s["metadata"].get("namespace") == ns:
                if key in (s.get("stringData") or {}):
                    return s["stringData"][key]
                if key in (s.get("data") or {}):
                    return base64.b64decode(s["data"][key]).decode()
                raise PodStartError(f"couldn't find key {key} in Secret {ns}/{name}")
        raise PodStartError(f'secret "{name}" not found')

    def check_driver_account(self, ns: str, account: str) -> None:
        if not [
            s
            for s in by_kind(self.docs, "ServiceAccount")
            if s["metadata"]["name"] == account and s["metadata"].get("namespace") == ns
        ]:
            raise PodStartError(f'serviceaccounts "{account}" not found in namespace {ns}')
        for verb in ("create", "delete"):
            if not _allows(self.docs, ns, account, verb, "pods"):
                raise PodStartError(
                    f'pods is forbidden: User "system:serviceaccount:{ns}:{account}" '
                    f'cannot {verb} resource "pods" in namespace "{ns}"'
                )

    def pod_env(self, ns: str, entries: list[dict]) -> dict[str, str]:
        out = {}
        for e in entries:
            if "value" in e:
                out[e["name"]] = str(e["value"])
            elif ref := (e.get("valueFrom") or {}).get("secretKeyRef"):
                try:
                    out[e["name"]] = self.secret_value(ns, ref["name"], ref["key"])
                except PodStartError:
                    if not ref.get("optional"):
                        raise
            else:
                raise PodStartError(f"env {e['name']}: unsupported source {e}")
        return out


class PodEnvRunner(LocalSparkRunner):
    """LocalSparkRunner whose process environment is the image's plus the pod spec's only."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.pod_envs: dict[str, dict[str, str]] = {}
        self.launched: dict[str, dict[str, str]] = {}

    def command(self, app, workdir):
        argv, env = super().command(app, workdir)
        name = app["metadata"]["name"]
        keep = {
            k: v
            for k, v in env.items()
            if k in IMAGE_ENV or k.startswith(("SPARK_", "PYSPARK_")) or k in ("PYTHONPATH", EVENTS_ENV)
        }
        for k, v in self.pod_envs[name].items():  # the image's paths → this checkout's (the image)
            keep[k] = (
                os.pathsep.join(application.local_path(p) for p in v.split(os.pathsep)) if k == "PYTHONPATH" else v
            )
        self.launched[name] = keep
        return argv, keep


class SparkOperatorStandIn:
    """Kubeflow's spark-operator, as far as a SparkApplication's pods are concerned."""

    def __init__(self, kmock, cluster: ClusterObjects, work_dir, kube=None):
        self.kmock, self.cluster = kmock, cluster
        self.kube = kube or client_for(kmock)  # the spark-operator's own credentials
        self.runner = PodEnvRunner(master="local[2]", work_dir=str(work_dir))
        self.seen: set[tuple[str, str]] = set()
        self.tasks: list[asyncio.Task] = []

    async def run(self) -> None:
        while True:
            for a in apps(self.kmock):
                key = (a["metadata"]["namespace"], a["metadata"]["name"])
                if key not in self.seen:
                    self.seen.add(key)
                    self.tasks.append(asyncio.create_task(self._drive(a)))
            await asyncio.sleep(0.1)

    async def _state(self, app: dict, state: str, msg: str = "") -> None:
        m = app["metadata"]
        st = {"state": state, **({"errorMessage": msg} if msg else {})}
        await self.kube.patch(
            SPARK_APPLICATION, m["namespace"], m["name"], {"status": {"applicationState": st}}, status=True
        )

    async def _drive(self, app: dict) -> None:
        ns, name, spec = app["metadata"]["namespace"], app["metadata"]["name"], app["spec"]
        try:
            self.cluster.check_driver_account(ns, spec["driver"].get("serviceAccount") or "default")
        except PodStartError as exc:
            await self._state(app, "SUBMISSION_FAILED", f"failed to create the driver pod: {exc}")
            return
        try:
            env = self.cluster.pod_env(ns, spec["driver"].get("env") or [])
            env.update(self.cluster.pod_env(ns, spec["executor"].get("env") or []))
        except PodStartError as exc:
            await self._state(app, "FAILED", f"driver container failed to start: CreateContainerConfigError: {exc}")
            return
        self.runner.pod_envs[name] = env
        handle = await self.runner.submit(app)
        last = None
        try:
            while True:
                st = await self.runner.state(handle)
                if st.state != last:
                    last = st.state
                    await self._state(app, st.state.value, st.message)
                if st.state.terminal:
                    return
                await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            await self.runner.cancel(handle)
            raise

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(BaseException):
                await t
        await self.kube.close()


@contextlib.asynccontextmanager
async def standin(kmock, cluster: ClusterObjects, work_dir, kube=None):
    op = SparkOperatorStandIn(kmock, cluster, work_dir, kube)
    task = asyncio.create_task(op.run())
    try:
        yield op
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await op.close()


@pytest.fixture
async def kube(kmock):
    declare(kmock)
    client = client_for(kmock)
    yield client
    await client.close()


# ---------------------------------------------------------------------------- wrong wiring fails
@pytest.mark.parametrize("broken", ["secret-missing", "secret-key-missing", "account-missing", "account-unbound"])
async def test_application_fails_when_the_secret_or_the_account_is_wrong(kmock, kube, tmp_path, broken):
    docs = render(chart_values("s3://b/data?endpoint=http://127.0.0.1:1"))
    settings = operator_settings(docs)
    cluster = ClusterObjects([*docs, user_secret(access="AKIA", secret="s3cr3t")])
    if broken == "secret-missing":
        cluster.docs = [d for d in cluster.docs if d["kind"] != "Secret"]
    elif broken == "secret-key-missing":
        cluster.docs[-1] = user_secret(access="AKIA")
    elif broken == "account-missing":
        cluster.docs = [
            d
            for d in cluster.docs
            if not (d["kind"] == "ServiceAccount" and d["metadata"]["name"] == settings["spark_service_account"])
        ]
    else:
        cluster.docs = [d for d in cluster.docs if d["kind"] != "RoleBinding"]
    cr = await make_collection_cr(kube, "docs", 7, ns=NS)
    app = application.from_config(
        "import",
        {"job_id": 1, "collection_id": 7, "collection_name": "docs"},
        application.app_name("import", 7, 1),
        Config(**settings),
    )
    runner = SparkApplicationRunner(kube, (NS,))
    handle = await runner.submit(app)
    assert handle["namespace"] == NS and cr
    async with standin(kmock, cluster, tmp_path / "spark") as op:

        async def terminal():
            st = await runner.state(handle)
            return st if st.state.terminal else None

        st = await eventually(terminal, 30, "the application to fail")
    assert op.runner.launched == {}  # nothing ran
    want = {
        "secret-missing": (JobState.FAILED, 'secret "s3-creds" not found'),
        "secret-key-missing": (JobState.FAILED, "couldn't find key secret in Secret team-a/s3-creds"),
        "account-missing": (JobState.SUBMISSION_FAILED, 'serviceaccounts "kmilvus-spark" not found'),
        "account-unbound": (JobState.SUBMISSION_FAILED, 'cannot create resource "pods"'),
    }[broken]
    assert st.state == want[0] and want[1] in st.message, st


# ---------------------------------------------------------------------------- a real import
@pytest.mark.spark
async def test_bulk_import_with_only_what_the_spec_provides(
    kmock, kube, node_factory, moto_endpoint, tmp_path, monkeypatch
):
    """Binlogs on (moto) S3; the job gets the S3 credentials from the Secret by secretKeyRef and
    nothing from the test's environment."""
    storage_uri = f"s3://kmilvus-{uuid.uuid4().hex[:8]}/data?endpoint={moto_endpoint}"
    docs = render(chart_values(storage_uri))
    settings = operator_settings(docs)
    assert settings["spark_s3_secret_name"] == "s3-creds" and settings["spark_namespace"] == NS
    cluster = ClusterObjects([*docs, user_secret(access="spec-access-key", secret="spec-secret-key")])
    monkeypatch.setenv("KMILVUS_TEST_ONLY_VARIABLE", "the test's own environment")

    n = 300
    vec = np.random.default_rng(1).random((n, DIM), dtype=np.float32)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.arange(n, dtype=np.int64)),
                "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM),
                "tag": pa.array([f"t{i % 5}" for i in range(n)]),
            }
        ),
        tmp_path / "rows.parquet",
    )
    # A job this small would run in-process: this test follows the SparkApplication route.
    node = await asyncio.to_thread(node_factory, storage_uri=storage_uri, inprocess_job_max_mb=0, **settings)
    runner = SparkApplicationRunner(client_for(kmock), (NS,))

    async def plug():
        node.component("datacoord").set_job_runner(runner)

    await asyncio.to_thread(node.call, plug())
    alias = "a" + uuid.uuid4().hex[:8]
    try:
        async with standin(kmock, cluster, tmp_path / "spark") as op:

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
            cr = await make_collection_cr(kube, "docs", cid, ns=NS)
            task = await asyncio.to_thread(
                utility.do_bulk_insert, "docs", files=[str(tmp_path / "rows.parquet")], using=alias
            )
            st = await asyncio.to_thread(_wait_import, task, alias, 240)
            assert st.state == BulkInsertState.ImportCompleted, st.infos
            assert st.row_count == n
            assert await asyncio.to_thread(lambda: Collection("docs", using=alias).num_entities) == n

            ((name, env),) = op.runner.launched.items()
            app_ns = {ns for ns, nm in op.seen if nm == name}
            assert app_ns == {NS} and cr["metadata"]["namespace"] == NS
            assert env["AWS_ACCESS_KEY_ID"] == "spec-access-key" and env["AWS_SECRET_ACCESS_KEY"] == "spec-secret-key"
            assert "KMILVUS_TEST_ONLY_VARIABLE" not in env and "AWS_DEFAULT_REGION" not in env
            assert os.environ["AWS_ACCESS_KEY_ID"] != env["AWS_ACCESS_KEY_ID"]  # not the test's own
    finally:
        with contextlib.suppress(Exception):
            connections.disconnect(alias)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(node.call, runner.kube.close())
