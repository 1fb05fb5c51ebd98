"""Shared fixtures: real etcd, nats-server (JetStream) and moto_server, started once per run on
free loopback ports in temp dirs. Tests isolate themselves with a unique `root` prefix (etcd
keys, JetStream stream/subject names, storage root)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from kmilvus.util.embedded import ChildServer, free_port, start_etcd, start_nats

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def servers_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def etcd_server(servers_dir) -> ChildServer:
    srv = start_etcd(servers_dir / "etcd")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def nats_server(servers_dir) -> ChildServer:
    srv = start_nats(servers_dir / "nats")
    yield srv
    srv.stop()


@pytest.fixture
def etcd_endpoint(etcd_server) -> str:
    return etcd_server.endpoint


@pytest.fixture
def nats_url(nats_server) -> str:
    return nats_server.endpoint


@pytest.fixture
def root() -> str:
    """A unique cluster name per test: etcd prefix, stream names and storage root derive from it."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def moto_endpoint(servers_dir) -> str:
    """A real S3 API (moto_server) on loopback."""
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    with open(servers_dir / "moto.log", "ab") as log:
        proc = subprocess.Popen(
            [str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1)
            break
        except OSError as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto_server did not start") from exc
            time.sleep(0.1)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
async def ms(nats_url, root):
    """A MsgStream of the test's own cluster; its streams are deleted afterwards."""
    from kmilvus.msgstream import MsgStream

    s = await MsgStream.connect(nats_url, root, name=f"test-{root}")
    yield s
    await s.delete_stream()
    await s.close()


@pytest.fixture
def node_factory(etcd_endpoint, nats_url, root, tmp_path):
    """Start in-process kmilvus nodes on the shared servers; all stopped at teardown."""
    from tests.harness import NodeThread, make_config

    started = []

    def make(roles=None, **overrides):
        from kmilvus.server import ALL_ROLES

        cfg = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage", **overrides)
        n = NodeThread(cfg, tuple(roles or ALL_ROLES)).start()
        started.append(n)
        return n

    yield make
    for n in reversed(started):
        n.stop()


@pytest.fixture
def node(node_factory):
    """One in-process `standalone`-shaped node (all five components)."""
    return node_factory()


@pytest.fixture
def client(node):
    from pymilvus import MilvusClient

    c = MilvusClient(uri=node.uri)
    yield c
    c.close()


@pytest.fixture
def orm(node):
    """A pymilvus ORM connection alias to `node`."""
    from pymilvus import connections

    alias = "a" + uuid.uuid4().hex[:8]
    connections.connect(alias, uri=node.uri)
    yield alias
    connections.disconnect(alias)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """A real Kubernetes control plane for the session (tests/controlplane.py): the pinned etcd,
    kube-apiserver, kube-controller-manager and kube-scheduler, the test a cluster admin."""
    from tests.controlplane import start_control_plane

    cp = start_control_plane(tmp_path_factory.mktemp("kubernetes"))
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def kube_node(control_plane, tmp_path_factory):
    """One Node of this machine that runs the pods bound to it (tests/nodeagent.py)."""
    from tests.nodeagent import NodeAgent

    agent = NodeAgent(control_plane, "kmilvus-node-0", tmp_path_factory.mktemp("node")).start()
    control_plane.kubectl("wait", "--for=condition=Ready", "node/kmilvus-node-0", "--timeout=60s")
    yield agent
    agent.stop()
