"""The Helm chart (charts/kmilvus), rendered offline by the real, pinned helm (`helm template`,
`helm lint`, tools/versions.env): lint, strict schema validation of every rendered object, the
chart's CRD copies against crds/, and the properties a cluster operator relies on (Service port,
probes, hardening, secrets by reference, least-privilege RBAC)."""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kmilvus import __version__
from kmilvus.util.embedded import find_binary

# kubernetes-validate re-reads its (large) JSON schemas on every call; memoise the reads.
if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
    kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(
        kubernetes_validate.utils.schema_contents
    )

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kmilvus"
CRDS = ROOT / "crds"
# The chart declares kubeVersion >=1.27; validate against an old and a recent schema set.
KUBE_VERSIONS = ("1.29", "1.34")
NS = "kmilvus"
RELEASE = "kmilvus"

EXTERNAL = {
    "externalEtcd": {"endpoint": "etcd-client.infra.svc:2379"},
    "externalNats": {
        "url": "nats://nats.infra.svc:4222",
        "auth": {"existingSecret": "nats-creds", "usernameKey": "user", "passwordKey": "pass"},
    },
    "storage": {
        "uri": "s3://binlogs/kmilvus?endpoint=http://ceph-rgw.infra.svc:7480",
        "region": "eu-west-1",
        "existingSecret": "s3-creds",
        "accessKeyIdKey": "access",
        "secretAccessKeyKey": "secret",
    },
    "image": {"repository": "registry.example.com/kmilvus", "tag": "1.2.3", "pullPolicy": "Always"},
    "operator": {
        "replicas": 2,
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "proxy": {
        "replicas": 3,
        "podDisruptionBudget": {"enabled": True},
        "service": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8"]},
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "proxy"}},
                        },
                    }
                ]
            }
        },
    },
    "datanode": {"replicas": 2, "podDisruptionBudget": {"enabled": True}},
    "indexnode": {"replicas": 3, "buildSlots": 2, "podDisruptionBudget": {"enabled": True}},
    "config": {"session_ttl": "15", "SEGMENT_MAX_SIZE_MB": 256},
}
IN_CHART = {"etcd": {"enabled": True}, "nats": {"enabled": True}, "minio": {"enabled": True}}
CLUSTER_WIDE = {
    **IN_CHART,
    "operator": {"clusterWide": True},
    "metrics": {"podAnnotations": True, "serviceMonitor": {"enabled": True}},
    "etcd": {"enabled": True, "persistence": {"enabled": False}},
}
MULTI_NS = {"operator": {"watchNamespaces": ["team-a", "team-b"]}}
SECURE = {
    **IN_CHART,
    "security": {
        "auth": {"enabled": True, "rootPasswordSecret": "kmilvus-root"},
        "tls": {"secretName": "kmilvus-tls", "mutual": True},
        "networkPolicy": {"enabled": True, "apiFrom": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]},
        "internalTls": {"secretName": "kmilvus-internal-tls"},
        "etcd": {"authSecret": "etcd-auth", "tlsSecret": "etcd-client-tls"},
        "nats": {"tlsSecret": "nats-client-tls"},
    },
}
SCENARIOS = {
    "default": {},
    "external": EXTERNAL,
    "in-chart": IN_CHART,
    "cluster-wide": CLUSTER_WIDE,
    "multi-namespace": MULTI_NS,
    "secure": SECURE,
}
KMILVUS_COMPONENTS = ("operator", "proxy", "datanode", "querynode", "indexnode")
pytestmark = pytest.mark.usefixtures("pinned_helm")  # the real helm renders the chart


# ------------------------------------------------------------------------------------ helpers


def helm(*args: str, values: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """The real helm (values as JSON on stdin: JSON is YAML), offline."""
    argv = [find_binary("helm"), *args]
    if values is not None:
        argv += ["--values", "-"]
    out = subprocess.run(argv, input=json.dumps(values or {}), capture_output=True, text=True)
    if check and out.returncode:
        raise AssertionError(f"helm {' '.join(args)}: {out.stderr.strip()}")
    return out


@functools.lru_cache(maxsize=64)
def _template(values_json: str) -> str:
    return helm("template", RELEASE, str(CHART), "--namespace", NS, values=json.loads(values_json)).stdout


def render(values: dict) -> list[dict]:
    """`helm template` of the chart: every object it would install (templates, not crds/)."""
    return [d for d in yaml.safe_load_all(_template(json.dumps(values, sort_keys=True))) if d]


@pytest.fixture(scope="module", params=list(SCENARIOS))
def scenario(request):
    return request.param, render(SCENARIOS[request.param])


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def workloads(docs):
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def flag(args: list[str], name: str) -> list[str]:
    """The values given to a (repeatable) command-line flag."""
    return [args[i + 1] for i, a in enumerate(args) if a == name]


def operator_args(docs) -> list[str]:
    return one(docs, "Deployment", f"{RELEASE}-operator")["spec"]["template"]["spec"]["containers"][0]["args"]


def component(obj) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crd_schema(crd: dict, version: str) -> dict:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise AssertionError(f"{crd['metadata']['name']} has no version {version}")


@functools.cache
def _chart_crds() -> dict[str, dict]:
    out = {}
    for f in sorted((CHART / "crds").glob("*.yaml")):
        for d in load_yaml_docs(f):
            out[(d["spec"]["group"], d["spec"]["names"]["kind"])] = d
    return out


def chart_crds() -> dict[str, dict]:
    """CRDs under charts/kmilvus/crds, by (group, kind) (a fresh copy)."""
    return copy.deepcopy(_chart_crds())


def validate_strict(obj: dict) -> None:
    """Every built-in object validates against the Kubernetes schemas, unknown fields rejected;
    instances of our or kopf's CRDs validate against the CRD's own schema."""
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    crds = _chart_crds()
    if (group, obj["kind"]) in crds:
        jsonschema.validate(obj, crd_schema(crds[(group, obj["kind"])], obj["apiVersion"].split("/")[1]))
        return
    if obj["kind"] == "ServiceMonitor":  # prometheus-operator CRD: not bundled, checked by hand
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(obj["spec"]) <= {"selector", "namespaceSelector", "podTargetLabels", "endpoints", "jobLabel"}
        assert obj["spec"]["endpoints"] and obj["spec"]["selector"]["matchLabels"]
        return
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version} at {path}: {e.message}"
            )


# ------------------------------------------------------------------------------------ lint


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_helm_lint_is_clean(name):
    """`helm lint --strict`: warnings fail it too."""
    out = helm("lint", str(CHART), "--strict", "--namespace", NS, values=SCENARIOS[name], check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def test_chart_metadata_is_helm3():
    meta = yaml.safe_load(helm("show", "chart", str(CHART)).stdout)
    crd_files = {f"crds/{p.name}" for p in (CHART / "crds").glob("*.yaml")}
    assert meta["apiVersion"] == "v2" and meta["name"] == "kmilvus"
    assert "crds/kopf-peerings.yaml" in crd_files
    assert any("collections" in f for f in crd_files)


# ------------------------------------------------------------------------------------ validation


def test_every_rendered_object_validates_strictly(scenario):
    name, docs = scenario
    assert len(docs) > 10, name
    for obj in docs:
        validate_strict(obj)


def test_rendered_objects_are_namespaced_to_the_release(scenario):
    name, docs = scenario
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"}
    served = set(SCENARIOS[name].get("operator", {}).get("watchNamespaces") or [NS])
    for obj in docs:
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"]
        elif obj["kind"] in ("Role", "RoleBinding", "KopfPeering") or (
            obj["metadata"]["name"] in ("kmilvus-spark", f"{RELEASE}-minio")
            and obj["kind"] in ("ServiceAccount", "Secret")
        ):
            assert obj["metadata"]["namespace"] in served
        else:
            assert obj["metadata"]["namespace"] == NS, f"{obj['kind']}/{obj['metadata']['name']}"
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in docs]
    assert len(names) == len(set(names)), "duplicate objects"


def test_chart_crds_validate_strictly():
    crds = chart_crds()
    assert {k for g, k in crds if g == "kmilvus.io"} == {"Collection", "FlushRequest", "Segment"}
    assert {k for g, k in crds if g == "kopf.dev"} == {"ClusterKopfPeering", "KopfPeering"}
    for crd in crds.values():
        validate_strict(crd)
    for kind, plural in (("Collection", "collections"), ("FlushRequest", "flushrequests"), ("Segment", "segments")):
        spec = crds[("kmilvus.io", kind)]["spec"]
        assert spec["scope"] == "Namespaced" and spec["names"]["plural"] == plural
        versions = {v["name"]: v for v in spec["versions"]}
        assert versions["v1alpha1"]["served"] and versions["v1alpha1"]["storage"]
        if kind != "Segment":  # Segments are written whole by the operator
            assert "status" in versions["v1alpha1"].get("subresources", {})


def _repo_crd_files() -> list[Path]:
    if not CRDS.is_dir():
        return []
    return [
        f
        for f in sorted(CRDS.glob("*.yaml"))
        if any(d.get("kind") == "CustomResourceDefinition" for d in load_yaml_docs(f))
    ]


def test_chart_crds_are_copies_of_crds_dir():
    """The chart installs crds/ from its own crds/ folder: the copies must not drift."""
    repo_files = _repo_crd_files()
    if not repo_files:
        # crds/ holds no CRDs yet: the chart carries its own best version of all three.
        assert {k for g, k in chart_crds() if g == "kmilvus.io"} == {"Collection", "FlushRequest", "Segment"}
        return
    hint = "run python tools/gen_crds.py"
    for f in repo_files:
        copy = CHART / "crds" / f.name
        assert copy.is_file(), f"charts/kmilvus/crds/{f.name} missing ({hint})"
        assert copy.read_bytes() == f.read_bytes(), f"charts/kmilvus/crds/{f.name} differs from crds/{f.name} ({hint})"
    repo_names = {
        d["metadata"]["name"]
        for f in repo_files
        for d in load_yaml_docs(f)
        if d.get("kind") == "CustomResourceDefinition"
    }
    chart_names = {d["metadata"]["name"] for d in chart_crds().values() if d["spec"]["group"] != "kopf.dev"}
    assert chart_names == repo_names, f"stale or missing CRDs in the chart ({hint})"


def test_crd_examples_match_the_crds():
    """crds/examples (used by e2e and NOTES.txt) are valid instances of the chart's CRDs."""
    examples = sorted((CRDS / "examples").glob("*.yaml")) if (CRDS / "examples").is_dir() else []
    crds = chart_crds()
    checked = 0
    for f in examples:
        for obj in load_yaml_docs(f):
            group, version = obj["apiVersion"].split("/")
            if (group, obj["kind"]) in crds:
                jsonschema.validate(obj, crd_schema(crds[(group, obj["kind"])], version))
                checked += 1
    assert checked == 0 or checked >= len(examples)
    assert crds[("kmilvus.io", "Collection")]  # the schema used above exists either way


# ------------------------------------------------------------------------------------ properties


def test_milvus_service_on_19530(scenario):
    _, docs = scenario
    svc = one(docs, "Service", f"{RELEASE}-milvus")
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert ports["milvus"]["port"] == 19530
    assert ports["milvus"]["targetPort"] == "milvus"
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "proxy"
    proxy = one(docs, "Deployment", f"{RELEASE}-proxy")
    c = proxy["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "milvus", "containerPort": 19530, "protocol": "TCP"} in c["ports"]
    assert c["command"] == ["kmilvus"] and c["args"][:2] == ["run", "proxy"] and "0.0.0.0" in c["args"]
    # The RESTful API v2 on its own port, exposed by the same Service.
    assert flag(c["args"], "--http-port") == ["19531"]
    assert {"name": "http", "containerPort": 19531, "protocol": "TCP"} in c["ports"]
    assert ports["http"]["port"] == 19531 and ports["http"]["targetPort"] == "http"
    assert ports["http"]["appProtocol"] == "http"


def test_restful_api_can_be_turned_off():
    docs = render({"proxy": {"httpPort": None}})
    c = one(docs, "Deployment", f"{RELEASE}-proxy")["spec"]["template"]["spec"]["containers"][0]
    assert flag(c["args"], "--http-port") == ["-1"]
    assert "http" not in {p["name"] for p in c["ports"]}
    svc = one(docs, "Service", f"{RELEASE}-milvus")
    assert [p["name"] for p in svc["spec"]["ports"]] == ["milvus"]


def test_component_workloads(scenario):
    _, docs = scenario
    op = one(docs, "Deployment", f"{RELEASE}-operator")
    assert op["spec"]["strategy"]["type"] == "Recreate"
    c = op["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["kmilvus-operator"] and c["args"][0].startswith("--")
    assert flag(c["args"], "--metrics-port") == ["9091"] and flag(c["args"], "--health-port") == ["8080"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"health": 8080, "metrics": 9091}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    dn = one(docs, "StatefulSet", f"{RELEASE}-datanode")
    assert dn["spec"]["serviceName"] == f"{RELEASE}-datanode"
    headless = one(docs, "Service", f"{RELEASE}-datanode")
    assert headless["spec"]["clusterIP"] == "None"
    dn_args = dn["spec"]["template"]["spec"]["containers"][0]["args"]
    assert dn["spec"]["template"]["spec"]["containers"][0]["command"] == ["kmilvus"]
    assert dn_args[:2] == ["run", "datanode"] and flag(dn_args, "--host") == ["$(POD_IP)"]
    qn = one(docs, "StatefulSet", f"{RELEASE}-querynode")
    assert qn["spec"]["serviceName"] == f"{RELEASE}-querynode"
    assert one(docs, "Service", f"{RELEASE}-querynode")["spec"]["clusterIP"] == "None"
    qn_args = qn["spec"]["template"]["spec"]["containers"][0]["args"]
    assert qn_args[:2] == ["run", "querynode"] and flag(qn_args, "--host") == ["$(POD_IP)"]
    # IndexNodes hold no data: a Deployment (no volume claims, no Service: DataCoord finds them
    # by their etcd sessions), replaced a pod at a time in place (no room for an extra one needed).
    ix = one(docs, "Deployment", f"{RELEASE}-indexnode")
    assert ix["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    ix_c = ix["spec"]["template"]["spec"]["containers"][0]
    assert ix_c["command"] == ["kmilvus"] and ix_c["args"][:2] == ["run", "indexnode"]
    assert flag(ix_c["args"], "--host") == ["$(POD_IP)"] and flag(ix_c["args"], "--metrics-port") == ["9091"]
    assert {p["name"]: p["containerPort"] for p in ix_c["ports"]} == {"metrics": 9091}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert ix_c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert not [v for v in ix["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert not [s for s in by_kind(docs, "Service") if component(s) == "indexnode"]


def test_kmilvus_pods_have_probes_and_env(scenario):
    _, docs = scenario
    kms = [w for w in workloads(docs) if component(w) in KMILVUS_COMPONENTS]
    assert {component(w) for w in kms} == set(KMILVUS_COMPONENTS)
    for w in kms:
        for c in w["spec"]["template"]["spec"]["containers"]:
            assert c.get("livenessProbe") and c.get("readinessProbe"), w["metadata"]["name"]
            env = {e["name"]: e for e in c["env"]}
            assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
            assert env["KMILVUS_INTERNAL_HOST"]["value"] == "$(POD_IP)"
            assert {"configMapRef": {"name": f"{RELEASE}-config"}} in c["envFrom"]
            assert c["resources"]["requests"]
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_every_pod_is_hardened(scenario):
    _, docs = scenario
    for w in workloads(docs):
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, w["metadata"]["name"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert "add" not in sc["capabilities"]
            assert c["image"] and ":" in c["image"] and not c["image"].endswith(":latest")
        if component(w) != "operator":
            assert pod["automountServiceAccountToken"] is False, w["metadata"]["name"]


# Env vars that carry credentials themselves (names of Secrets and of their keys are fine).
SECRETISH = re.compile(r"(PASSWORD|PASSWD|SECRET_ACCESS_KEY|ACCESS_KEY_ID|SESSION_TOKEN|_TOKEN)$")


def test_secrets_are_referenced_never_inlined(scenario):
    _, docs = scenario
    for w in workloads(docs):
        for c in w["spec"]["template"]["spec"]["containers"]:
            for e in c.get("env", []):
                if SECRETISH.search(e["name"]):
                    assert "value" not in e, f"{w['metadata']['name']}: {e['name']} is inlined"
                    assert "secretKeyRef" in e["valueFrom"], e
    for cm in by_kind(docs, "ConfigMap"):
        for k in cm["data"]:
            assert not re.search(r"PASSWORD|SECRET_ACCESS", k), k


def test_external_endpoints_and_secret_refs():
    docs = render(EXTERNAL)
    cm = one(docs, "ConfigMap", f"{RELEASE}-config")["data"]
    assert cm["KMILVUS_ETCD_ENDPOINT"] == "etcd-client.infra.svc:2379"
    assert cm["KMILVUS_STORAGE_URI"] == "s3://binlogs/kmilvus?endpoint=http://ceph-rgw.infra.svc:7480"
    assert cm["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert cm["KMILVUS_SESSION_TTL"] == "15" and cm["KMILVUS_SEGMENT_MAX_SIZE_MB"] == "256"
    assert "KMILVUS_NATS_URL" not in cm  # composed from the secret-backed env below
    assert not [d for d in docs if d["kind"] == "Secret"]  # nothing generated, nothing copied
    for w in workloads(docs):
        c = w["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == "registry.example.com/kmilvus:1.2.3" and c["imagePullPolicy"] == "Always"
        env = {e["name"]: e for e in c["env"]}
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "access"}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "secret"}
        assert env["NATS_USER"]["valueFrom"]["secretKeyRef"] == {"name": "nats-creds", "key": "user"}
        assert env["NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "nats-creds", "key": "pass"}
        names = [e["name"] for e in c["env"]]
        assert names.index("NATS_PASSWORD") < names.index("KMILVUS_NATS_URL")  # $(VAR) needs order
        assert env["KMILVUS_NATS_URL"]["value"] == "nats://$(NATS_USER):$(NATS_PASSWORD)@nats.infra.svc:4222"
    op = one(docs, "Deployment", f"{RELEASE}-operator")
    assert op["spec"]["replicas"] == 2
    assert op["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "system"}
    assert op["spec"]["template"]["spec"]["tolerations"][0]["key"] == "dedicated"
    assert one(docs, "Deployment", f"{RELEASE}-proxy")["spec"]["replicas"] == 3
    assert one(docs, "StatefulSet", f"{RELEASE}-datanode")["spec"]["replicas"] == 2
    ix = one(docs, "Deployment", f"{RELEASE}-indexnode")
    assert ix["spec"]["replicas"] == 3
    ix_env = {e["name"]: e for e in ix["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert ix_env["KMILVUS_INDEX_BUILD_SLOTS"] == {"name": "KMILVUS_INDEX_BUILD_SLOTS", "value": "2"}
    svc = one(docs, "Service", f"{RELEASE}-milvus")
    assert svc["spec"]["type"] == "LoadBalancer" and svc["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/8"]
    assert {p["metadata"]["name"] for p in by_kind(docs, "PodDisruptionBudget")} == {
        f"{RELEASE}-proxy",
        f"{RELEASE}-datanode",
        f"{RELEASE}-indexnode",
    }
    assert not [w for w in workloads(docs) if component(w) in ("etcd", "nats", "minio")]


def test_default_values_use_external_services_without_credentials():
    docs = render({})
    cm = one(docs, "ConfigMap", f"{RELEASE}-config")["data"]
    assert cm["KMILVUS_ETCD_ENDPOINT"] == "etcd:2379"
    assert cm["KMILVUS_NATS_URL"] == "nats://nats:4222"
    assert cm["KMILVUS_CLUSTER"] == RELEASE
    assert not [w for w in workloads(docs) if component(w) in ("etcd", "nats", "minio")]
    for w in workloads(docs):
        env = {e["name"] for e in w["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert not env & {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "NATS_PASSWORD"}
    assert not by_kind(docs, "ServiceMonitor")
    assert not by_kind(docs, "PodDisruptionBudget")


def test_in_chart_etcd_nats_minio():
    docs = render(IN_CHART)
    cm = one(docs, "ConfigMap", f"{RELEASE}-config")["data"]
    assert cm["KMILVUS_ETCD_ENDPOINT"] == f"{RELEASE}-etcd.{NS}.svc:2379"
    assert cm["KMILVUS_NATS_URL"] == f"nats://{RELEASE}-nats.{NS}.svc:4222"
    assert cm["KMILVUS_STORAGE_URI"] == f"s3://kmilvus/data?endpoint=http://{RELEASE}-minio.{NS}.svc:9000"
    etcd = one(docs, "StatefulSet", f"{RELEASE}-etcd")
    assert one(docs, "Service", f"{RELEASE}-etcd")["spec"]["ports"][0]["port"] == 2379
    assert etcd["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    nats = one(docs, "StatefulSet", f"{RELEASE}-nats")
    assert nats["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "nats-server",
        "--config",
        "/etc/nats/nats.conf",
    ]
    conf = one(docs, "ConfigMap", f"{RELEASE}-nats-config")["data"]["nats.conf"]
    assert re.search(r"^max_payload: 8MB$", conf, re.M)
    assert "jetstream {" in conf and "store_dir: /data" in conf
    assert one(docs, "Service", f"{RELEASE}-nats")["spec"]["ports"][0]["port"] == 4222
    secret = one(docs, "Secret", f"{RELEASE}-minio")
    password = base64.b64decode(secret["data"]["rootPassword"]).decode()
    assert len(password) == 32
    for w in workloads(docs):
        c = w["spec"]["template"]["spec"]["containers"][0]
        for e in c.get("env", []):
            assert e.get("value") != password
        if component(w) in KMILVUS_COMPONENTS:
            env = {e["name"]: e for e in c["env"]}
            assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
                "name": f"{RELEASE}-minio",
                "key": "rootPassword",
            }
    minio = one(docs, "StatefulSet", f"{RELEASE}-minio")
    menv = {e["name"]: e for e in minio["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert menv["MINIO_ROOT_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == f"{RELEASE}-minio"


def test_monitoring_is_optional():
    docs = render(CLUSTER_WIDE)
    sm = one(docs, "ServiceMonitor", RELEASE)
    svc = one(docs, "Service", f"{RELEASE}-metrics")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert svc["spec"]["selector"]["kmilvus.io/metrics"] == "true"
    for w in workloads(docs):
        if component(w) in KMILVUS_COMPONENTS:
            tmpl = w["spec"]["template"]["metadata"]
            assert tmpl["labels"]["kmilvus.io/metrics"] == "true"
            assert tmpl["annotations"]["prometheus.io/scrape"] == "true"
            assert tmpl["annotations"]["prometheus.io/port"] == "9091"


# ------------------------------------------------------------------------------------ RBAC

READ = {"get", "list", "watch"}


def _rules(docs, kind):
    return [(r["metadata"].get("namespace"), rule) for r in by_kind(docs, kind) for rule in r["rules"]]


def test_rbac_has_no_wildcards(scenario):
    _, docs = scenario
    for kind in ("Role", "ClusterRole"):
        for _, rule in _rules(docs, kind):
            for key in ("verbs", "resources", "apiGroups", "resourceNames"):
                assert "*" not in rule.get(key, []), rule
            assert "secrets" not in rule["resources"]
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def test_namespaced_operator_rbac_is_least_privilege():
    docs = render({})
    # a namespaced operator needs nothing at cluster scope (kopf's scanning is off)
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")
    role = one(docs, "Role", f"{RELEASE}-operator")
    assert role["metadata"]["namespace"] == NS
    granted = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    for need in [
        ("kmilvus.io", "collections", "patch"),
        ("kmilvus.io", "collections/status", "patch"),
        ("kmilvus.io", "collections/finalizers", "update"),
        ("kmilvus.io", "flushrequests", "watch"),
        ("kmilvus.io", "flushrequests/status", "patch"),
        ("kmilvus.io", "segments", "create"),
        ("kmilvus.io", "segments", "delete"),
        ("kmilvus.io", "segments/status", "patch"),
        ("sparkoperator.k8s.io", "sparkapplications", "create"),
        ("sparkoperator.k8s.io", "sparkapplications", "watch"),
        ("", "events", "create"),
        ("", "pods", "list"),
        ("", "services", "get"),
        ("kopf.dev", "kopfpeerings", "list"),
        ("kopf.dev", "kopfpeerings", "patch"),
    ]:
        assert need in granted, need
    # collections are mirrored from pymilvus (create/delete), never wiped wholesale
    assert ("kmilvus.io", "collections", "deletecollection") not in granted
    assert ("kmilvus.io", "flushrequests", "create") not in granted  # users ask for flushes
    # pods and services are read-only
    assert not {v for g, r, v in granted if r in ("pods", "services")} - READ
    # the peering object it writes is its own (it may create it when missing)
    for rule in role["rules"]:
        if "kopfpeerings" in rule["resources"] and set(rule["verbs"]) & {"patch", "update", "delete"}:
            assert rule["resourceNames"] == [RELEASE] and "delete" not in rule["verbs"]
    rb = one(docs, "RoleBinding", f"{RELEASE}-operator")
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-operator", "namespace": NS}]
    assert rb["roleRef"]["name"] == role["metadata"]["name"]
    peering = one(docs, "KopfPeering", RELEASE)
    assert peering["metadata"]["namespace"] == NS
    args = operator_args(docs)
    assert flag(args, "--namespace") == [NS] and flag(args, "--peering") == [RELEASE]
    assert flag(args, "--sdk-namespace") == [NS]


def test_multi_namespace_and_cluster_wide_rbac():
    docs = render(MULTI_NS)
    assert {
        r["metadata"]["namespace"] for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-operator")
    } == {"team-a", "team-b"}
    assert {p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")} == {"team-a", "team-b"}
    assert {
        s["metadata"]["namespace"] for s in by_kind(docs, "ServiceAccount") if s["metadata"]["name"] == "kmilvus-spark"
    } == {"team-a", "team-b"}
    for rb in by_kind(docs, "RoleBinding"):
        if rb["metadata"]["name"].endswith("-operator"):
            assert rb["subjects"][0]["namespace"] == NS  # the operator's SA lives in the release ns
    args = operator_args(docs)
    assert flag(args, "--namespace") == ["team-a", "team-b"]
    assert flag(args, "--sdk-namespace") == ["team-a"]

    docs = render(CLUSTER_WIDE)
    assert not [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-operator")]
    (cr,) = by_kind(docs, "ClusterRole")
    resources = {r for rule in cr["rules"] for r in rule["resources"]}
    assert {"collections", "segments", "sparkapplications", "clusterkopfpeerings"} <= resources
    assert one(docs, "ClusterKopfPeering", RELEASE)
    (crb,) = by_kind(docs, "ClusterRoleBinding")
    assert crb["roleRef"]["name"] == cr["metadata"]["name"]
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-operator", "namespace": NS}]
    for rule in cr["rules"]:
        if "clusterkopfpeerings" in rule["resources"] and set(rule["verbs"]) & {"patch", "update"}:
            assert rule["resourceNames"] == [RELEASE]
    assert not by_kind(docs, "KopfPeering")
    args = operator_args(docs)
    assert flag(args, "--namespace") == []  # no --namespace: cluster-wide
    assert flag(args, "--sdk-namespace") == [NS]


def test_spark_driver_rbac():
    docs = render({})
    sa = one(docs, "ServiceAccount", "kmilvus-spark")
    assert sa["metadata"]["namespace"] == NS
    role = one(docs, "Role", "kmilvus-spark")
    (rule,) = role["rules"]
    assert rule["apiGroups"] == [""]
    assert set(rule["resources"]) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    rb = one(docs, "RoleBinding", "kmilvus-spark")
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "kmilvus-spark", "namespace": NS}]
    env = {
        e["name"]: e.get("value")
        for e in one(docs, "Deployment", f"{RELEASE}-operator")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["KMILVUS_SPARK_SERVICE_ACCOUNT"] == "kmilvus-spark"
    assert env["KMILVUS_SPARK_IMAGE"] == f"kmilvus/kmilvus-spark:{__version__}"


def _operator_config(docs, monkeypatch):
    """The operator's Config from exactly its rendered container: plain env values + ConfigMap."""
    from kmilvus.config import Config

    c = one(docs, "Deployment", f"{RELEASE}-operator")["spec"]["template"]["spec"]["containers"][0]
    for key, value in one(docs, "ConfigMap", f"{RELEASE}-config")["data"].items():
        monkeypatch.setenv(key, value)
    for e in c["env"]:
        if e["name"].startswith("KMILVUS_SPARK_"):
            assert "value" in e, f"{e['name']} must be a plain value"
            monkeypatch.setenv(e["name"], e["value"])
    return Config.from_env(), {e["name"]: e for e in c["env"]}


def _allows(docs, ns: str, account: str, verb: str, resource: str) -> bool:
    """Whether a RoleBinding in `ns` grants ServiceAccount ns/account `verb` on core `resource`."""
    for rb in by_kind(docs, "RoleBinding"):
        if rb["metadata"]["namespace"] != ns or rb["roleRef"]["kind"] != "Role":
            continue
        if {"kind": "ServiceAccount", "name": account, "namespace": ns} not in rb["subjects"]:
            continue
        role = one(
            [r for r in by_kind(docs, "Role") if r["metadata"]["namespace"] == ns], "Role", rb["roleRef"]["name"]
        )
        if any("" in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in role["rules"]):
            return True
    return False


SPARK_SCENARIOS = {
    **SCENARIOS,
    "multi-namespace+minio": {**IN_CHART, **MULTI_NS},
    "cluster-wide+spark": {**CLUSTER_WIDE, "spark": {"namespaces": ["team-c"]}},
}


@pytest.mark.parametrize("name", sorted(set(SPARK_SCENARIOS) - {"cluster-wide"}))
def test_spark_applications_get_what_the_chart_provides(name, monkeypatch):
    """An application built from the operator's rendered settings, placed in any served
    namespace (its Collection's), names a driver account that exists there with the Role it
    needs, the chart's Spark image, and the operator's own S3 Secret by secretKeyRef."""
    from kmilvus.spark import application

    values = copy.deepcopy(SPARK_SCENARIOS[name])
    docs = render(values)
    cfg, op_env = _operator_config(docs, monkeypatch)
    served = (values.get("operator", {}).get("watchNamespaces") or [NS]) + values.get("spark", {}).get("namespaces", [])
    assert cfg.spark_runner == "sparkapplication" and cfg.spark_namespace in served
    app = application.from_config("import", {"job_id": 1, "collection_id": 2}, "kmilvus-import-2-1", cfg)
    spec = app["spec"]
    assert spec["image"] == f"kmilvus/kmilvus-spark:{__version__}" and spec["imagePullPolicy"] == "IfNotPresent"
    assert spec["sparkVersion"] == application.SPARK_VERSION
    account = spec["driver"]["serviceAccount"]
    for ns in served:
        sa = [s for s in by_kind(docs, "ServiceAccount") if s["metadata"]["namespace"] == ns]
        assert account in {s["metadata"]["name"] for s in sa}, f"no driver account {account} in {ns}"
        assert _allows(docs, ns, account, "create", "pods") and _allows(docs, ns, account, "delete", "pods")
    # S3: the Secret the operator itself uses, by reference, on driver and executors.
    own = {
        k: op_env[k]["valueFrom"]["secretKeyRef"] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if k in op_env
    }
    for pod in ("driver", "executor"):
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in spec[pod]["env"] if e["name"].startswith("AWS_")}
        assert refs == own
        assert all("value" not in e for e in spec[pod]["env"] if e["name"].startswith("AWS_"))
    if name == "external":  # the user's Secret (values: create it in every served namespace)
        assert own["AWS_ACCESS_KEY_ID"] == {"name": "s3-creds", "key": "access"}
    elif values.get("minio", {}).get("enabled"):  # the chart's: rendered wherever jobs run
        assert own["AWS_SECRET_ACCESS_KEY"] == {"name": f"{RELEASE}-minio", "key": "rootPassword"}
        copies = [s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == f"{RELEASE}-minio"]
        assert {s["metadata"]["namespace"] for s in copies} == set(served) | {NS}
        assert len({(s["data"]["rootUser"], s["data"]["rootPassword"]) for s in copies}) == 1
    else:
        assert own == {}


# ------------------------------------------------------------------------------------ CLI contract


@pytest.mark.parametrize("name", ["default", "multi-namespace", "cluster-wide"])
def test_container_args_parse_with_the_kmilvus_cli(name, monkeypatch):
    """The command and args the chart gives each container are accepted by the real CLIs:
    `kmilvus-operator` (controllers.main) for the operator, `kmilvus run ROLE` for the others."""
    import click

    from controllers import main as operator_cli
    from kmilvus import cli

    docs = render(SCENARIOS[name])
    for key, value in one(docs, "ConfigMap", f"{RELEASE}-config")["data"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("KMILVUS_INTERNAL_HOST", "10.0.0.7")
    for w in workloads(docs):
        if component(w) not in KMILVUS_COMPONENTS:
            continue
        c = w["spec"]["template"]["spec"]["containers"][0]
        args = c["args"]
        if component(w) == "operator":
            assert c["command"] == ["kmilvus-operator"]
            ctx = operator_cli.main.make_context("kmilvus-operator", list(args))
        else:
            assert c["command"] == ["kmilvus"]
            command = cli.main.get_command(click.Context(cli.main), args[0])
            assert command is not None, f"kmilvus has no `{args[0]}` command"
            ctx = command.make_context(args[0], list(args[1:]))
        if component(w) == "operator":
            served = SCENARIOS[name].get("operator", {})
            expected = () if served.get("clusterWide") else tuple(served.get("watchNamespaces") or [NS])
            assert ctx.params["namespaces"] == expected
            assert ctx.params["metrics_port"] == 9091 and ctx.params["health_port"] == 8080
            assert ctx.params["peering"] == RELEASE
        else:
            assert ctx.params["roles"] == (component(w),)
            assert ctx.params["etcd_endpoint"] and ctx.params["storage_uri"] and ctx.params["nats_url"]


# ------------------------------------------------------------------------------------ GitOps health


def _argocd_health_lua() -> str:
    text = (CHART / "README.md").read_text()
    block = re.search(
        r"```yaml\n(data:\n  resource\.customizations\.health\.kmilvus\.io_Collection:.*?)```", text, re.S
    )
    assert block, "charts/kmilvus/README.md has no Argo CD health check for Collections"
    return yaml.safe_load(block.group(1))["data"]["resource.customizations.health.kmilvus.io_Collection"]


def _argocd_health(obj: dict) -> dict:
    """Run the README's Lua check as Argo CD does: `obj` global, the script's return value."""
    import lupa

    lua = lupa.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute(_argocd_health_lua())
    return {"status": hs["status"], "message": hs["message"]}


def test_argocd_health_check_reads_the_kstatus_conditions():
    from controllers import conditions

    def collection(generation: int, observed: int | None, *conds) -> dict:
        cs: list[dict] = []
        for ctype, ok, reason, msg in conds:
            cs, _ = conditions.set_condition(cs, ctype, ok, reason, msg, observed)
        status = {"conditions": conditions.with_kstatus(cs, observed)} if conds else {}
        if observed is not None and conds:
            status["observedGeneration"] = observed
        return {"metadata": {"name": "docs", "generation": generation}, **({"status": status} if status else {})}

    assert _argocd_health(collection(1, None))["status"] == "Progressing"
    assert _argocd_health(collection(1, 1, ("Ready", True, "Created", "created collection docs"))) == {
        "status": "Healthy",
        "message": "created collection docs",
    }
    # A new generation not observed yet: still progressing.
    assert _argocd_health(collection(2, 1, ("Ready", True, "Created", "created")))["status"] == "Progressing"
    bad = _argocd_health(collection(1, 1, ("Ready", False, "InvalidSpec", "dim must be in [1, 32768]")))
    assert bad == {"status": "Degraded", "message": "InvalidSpec: dim must be in [1, 32768]"}
    refused = collection(
        2,
        2,
        ("Ready", True, "Created", "created"),
        ("SchemaSynced", False, "SchemaImmutable", "the schema cannot change"),
    )
    assert _argocd_health(refused)["status"] == "Degraded"


# ------------------------------------------------------------------------------------ security


def test_security_values_wire_auth_tls_and_network_policies():
    docs = render(SECURE)
    operator = one(docs, "Deployment", f"{RELEASE}-operator")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in operator["env"]}
    assert env["KMILVUS_AUTH"]["value"] == "true"
    assert env["KMILVUS_ROOT_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kmilvus-root", "key": "password"}
    pod = one(docs, "Deployment", f"{RELEASE}-proxy")["spec"]["template"]["spec"]
    proxy = pod["containers"][0]
    assert "KMILVUS_ROOT_PASSWORD" not in {e["name"] for e in proxy["env"]}  # only RootCoord needs it
    assert {e["name"]: e.get("value") for e in proxy["env"]}["KMILVUS_AUTH"] == "true"
    args = proxy["args"]
    assert flag(args, "--tls-cert") == ["/etc/kmilvus/tls/tls.crt"]
    assert flag(args, "--tls-key") == ["/etc/kmilvus/tls/tls.key"]
    assert flag(args, "--tls-ca") == ["/etc/kmilvus/tls/ca.crt"]
    assert {"name": "tls", "mountPath": "/etc/kmilvus/tls", "readOnly": True} in proxy["volumeMounts"]
    assert {"name": "tls", "secret": {"secretName": "kmilvus-tls", "defaultMode": 0o440}} in pod["volumes"]

    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "NetworkPolicy")}
    for server in ("etcd", "nats"):
        peers = [
            f["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            for f in policies[f"{RELEASE}-{server}"]["ingress"][0]["from"]
        ]
        assert sorted(peers) == sorted(["operator", "proxy", "datanode", "querynode", "indexnode", server])
        assert "ports" not in policies[f"{RELEASE}-{server}"]["ingress"][0]
    api_rules = [
        r
        for r in policies[f"{RELEASE}-proxy"]["ingress"]
        if r.get("ports") == [{"port": 19530, "protocol": "TCP"}, {"port": 19531, "protocol": "TCP"}]
    ]
    assert api_rules and api_rules[0]["from"] == SECURE["security"]["networkPolicy"]["apiFrom"]
    for name in ("operator", "datanode", "querynode", "indexnode"):
        ports = [p["port"] for r in policies[f"{RELEASE}-{name}"]["ingress"] for p in r.get("ports", [])]
        assert ports == [9091]  # only metrics from outside the release's kmilvus pods
    assert not by_kind(render({}), "NetworkPolicy")

    # Internal mutual TLS, etcd and NATS client TLS and etcd credentials: on every kmilvus pod.
    for w in workloads(docs):
        if component(w) not in KMILVUS_COMPONENTS:
            continue
        spec = w["spec"]["template"]["spec"]
        c = spec["containers"][0]
        env = {e["name"]: e for e in c["env"]}
        secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        for name, secret, prefix in (
            ("internal-tls", "kmilvus-internal-tls", "KMILVUS_INTERNAL_TLS"),
            ("etcd-tls", "etcd-client-tls", "KMILVUS_ETCD_TLS"),
            ("nats-tls", "nats-client-tls", "KMILVUS_NATS_TLS"),
        ):
            assert secrets[name] == secret
            assert {"name": name, "mountPath": f"/etc/kmilvus/{name}", "readOnly": True} in c["volumeMounts"]
            assert env[f"{prefix}_CA"]["value"] == f"/etc/kmilvus/{name}/ca.crt"
        assert env["KMILVUS_INTERNAL_TLS_SERVER_NAME"]["value"] == "kmilvus-internal"
        assert env["KMILVUS_ETCD_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "etcd-auth", "key": "password"}


def _pod_labels(docs, comp: str) -> dict[str, str]:
    """The labels of `comp`'s pods (its workload's pod template)."""
    (w,) = [w for w in workloads(docs) if component(w) == comp]
    return w["spec"]["template"]["metadata"]["labels"]


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    assert not selector.get("matchExpressions"), "not evaluated here"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _may_connect(docs, src: dict[str, str], dst: dict[str, str], port: int) -> bool:
    """Whether the rendered NetworkPolicies let a pod of the release namespace labelled `src` open
    a TCP connection to `port` of a pod labelled `dst`, as Kubernetes evaluates ingress: allowed
    when no policy selects the destination, else when a rule of a selecting policy admits both the
    source and the port. A peer with a namespaceSelector or ipBlock is taken not to match (the
    chart writes no egress policies, so egress is never what refuses)."""
    every = by_kind(docs, "NetworkPolicy")
    assert all(p["spec"]["policyTypes"] == ["Ingress"] for p in every)
    selecting = [p for p in every if _selects(p["spec"]["podSelector"], dst)]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get("ingress", []):
            ports_ok = "ports" not in rule or any(
                r["port"] == port and r.get("protocol", "TCP") == "TCP" for r in rule["ports"]
            )
            peers = rule.get("from")
            from_ok = peers is None or any(
                set(peer) == {"podSelector"} and _selects(peer["podSelector"], src) for peer in peers
            )
            if ports_ok and from_ok:
                return True
    return False


def test_network_policies_let_each_component_reach_what_it_calls():
    """With network policies on: DataCoord (in the operator pod) reaches an IndexNode's internal
    gRPC port (chosen at start, published in its etcd session: any port), every kmilvus pod
    reaches every other's and the in-chart etcd, NATS and MinIO; a pod that is not kmilvus'
    reaches only the metrics ports and the Milvus API."""
    docs = render(SECURE)
    pod = functools.partial(_pod_labels, docs)
    internal = 41234
    assert _may_connect(docs, pod("operator"), pod("indexnode"), internal)
    for src in KMILVUS_COMPONENTS:
        for dst in KMILVUS_COMPONENTS:
            assert _may_connect(docs, pod(src), pod(dst), internal), (src, dst)
        for server, port in (("etcd", 2379), ("nats", 4222), ("minio", 9000)):
            assert _may_connect(docs, pod(src), pod(server), port), (src, server)
    stranger = {"app.kubernetes.io/name": "something-else"}
    for dst in KMILVUS_COMPONENTS:
        assert not _may_connect(docs, stranger, pod(dst), internal), dst
        assert _may_connect(docs, stranger, pod(dst), 9091), dst  # metricsFrom empty: anyone scrapes
    for server, port in (("etcd", 2379), ("nats", 4222)):
        assert not _may_connect(docs, stranger, pod(server), port), server
    assert not _may_connect(docs, stranger, pod("proxy"), 19530)  # apiFrom: namespaces labelled team=ml


def test_auth_without_a_root_password_secret_does_not_render():
    with pytest.raises(Exception, match="rootPasswordSecret is required"):
        render({"security": {"auth": {"enabled": True}}})


def test_inprocess_job_limit_is_a_chart_value():
    """Small jobs run in the operator process: the limit reaches it as KMILVUS_INPROCESS_JOB_MAX_MB."""

    def env(values: dict) -> dict:
        c = one(render(values), "Deployment", f"{RELEASE}-operator")["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in c["env"]}

    assert env({})["KMILVUS_INPROCESS_JOB_MAX_MB"] == "1024"
    assert env({"spark": {"inProcessMaxMB": 0}})["KMILVUS_INPROCESS_JOB_MAX_MB"] == "0"


def test_in_chart_servers_are_the_pinned_versions():
    """The in-chart etcd and NATS run the versions kmilvus is built and tested with
    (tools/versions.env: what `kmilvus standalone` and the tests start)."""
    pins = dict(
        line.split("=", 1)
        for line in (ROOT / "tools/versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    docs = render({"etcd": {"enabled": True}, "nats": {"enabled": True}})
    images = {c["image"] for d in by_kind(docs, "StatefulSet") for c in d["spec"]["template"]["spec"]["containers"]}
    assert f"quay.io/coreos/etcd:{pins['ETCD_VERSION']}" in images, images
    assert f"nats:{pins['NATS_SERVER_VERSION'].lstrip('v')}-alpine" in images, images
