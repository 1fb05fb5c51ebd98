"""The Spark image's entrypoint for the test node (tests/nodeagent.py runs it for
images/spark/Dockerfile's image, as apache/spark's /opt/entrypoint.sh), the driver role only.

What Spark's driver does in a driver pod that spark-submit made in cluster mode: read the
properties spark-submit mounted at /opt/spark/conf, look up its own pod and create its executor
pods with its own service-account token (so the driver's account must exist and its Role must
let it create pods, or the application fails with the API server's 403), then run the
application. The one difference: the executors. Their pods are created as a dry run — authorized
and admitted exactly like the real creation, nothing scheduled — and their work runs in the
driver's own JVM (`local[instances x cores]`), because this node runs no Spark image of its own.

Standard library only: it runs as the pod's process, with only what the pod gives it.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.error
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def api(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """A request with the pod's own service-account token, to the `kubernetes` Service."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    with open(f"{SA}/token") as f:
        token = f.read()
    req = urllib.request.Request(
        f"https://{host}:{port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    ctx = ssl.create_default_context(cafile=f"{SA}/ca.crt")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def properties(path: str) -> dict[str, str]:
    """A Java properties file as spark-submit writes it (key=value lines)."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "!")) and "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def fail(what: str, status: int, body: dict) -> None:
    # The driver's last words, as Spark's Kubernetes client says them.
    print(
        f'Exception in thread "main" io.fabric8.kubernetes.client.KubernetesClientException: Failure executing: '
        f"{what}. Status: {status}. Message: {body.get('message', body)}.",
        file=sys.stderr,
    )
    sys.exit(1)


def request_executors(conf: dict[str, str]) -> int:
    """Create the executor pods (dry run) as the driver does; returns how many."""
    ns, me = conf["spark.kubernetes.namespace"], conf["spark.kubernetes.driver.pod.name"]
    status, driver = api("GET", f"/api/v1/namespaces/{ns}/pods/{me}")
    if status != 200:
        fail(f"GET at: https://kubernetes.default.svc/api/v1/namespaces/{ns}/pods/{me}", status, driver)
    n = int(conf.get("spark.executor.instances", "1"))
    prefix = conf.get("spark.kubernetes.executor.podNamePrefix", me.removesuffix("-driver"))
    for i in range(1, n + 1):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{prefix}-exec-{i}",
                "namespace": ns,
                "labels": {**driver["metadata"].get("labels", {}), "spark-role": "executor", "spark-exec-id": str(i)},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": me,
                        "uid": driver["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": driver["spec"].get("serviceAccountName", "default"),
                "containers": [
                    {
                        "name": "spark-kubernetes-executor",
                        "image": conf.get("spark.kubernetes.container.image", driver["spec"]["containers"][0]["image"]),
                        "args": ["executor"],
                        "env": driver["spec"]["containers"][0].get("env") or [],
                    }
                ],
            },
        }
        status, out = api("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
        if status != 201:
            fail(f"POST at: https://kubernetes.default.svc/api/v1/namespaces/{ns}/pods", status, out)
    return n


def main(argv: list[str]) -> None:
    if not argv or argv[0] != "driver":
        sys.exit(f"this node runs the Spark image's driver role only, not {argv[:1]}")
    args = argv[1:]
    conf_file = args[args.index("--properties-file") + 1]
    if "--class" in args:
        i = args.index("--class")
        del args[i : i + 2]
    i = args.index("--properties-file")
    del args[i : i + 2]
    main_file, app_args = args[0].removeprefix("local://"), args[1:]
    conf = properties(conf_file)
    executors = request_executors(conf)
    cores = executors * int(conf.get("spark.executor.cores", "1"))
    bind = os.environ.get("SPARK_DRIVER_BIND_ADDRESS", "127.0.0.1")
    os.environ["SPARK_LOCAL_IP"] = bind
    argv = ["spark-submit", "--master", f"local[{cores}]", "--deploy-mode", "client",
            "--properties-file", conf_file, "--conf", f"spark.driver.bindAddress={bind}",
            "--conf", f"spark.driver.host={bind}", main_file, *app_args]  # fmt: skip
    sys.stdout.flush()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
