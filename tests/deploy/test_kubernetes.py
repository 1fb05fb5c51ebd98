"""kmilvus as users run it, against a real Kubernetes control plane (tests/controlplane.py) with
one node of this machine (tests/nodeagent.py): the real `helm install` of charts/kmilvus, the
real `kubectl apply` of the example Collection, pymilvus through the Proxy pod, a FlushRequest,
Segments, a bulk import and a compaction in the operator (below spark.inProcessMaxMB), `helm
upgrade` (keeps the data, and sets spark.inProcessMaxMB to 0), a bulk import and a compaction as
SparkApplications (run by the spark-operator stand-in, tests/sparkstandin.py, as driver pods with
the chart's driver service account), `kubectl delete collection` (the controller-manager's garbage
collector removes the children), `helm uninstall` leaves nothing. The operator runs with its chart
ServiceAccount's token and nothing more (RBAC enforced by the API server itself).

The story itself is tests/k8s_story.py, which e2e/ (kind, images, in-chart etcd/NATS/MinIO) runs
too; here the session's etcd, nats-server and moto S3 are the chart's external services.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from pymilvus import MilvusClient

from kmilvus.meta import EtcdKV, catalog
from kmilvus.msgstream import MsgStream, pchannel_of
from kmilvus.storage import paths
from kmilvus.storage.objectstore import ObjectStore
from kmilvus.util.embedded import find_binary, free_port
from tests.k8s_story import Cluster, Story
from tests.nodeagent import pod_logs
from tests.pinned import pins
from tests.sparkstandin import driver_pod_name
from tests.util import eventually

pytestmark = [pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kmilvus"
RELEASE, RELEASE_NS, NS = "kmilvus", "kmilvus", "default"


def get(cp, *what: str, ns: str = NS) -> dict | None:
    out = cp.kubectl("-n", ns, "get", *what, "-o", "json", check=False)
    if out.returncode:
        assert "NotFound" in out.stderr, out.stderr
        return None
    return json.loads(out.stdout)


def cond(o: dict, type_: str) -> dict:
    return next((c for c in (o.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


# ------------------------------------------------------------------------------ the control plane
def test_the_control_plane_is_the_pinned_kubernetes(control_plane, kube_node):
    v = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert v["serverVersion"]["gitVersion"] == pins()["KUBERNETES_VERSION"]
    assert v["clientVersion"]["gitVersion"] == pins()["KUBERNETES_VERSION"]
    helm = subprocess.run([find_binary("helm"), "version", "--short"], capture_output=True, text=True, check=True)
    assert helm.stdout.startswith(pins()["HELM_VERSION"])
    # The node is Ready and schedulable (the controller-manager took the not-ready taint off).
    n = get(control_plane, "node", "kmilvus-node-0")
    assert n is not None and cond(n, "Ready")["status"] == "True"


def test_a_pod_gets_what_its_spec_gives_and_nothing_more(control_plane, kube_node, tmp_path):
    """Env from a Secret and the downward API, a mounted ConfigMap and the service-account token
    at their paths, readiness from the probe; the pod's token is its ServiceAccount's (RBAC)."""
    cp = control_plane
    ns = "pod-" + uuid.uuid4().hex[:6]
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("-n", ns, "create", "secret", "generic", "s", "--from-literal=password=hunter2")
    cp.kubectl("-n", ns, "create", "configmap", "c", "--from-literal=settings.yaml=a: 1")
    port = free_port()
    script = (
        "import os, pathlib, http.server, json, urllib.request, ssl, socket\n"
        "sa = pathlib.Path('/var/run/secrets/kubernetes.io/serviceaccount')\n"
        "ctx = ssl.create_default_context(cafile=str(sa / 'ca.crt'))\n"
        "def status(path):\n"
        "    host, port = os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']\n"
        "    url = 'https://%s:%s%s' % (host, port, path)\n"
        "    req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + (sa / 'token').read_text()})\n"
        "    try:\n"
        "        return urllib.request.urlopen(req, context=ctx).status\n"
        "    except urllib.error.HTTPError as e:\n"
        "        return e.code\n"
        "out = {'password': os.environ.get('PASSWORD'), 'pod': os.environ.get('POD'),\n"
        "       'settings': pathlib.Path('/etc/app/settings.yaml').read_text(),\n"
        "       'namespace': (sa / 'namespace').read_text(), 'uid': os.getuid(),\n"
        "       'own_pods': status('/api/v1/namespaces/%s/pods' % (sa / 'namespace').read_text()),\n"
        "       'secrets': status('/api/v1/namespaces/%s/secrets' % (sa / 'namespace').read_text()),\n"
        "       'test_env': os.environ.get('KMILVUS_TEST_ONLY'),\n"
        "       'hostname': socket.gethostname(), 'resolves': socket.gethostbyname(socket.gethostname())}\n"
        "try:\n"
        "    open('/written', 'w')\n"
        "    out['root_writable'] = True\n"
        "except OSError:\n"
        "    out['root_writable'] = False\n"
        "pathlib.Path('/tmp/out.json').write_text(json.dumps(out))\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()\n"
    )
    cp.kubectl("-n", ns, "create", "role", "pods", "--verb=list", "--resource=pods")
    cp.kubectl("-n", ns, "create", "rolebinding", "pods", "--role=pods", f"--serviceaccount={ns}:default")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {
            "securityContext": {"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001, "runAsNonRoot": True},
            "containers": [
                {
                    "name": "app",
                    "image": "kmilvus/kmilvus:test",
                    "command": ["python", "-c", script],
                    "workingDir": "/tmp",
                    "env": [
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/etc/app"},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                    "readinessProbe": {"httpGet": {"port": port, "path": "/out.json"}, "periodSeconds": 1},
                    "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
                }
            ],
            "volumes": [{"name": "cfg", "configMap": {"name": "c"}}, {"name": "tmp", "emptyDir": {}}],
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(pod))
    waited = cp.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/probe", "--timeout=60s", check=False)
    assert waited.returncode == 0, waited.stderr + pod_logs(kube_node, ns, "probe")
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/out.json", timeout=5) as r:
        out = json.loads(r.read())
    assert out == {
        "password": "hunter2",
        "pod": "probe",
        "settings": "a: 1",
        "namespace": ns,
        "uid": 10001,
        "own_pods": 200,  # its Role allows it
        "secrets": 403,  # nothing else
        "test_env": None,  # the test's own environment does not leak into a pod
        "hostname": "probe",  # its own host name, which resolves (Spark's driver looks itself up)
        "resolves": "127.0.0.1",
        "root_writable": False,
    }
    cp.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s")
    assert not [p for p in kube_node.pods.values() if p.ns == ns]


# ------------------------------------------------------------------------------ validation
INVALID = [
    ("two primary keys", {"fields": [
        {"name": "a", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "b", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "v", "dataType": "FloatVector", "dim": 4}]},
     "exactly one field must be the primary key (isPrimaryKey)"),
    ("a vector without dim", {"fields": [
        {"name": "a", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "v", "dataType": "FloatVector"}]},
     "a dense vector field needs dim"),
    ("an unknown data type", {"fields": [
        {"name": "a", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "v", "dataType": "FloatVectr", "dim": 4}]},
     'Unsupported value: "FloatVectr"'),
    ("an index on no field", {"fields": [
        {"name": "a", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "v", "dataType": "FloatVector", "dim": 4}], "indexes": [{"fieldName": "w"}]},
     "an index's fieldName must name a field of spec.fields"),
    ("a partition key and partitions", {"fields": [
        {"name": "a", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "k", "dataType": "VarChar", "maxLength": 8, "isPartitionKey": True},
        {"name": "v", "dataType": "FloatVector", "dim": 4}], "partitions": ["p1"]},
     "a collection with a partition key declares no partitions"),
]  # fmt: skip


@pytest.fixture
def crds(kube_crds):
    return kube_crds


@pytest.mark.parametrize(("what", "spec", "message"), INVALID, ids=[i[0] for i in INVALID])
def test_the_api_server_refuses_invalid_collections(crds, what, spec, message):
    body = {"apiVersion": "kmilvus.io/v1alpha1", "kind": "Collection", "metadata": {"name": "bad"}, "spec": spec}
    out = crds.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(body), check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert 'The Collection "bad" is invalid' in out.stderr
    # The operator evaluates the same CEL rules (controllers/crd.py): where the API server reports
    # a rule, the operator's problem names the same path and says the same words.
    from controllers.schema import check_spec

    problems = check_spec(spec, "bad")
    assert any(message in p for p in problems) or message.startswith("Unsupported value"), problems
    for p in problems:
        path, _, words = p.partition(": ")
        if words and " (" not in path:  # a rule on a list or the spec: `spec.fields: exactly one ...`
            assert f"{path}: Invalid value" in out.stderr and words in out.stderr, (p, out.stderr)


def test_the_schema_is_immutable_on_the_api_server(crds):
    example = yaml.safe_load((ROOT / "crds/examples/collection.yaml").read_text())
    example["metadata"]["name"] = "immutable"
    example["spec"]["load"] = False
    example["spec"].pop("indexes", None)
    crds.kubectl("apply", "-f", "-", input=json.dumps(example))
    try:
        example["spec"]["fields"][2]["maxLength"] = 128
        out = crds.kubectl("apply", "-f", "-", input=json.dumps(example), check=False)
        assert out.returncode != 0 and "the schema (spec.fields) is immutable" in out.stderr, out.stderr
        example["spec"]["fields"][2]["maxLength"] = 64
        example["spec"]["shardsNum"] = 3
        out = crds.kubectl("apply", "-f", "-", input=json.dumps(example), check=False)
        assert out.returncode != 0 and "spec.shardsNum is immutable" in out.stderr, out.stderr
    finally:
        crds.kubectl("-n", NS, "delete", "collection", "immutable", "--wait=false")
        # No operator serves it here: its finalizer (if any) is not there to wait for.


# ------------------------------------------------------------------------------ the deployment
def s3_secret(ns: str) -> dict:
    """The S3 credentials a user creates (`kubectl create secret generic s3-creds`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s3-creds", "namespace": ns},
        "data": {"access": base64.b64encode(b"testing").decode(), "secret": base64.b64encode(b"testing").decode()},
    }


async def assert_collection_gone(etcd_endpoint: str, root: str, storage_uri: str, cid: int, vchannels: list) -> None:
    """Nothing of a dropped collection is left: no etcd key it owned, no binlog of it."""
    kv = await EtcdKV.connect([etcd_endpoint], f"{root}/meta")
    try:
        for prefix in catalog.collection_owned_prefixes(cid, vchannels):
            assert not await kv.get_prefix(prefix), prefix
    finally:
        await kv.close()
    store = ObjectStore.from_uri(storage_uri)
    for prefix in (paths.insert_log_prefix(cid), paths.ddl_prefix(cid), paths.stats_log_prefix(cid)):
        assert await asyncio.to_thread(store.list_sync, prefix) == [], prefix


def chart_values(root: str, etcd_endpoint: str, nats_url: str, storage_uri: str, port: int) -> dict:
    """The chart for the session's etcd, nats-server and S3 (a Secret `s3-creds`). Every pod
    shares this machine's loopback (tests/nodeagent.py): each listens on its own ports."""
    return {
        "cluster": root,
        "operator": {"watchNamespaces": [NS], "healthPort": free_port(), "metricsPort": free_port()},
        "externalEtcd": {"endpoint": etcd_endpoint},
        "externalNats": {"url": nats_url},
        "storage": {
            "uri": storage_uri,
            "existingSecret": "s3-creds",
            "accessKeyIdKey": "access",
            "secretAccessKeyKey": "secret",
        },
        "proxy": {"port": port, "metricsPort": free_port(), "healthPort": free_port()},
        "datanode": {"metricsPort": free_port(), "healthPort": free_port()},
        "querynode": {"metricsPort": free_port(), "healthPort": free_port()},
        # The chart's requests of every pod, the Proxy's surge pod and the Spark drivers must fit
        # this machine's CPUs (2 on CI): the IndexNode, idle but for builds, asks for little.
        "indexnode": {"metricsPort": free_port(), "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}},
    }


async def test_helm_install_to_uninstall(
    control_plane, kube_node, kube_crds, spark_operator, etcd_endpoint, nats_url, moto_endpoint, root, tmp_path,
    monkeypatch,
):  # fmt: skip
    cp = control_plane
    monkeypatch.setenv("KMILVUS_TEST_ONLY", "the test's own environment")
    port = free_port()
    storage_uri = f"s3://kmilvus-{uuid.uuid4().hex[:8]}/data?endpoint={moto_endpoint}"
    values = chart_values(root, etcd_endpoint, nats_url, storage_uri, port)
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    cp.kubectl("create", "namespace", RELEASE_NS)
    for ns in (RELEASE_NS, NS):  # `kubectl create secret` where the pods and the jobs run
        cp.kubectl("apply", "-f", "-", input=json.dumps(s3_secret(ns)))

    def helm(*args: str) -> str:
        out = cp.helm(*args, check=False)
        assert out.returncode == 0, out.stderr + pod_logs(kube_node, RELEASE_NS, RELEASE)
        return out.stdout

    out = helm("install", RELEASE, str(CHART), "-n", RELEASE_NS, "-f", str(tmp_path / "values.yaml"),
               "--wait", "--timeout", "5m")  # fmt: skip
    try:
        # The NOTES a user reads after the install.
        notes = out.split("NOTES:", 1)[1]
        assert f"kubectl -n {RELEASE_NS} port-forward svc/{RELEASE}-milvus 19530:19530" in notes
        assert 'MilvusClient(uri="http://127.0.0.1:19530")' in notes
        store = ObjectStore.from_uri(storage_uri)
        cluster = Cluster(
            kubectl=cp.kubectl,
            namespace=NS,
            milvus_uri=f"http://127.0.0.1:{port}",
            put_object=store.write_sync,
            diagnostics=lambda: (
                "\n"
                + pod_logs(kube_node, RELEASE_NS, f"{RELEASE}-operator")
                + "\n"
                + pod_logs(kube_node, NS, "kmilvus-")
            ),  # the SparkApplications' driver pods
        )
        await _scenario(cp, kube_node, spark_operator, helm, values, Story(cluster), storage_uri, etcd_endpoint,
                        nats_url, root, tmp_path)  # fmt: skip
    finally:
        cp.helm("uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "3m", check=False)
    # Nothing left of the release: no workloads, no pods, no RBAC objects.
    left = cp.kubectl("get", "all,roles,rolebindings,serviceaccounts,configmaps", "-A", "-l",
                      f"app.kubernetes.io/instance={RELEASE}", "-o", "name").stdout.split()  # fmt: skip
    assert left == []
    assert not [p for p in kube_node.pods.values() if p.ns == RELEASE_NS]


async def all_indexed(story: Story) -> bool:
    """Every row the story wrote is in the example's index (field `vec`), as pymilvus reports it."""

    def indexed() -> int:
        c = MilvusClient(uri=story.cluster.milvus_uri)
        try:
            return int(c.describe_index(story.milvus_name, "vec").get("indexed_rows", 0))
        finally:
            c.close()

    return await asyncio.to_thread(indexed) == story.rows


def search(story: Story) -> list:
    """Hits of one search of the loaded collection through the Proxy pod."""
    c = MilvusClient(uri=story.cluster.milvus_uri)
    try:
        (hits,) = c.search(story.milvus_name, [[0.1] * 128], anns_field="vec", limit=3)
        return list(hits)
    finally:
        c.close()


def indexnode_builds(values: dict) -> float:
    """Index builds the IndexNode pod finished (kmilvus_indexnode_builds_total, its /metrics)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{values['indexnode']['metricsPort']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "kmilvus_indexnode_builds_total" and s.labels.get("state") == "finished"
    )


async def _no_consumers(stream: MsgStream, vchannels: list[str]) -> bool:
    chans = [*vchannels, *{pchannel_of(v) for v in vchannels}]  # own (catching up) and shared consumers
    return not [n for ch in chans for n in await stream.consumer_names(ch)]


async def _scenario(cp, kube_node, spark_operator, helm, values, story, storage_uri, etcd_endpoint, nats_url, root,
                    tmp_path) -> None:  # fmt: skip
    spark_operator.serve(NS)  # the spark-operator runs the served namespace's applications
    for crd in ("collections", "flushrequests", "segments"):
        cp.kubectl("wait", "--for=condition=Established", f"crd/{crd}.kmilvus.io", "--timeout=60s")
    pods = json.loads(cp.kubectl("-n", RELEASE_NS, "get", "pods", "-o", "json").stdout)["items"]
    names = [p["metadata"]["name"] for p in pods]
    for workload in ("kmilvus-operator-", "kmilvus-proxy-", "kmilvus-datanode-0", "kmilvus-querynode-0",
                     "kmilvus-indexnode-"):  # fmt: skip
        assert [n for n in names if n.startswith(workload)], (workload, names)
    assert all(cond(p, "Ready")["status"] == "True" for p in pods)
    # The operator's ServiceAccount gets what the chart's Role grants in the served namespace,
    # nothing more (the API server's RBAC answers, not a rendering of the rules).
    sa = f"--as=system:serviceaccount:{RELEASE_NS}:{RELEASE}-operator"
    for verb, what, ns, allowed in (
        ("patch", "collections.kmilvus.io --subresource=status", NS, "yes"),
        ("create", "segments.kmilvus.io", NS, "yes"),
        ("create", "sparkapplications.sparkoperator.k8s.io", NS, "yes"),
        ("get", "secrets", NS, "no"),
        ("get", "secrets", RELEASE_NS, "no"),
        ("create", "segments.kmilvus.io", "kube-system", "no"),
        ("create", "sparkapplications.sparkoperator.k8s.io", RELEASE_NS, "no"),
        ("delete", "pods", NS, "no"),
    ):
        out = cp.kubectl("auth", "can-i", verb, *what.split(), "-n", ns, sa, check=False).stdout.strip()
        assert out == allowed, (verb, what, ns, out)

    # The example Collection, as a user applies it → Ready (kubectl wait: GitOps tools do the same).
    story.apply_collection(timeout=180)
    cid, vchannels = story.collection_id, story.vchannels
    story.insert(300)
    story.flush(timeout=120)
    # The flushed segments' index is built by the IndexNode pod (DataCoord, in the operator,
    # builds none itself), then searched on the loaded collection.
    await eventually(functools.partial(all_indexed, story), 120, "the index of every flushed row")
    assert await asyncio.to_thread(indexnode_builds, values) >= 1
    assert len(await asyncio.to_thread(search, story)) == 3
    # A bulk import and a compaction in the operator (below spark.inProcessMaxMB).
    story.bulk_import(200, "imports/rows.parquet", spark=False, timeout=300)
    story.insert(100)
    story.flush(timeout=120)
    story.compact(spark=False, timeout=300)

    # `helm upgrade` (changed values, pods rolled) keeps the data; from now on every job is a
    # SparkApplication (spark.inProcessMaxMB 0).
    values["logLevel"] = "debug"
    values["spark"] = {"inProcessMaxMB": 0}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NS, "-f", str(tmp_path / "values.yaml"),
         "--wait", "--timeout", "5m")  # fmt: skip

    def count() -> bool:
        c = MilvusClient(uri=story.cluster.milvus_uri)
        try:
            return c.query(story.milvus_name, filter="", output_fields=["count(*)"])[0]["count(*)"] == story.rows
        except Exception:  # noqa: BLE001 - the new Proxy pod may not answer yet
            return False
        finally:
            c.close()

    async def counted() -> bool:
        return await asyncio.to_thread(count)

    await eventually(counted, 120, f"{story.rows} rows after the upgrade")
    # The IndexNode pod the upgrade rolled builds the new segments' indexes.
    story.insert(100)
    story.flush(timeout=120)
    await eventually(functools.partial(all_indexed, story), 120, "the index after the upgrade")

    # A bulk import and a compaction as SparkApplications: the stand-in made each one's driver pod
    # with the chart's driver ServiceAccount and the S3 Secret by reference, and the job ran with
    # that pod's environment and token only.
    imp = story.bulk_import(300, "imports/more.parquet", spark=True, timeout=600)
    story.insert(100)
    story.flush(timeout=120)
    comp = story.compact(spark=True, timeout=600)
    for last in (imp["last"], comp):
        app = spark_operator.seen[(NS, last["sparkApplication"])]
        assert [(o["kind"], o["name"]) for o in app["metadata"]["ownerReferences"]] == [("Collection", "docs")]
        pod = spark_operator.pods[(NS, last["sparkApplication"])]["spec"]
        assert pod["serviceAccountName"] == "kmilvus-spark"  # the chart's, with its Role
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "secret"}
        log = pod_logs(kube_node, NS, driver_pod_name(last["sparkApplication"]), tail=10**6)
        assert "KMILVUS_TEST_ONLY" not in log
    assert spark_operator.errors == []

    # Delete the Collection → the Milvus collection, its data and its children are gone.
    stream = await MsgStream.connect(nats_url, root)
    try:
        assert not await _no_consumers(stream, vchannels)  # the DataNode pod consumes them now
        story.delete(120)
        await assert_collection_gone(etcd_endpoint, root, storage_uri, cid, vchannels)

        async def consumers_gone() -> bool:
            return await _no_consumers(stream, vchannels)

        await eventually(consumers_gone, 60, "the stream consumers to go")
    finally:
        await stream.close()
    # The driver pods went with their SparkApplications (ownerReferences, the garbage collector).
    await eventually(
        lambda: not [p for p in kube_node.pods.values() if p.ns == NS and p.name.endswith("-driver")], 120,
        "the driver pods to go",
    )  # fmt: skip
    # Not one request of the operator was refused.
    assert "Forbidden" not in pod_logs(kube_node, RELEASE_NS, f"{RELEASE}-operator", tail=10**7)


def test_the_operator_runs_as_a_user_the_image_does_not_know(
    control_plane, kube_node, etcd_endpoint, nats_url, moto_endpoint, root, tmp_path
):
    """OpenShift's restricted policy runs pods as an arbitrary UID that the image's passwd lacks:
    kopf then names its peering identity from POD_ID, not from the user name it cannot look up."""
    cp = control_plane
    ns, release = "kmilvus-uid", "uid"
    storage_uri = f"s3://kmilvus-{uuid.uuid4().hex[:8]}/data?endpoint={moto_endpoint}"
    values = chart_values(root, etcd_endpoint, nats_url, storage_uri, free_port())
    values["operator"]["watchNamespaces"] = [ns]
    values["podSecurityContext"] = {"runAsNonRoot": True, "runAsUser": 1000680000, "runAsGroup": 0,
                                    "fsGroup": 1000680000}  # fmt: skip
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", "-", input=json.dumps(s3_secret(ns)))
    try:
        out = cp.helm("install", release, str(CHART), "-n", ns, "-f", str(tmp_path / "values.yaml"),
                      "--wait", "--timeout", "2m", check=False)  # fmt: skip
        assert out.returncode == 0, out.stderr + pod_logs(kube_node, ns, f"{release}-operator")
    finally:
        cp.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "2m", check=False)
        cp.kubectl("delete", "namespace", ns, "--wait=false")
