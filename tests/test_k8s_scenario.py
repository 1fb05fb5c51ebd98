"""The Kubernetes deployment (docs/user-guide/kubernetes.md) as Kubernetes would run it, without a
cluster: the chart rendered for external etcd / NATS / (moto) S3 with a credentials Secret; the
Proxy and the DataNode as processes with exactly their pod specs, and so is the operator (its
rendered container, with the API address a pod gets from its service account), under the
rendered RBAC (403 otherwise);
SparkApplications run by the spark-operator stand-in with only what their spec provides. Apply the example Collection →
Ready; insert through pymilvus; FlushRequest → Completed; bulk import (SparkApplication) → rows
counted; compaction (SparkApplication) → fewer Segments; delete the Collection → its etcd keys,
binlogs, stream consumers, Segments and SparkApplications gone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import kopf
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pymilvus import MilvusClient, connections, utility

from controllers import resources as R
from controllers.kube import KubeClient
from kmilvus.msgstream import MsgStream, pchannel_of
from kmilvus.util.embedded import free_port
from tests.test_chart import NS as RELEASE_NS
from tests.test_chart import RELEASE, by_kind, render
from tests.test_controllers import COLL, FLUSH, SEGS, cond, obj
from tests.test_kubernetes import assert_collection_gone, chart_values, s3_secret
from tests.test_operator_rbac import (  # noqa: F401
    ACCOUNT,
    ADMIN_TOKEN,
    Authorizer,
    RBACKMock,
    container_process,
    kube,
    kubeconfig,
)
from tests.test_spark_application_runner import APPS, declare
from tests.test_spark_cluster_standin import ClusterObjects, standin
from tests.util import eventually

pytestmark = [pytest.mark.kmock(cls=RBACKMock), pytest.mark.timeout(900), pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[1]
NS = "default"
DIM = 128


def rows(start: int, n: int) -> list[dict]:
    rng = np.random.default_rng(start)
    return [
        {"id": i, "vec": rng.random(DIM, dtype=np.float32).tolist(), "tag": f"t{i}", "meta": {"i": i}}
        for i in range(start, start + n)
    ]


async def _no_consumers(stream: MsgStream, vchannels: list[str]) -> bool:
    chans = [*vchannels, *{pchannel_of(v) for v in vchannels}]  # own (catching up) and shared consumers
    return not [n for ch in chans for n in await stream.consumer_names(ch)]


async def test_collection_lifecycle_as_kubernetes_runs_it(
    kmock, kube, etcd_endpoint, nats_url, moto_endpoint, root, tmp_path, monkeypatch
):
    monkeypatch.setenv("KMILVUS_TEST_ONLY", "the test's own environment")
    declare(kmock)
    port = free_port()
    storage_uri = f"s3://kmilvus-{uuid.uuid4().hex[:8]}/data?endpoint={moto_endpoint}"
    # Small jobs would run in the operator process: this test follows SparkApplications.
    docs = render({**chart_values(root, etcd_endpoint, nats_url, storage_uri, port), "spark": {"inProcessMaxMB": 0}})
    users = [s3_secret(RELEASE_NS), s3_secret(NS)]  # `kubectl create secret` where pods and jobs run
    kmock.authorizer = auth = Authorizer(docs, ACCOUNT, RELEASE_NS)

    async def admin_login():
        return kopf.ConnectionInfo(server=str(kmock.url), insecure=True, token=ADMIN_TOKEN)

    spark_kube = KubeClient(admin_login)
    procs = []
    try:
        for kind, name in (
            ("Deployment", ACCOUNT),
            ("StatefulSet", f"{RELEASE}-datanode"),
            ("Deployment", f"{RELEASE}-proxy"),
        ):
            w = next(d for d in by_kind(docs, kind) if d["metadata"]["name"] == name)
            argv, env = container_process(docs, users, w, f"{name}-0")
            assert "KMILVUS_TEST_ONLY" not in env
            if name == ACCOUNT:  # the operator: Spark jobs as SparkApplications, the API from its pod
                assert env["KMILVUS_SPARK_RUNNER"] == "sparkapplication"
                assert env["KMILVUS_SPARK_S3_SECRET_NAME"] == "s3-creds"
                env["KUBECONFIG"] = str(kubeconfig(tmp_path / "kubeconfig", str(kmock.url)))
            with open(tmp_path / f"{name}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                )

        def serving() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
            return False

        await eventually(lambda: serving() or any(p.poll() is not None for p in procs), 90, "the Proxy port")
        assert all(p.poll() is None for p in procs)
        client = MilvusClient(uri=f"http://127.0.0.1:{port}")

        # Apply the example Collection → Ready.
        await kube.create(R.COLLECTION, NS, yaml.safe_load((ROOT / "crds/examples/collection.yaml").read_text()))
        o = await eventually(
            lambda: (x := obj(kmock, COLL, "docs")) and cond(x, "Ready").get("status") == "True" and x,
            30,
            "the example Collection Ready",
        )
        cid, vchannels = o["status"]["collectionID"], o["status"]["vchannels"]

        # Insert and flush twice (two rounds of small segments on each channel).
        async def insert_and_flush(start: int, flush_name: str) -> None:
            await asyncio.to_thread(client.insert, "docs", rows(start, 200))
            body = yaml.safe_load((ROOT / "crds/examples/flushrequest.yaml").read_text())
            body["metadata"]["name"] = flush_name
            await kube.create(R.FLUSHREQUEST, NS, body)
            await eventually(
                lambda: (x := obj(kmock, FLUSH, flush_name)) and x.get("status", {}).get("phase") == "Completed",
                60,
                f"{flush_name} Completed",
            )

        await insert_and_flush(0, "flush-1")
        await insert_and_flush(200, "flush-2")
        await eventually(lambda: obj(kmock, COLL, "docs")["status"].get("rows") == 400, 30, "status.rows 400")

        cluster = ClusterObjects(docs + users)
        async with standin(kmock, cluster, tmp_path / "spark", spark_kube) as spark:
            # Bulk import through a SparkApplication in the Collection's namespace → rows counted.
            n = 300
            vec = np.random.default_rng(9).random((n, DIM), dtype=np.float32)
            pq.write_table(
                pa.table(
                    {
                        "id": pa.array(np.arange(1000, 1000 + n, dtype=np.int64)),
                        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM),
                        "tag": pa.array([f"i{i}" for i in range(n)]),
                        "meta": pa.array(['{"imported": true}'] * n),
                    }
                ),
                tmp_path / "rows.parquet",
            )
            alias = "a" + uuid.uuid4().hex[:8]
            await asyncio.to_thread(connections.connect, alias, uri=f"http://127.0.0.1:{port}")
            task = await asyncio.to_thread(
                utility.do_bulk_insert, "docs", files=[str(tmp_path / "rows.parquet")], using=alias
            )
            o = await eventually(
                lambda: (
                    (x := obj(kmock, COLL, "docs"))
                    and (x["status"].get("imports") or {}).get("last", {}).get("state")
                    in ("ImportCompleted", "ImportFailed")
                    and x
                ),
                400,
                "the import to finish",
            )
            imp = o["status"]["imports"]
            assert imp["last"]["state"] == "ImportCompleted", imp
            assert imp["last"]["jobID"] == task and imp["rowsImported"] == n and imp["running"] == 0
            await eventually(lambda: obj(kmock, COLL, "docs")["status"].get("rows") == 400 + n, 30, "rows 700")
            ((app_ns, app_name),) = [k for k in spark.seen if "import" in k[1]]
            assert app_ns == NS and imp["last"]["sparkApplication"] == app_name

            # Compaction through a SparkApplication → fewer Segments.
            def segments() -> list[dict]:
                return [
                    s for k in list(kmock.objects) if k[0] == kmock.resource(SEGS) and (s := obj(kmock, SEGS, k[2]))
                ]

            before = len(segments())
            comp = await asyncio.to_thread(client.compact, "docs")
            o = await eventually(
                lambda: (
                    (x := obj(kmock, COLL, "docs"))
                    and (x["status"].get("compactions") or {}).get("last", {}).get("compactionID") == comp
                    and x["status"]["compactions"]["running"] == 0
                    and x
                ),
                400,
                "the compaction",
            )
            assert o["status"]["compactions"]["last"]["state"] == "Completed", o["status"]["compactions"]
            assert o["status"]["compactions"]["last"]["plans"] >= 1
            await eventually(lambda: len(segments()) < before, 30, f"fewer than {before} Segments")
            assert obj(kmock, COLL, "docs")["status"]["rows"] == 400 + n
            assert {k[0] for k in spark.seen} == {NS}
            with contextlib.suppress(Exception):
                connections.disconnect(alias)

        # Delete the Collection → everything it owned is gone.
        stream = await MsgStream.connect(nats_url, root)
        assert not await _no_consumers(stream, vchannels)  # the DataNode process consumes them now
        await kube.delete(R.COLLECTION, NS, "docs")
        await eventually(lambda: obj(kmock, COLL, "docs") is None, 60, "the Collection to go")
        await eventually(lambda: not segments(), 30, "its Segments to go")
        await eventually(
            lambda: (
                not [k for k in list(kmock.objects) if k[0] == kmock.resource(APPS) and obj(kmock, APPS, k[2], k[1])]
            ),
            30,
            "its SparkApplications to go",
        )
        assert all(p.poll() is None for p in procs)
        await assert_collection_gone(etcd_endpoint, root, storage_uri, cid, vchannels)
        try:  # the DataNode process's consumers of the collection's channels are gone too

            async def consumers_gone() -> bool:
                return await _no_consumers(stream, vchannels)

            await eventually(consumers_gone, 30, "the stream consumers to go")
        finally:
            await stream.close()
        assert auth.denied == []
        client.close()
    finally:
        await spark_kube.close()
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(20)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
