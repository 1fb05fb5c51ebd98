"""The one conftest of the suite: its tiers, and the shared fixtures.

Tiers (directories; each test gets its directory's marker here, registered in pyproject.toml). A
test module goes in the tier of the heaviest thing its tests start, whatever its name says:
- unit: pure Python, no server process (the parser, schemas, config, indexes, storage on a temp
  dir, the repository's own rules); `./dev test --fast` runs only these;
- integration: one component or client of kmilvus against real servers the test starts (etcd,
  NATS JetStream, moto's S3, a gRPC server), in the test's process;
- system: kmilvus as a whole (the `node` fixtures, `kmilvus standalone` processes) driven as users
  drive it (pymilvus, the Node.js SDK, Milvus' CLI, REST), faults and restarts included;
- operator: the controllers against the real kube-apiserver (the pinned Kubernetes build);
- deploy: what is shipped to a cluster (the Helm chart, the plain manifests, `helm install` on the
  test control plane).
The tiers run in that order; the tests that need the pinned helm or Kubernetes build run last
whatever their tier (see below). Helpers shared by tiers stay here at the top of tests/.

Shared fixtures: real etcd, nats-server (JetStream) and moto_server, started once per run on
free loopback ports in temp dirs. Tests isolate themselves with a unique `root` prefix (etcd
keys, JetStream stream/subject names, storage root)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from kmilvus.util.embedded import ChildServer, free_port, start_etcd, start_nats
from tests.util import wait_until

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# faiss' OpenMP threads sleep while they wait for work instead of spinning: on a machine whose
# cores are shared, spinning threads starve everything else (read before faiss loads, so here).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "system", "operator", "deploy")  # in the order they run


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


# ------------------------------------------------------------------ the pinned helm and Kubernetes
# `./dev test` builds them in the background (tests/pinned.py): the tests that use them run last
# and wait for that build before their timeouts start.
PINNED_FIXTURES = {"pinned_helm": "HELM", "pinned_kubernetes": "KUBERNETES"}


def _pinned_needs(item) -> tuple[str, ...]:
    from tests import pinned

    names: tuple[str, ...] = ()
    for fixture, group in PINNED_FIXTURES.items():
        if fixture in getattr(item, "fixturenames", ()):
            names += tuple(n for n in getattr(pinned, group) if n not in names)
    return names


# ------------------------------------------------------------------ tiers: markers and run order
def _tier(item) -> str | None:
    """The tier directory `item` is in; None for a test outside tests/ (e2e/ run with this one)."""
    if not item.path.is_relative_to(TESTS):
        return None
    parts = item.path.relative_to(TESTS).parts
    if len(parts) < 2 or parts[0] not in TIERS:
        raise pytest.UsageError(
            f"{item.path.relative_to(TESTS.parent)} is outside the tiers: move it into tests/<tier>/ "
            f"({', '.join(TIERS)}; see tests/conftest.py)"
        )
    return parts[0]


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the tier markers
def pytest_collection_modifyitems(session, config, items):
    rank = {}
    for item in items:
        tier = _tier(item)
        if tier is not None:
            item.add_marker(tier)
        rank[item.nodeid] = TIERS.index(tier) if tier else len(TIERS)
    # Stable: within a tier, the collection order is kept.
    items[:] = sorted(items, key=lambda item: (bool(_pinned_needs(item)), rank[item.nodeid]))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # Outside pytest-timeout's wrapper: the wait does not count against the test's timeout.
    if names := _pinned_needs(item):
        from tests import pinned

        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        pinned.wait_for_build(names, lambda msg: reporter.write_line(msg) if reporter else print(msg))
    yield


# Where the suite's time goes, per tier: each test's setup, call and teardown, summed.
_TIER_SECONDS: dict[str, float] = {}
_TIER_TESTS: dict[str, int] = {}


def pytest_runtest_logreport(report):
    tier = next((t for t in TIERS if t in report.keywords), "other")
    _TIER_SECONDS[tier] = _TIER_SECONDS.get(tier, 0.0) + report.duration
    if report.when == "call":
        _TIER_TESTS[tier] = _TIER_TESTS.get(tier, 0) + 1


def pytest_terminal_summary(terminalreporter):
    if _TIER_SECONDS:
        terminalreporter.write_sep("-", "time per tier (setup + call + teardown)")
        for tier in (*TIERS, "other"):
            if tier in _TIER_SECONDS:
                terminalreporter.write_line(
                    f"{tier:12} {_TIER_TESTS.get(tier, 0):5} tests  {_TIER_SECONDS[tier]:8.1f} s"
                )


def pytest_sessionfinish(session, exitstatus):
    from tests import pinned

    pinned.stop_background_build()


@pytest.fixture(scope="session")
def pinned_helm() -> None:
    """The pinned helm (tools/versions.env) is there; else the test fails saying why."""
    from tests import pinned

    if why := pinned.missing(pinned.HELM):
        pytest.fail(why, pytrace=False)


@pytest.fixture(scope="session")
def pinned_kubernetes(pinned_helm) -> None:
    """The pinned Kubernetes binaries and helm are there; else the test fails saying why."""
    from tests import pinned

    if why := pinned.missing(pinned.KUBERNETES):
        pytest.fail(why, pytrace=False)


@pytest.fixture(scope="session")
def control_plane(pinned_kubernetes, tmp_path_factory):
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


@pytest.fixture(scope="session")
def kube_crds(control_plane):
    """kmilvus' CRDs (crds/), kopf's peering CRDs (the chart's crds/) and the SparkApplication
    CRD (tests/sparkcrd.py) on the session's control plane, established."""
    from tests.sparkcrd import spark_application_crd

    root = Path(__file__).resolve().parents[1]
    for path in (root / "crds", root / "charts/kmilvus/crds/kopf-peerings.yaml"):
        control_plane.kubectl("apply", "--server-side", "-f", str(path))
    out = control_plane.kubectl(
        "apply", "--server-side", "-f", "-", input=json.dumps(spark_application_crd()), check=False
    )
    assert out.returncode == 0, out.stderr

    def established() -> bool:  # (`kubectl wait` fails on a CRD that has no conditions yet)
        crds = control_plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
        return all(
            any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (d.get("status") or {}).get("conditions") or []
            )
            for d in crds
        )

    wait_until(established, 60, 0.1, "the CRDs to be established")
    return control_plane


@pytest.fixture
async def kns(kube_crds):
    """The test's own namespace on the session's control plane (tests/controlplane.Namespace),
    deleted afterwards (the finalizers of what the test's operator left are released first)."""
    from controllers import resources as R
    from controllers.kube import KubeClient
    from controllers.spark_runner import SPARK_APPLICATION
    from tests.controlplane import Namespace

    name = "t-" + uuid.uuid4().hex[:8]
    kube_crds.kubectl("create", "namespace", name)
    client = KubeClient(kube_crds.login(), user_agent="kmilvus-test")
    ns = Namespace(kube_crds, name, client)
    yield ns
    await client.close()
    await asyncio.to_thread(ns.release, (R.COLLECTION, R.FLUSHREQUEST, R.SEGMENT, SPARK_APPLICATION))
    await asyncio.to_thread(kube_crds.kubectl, "delete", "namespace", name, "--wait=false")


@pytest.fixture
async def more_namespaces(kns):
    """`make(n)`: n more namespaces named after the test's own, released and deleted like it
    (request this fixture before the operators that use them: it is torn down after them)."""
    from controllers import resources as R
    from controllers.spark_runner import SPARK_APPLICATION
    from tests.controlplane import Namespace

    made: list[Namespace] = []

    def make(n: int) -> list[str]:
        for _ in range(n):
            name = f"{kns.name}-{len(made)}"
            kns.cp.kubectl("create", "namespace", name)
            made.append(Namespace(kns.cp, name, kns.client))
        return [m.name for m in made[-n:]]

    yield make
    for ns in made:
        await asyncio.to_thread(ns.release, (R.COLLECTION, R.FLUSHREQUEST, R.SEGMENT, SPARK_APPLICATION))
        await asyncio.to_thread(kns.cp.kubectl, "delete", "namespace", ns.name, "--wait=false")


@pytest.fixture(scope="session")
def spark_operator(kube_crds, kube_node):
    """The spark-operator stand-in (tests/sparkstandin.py) for the session: SparkApplications in
    any namespace get driver pods, run by the session's node."""
    from tests.sparkstandin import SparkOperatorStandIn

    op = SparkOperatorStandIn(kube_crds).start()
    yield op
    op.stop()
