"""The operator under the RBAC the chart gives it (docs/user-guide/kubernetes.md), enforced by the
session's real API server: the chart's ServiceAccounts, Roles, RoleBindings and peering objects as
the real helm renders them for one served namespace and for several, the operator (in process) with
its ServiceAccount's token and nothing more, and the story still passes without one request
refused: the example Collection → Ready, insert through pymilvus, a FlushRequest → Completed, the
Collection deleted → gone. (tests/deploy/test_kubernetes.py runs the whole chart, operator pod included,
for one namespace.)"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import numpy as np
import pytest
import yaml
from pymilvus import MilvusClient

from controllers import resources as R
from tests.deploy.test_chart import CHART, by_kind, helm
from tests.operator.test_controllers import cfg, cond, operators, start_operator  # noqa: F401
from tests.util import eventually

ROOT = Path(__file__).resolve().parents[2]
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "KopfPeering")
pytestmark = [pytest.mark.timeout(180)]


class Refusals(logging.Handler):
    """Every log record that says the API server refused a request (403)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record):
        msg = record.getMessage()
        if "403" in msg or "Forbidden" in msg or "forbidden" in msg:
            self.records.append(msg[:500])


@pytest.fixture
def refusals():
    h = Refusals()
    logging.getLogger().addHandler(h)
    yield h
    logging.getLogger().removeHandler(h)


def flags(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


@pytest.mark.parametrize("served", [1, 2], ids=["one-namespace", "multi-namespace"])
async def test_scenario_passes_within_the_chart_rbac(kns, more_namespaces, operators, node_factory, refusals, served):
    cp = kns.cp
    release, release_ns = "kmilvus-" + uuid.uuid4().hex[:6], kns.name
    namespaces = more_namespaces(served)
    values = {"operator": {"watchNamespaces": namespaces}}
    docs = [
        d
        for d in yaml.safe_load_all(
            helm("template", release, str(CHART), "--namespace", release_ns, values=values).stdout
        )
        if d
    ]
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([d for d in docs if d["kind"] in RBAC_KINDS]))
    deployment = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == f"{release}-operator")
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert flags(args, "--namespace") == namespaces
    account = pod["serviceAccountName"]
    who = f"--as=system:serviceaccount:{release_ns}:{account}"
    # What the API server lets the account do: its own kinds where it serves, nothing else.
    for verb, what, ns, allowed in (
        *[("patch", "collections.kmilvus.io --subresource=status", ns, "yes") for ns in namespaces],
        *[("create", "segments.kmilvus.io", ns, "yes") for ns in namespaces],
        ("create", "segments.kmilvus.io", release_ns, "no"),
        ("get", "secrets", namespaces[0], "no"),
        ("list", "collections.kmilvus.io", "default", "no"),
    ):
        got = cp.kubectl("auth", "can-i", verb, *what.split(), "-n", ns, who, check=False).stdout.strip()
        assert got == allowed, (verb, what, ns, got)

    op = await start_operator(
        operators,
        namespaces=tuple(namespaces),
        peering=flags(args, "--peering")[0],
        sdk_namespace=flags(args, "--sdk-namespace")[0],
        login=cp.login(token=cp.token(release_ns, account)),
    )
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "proxy"))
    ns = namespaces[-1]  # with several: not the first (the SDK namespace)

    def obj(res, name: str) -> dict | None:
        return kns.obj(res, name, ns)

    example = yaml.safe_load((ROOT / "crds" / "examples" / "collection.yaml").read_text())
    example["metadata"]["namespace"] = ns
    await kns.client.create(R.COLLECTION, ns, example)
    o = await eventually(
        lambda: (x := obj(R.COLLECTION, "docs")) and cond(x, "Ready").get("status") == "True" and x,
        30,
        "the example Collection Ready",
    )
    assert cond(o, "Stalled")["status"] == "False"

    def insert() -> None:
        c = MilvusClient(uri=data.uri)
        try:
            rng = np.random.default_rng(0)
            rows = [
                {"id": i, "vec": rng.random(128, dtype=np.float32).tolist(), "tag": f"t{i}", "meta": {"i": i}}
                for i in range(500)
            ]
            c.insert("docs", rows)
        finally:
            c.close()

    await asyncio.to_thread(insert)
    flush = yaml.safe_load((ROOT / "crds" / "examples" / "flushrequest.yaml").read_text())
    flush["metadata"]["namespace"] = ns
    await kns.client.create(R.FLUSHREQUEST, ns, flush)
    await eventually(
        lambda: (x := obj(R.FLUSHREQUEST, "flush-docs")) and x.get("status", {}).get("phase") == "Completed",
        30,
        "the FlushRequest Completed",
    )
    await eventually(lambda: obj(R.COLLECTION, "docs")["status"].get("rows") == 500, 20, "status.rows")
    assert kns.items(R.SEGMENT, ns=ns)

    await kns.client.delete(R.COLLECTION, ns, "docs")
    await eventually(lambda: obj(R.COLLECTION, "docs") is None, 30, "the Collection to go")
    await eventually(lambda: not kns.items(R.SEGMENT, ns=ns), 20, "its Segments to go")
    assert not op.component("rootcoord").collections
    # Not one request of the operator was refused (kopf and the controllers log each one).
    assert refusals.records == []
