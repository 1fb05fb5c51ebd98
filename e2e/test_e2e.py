"""kmilvus on a real cluster: the Collection / FlushRequest / Segment resources drive the
coordinators, pymilvus talks to the Proxies through the Service, and deleting a Collection
leaves nothing behind (no Milvus collection, no Segment resources).

Run by e2e/run.sh (kind + Helm); see e2e/README.md.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBECTL = os.environ.get("KUBECTL", "kubectl")

GROUP, VERSION = "kmilvus.io", "v1alpha1"
EXAMPLES = ROOT / "crds" / "examples"
ROWS = 10_000
BATCH = 2_000


# ------------------------------------------------------------------------------------ helpers


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    out = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True, timeout=120)
    if check and out.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def example(name: str, namespace: str) -> dict:
    """An example resource from crds/examples, moved into the namespace kmilvus serves."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    assert len(docs) == 1, f"{name}: expected one resource"
    obj = copy.deepcopy(docs[0])
    obj["metadata"]["namespace"] = namespace
    return obj


def apply(obj: dict) -> None:
    kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))


def get(kube, plural: str, namespace: str, name: str) -> dict | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        return client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_segments(kube, namespace: str, collection_id: int) -> list[dict]:
    from kubernetes import client

    items = client.CustomObjectsApi(kube).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "segments", label_selector=f"kmilvus.io/collection-id={collection_id}"
    )["items"]
    # The label is how the operator finds them; spec.collectionID (required by the CRD) is what
    # they say about themselves: both must agree.
    assert all(int(s["spec"]["collectionID"]) == collection_id for s in items), items
    return items


def wait_for(what: str, fn, timeout: float, interval: float = 2.0):
    """Poll `fn` until it returns a truthy value; fail with the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {json.dumps(last, default=str)[:2000]}")


def condition(obj: dict | None, ctype: str) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("status")
    return None


def rows_for(fields: list[dict], start: int, n: int) -> list[dict]:
    """`n` rows for the Collection's schema (spec.fields), primary keys start..start+n-1."""
    rnd = random.Random(start)
    out = []
    for i in range(start, start + n):
        row = {}
        for f in fields:
            if f.get("isPrimaryKey") and f.get("autoID"):
                continue
            t = f["dataType"]
            if f.get("isPrimaryKey"):
                row[f["name"]] = i if t == "Int64" else f"pk-{i}"
            elif t == "FloatVector":
                row[f["name"]] = [rnd.random() for _ in range(int(f["dim"]))]
            elif t == "BinaryVector":
                row[f["name"]] = bytes(rnd.getrandbits(8) for _ in range(int(f["dim"]) // 8))
            elif t == "VarChar":
                row[f["name"]] = f"tag-{i % 97}"[: int(f.get("maxLength", 64))]
            elif t in ("Int64", "Int32", "Int16", "Int8"):
                row[f["name"]] = i % 100
            elif t in ("Float", "Double"):
                row[f["name"]] = rnd.random()
            elif t == "Bool":
                row[f["name"]] = i % 2 == 0
            elif t == "JSON":
                row[f["name"]] = {"i": i, "even": i % 2 == 0}
            else:
                pytest.fail(f"e2e data generator does not know dataType {t} (field {f['name']})")
        out.append(row)
    return out


def all_flushed_segments(kube, namespace: str, collection_id: int) -> list[dict]:
    return [
        s for s in list_segments(kube, namespace, collection_id) if (s.get("status") or {}).get("state") == "Flushed"
    ]


def spark_applications(kube, namespace: str) -> list[dict]:
    from kubernetes import client

    return client.CustomObjectsApi(kube).list_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications"
    )["items"]


def owned_by(obj: dict, collection: str) -> bool:
    return any(
        o["kind"] == "Collection" and o["name"] == collection for o in obj["metadata"].get("ownerReferences") or []
    )


def upload_to_minio(kube, namespace: str, release: str, key: str, data: bytes) -> None:
    """Put `data` into the in-chart MinIO (e2e/values.yaml) through a port-forward, with the
    credentials of the chart's Secret — the same store kmilvus' storage URI names."""
    import base64
    import socket

    import boto3
    from kubernetes import client

    secret = client.CoreV1Api(kube).read_namespaced_secret(f"{release}-minio", namespace).data
    user, password = (base64.b64decode(secret[k]).decode() for k in ("rootUser", "rootPassword"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pf = subprocess.Popen([KUBECTL, "-n", namespace, "port-forward", f"svc/{release}-minio", f"{port}:9000"])
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id=user,
            aws_secret_access_key=password,
            region_name="us-east-1",
        )
        wait_for("the MinIO port-forward", lambda: _put(s3, key, data), timeout=60)
    finally:
        pf.terminate()
        pf.wait(10)


def _put(s3, key: str, data: bytes) -> bool:
    bucket, _, path = key.partition("/")
    try:
        s3.put_object(Bucket=bucket, Key=path, Body=data)
    except Exception:  # noqa: BLE001 - the port-forward is not up yet
        return False
    return True


def bulk_import(kube, namespace: str, milvus_port: int, name: str, fields: list[dict], cr_name: str) -> int:
    """A Parquet file of 3,000 new rows into MinIO, `do_bulk_insert` of its storage-relative key,
    then the Collection's status until the SparkApplication's import is registered."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pymilvus import connections, utility

    n, start = 3_000, ROWS
    rows = rows_for(fields, start, n)

    def column(f: dict) -> pa.Array:
        values = [r[f["name"]] for r in rows]
        if f["dataType"] == "JSON":
            return pa.array([json.dumps(v) for v in values])
        if f["dataType"] == "FloatVector":
            return pa.array(values, pa.list_(pa.float32(), int(f["dim"])))
        return pa.array(values)

    table = pa.table({f["name"]: column(f) for f in fields if not (f.get("isPrimaryKey") and f.get("autoID"))})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    # The chart's storage URI is s3://<minio.bucket>/<minio.prefix>: a relative import path is a
    # key under it (kmilvus.spark.files.resolve).
    upload_to_minio(
        kube, namespace, os.environ.get("E2E_RELEASE", "kmilvus"), "kmilvus/data/e2e/rows.parquet", buf.getvalue()
    )
    connections.connect("e2e-import", uri=f"http://127.0.0.1:{milvus_port}")
    try:
        task = utility.do_bulk_insert(name, files=["e2e/rows.parquet"], using="e2e-import")
    finally:
        connections.disconnect("e2e-import")

    def finished():
        o = get(kube, "collections", namespace, cr_name)
        imp = ((o or {}).get("status") or {}).get("imports") or {}
        last = imp.get("last") or {}
        return imp if last.get("jobID") == task and last.get("state") in ("ImportCompleted", "ImportFailed") else None

    imp = wait_for("the bulk import to finish", finished, timeout=900)
    assert imp["last"]["state"] == "ImportCompleted", imp
    assert imp["rowsImported"] == n and imp["running"] == 0, imp
    app = imp["last"]["sparkApplication"]
    assert any(a["metadata"]["name"] == app for a in spark_applications(kube, namespace)), app
    return n


# ------------------------------------------------------------------------------------ tests


def test_kmilvus_is_running(kube, namespace, release):
    from kubernetes import client

    apps = client.AppsV1Api(kube)
    for name in (f"{release}-operator", f"{release}-proxy"):
        d = apps.read_namespaced_deployment(name, namespace)
        assert (d.status.ready_replicas or 0) >= 1, f"deployment {name} has no ready replica"
    s = apps.read_namespaced_stateful_set(f"{release}-datanode", namespace)
    assert (s.status.ready_replicas or 0) >= 1, "no ready datanode"
    svc = client.CoreV1Api(kube).read_namespaced_service(f"{release}-milvus", namespace)
    assert [(p.name, p.port) for p in svc.spec.ports] == [("milvus", 19530)]


def test_collection_lifecycle(kube, namespace, milvus, milvus_port):
    coll = example("collection.yaml", namespace)
    flush = example("flushrequest.yaml", namespace)
    cr_name = coll["metadata"]["name"]

    # Leftovers of an earlier run (e2e/run.sh --reuse) must not leak into this one.
    kubectl("-n", namespace, "delete", "flushrequest", flush["metadata"]["name"], "--ignore-not-found", "--wait=true")
    kubectl("-n", namespace, "delete", "collection", cr_name, "--ignore-not-found", "--wait=true", "--timeout=180s")

    # 1. Collection resource -> Ready, and visible to pymilvus ----------------------------------
    apply(coll)
    ready = wait_for(
        f"Collection {cr_name} Ready",
        lambda: (
            (o := get(kube, "collections", namespace, cr_name))
            and (o.get("status") or {}).get("phase") == "Ready"
            and condition(o, "Ready") == "True"
            and o
        ),
        timeout=180,
    )
    status = ready["status"]
    assert status.get("phase") == "Ready", status
    collection_id = int(status["collectionID"])
    milvus_name = status["name"]
    assert milvus_name == (coll["spec"].get("name") or cr_name), status
    assert milvus.has_collection(milvus_name), f"pymilvus does not see collection {milvus_name}"
    described = milvus.describe_collection(milvus_name)
    assert {f["name"] for f in described["fields"]} >= {f["name"] for f in coll["spec"]["fields"]}

    # 2. 10k rows through pymilvus -------------------------------------------------------------
    inserted = 0
    for start in range(0, ROWS, BATCH):
        res = milvus.insert(milvus_name, rows_for(coll["spec"]["fields"], start, BATCH))
        inserted += res["insert_count"]
    assert inserted == ROWS

    # 3. FlushRequest -> Completed -----------------------------------------------------------
    apply(flush)
    fr_name = flush["metadata"]["name"]

    def flushed():
        o = get(kube, "flushrequests", namespace, fr_name)
        phase = ((o or {}).get("status") or {}).get("phase")
        if phase == "Failed":
            pytest.fail(f"FlushRequest {fr_name} failed: {json.dumps(o['status'])}")
        return o if phase == "Completed" else None

    done = wait_for(f"FlushRequest {fr_name} Completed", flushed, timeout=300)
    fstatus = done["status"]
    assert fstatus["total"] >= 1 and fstatus["flushed"] == fstatus["total"], fstatus
    assert fstatus.get("completionTime"), fstatus

    # 4. Segments listed as Flushed, holding all rows ------------------------------------------
    def all_flushed():
        segs = [
            s
            for s in list_segments(kube, namespace, collection_id)
            if (s.get("status") or {}).get("state") != "Dropped"
        ]
        if (
            segs
            and all(s["status"].get("state") == "Flushed" for s in segs)
            and sum(int(s["status"].get("rows", 0)) for s in segs) == ROWS
        ):
            return segs
        return None

    segments = wait_for("every Segment Flushed with all rows", all_flushed, timeout=120)
    table = kubectl("-n", namespace, "get", "segments", "-l", f"kmilvus.io/collection-id={collection_id}")
    print(table)
    assert "Flushed" in table
    for s in segments:
        owners = s["metadata"].get("ownerReferences") or []
        assert any(o["kind"] == "Collection" and o["name"] == cr_name for o in owners), s["metadata"]
    stats = milvus.get_collection_stats(milvus_name)
    assert int(stats["row_count"]) == ROWS, stats

    # 5. Bulk import through a SparkApplication in the Collection's namespace -------------------
    imported = bulk_import(kube, namespace, milvus_port, milvus_name, coll["spec"]["fields"], cr_name)
    assert int(milvus.get_collection_stats(milvus_name)["row_count"]) == ROWS + imported

    # 6. Compaction through a SparkApplication: fewer Segments, the same rows ------------------
    before = len(all_flushed_segments(kube, namespace, collection_id))
    compaction_id = milvus.compact(milvus_name)

    def compacted():
        o = get(kube, "collections", namespace, cr_name)
        c = ((o or {}).get("status") or {}).get("compactions") or {}
        last = c.get("last") or {}
        if last.get("compactionID") == compaction_id and c.get("running") == 0:
            return last
        return None

    last = wait_for("the compaction to finish", compacted, timeout=900)
    assert last["state"] == "Completed", last
    assert last["plans"] >= 1, last
    after = wait_for(
        f"fewer than {before} Segments",
        lambda: (s := all_flushed_segments(kube, namespace, collection_id)) and len(s) < before and s,
        timeout=120,
    )
    assert sum(int(s["status"]["rows"]) for s in after) == ROWS + imported
    apps = spark_applications(kube, namespace)
    assert any(a["metadata"]["name"] == last["sparkApplication"] for a in apps), [a["metadata"]["name"] for a in apps]

    # 7. Delete the Collection -> gone from pymilvus, no Segment resources left ---------------
    kubectl("-n", namespace, "delete", "collection", cr_name, "--wait=false")
    wait_for(f"Collection {cr_name} deleted", lambda: get(kube, "collections", namespace, cr_name) is None, timeout=180)
    wait_for(f"{milvus_name} dropped", lambda: not milvus.has_collection(milvus_name), timeout=60)
    wait_for("no Segment resources left", lambda: not list_segments(kube, namespace, collection_id), timeout=120)
    wait_for(
        "its SparkApplications to go",
        lambda: not [a for a in spark_applications(kube, namespace) if owned_by(a, cr_name)],
        timeout=120,
    )
    assert milvus_name not in milvus.list_collections()
    kubectl("-n", namespace, "delete", "flushrequest", fr_name, "--ignore-not-found")
