"""controllers.kube.KubeClient against the session's real API server (tests/controlplane.py): what
the API server answers besides success that a client has to handle as client-go does."""

from __future__ import annotations

import asyncio
import json

import pytest

from controllers.kube import KubeClient, Resource
from tests.util import eventually

pytestmark = [pytest.mark.timeout(120)]
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
USER = "kmilvus-throttled"


def flow_control(name: str) -> list[dict]:
    """API Priority and Fairness objects that refuse every request of USER with 429 and a
    Retry-After (a priority level with no seats that borrows none and queues nothing): what a
    busy API server answers a client over its share, and what any API server answers while the
    watch cache of a resource (re)initializes."""
    return [
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 0,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": USER}}],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "clusterScope": True,
                                "namespaces": ["*"],
                            }
                        ],
                    }
                ],
            },
        },
    ]


def executing(cp, level: str) -> int | None:
    """Requests the API server is executing at priority level `level` (None: level unknown)."""
    dump = cp.kubectl("get", "--raw", "/debug/api_priority_and_fairness/dump_priority_levels").stdout
    for line in dump.splitlines()[1:]:
        cells = [c.strip() for c in line.split(",")]
        if cells[0] == level:
            return int(cells[5])  # ExecutingRequests
    return None


async def test_a_429_with_retry_after_is_retried(control_plane):
    """A throttled request (429, Retry-After) is sent again after the time the server asks for, as
    client-go does, instead of failing the reconcile that made it; it succeeds once the server
    serves it. The user's priority level runs one request at a time: a request that waits for a
    resourceVersion the API server has not reached (it gives up after 3 s) holds it meanwhile."""
    cp = control_plane
    name = "kmilvus-test-throttled"
    cp.kubectl("create", "clusterrolebinding", name, "--clusterrole=view", f"--user={USER}")
    cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in flow_control(name)))
    creds = cp.credentials(USER)
    client = KubeClient(cp.login(creds), user_agent="kmilvus-test")
    try:
        await eventually(lambda: executing(cp, name) is not None, 30, "the priority level in force")
        hold = asyncio.create_task(
            asyncio.to_thread(
                cp.request,
                "GET",
                "/api/v1/namespaces?resourceVersion=999999999&resourceVersionMatch=NotOlderThan",
                creds=creds,
                retry=False,
            )
        )
        await eventually(lambda: executing(cp, name) == 1, 30, "the request holding the priority level")
        ns = await client.get(NAMESPACES, None, "default")
        assert ns["metadata"]["name"] == "default"
        assert client.requests >= 2  # refused (429) while the other one ran, then served
        status, body = await hold
        assert status == 504 and "Too large resource version" in body["message"], body
    finally:
        await client.close()
        cp.kubectl("delete", "flowschema,prioritylevelconfiguration", name, "--ignore-not-found")
        cp.kubectl("delete", "clusterrolebinding", name)
