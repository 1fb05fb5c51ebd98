"""A stand-in for Kubeflow's spark-operator on the test control plane (tests/controlplane.py).

Why not the real one: its Go module is not served by the Go module proxy these machines reach
(403, "not available"), so it cannot be built here; and it could not run here either: it submits
with spark-submit in cluster mode, whose driver creates executor pods that reach the driver through
a headless Service's DNS name (this node has no cluster DNS and runs no Spark image).

What it does is what the spark-operator and spark-submit's cluster mode do for a SparkApplication,
through the API server and with the RBAC the spark-operator's chart gives its controller:
the driver's configuration as a ConfigMap (spark.properties), the driver pod — named
`<app>-driver`, owned by the application, with the application's driver service account, image,
env (secretKeyRef entries as the spark-operator's webhook adds them) and `driver` args for the
image's entrypoint — and the application's state from that pod's phase in
`status.applicationState`. So the API server refuses a driver whose service account does not exist
(SUBMISSION_FAILED), the node (tests/nodeagent.py) fails a pod whose Secret or key is missing, and
the driver (tests/sparkimage.py) runs with its pod's token and nothing else: its executor pods are
created, as a dry run, with that token (403 without the chart's Role), and run inside the driver.
It runs in a thread of its own, polling.
"""

from __future__ import annotations

import datetime
import json
import threading
import traceback
from dataclasses import dataclass, field

from tests.controlplane import ControlPlane

API = "/apis/sparkoperator.k8s.io/v1beta2"
USER = "spark-operator"
# The spark-operator chart's controller ClusterRole, as far as this stand-in needs it.
RBAC = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "kmilvus-test-spark-operator"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "configmaps"],
             "verbs": ["get", "list", "watch", "create", "delete"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            {"apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications"],
             "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": ["sparkoperator.k8s.io"], "resources": ["sparkapplications/status"],
             "verbs": ["get", "update", "patch"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kmilvus-test-spark-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kmilvus-test-spark-operator"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    },
]  # fmt: skip
CONF_DIR = "/opt/spark/conf"
LOCAL_DIR = "/var/data/spark-local-dir-1"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def driver_pod_name(app_name: str) -> str:
    return f"{app_name}-driver"


def spark_properties(app: dict) -> dict[str, str]:
    """What spark-submit writes to the driver's spark.properties for `app`."""
    m, spec = app["metadata"], app["spec"]
    drv, exe = spec.get("driver") or {}, spec.get("executor") or {}
    conf = {
        "spark.app.name": m["name"],
        "spark.master": "k8s://https://kubernetes.default.svc:443",
        "spark.submit.deployMode": "cluster",
        "spark.kubernetes.namespace": m["namespace"],
        "spark.kubernetes.driver.pod.name": driver_pod_name(m["name"]),
        "spark.kubernetes.executor.podNamePrefix": m["name"],
        "spark.kubernetes.container.image": exe.get("image") or spec.get("image", ""),
        "spark.kubernetes.authenticate.driver.serviceAccountName": drv.get("serviceAccount") or "default",
        "spark.executor.instances": str(exe.get("instances") or 1),
        "spark.executor.cores": str(exe.get("cores") or 1),
        "spark.local.dir": LOCAL_DIR,
    }
    if drv.get("memory"):
        conf["spark.driver.memory"] = str(drv["memory"])
    if exe.get("memory"):
        conf["spark.executor.memory"] = str(exe["memory"])
    conf.update({k: str(v) for k, v in (spec.get("sparkConf") or {}).items()})
    return conf


def driver_pod(app: dict) -> dict:
    m, spec = app["metadata"], app["spec"]
    drv = spec.get("driver") or {}
    name = driver_pod_name(m["name"])
    owner = {
        "apiVersion": app["apiVersion"],
        "kind": app["kind"],
        "name": m["name"],
        "uid": m["uid"],
        "controller": True,
    }
    env = [
        *(drv.get("env") or []),
        {"name": "SPARK_DRIVER_BIND_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SPARK_LOCAL_DIRS", "value": LOCAL_DIR},
        {"name": "SPARK_CONF_DIR", "value": CONF_DIR},
    ]
    container = {
        "name": "spark-kubernetes-driver",
        "image": drv.get("image") or spec.get("image", ""),
        "imagePullPolicy": spec.get("imagePullPolicy", "IfNotPresent"),
        "args": [
            "driver",
            "--properties-file",
            f"{CONF_DIR}/spark.properties",
            "--class",
            "org.apache.spark.deploy.PythonRunner",
            spec["mainApplicationFile"],
            *[str(a) for a in spec.get("arguments") or []],
        ],
        "env": env,
        "volumeMounts": [
            {"name": "spark-conf-volume-driver", "mountPath": CONF_DIR},
            {"name": "spark-local-dir-1", "mountPath": LOCAL_DIR},
        ],
    }
    if drv.get("securityContext"):
        container["securityContext"] = drv["securityContext"]
    pod_spec = {
        "restartPolicy": "Never",
        "serviceAccountName": drv.get("serviceAccount") or "default",
        "containers": [container],
        "volumes": [
            {"name": "spark-conf-volume-driver", "configMap": {"name": f"{name}-conf"}},
            {"name": "spark-local-dir-1", "emptyDir": {}},
        ],
    }
    if drv.get("podSecurityContext"):
        pod_spec["securityContext"] = drv["podSecurityContext"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": m["namespace"],
            "labels": {
                **(drv.get("labels") or {}),
                "spark-role": "driver",
                "sparkoperator.k8s.io/app-name": m["name"],
                "sparkoperator.k8s.io/launched-by-spark-operator": "true",
            },
            "annotations": drv.get("annotations") or {},
            "ownerReferences": [owner],
        },
        "spec": pod_spec,
    }


@dataclass
class SparkOperatorStandIn:
    cp: ControlPlane
    seen: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, name) → the application as submitted
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, name) → its driver pod as created
    errors: list[str] = field(default_factory=list)
    # The namespaces whose applications it runs (the spark-operator's `spark.jobNamespaces`):
    # tests that play the spark-operator themselves keep theirs out.
    job_namespaces: set[str] = field(default_factory=set)

    def serve(self, namespace: str) -> None:
        self.job_namespaces.add(namespace)

    def __post_init__(self) -> None:
        self.cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in RBAC))
        self.creds = self.cp.credentials(USER)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-operator-standin", daemon=True)

    def start(self) -> SparkOperatorStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _api(self, method: str, path: str, body=None, ctype: str = "application/json"):
        return self.cp.request(method, path, body, ctype=ctype, creds=self.creds)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception:  # noqa: BLE001 - kept for the test to see; the loop goes on
                self.errors.append(traceback.format_exc())
            self._stop.wait(0.3)

    def _status(self, app: dict, state: str, message: str = "", **extra) -> None:
        m = app["metadata"]
        status = {
            "applicationState": {"state": state, **({"errorMessage": message} if message else {})},
            "driverInfo": {},  # required by the CRD: the spark-operator writes it in every status
            **extra,
        }
        code, out = self._api(
            "PATCH",
            f"{API}/namespaces/{m['namespace']}/sparkapplications/{m['name']}/status",
            {"status": status},
            ctype="application/merge-patch+json",
        )
        if code not in (200, 404):  # 404: deleted meanwhile
            raise RuntimeError(f"status of SparkApplication {m['namespace']}/{m['name']}: {code} {out}")

    def _sync(self) -> None:
        status, listed = self._api("GET", f"{API}/sparkapplications")
        if status != 200:
            raise RuntimeError(f"listing SparkApplications: {status} {listed}")
        for app in listed["items"]:
            m = app["metadata"]
            key = (m["namespace"], m["name"])
            state = ((app.get("status") or {}).get("applicationState") or {}).get("state", "")
            if m.get("deletionTimestamp") or m["namespace"] not in self.job_namespaces:
                continue
            if key not in self.seen and state == "":
                self._submit(key, app)
            elif state in ("SUBMITTED", "RUNNING"):
                self._follow(app)

    def _submit(self, key: tuple[str, str], app: dict) -> None:
        self.seen[key] = app
        ns = key[0]
        pod = driver_pod(app)
        props = "".join(f"{k}={v}\n" for k, v in sorted(spark_properties(app).items()))
        owner = pod["metadata"]["ownerReferences"]
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{pod['metadata']['name']}-conf", "namespace": ns, "ownerReferences": owner},
            "data": {"spark.properties": props},
        }
        for kind, body in (("configmaps", cm), ("pods", pod)):
            status, out = self._api("POST", f"/api/v1/namespaces/{ns}/{kind}", body)
            if status not in (201, 409):
                why = (out or {}).get("message", out) if isinstance(out, dict) else out
                msg = f'failed to run spark-submit: {kind} "{body["metadata"]["name"]}": {why}'
                self._status(app, "SUBMISSION_FAILED", msg, submissionAttempts=1, lastSubmissionAttemptTime=_now())
                return
        self.pods[key] = pod
        self._status(
            app,
            "SUBMITTED",
            driverInfo={"podName": pod["metadata"]["name"]},
            submissionAttempts=1,
            lastSubmissionAttemptTime=_now(),
        )

    def _follow(self, app: dict) -> None:
        m = app["metadata"]
        pod = self.cp.get(f"/api/v1/namespaces/{m['namespace']}/pods/{driver_pod_name(m['name'])}")
        if pod is None:
            self._status(app, "FAILED", "driver pod not found", terminationTime=_now())
            return
        st = pod.get("status") or {}
        phase = st.get("phase", "Pending")
        if phase == "Running":
            self._status(app, "RUNNING")
        elif phase == "Succeeded":
            self._status(app, "COMPLETED", terminationTime=_now())
        elif phase == "Failed":
            term = next(
                (
                    c["state"]["terminated"]
                    for c in st.get("containerStatuses") or []
                    if "terminated" in c.get("state", {})
                ),
                {},
            )
            msg = (
                st.get("message")
                or f"driver container failed with ExitCode: {term.get('exitCode')}, Reason: {term.get('reason')}"
            )
            self._status(app, "FAILED", msg, terminationTime=_now())
