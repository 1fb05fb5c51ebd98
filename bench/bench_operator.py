"""Benchmark: N Collection resources created at once reach Ready, then are deleted again.

`kmilvus-operator` (kopf + RootCoord/DataCoord/QueryCoord in one process) runs as a child process
against a real Kubernetes control plane (tests/controlplane.py: the pinned etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built by `./dev setup`) with a client certificate of
its own, with real etcd and NATS JetStream started here. Reported: the time until all are Ready
and until all are gone (collections dropped through RootCoord, finalizers released), and the
Kubernetes API requests the operator sent per reconciled object, by phase and verb (watch streams
counted apart), read from the API server's audit log.

    .venv/bin/python bench/bench_operator.py [--n 200] [--standalone] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controllers import resources as R
from controllers.kube import KubeClient
from kmilvus.meta import EtcdKV
from kmilvus.util.embedded import free_port, start_etcd, start_nats
from tests.controlplane import start_control_plane

NS = "default"
BENCH_UA = "kmilvus-bench"
CLUSTER = "bench"
OPERATOR_USER = "kmilvus-bench-operator"  # the operator's client certificate: its audited requests
PEERING = "kmilvus"


def collection(i: int) -> dict:
    return {
        "metadata": {"name": f"c{i:04d}", "namespace": NS},
        "spec": {
            "fields": [
                {"name": "id", "dataType": "Int64", "isPrimaryKey": True},
                {"name": "vec", "dataType": "FloatVector", "dim": 64},
                {"name": "tag", "dataType": "VarChar", "maxLength": 32},
            ]
        },
    }


VERBS = {"get": "GET", "list": "GET", "create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}


def classify(audit: Path, start: int, end: int) -> dict:
    """The operator's requests in the audit log between byte offsets [start, end), by verb and
    target; watches apart (counted when their response starts)."""
    out: dict = {"operator": collections.Counter(), "watch": 0}
    with audit.open("rb") as f:
        f.seek(start)
        lines = f.read(end - start).splitlines()
    for line in lines:
        e = json.loads(line)
        if e["user"]["username"] != OPERATOR_USER:
            continue
        if e["verb"] == "watch":
            out["watch"] += e["stage"] == "ResponseStarted"
            continue
        if e["stage"] != "ResponseComplete":
            continue
        ref = e.get("objectRef") or {}
        res = ref.get("resource", "")
        target = (
            "events"
            if res == "events"
            else "peering"
            if "kopfpeerings" in res
            else "segments"
            if res == "segments"
            else "status"
            if ref.get("subresource") == "status"
            else res
        )
        out["operator"][f"{VERBS.get(e['verb'], e['verb'].upper())} {target}"] += 1
    return out


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


async def wait_for(pred, timeout: float, what: str, interval: float = 0.05) -> float:
    t0 = time.monotonic()
    while not await pred() if asyncio.iscoroutinefunction(pred) else not pred():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not done after {timeout}s")
        await asyncio.sleep(interval)
    return time.monotonic() - t0


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            return r.read().decode()
    except OSError:
        return ""


async def bench(n: int, standalone: bool, data_dir: Path, log_level: str = "warning") -> dict:
    etcd = start_etcd(data_dir / "etcd")
    nats = start_nats(data_dir / "nats")
    cp = await asyncio.to_thread(start_control_plane, data_dir / "k8s", audit_users=(OPERATOR_USER,))
    audit = data_dir / "k8s" / "audit.log"
    proc = None
    kv = await EtcdKV.connect([etcd.endpoint], f"{CLUSTER}/meta")
    kube = KubeClient(cp.login(), user_agent=BENCH_UA)  # the bench: the cluster admin, not audited
    try:
        for path in (ROOT / "crds", ROOT / "charts/kmilvus/crds/kopf-peerings.yaml"):
            cp.kubectl("apply", "--server-side", "-f", str(path))
        cp.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        if not standalone:
            peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING}}
            cp.kubectl("apply", "-f", "-", input=json.dumps(peering))
        health, metrics = free_port(), free_port()
        env = dict(
            os.environ,
            KUBECONFIG=str(cp.credentials(OPERATOR_USER, ("system:masters",)).kubeconfig),
            KMILVUS_ETCD_ENDPOINT=etcd.endpoint,
            KMILVUS_NATS_URL=nats.endpoint,
            KMILVUS_STORAGE_URI=(data_dir / "storage").as_uri(),
            KMILVUS_DML_CHANNEL_NUM="16",
        )
        argv = [
            str(Path(sys.executable).with_name("kmilvus-operator")),
            "--cluster",
            CLUSTER,
            "--metrics-port",
            str(metrics),
            "--health-port",
            str(health),
            "--log-level",
            log_level,
        ]
        argv += ["--standalone"] if standalone else ["--peering", PEERING]
        with open(data_dir / "operator.log", "wb") as log:
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        async def active() -> bool:  # the gauge is live (kopf caches /healthz probes for 10 s)
            return "kmilvus_operator_active 1.0" in await asyncio.to_thread(scrape, metrics)

        await wait_for(active, 60, "operator active", interval=0.2)

        async def all_ready() -> bool:
            objs = await kube.list(R.COLLECTION, NS)
            return len(objs) == n and all(
                any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (o.get("status") or {}).get("conditions") or []
                )
                for o in objs
            )

        async def none_left() -> bool:
            return not await kube.list(R.COLLECTION, NS)

        async def in_rootcoord() -> int:
            return len(await kv.get_prefix("root-coord/collection/", keys_only=True))

        # Create.
        r0 = size(audit)
        t0 = time.monotonic()
        await asyncio.gather(*(kube.create(R.COLLECTION, NS, collection(i)) for i in range(n)))
        t_posted = time.monotonic() - t0
        await wait_for(all_ready, 600, "all Ready", interval=0.1)
        t_ready = time.monotonic() - t0
        assert await in_rootcoord() == n
        await asyncio.sleep(2.0)  # trailing writes (events, monitors) land in this phase
        r1 = size(audit)

        # Delete.
        t1 = time.monotonic()
        await asyncio.gather(*(kube.delete(R.COLLECTION, NS, f"c{i:04d}") for i in range(n)))
        await wait_for(none_left, 600, "all deleted", interval=0.1)
        t_gone = time.monotonic() - t1
        assert await in_rootcoord() == 0
        assert not await kv.get_prefix("root-coord/drop-task/", keys_only=True)
        await asyncio.sleep(2.0)
        r2 = size(audit)
        create, delete = classify(audit, r0, r1), classify(audit, r1, r2)
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(proc.wait, 60)
        proc = None
    except BaseException:
        import shutil

        shutil.copy(data_dir / "operator.log", "/tmp/bench_operator_failed.log")
        tail = (data_dir / "operator.log").read_text(errors="replace").splitlines()[-60:]
        print("operator log (tail):\n" + "\n".join(tail), file=sys.stderr)
        raise
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)
        await kube.close()
        await kv.close()
        cp.stop()
        etcd.stop()
        nats.stop()
    c_ops, d_ops = sum(create["operator"].values()), sum(delete["operator"].values())
    return {
        "collections": n,
        "mode": "standalone" if standalone else "peering",
        "create_post_seconds": round(t_posted, 2),
        "create_ready_seconds": round(t_ready, 2),
        "delete_gone_seconds": round(t_gone, 2),
        "create_requests_per_object": round(c_ops / n, 2),
        "delete_requests_per_object": round(d_ops / n, 2),
        "create_requests": dict(sorted(create["operator"].items())),
        "delete_requests": dict(sorted(delete["operator"].items())),
        "watch_requests": create["watch"] + delete["watch"],
        "operator_exit_code": rc,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--standalone", action="store_true", help="no kopf peering")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--log-level", default="warning", help="the operator's log level (its log goes to stderr on failure)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kmilvus-bench-op-") as d:
        res = asyncio.run(bench(args.n, args.standalone, Path(d), args.log_level))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    n = res["collections"]
    print(f"kmilvus operator bench: {n} Collections at once ({res['mode']}), real kube-apiserver + etcd/JetStream")
    print(
        f"  create: POSTed in {res['create_post_seconds']}s; all Ready after {res['create_ready_seconds']}s "
        f"({n / res['create_ready_seconds']:.1f}/s)"
    )
    print(
        f"  delete: all dropped and gone after {res['delete_gone_seconds']}s ({n / res['delete_gone_seconds']:.1f}/s)"
    )
    print(f"  API requests per object: create {res['create_requests_per_object']}  {res['create_requests']}")
    print(f"                           delete {res['delete_requests_per_object']}  {res['delete_requests']}")
    print(f"  watch requests: {res['watch_requests']}; operator exit code {res['operator_exit_code']}")


if __name__ == "__main__":
    main()
