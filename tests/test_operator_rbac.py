"""The operator under the RBAC the chart renders for it (docs/user-guide/kubernetes.md): the API
stand-in (KMock) answers 403 to every request the operator's ServiceAccount is not allowed by
the rendered Roles/ClusterRoles bound to it — as an API server would — and the scenario still
passes without a single 403: the example Collection → Ready, insert through pymilvus, a
FlushRequest → Completed, the Collection deleted → gone."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import attrs
import kmock
import kopf
import numpy as np
import pytest
import yaml
from pymilvus import MilvusClient

from controllers import resources as R
from controllers.kube import KubeClient
from kmilvus.util.embedded import free_port
from tests.kmock_compat import KMockCompat, declare_crds
from tests.test_chart import NS as RELEASE_NS
from tests.test_chart import RELEASE, by_kind, render
from tests.test_controllers import COLL, FLUSH, SEGS, cfg, cond, obj, operators, start_operator  # noqa: F401
from tests.test_kubernetes import chart_values
from tests.util import eventually

ROOT = Path(__file__).resolve().parents[1]
NS = "default"
ACCOUNT = f"{RELEASE}-operator"
ADMIN_TOKEN = "cluster-admin"  # the test's own requests (a user applying manifests): not checked


class Authorizer:
    """RBAC's rule evaluation for one ServiceAccount over a set of rendered objects."""

    def __init__(self, docs: list[dict], account: str, account_ns: str):
        self.docs, self.subject = docs, {"kind": "ServiceAccount", "name": account, "namespace": account_ns}
        self.denied: list[str] = []
        self.allowed: set[tuple[str, str, str, str | None]] = set()

    def _rules(self, namespace: str | None) -> list[dict]:
        rules = []
        for crb in by_kind(self.docs, "ClusterRoleBinding"):
            if self.subject in crb["subjects"]:
                rules += self._role("ClusterRole", crb["roleRef"]["name"], None)
        if namespace is not None:
            for rb in by_kind(self.docs, "RoleBinding"):
                if rb["metadata"].get("namespace") == namespace and self.subject in rb["subjects"]:
                    kind = rb["roleRef"]["kind"]
                    rules += self._role(kind, rb["roleRef"]["name"], namespace if kind == "Role" else None)
        return rules

    def _role(self, kind: str, name: str, namespace: str | None) -> list[dict]:
        for r in by_kind(self.docs, kind):
            if r["metadata"]["name"] == name and r["metadata"].get("namespace") == namespace:
                return r.get("rules") or []
        return []

    def allows(self, verb: str, group: str, resource: str, namespace: str | None, name: str | None) -> bool:
        for rule in self._rules(namespace):
            if (
                (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
                and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
                and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
                and (not rule.get("resourceNames") or (name is not None and name in rule["resourceNames"]))
            ):
                return True
        return False


def verb_of(request) -> str:
    m = request.method.upper()
    if m == "GET":
        return "get" if request.name else ("watch" if (request.params or {}).get("watch") in ("true", "1") else "list")
    if m == "DELETE":
        return "delete" if request.name else "deletecollection"
    return {"POST": "create", "PATCH": "patch", "PUT": "update"}[m]


@attrs.define(kw_only=True)
class RBACKMock(KMockCompat):
    authorizer: Authorizer | None = attrs.field(default=None, init=False)

    async def _handle_k8s(self, request):
        res = request.resource
        admin = (request.headers or {}).get("Authorization") == f"Bearer {ADMIN_TOKEN}"
        if self.authorizer is not None and not admin and res is not None and res.plural is not None:
            verb = verb_of(request)
            plural = f"{res.plural}/{request.subresource}" if request.subresource else str(res.plural)
            name = request.name if verb != "create" else None
            if not self.authorizer.allows(verb, res.group or "", plural, request.namespace, name):
                what = f"{verb} {res.group or 'core'}/{plural} {request.namespace or '(cluster)'}/{request.name or ''}"
                self.authorizer.denied.append(what)
                raise kmock.KubernetesError(status=403, reason="Forbidden", message=f"forbidden: {what}")
            self.authorizer.allowed.add((verb, res.group or "", plural, request.namespace))
        return await super()._handle_k8s(request)


pytestmark = [pytest.mark.kmock(cls=RBACKMock), pytest.mark.timeout(120)]


@pytest.fixture
async def kube(kmock):
    """The test's client: a cluster admin (the operator talks without this token)."""
    declare_crds(kmock)

    async def login():
        return kopf.ConnectionInfo(server=str(kmock.url), insecure=True, token=ADMIN_TOKEN)

    client = KubeClient(login)
    yield client
    await client.close()


def operator_client(kmock) -> KubeClient:
    async def login():
        return kopf.ConnectionInfo(server=str(kmock.url), insecure=True)

    return KubeClient(login)


def rendered() -> list[dict]:
    return render({"operator": {"watchNamespaces": [NS]}})


async def test_the_stand_in_answers_403_outside_the_rendered_roles(kmock, kube):
    kmock.authorizer = auth = Authorizer(rendered(), ACCOUNT, RELEASE_NS)
    body = {"metadata": {"name": "x", "namespace": NS}, "spec": {"segmentID": 1, "collectionID": 2, "channel": "c"}}
    op = operator_client(kmock)
    try:
        await op.create(R.SEGMENT, NS, copy.deepcopy(body))  # allowed in a served namespace
        with pytest.raises(Exception) as exc:
            await op.create(R.SEGMENT, "elsewhere", {**body, "metadata": {"name": "x", "namespace": "elsewhere"}})
    finally:
        await op.close()
    assert "403" in str(exc.value) or "Forbidden" in str(exc.value)
    await kube.create(R.SEGMENT, "elsewhere", {**body, "metadata": {"name": "x", "namespace": "elsewhere"}})  # admin
    assert auth.denied == ["create kmilvus.io/segments elsewhere/"]
    # Rules are per resource: the operator may not touch Secrets at all.
    assert not auth.allows("get", "", "secrets", NS, "s3-creds")
    assert auth.allows("patch", "kmilvus.io", "segments/status", NS, "x")
    assert not auth.allows("patch", "kopf.dev", "kopfpeerings", NS, "someone-else")


@pytest.mark.parametrize("served", [[NS], ["team-a", "team-b"]], ids=["one-namespace", "multi-namespace"])
async def test_scenario_passes_within_the_rendered_rbac(kmock, kube, operators, node_factory, served):
    docs = render({"operator": {"watchNamespaces": served}})
    kmock.authorizer = auth = Authorizer(docs, ACCOUNT, RELEASE_NS)
    op_args = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == ACCOUNT)
    args = op_args["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = lambda f: [args[i + 1] for i, a in enumerate(args) if a == f]  # noqa: E731
    assert flags("--namespace") == served
    op = await start_operator(
        operators,
        namespaces=tuple(flags("--namespace")),
        peering=flags("--peering")[0],
        sdk_namespace=flags("--sdk-namespace")[0],
    )
    data = await asyncio.to_thread(node_factory, roles=("datanode", "proxy"))
    ns = served[-1]  # with several: not the first (the SDK namespace)

    example = yaml.safe_load((ROOT / "crds" / "examples" / "collection.yaml").read_text())
    example["metadata"]["namespace"] = ns
    await kube.create(R.COLLECTION, ns, example)
    o = await eventually(
        lambda: (x := obj(kmock, COLL, "docs", ns)) and cond(x, "Ready").get("status") == "True" and x,
        30,
        "the example Collection Ready",
    )
    assert cond(o, "Stalled")["status"] == "False"

    def insert() -> None:
        c = MilvusClient(uri=data.uri)
        try:
            rng = np.random.default_rng(0)
            c.insert(
                "docs",
                [
                    {"id": i, "vec": rng.random(128, dtype=np.float32).tolist(), "tag": f"t{i}", "meta": {"i": i}}
                    for i in range(500)
                ],
            )
        finally:
            c.close()

    await asyncio.to_thread(insert)
    flush = yaml.safe_load((ROOT / "crds" / "examples" / "flushrequest.yaml").read_text())
    flush["metadata"]["namespace"] = ns
    await kube.create(R.FLUSHREQUEST, ns, flush)
    await eventually(
        lambda: (x := obj(kmock, FLUSH, "flush-docs", ns)) and x.get("status", {}).get("phase") == "Completed",
        30,
        "the FlushRequest Completed",
    )
    await eventually(lambda: obj(kmock, COLL, "docs", ns)["status"].get("rows") == 500, 20, "status.rows")

    await kube.delete(R.COLLECTION, ns, "docs")
    await eventually(lambda: obj(kmock, COLL, "docs", ns) is None, 30, "the Collection to go")
    await eventually(
        lambda: not [k for k in list(kmock.objects) if k[0] == kmock.resource(SEGS) and obj(kmock, SEGS, k[2], k[1])],
        20,
        "its Segments to go",
    )
    assert not op.component("rootcoord").collections

    assert auth.denied == []
    # It really went through the check: the operator's own kinds of requests were authorized.
    assert {
        ("watch", "kmilvus.io", "collections", ns),
        ("patch", "kmilvus.io", "collections/status", ns),
        ("create", "kmilvus.io", "segments", ns),
        ("patch", "kmilvus.io", "segments/status", ns),
        ("create", "", "events", ns),
    } <= auth.allowed


# ------------------------------------------------------------------ Proxy and DataNode from pod specs
def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in env values and args ($$ escapes, unknown names stay)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        value,
    )


def container_process(docs: list[dict], cluster_objects: list[dict], workload: dict, pod_name: str) -> tuple:
    """argv and environment of a workload's container exactly as its pod spec gives them:
    its `command` (the image has no ENTRYPOINT; its CMD is `kmilvus-operator`) + args, envFrom
    ConfigMaps, then env (values with $(VAR), fieldRef, secretKeyRef, configMapKeyRef), over the
    image's own variables."""
    pod = workload["spec"]["template"]["spec"]
    c = pod["containers"][0]
    ns = workload["metadata"]["namespace"]
    objs = docs + cluster_objects

    def find(kind: str, name: str) -> dict:
        found = [
            o
            for o in objs
            if o["kind"] == kind and o["metadata"]["name"] == name and o["metadata"].get("namespace") == ns
        ]
        assert found, f"{kind} {ns}/{name} does not exist"
        return found[0]

    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR", "JAVA_HOME") if k in os.environ}
    for src in c.get("envFrom") or []:
        env.update(find("ConfigMap", src["configMapRef"]["name"])["data"])
    fields = {"metadata.name": pod_name, "metadata.namespace": ns, "status.podIP": "127.0.0.1"}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = _expand(str(e["value"]), env)
        elif ref := e["valueFrom"].get("fieldRef"):
            env[e["name"]] = fields[ref["fieldPath"]]
        elif ref := e["valueFrom"].get("secretKeyRef"):
            env[e["name"]] = base64.b64decode(find("Secret", ref["name"])["data"][ref["key"]]).decode()
        elif ref := e["valueFrom"].get("configMapKeyRef"):
            env[e["name"]] = find("ConfigMap", ref["name"])["data"][ref["key"]]
    command = [_expand(a, env) for a in c.get("command") or ["kmilvus-operator"]]
    # The image puts the console scripts on PATH; here they are the virtualenv's.
    command[0] = str(Path(sys.executable).with_name(command[0]))
    argv = command + [_expand(a, env) for a in c.get("args") or []]
    return argv, env


async def test_proxy_and_datanode_run_from_their_rendered_pod_specs(
    kmock, kube, cfg, operators, etcd_endpoint, nats_url, moto_endpoint, root, tmp_path, monkeypatch
):
    """The chart rendered for external etcd/NATS/S3 (with a Secret); the Proxy and the DataNode
    run as processes with exactly their pod specs' args and environment; the operator (in
    process, under the rendered RBAC) serves the example Collection and a FlushRequest."""
    monkeypatch.setenv("KMILVUS_TEST_ONLY", "the test's own environment")
    port = free_port()
    storage_uri = f"s3://kmilvus-{uuid.uuid4().hex[:8]}/data?endpoint={moto_endpoint}"
    values = chart_values(root, etcd_endpoint, nats_url, storage_uri, port)
    docs = render(values)
    user = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-creds", "namespace": RELEASE_NS},
            "data": {"access": base64.b64encode(b"testing").decode(), "secret": base64.b64encode(b"testing").decode()},
        }
    ]
    kmock.authorizer = auth = Authorizer(docs, ACCOUNT, RELEASE_NS)
    cm = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == f"{RELEASE}-config")["data"]
    cfg.storage_uri = cm["KMILVUS_STORAGE_URI"]  # the operator's Config, as its ConfigMap says
    op = await start_operator(operators, namespaces=(NS,), peering=RELEASE, sdk_namespace=NS)
    assert op.cfg.cluster == cm["KMILVUS_CLUSTER"] == root

    procs = []
    try:
        for kind, name in (("StatefulSet", f"{RELEASE}-datanode"), ("Deployment", f"{RELEASE}-proxy")):
            w = next(d for d in by_kind(docs, kind) if d["metadata"]["name"] == name)
            argv, env = container_process(docs, user, w, f"{name}-0")
            assert "KMILVUS_TEST_ONLY" not in env and env["AWS_ACCESS_KEY_ID"] == "testing"
            with open(tmp_path / f"{name}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                )

        def serving() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
            return False

        await eventually(lambda: serving() or any(p.poll() is not None for p in procs), 60, "the Proxy port")
        assert all(p.poll() is None for p in procs), [
            (tmp_path / f).read_text()[-2000:] for f in os.listdir(tmp_path) if f.endswith(".log")
        ]

        example = yaml.safe_load((ROOT / "crds" / "examples" / "collection.yaml").read_text())
        await kube.create(R.COLLECTION, NS, example)
        await eventually(
            lambda: (x := obj(kmock, COLL, "docs")) and cond(x, "Ready").get("status") == "True",
            30,
            "the example Collection Ready",
        )

        def insert() -> None:
            c = MilvusClient(uri=f"http://127.0.0.1:{port}")
            try:
                rng = np.random.default_rng(0)
                c.insert(
                    "docs",
                    [
                        {"id": i, "vec": rng.random(128, dtype=np.float32).tolist(), "tag": f"t{i}", "meta": {"i": i}}
                        for i in range(300)
                    ],
                )
            finally:
                c.close()

        await asyncio.to_thread(insert)
        await kube.create(
            R.FLUSHREQUEST, NS, yaml.safe_load((ROOT / "crds" / "examples" / "flushrequest.yaml").read_text())
        )
        await eventually(
            lambda: (x := obj(kmock, FLUSH, "flush-docs")) and x.get("status", {}).get("phase") == "Completed",
            60,
            "the FlushRequest Completed",
        )
        await eventually(lambda: obj(kmock, COLL, "docs")["status"].get("rows") == 300, 20, "status.rows")
        await kube.delete(R.COLLECTION, NS, "docs")
        await eventually(lambda: obj(kmock, COLL, "docs") is None, 30, "the Collection to go")
        assert auth.denied == []
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(20)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


def kubeconfig(path: Path, url: str) -> Path:
    """What the kubelet's service-account token mount gives a pod: the API server's address and
    the account's credentials (here: no token, so every request is the operator's)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "pod",
                "clusters": [{"name": "c", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "operator", "user": {}}],
                "contexts": [{"name": "pod", "context": {"cluster": "c", "user": "operator"}}],
            }
        )
    )
    return path


async def test_operator_process_from_its_pod_spec(
    kmock, kube, node_factory, etcd_endpoint, nats_url, moto_endpoint, root, tmp_path, monkeypatch
):
    """The operator as a process with exactly its rendered container (args, ConfigMap, Secret
    env, the spark_* settings), plus the API address a pod gets from its service account, under
    the rendered RBAC: the example Collection → Ready, a FlushRequest → Completed, delete → gone."""
    monkeypatch.setenv("KMILVUS_TEST_ONLY", "the test's own environment")
    storage_uri = f"s3://kmilvus-{uuid.uuid4().hex[:8]}/data?endpoint={moto_endpoint}"
    docs = render(chart_values(root, etcd_endpoint, nats_url, storage_uri, free_port()))
    user = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-creds", "namespace": RELEASE_NS},
            "data": {"access": base64.b64encode(b"testing").decode(), "secret": base64.b64encode(b"testing").decode()},
        }
    ]
    kmock.authorizer = auth = Authorizer(docs, ACCOUNT, RELEASE_NS)
    w = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == ACCOUNT)
    argv, env = container_process(docs, user, w, f"{ACCOUNT}-0")
    assert env["KMILVUS_SPARK_RUNNER"] == "sparkapplication" and "KMILVUS_TEST_ONLY" not in env
    env["KUBECONFIG"] = str(kubeconfig(tmp_path / "kubeconfig", str(kmock.url)))
    with open(tmp_path / "operator.log", "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        data = await asyncio.to_thread(node_factory, roles=("datanode", "proxy"), storage_uri=storage_uri)
        example = yaml.safe_load((ROOT / "crds" / "examples" / "collection.yaml").read_text())
        await kube.create(R.COLLECTION, NS, example)
        await eventually(
            lambda: (
                ((x := obj(kmock, COLL, "docs")) and cond(x, "Ready").get("status") == "True")
                or proc.poll() is not None
            ),
            90,
            "the example Collection Ready",
        )
        assert proc.poll() is None, (tmp_path / "operator.log").read_text()[-3000:]

        def insert() -> None:
            c = MilvusClient(uri=data.uri)
            try:
                rng = np.random.default_rng(0)
                c.insert(
                    "docs",
                    [
                        {"id": i, "vec": rng.random(128, dtype=np.float32).tolist(), "tag": f"t{i}", "meta": {"i": i}}
                        for i in range(200)
                    ],
                )
            finally:
                c.close()

        await asyncio.to_thread(insert)
        await kube.create(
            R.FLUSHREQUEST, NS, yaml.safe_load((ROOT / "crds" / "examples" / "flushrequest.yaml").read_text())
        )
        await eventually(
            lambda: (x := obj(kmock, FLUSH, "flush-docs")) and x.get("status", {}).get("phase") == "Completed",
            60,
            "the FlushRequest Completed",
        )
        await eventually(lambda: obj(kmock, COLL, "docs")["status"].get("rows") == 200, 30, "status.rows")
        await kube.delete(R.COLLECTION, NS, "docs")
        await eventually(lambda: obj(kmock, COLL, "docs") is None, 60, "the Collection to go")
        assert auth.denied == []
        assert ("patch", "kmilvus.io", "collections/status", NS) in auth.allowed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
