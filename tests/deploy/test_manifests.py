"""Plain manifests for kubectl / GitOps (operator/, spark-operator/rbac.yaml): they build with
kubectl's built-in kustomize, every object validates strictly against the Kubernetes schemas,
RBAC is least privilege, and the CRD copies match crds/."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kmilvus import __version__

# kubernetes-validate re-reads its (large) JSON schemas on every call; memoise the reads.
if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
    kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(
        kubernetes_validate.utils.schema_contents
    )

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator"
CRDS = ROOT / "crds"
CHART_CRDS = ROOT / "charts" / "kmilvus" / "crds"
KUBE_VERSIONS = ("1.29", "1.34")
NS = "kmilvus-system"
READ = {"get", "list", "watch"}
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture(scope="module")
def built() -> list[dict]:
    if not Path(KUBECTL).exists():
        pytest.fail("kubectl is required to build operator/ with its built-in kustomize")
    out = subprocess.run([KUBECTL, "kustomize", str(OPERATOR)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert docs
    return docs


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def flag(args: list[str], name: str) -> list[str]:
    """The values given to a (repeatable) command-line flag."""
    return [args[i + 1] for i, a in enumerate(args) if a == name]


def validate_strict(obj: dict) -> None:
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version} at {path}: {e.message}"
            )


def test_operator_dir_is_not_a_python_package():
    # `operator/` would shadow Python's standard `operator` module.
    assert not (OPERATOR / "__init__.py").exists()


def test_kustomization_builds_and_validates(built):
    kinds = {}
    for obj in built:
        validate_strict(obj)
        kinds.setdefault(obj["kind"], set()).add(obj["metadata"]["name"])
    assert kinds["Namespace"] == {NS}
    assert {
        "collections.kmilvus.io",
        "flushrequests.kmilvus.io",
        "segments.kmilvus.io",
        "kopfpeerings.kopf.dev",
        "clusterkopfpeerings.kopf.dev",
    } <= kinds["CustomResourceDefinition"]
    assert kinds["Deployment"] == {"kmilvus-operator", "kmilvus-proxy", "kmilvus-indexnode"}
    assert kinds["StatefulSet"] == {"kmilvus-datanode", "kmilvus-querynode"}
    assert {"kmilvus-milvus", "kmilvus-datanode", "kmilvus-querynode"} <= kinds["Service"]
    assert {"kmilvus-operator", "kmilvus", "kmilvus-spark"} <= kinds["ServiceAccount"]
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for obj in built:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == NS, obj["metadata"]["name"]


def test_kustomization_lists_only_local_files():
    kust = yaml.safe_load((OPERATOR / "kustomization.yaml").read_text())
    for res in kust["resources"]:
        assert "/" not in res and (OPERATOR / res).is_file(), res
    # no custom resources: a CR cannot be applied in the same pass as its CRD
    for res in kust["resources"]:
        for d in load_docs(OPERATOR / res):
            assert d["apiVersion"].split("/")[0] not in ("kmilvus.io", "kopf.dev"), res


def test_proxy_service_and_workloads(built):
    svc = one(built, "Service", "kmilvus-milvus")
    (port,) = svc["spec"]["ports"]
    assert port["name"] == "milvus" and port["port"] == 19530 and port["targetPort"] == "milvus"
    dn_svc = one(built, "Service", "kmilvus-datanode")
    assert dn_svc["spec"]["clusterIP"] == "None"
    assert one(built, "StatefulSet", "kmilvus-datanode")["spec"]["serviceName"] == "kmilvus-datanode"
    op = one(built, "Deployment", "kmilvus-operator")
    assert op["spec"]["strategy"]["type"] == "Recreate"
    c = op["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["kmilvus-operator"]
    assert flag(c["args"], "--metrics-port") == ["9091"] and flag(c["args"], "--health-port") == ["8080"]
    assert flag(c["args"], "--namespace") == [NS] and flag(c["args"], "--sdk-namespace") == [NS]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"health": 8080, "metrics": 9091}
    for sel_kind, name in (
        ("Deployment", "kmilvus-proxy"),
        ("StatefulSet", "kmilvus-datanode"),
        ("StatefulSet", "kmilvus-querynode"),
        ("Deployment", "kmilvus-indexnode"),
        ("Deployment", "kmilvus-operator"),
    ):
        w = one(built, sel_kind, name)
        assert w["spec"]["selector"]["matchLabels"].items() <= w["spec"]["template"]["metadata"]["labels"].items()


def test_workloads_are_hardened_and_configured(built):
    cm = one(built, "ConfigMap", "kmilvus-config")["data"]
    for key in ("KMILVUS_ETCD_ENDPOINT", "KMILVUS_NATS_URL", "KMILVUS_STORAGE_URI", "KMILVUS_CLUSTER"):
        assert cm[key]
    assert cm["KMILVUS_NATS_URL"].startswith("nats://") and cm["KMILVUS_STORAGE_URI"].startswith("s3://")
    for w in (d for d in built if d["kind"] in ("Deployment", "StatefulSet")):
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        if w["metadata"]["name"] != "kmilvus-operator":
            assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert c["livenessProbe"] and c["readinessProbe"]
            assert c["image"] == f"kmilvus/kmilvus:{__version__}"
            assert {"configMapRef": {"name": "kmilvus-config"}} in c["envFrom"]
            env = {e["name"]: e for e in c["env"]}
            assert env["KMILVUS_INTERNAL_HOST"]["value"] == "$(POD_IP)"
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                assert "value" not in env[name]
                assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "kmilvus-s3"


def _rules(docs):
    return [(r["kind"], rule) for r in docs if r["kind"] in ("Role", "ClusterRole") for rule in r["rules"]]


def test_rbac_is_least_privilege(built):
    for _kind, rule in _rules(built):
        for key in ("verbs", "resources", "apiGroups", "resourceNames"):
            assert "*" not in rule.get(key, []), rule
        assert "secrets" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    # a namespaced operator needs nothing at cluster scope
    assert not [d for d in built if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    role = one(built, "Role", "kmilvus-operator")
    granted = {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    for need in [
        ("kmilvus.io", "collections", "watch"),
        ("kmilvus.io", "collections/status", "patch"),
        ("kmilvus.io", "flushrequests/status", "patch"),
        ("kmilvus.io", "segments", "create"),
        ("kmilvus.io", "segments", "delete"),
        ("kmilvus.io", "collections/finalizers", "update"),
        ("sparkoperator.k8s.io", "sparkapplications", "create"),
        ("", "events", "create"),
        ("", "pods", "get"),
        ("", "services", "list"),
        ("kopf.dev", "kopfpeerings", "patch"),
    ]:
        assert need in granted, need
    assert ("kmilvus.io", "collections", "deletecollection") not in granted
    assert ("kmilvus.io", "flushrequests", "create") not in granted  # users ask for flushes
    assert not {v for g, r, v in granted if r in ("pods", "services")} - READ
    for binding in (d for d in built if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        for s in binding["subjects"]:
            assert s["kind"] == "ServiceAccount" and s["namespace"] == NS
    spark = one(built, "Role", "kmilvus-spark")
    assert {r for rule in spark["rules"] for r in rule["resources"]} == {
        "pods",
        "services",
        "configmaps",
        "persistentvolumeclaims",
    }


def test_operator_may_create_and_write_only_its_peering_object(built):
    args = one(built, "Deployment", "kmilvus-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    (peering,) = flag(args, "--peering")
    role = one(built, "Role", "kmilvus-operator")
    peering_rules = [r for r in role["rules"] if "kopfpeerings" in r["resources"]]
    writes = [r for r in peering_rules if set(r["verbs"]) & {"patch", "update"}]
    assert writes and all(r["resourceNames"] == [peering] for r in writes)
    assert any("create" in r["verbs"] for r in peering_rules)  # created when missing
    assert not [r for r in peering_rules if "delete" in r["verbs"]]


def _crd_docs(paths) -> dict[str, dict]:
    return {
        d["metadata"]["name"]: d for p in paths for d in load_docs(p) if d.get("kind") == "CustomResourceDefinition"
    }


def test_crd_copies_match_crds_dir():
    copies = _crd_docs([OPERATOR / "crds.yaml"])
    assert set(copies) == {"collections.kmilvus.io", "flushrequests.kmilvus.io", "segments.kmilvus.io"}
    repo = _crd_docs(sorted(CRDS.glob("*.yaml"))) if CRDS.is_dir() else {}
    hint = "run python tools/gen_crds.py"
    if repo:
        assert copies == repo, f"operator/crds.yaml differs from crds/*.yaml ({hint})"
    # the chart's copies and the operator's are the same CRDs either way
    chart = {n: d for n, d in _crd_docs(sorted(CHART_CRDS.glob("*.yaml"))).items() if not n.endswith(".kopf.dev")}
    assert copies == chart, f"operator/crds.yaml differs from charts/kmilvus/crds ({hint})"
    assert (OPERATOR / "kopf-peerings.yaml").read_bytes() == (CHART_CRDS / "kopf-peerings.yaml").read_bytes()


def test_spark_operator_rbac():
    docs = load_docs(ROOT / "spark-operator" / "rbac.yaml")
    for obj in docs:
        validate_strict(obj)
    sa = one(docs, "ServiceAccount", "kmilvus-spark")
    role = one(docs, "Role", "kmilvus-spark")
    rb = one(docs, "RoleBinding", "kmilvus-spark")
    (rule,) = role["rules"]
    assert rule["apiGroups"] == [""]
    assert set(rule["resources"]) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    assert "*" not in rule["verbs"]
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kmilvus-spark"}
    assert rb["subjects"][0]["name"] == sa["metadata"]["name"]
    # The same rules as the kustomize copy (operator/spark-rbac.yaml).
    kust_role = one(load_docs(OPERATOR / "spark-rbac.yaml"), "Role", "kmilvus-spark")
    assert kust_role["rules"] == role["rules"]


def test_container_args_parse_with_the_kmilvus_cli(built, monkeypatch):
    """The command and args each container gets are accepted by the real CLIs: `kmilvus-operator`
    (controllers.main) for the operator, `kmilvus run ROLE` for the others."""
    import click

    from controllers import main as operator_cli
    from kmilvus import cli

    for key, value in one(built, "ConfigMap", "kmilvus-config")["data"].items():
        monkeypatch.setenv(key, value)
    for w in (d for d in built if d["kind"] in ("Deployment", "StatefulSet")):
        c = w["spec"]["template"]["spec"]["containers"][0]
        args = c["args"]
        if c["command"] == ["kmilvus-operator"]:
            ctx = operator_cli.main.make_context("kmilvus-operator", list(args))
            assert ctx.params["namespaces"] == (NS,) and ctx.params["sdk_namespace"] == NS
            continue
        assert c["command"] == ["kmilvus"]
        command = cli.main.get_command(click.Context(cli.main), args[0])
        assert command is not None, f"kmilvus has no `{args[0]}` command"
        ctx = command.make_context(args[0], list(args[1:]))
        assert ctx.params["roles"] in (("proxy",), ("datanode",), ("querynode",), ("indexnode",))


def test_indexnode_deployment(built, monkeypatch):
    """IndexNodes: a Deployment (they hold no data) of `kmilvus run indexnode` on the pod IP, whose
    build slots reach its Config."""
    from kmilvus.config import Config

    ix = one(built, "Deployment", "kmilvus-indexnode")
    assert ix["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    pod = ix["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    (c,) = pod["containers"]
    assert c["args"][:2] == ["run", "indexnode"] and flag(c["args"], "--host") == ["$(POD_IP)"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    for key, value in one(built, "ConfigMap", "kmilvus-config")["data"].items():
        monkeypatch.setenv(key, value)
    for e in c["env"]:
        if "value" in e and e["name"].startswith("KMILVUS_") and "$(" not in e["value"]:
            monkeypatch.setenv(e["name"], e["value"])
    assert Config.from_env().index_build_slots == 1


def _workload_shape(w: dict) -> dict:
    """What a kmilvus node's workload must agree on wherever it is rendered: kind, command, args,
    ports, probes, hardening and environment names (values and sizes are each install's own)."""
    pod = w["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return {
        "kind": w["kind"],
        "strategy": w["spec"].get("strategy"),
        "command": c["command"],
        "args": c["args"],
        "ports": c["ports"],
        "probes": {p: c[p] for p in ("startupProbe", "livenessProbe", "readinessProbe")},
        "securityContext": c["securityContext"],
        "podSecurityContext": pod["securityContext"],
        "automountServiceAccountToken": pod["automountServiceAccountToken"],
        "terminationGracePeriodSeconds": pod["terminationGracePeriodSeconds"],
        "env": sorted(e["name"] for e in c["env"]),
    }


@pytest.mark.usefixtures("pinned_helm")
def test_indexnode_matches_the_charts():
    """operator/indexnode.yaml is the chart's IndexNode with the chart's defaults (and the
    kustomize manifests' S3 Secret `kmilvus-s3`)."""
    from tests.deploy.test_chart import RELEASE, render
    from tests.deploy.test_chart import one as chart_one

    chart = chart_one(render({"storage": {"existingSecret": "kmilvus-s3"}}), "Deployment", f"{RELEASE}-indexnode")
    manifest = one(load_docs(OPERATOR / "indexnode.yaml"), "Deployment", "kmilvus-indexnode")
    assert _workload_shape(manifest) == _workload_shape(chart)
    assert manifest["spec"]["replicas"] == chart["spec"]["replicas"]
    res = [w["spec"]["template"]["spec"]["containers"][0]["resources"] for w in (manifest, chart)]
    assert res[0] == res[1]
