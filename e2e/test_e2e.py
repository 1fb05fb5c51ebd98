"""kmilvus on a real cluster: the Collection / FlushRequest / Segment resources drive the
coordinators, pymilvus talks to the Proxies through the Service, bulk imports and compactions run
as SparkApplications (e2e/values.yaml: spark.inProcessMaxMB 0), and deleting a Collection leaves
nothing behind (no Milvus collection, no Segment resources, no SparkApplications).

The story is tests/k8s_story.py, the one tests/deploy/test_kubernetes.py runs against the test suite's
own control plane: here it runs on a kind cluster with the images, the in-chart etcd, NATS and
MinIO, and pymilvus through `kubectl port-forward`. Run by e2e/run.sh (kind + Helm); see
e2e/README.md.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.k8s_story import Cluster, Story, wait_for  # noqa: E402

KUBECTL = os.environ.get("KUBECTL", "kubectl")
ROWS = 10_000


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True, timeout=600)
    if check and out.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out


def minio_writer(kube, namespace: str, release: str):
    """`put_object(key, data)`: a key under the chart's storage root (s3://<minio.bucket>/<minio.prefix>,
    e2e/values.yaml) in the in-chart MinIO, through a port-forward, with the chart Secret's
    credentials."""
    import boto3
    from kubernetes import client

    secret = client.CoreV1Api(kube).read_namespaced_secret(f"{release}-minio", namespace).data
    user, password = (base64.b64decode(secret[k]).decode() for k in ("rootUser", "rootPassword"))

    def put_object(key: str, data: bytes) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        pf = subprocess.Popen([KUBECTL, "-n", namespace, "port-forward", f"svc/{release}-minio", f"{port}:9000"])
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id=user,
            aws_secret_access_key=password,
            region_name="us-east-1",
        )

        def put() -> bool:
            try:
                s3.put_object(Bucket="kmilvus", Key=f"data/{key}", Body=data)
            except Exception:  # noqa: BLE001 - the port-forward is not up yet
                return False
            return True

        try:
            wait_for("the MinIO port-forward", put, 60)
        finally:
            pf.terminate()
            pf.wait(10)

    return put_object


def pod_logs(namespace: str, release: str) -> str:
    out = kubectl("-n", namespace, "logs", f"deploy/{release}-operator", "--tail=200", check=False)
    return "\n--- operator log (tail) ---\n" + (out.stdout or out.stderr)


# ------------------------------------------------------------------------------------ tests


def test_kmilvus_is_running(kube, namespace, release):
    from kubernetes import client

    apps = client.AppsV1Api(kube)
    for name in (f"{release}-operator", f"{release}-proxy", f"{release}-indexnode"):
        d = apps.read_namespaced_deployment(name, namespace)
        assert (d.status.ready_replicas or 0) >= 1, f"deployment {name} has no ready replica"
    s = apps.read_namespaced_stateful_set(f"{release}-datanode", namespace)
    assert (s.status.ready_replicas or 0) >= 1, "no ready datanode"
    svc = client.CoreV1Api(kube).read_namespaced_service(f"{release}-milvus", namespace)
    assert [(p.name, p.port) for p in svc.spec.ports] == [("milvus", 19530)]


def test_collection_lifecycle(kube, namespace, release, milvus_port):
    story = Story(
        Cluster(
            kubectl=kubectl,
            namespace=namespace,
            milvus_uri=f"http://127.0.0.1:{milvus_port}",
            put_object=minio_writer(kube, namespace, release),
            diagnostics=lambda: pod_logs(namespace, release),
        )
    )
    # Leftovers of an earlier run (e2e/run.sh --reuse) must not leak into this one.
    kubectl("-n", namespace, "delete", "flushrequests", "--all", "--wait=true")
    kubectl("-n", namespace, "delete", "collection", story.name, "--ignore-not-found", "--wait=true", "--timeout=180s")

    story.apply_collection(timeout=180)
    story.insert(ROWS)
    story.flush(timeout=300)
    print(kubectl("-n", namespace, "get", "segments", "-l", f"kmilvus.io/collection-id={story.collection_id}").stdout)
    story.bulk_import(3_000, "e2e/rows.parquet", spark=True, timeout=900)
    story.compact(spark=True, timeout=900)
    story.delete(timeout=300)
