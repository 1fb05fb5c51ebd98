"""End-to-end fixtures: a real cluster (KUBECONFIG) with kmilvus installed by e2e/run.sh.

These tests are never part of the normal run (pytest's testpaths is tests/). When they are run
without a reachable cluster they fail with an explanation; they never skip silently.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = os.environ.get("E2E_NAMESPACE", "kmilvus")
RELEASE = os.environ.get("E2E_RELEASE", "kmilvus")
KUBECTL = os.environ.get("KUBECTL", "kubectl")


def _cluster_problem() -> str | None:
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        return (
            "KUBECONFIG is not set: the e2e tests need a Kubernetes cluster with kmilvus installed. "
            "Run e2e/run.sh (it creates a kind cluster, installs everything and runs these tests)."
        )
    missing = [p for p in kubeconfig.split(os.pathsep) if p and not Path(p).is_file()]
    if missing:
        return f"KUBECONFIG names missing file(s): {', '.join(missing)}"
    if shutil.which(KUBECTL) is None:
        return f"{KUBECTL} is not installed (needed for apply and port-forward)"
    try:
        from kubernetes import client, config

        config.load_kube_config()
        client.VersionApi().get_code(_request_timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable cluster
        return f"cannot reach the cluster in KUBECONFIG={kubeconfig}: {exc}"
    return None


def pytest_configure(config):
    problem = _cluster_problem()
    if problem:
        raise pytest.UsageError(f"e2e: {problem}")


@pytest.fixture(scope="session", autouse=True)
def _cluster_required():
    # Also when e2e/ is collected some other way than `pytest e2e/`.
    problem = _cluster_problem()
    if problem:
        pytest.fail(f"e2e: {problem}", pytrace=False)


@pytest.fixture(scope="session")
def namespace() -> str:
    return NAMESPACE


@pytest.fixture(scope="session")
def release() -> str:
    return RELEASE


@pytest.fixture(scope="session")
def kube():
    from kubernetes import client, config

    config.load_kube_config()
    return client.ApiClient()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def milvus_port(namespace, release):
    """`kubectl port-forward svc/<release>-milvus` to a free local port."""
    port = _free_port()
    proc = subprocess.Popen(
        [KUBECTL, "-n", namespace, "port-forward", f"svc/{release}-milvus", f"{port}:19530"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"kubectl port-forward exited: {proc.stdout.read()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("kubectl port-forward did not open the local port within 60 s")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def milvus(milvus_port):
    """A pymilvus client connected through the port-forward (retried while proxies warm up)."""
    from pymilvus import MilvusClient

    deadline = time.monotonic() + 120
    last = None
    while time.monotonic() < deadline:
        try:
            client = MilvusClient(uri=f"http://127.0.0.1:{milvus_port}", timeout=30)
            client.list_collections()
            break
        except Exception as exc:  # noqa: BLE001 - the proxy may not answer yet
            last = exc
            time.sleep(2)
    else:
        pytest.fail(f"pymilvus could not connect through the port-forward: {last}")
    yield client
    client.close()
