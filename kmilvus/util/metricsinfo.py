"""GetMetrics `system_info` (Milvus' pkg/util/metricsinfo): each component describes itself
(ComponentInfos: hardware, deploy and configuration), a coordinator adds the nodes it manages
(its cluster topology), and the Proxy assembles the SystemTopology graph Attu's system page
draws (`nodes_info`: identifier, infos, connected edges).

The JSON keys are Milvus' own (`metrics_info.go`, `topology.go`), so any client that reads
Milvus' answer reads kmilvus'. Hardware figures are the machine's (psutil), as Milvus reports
its container's.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import Any, Protocol

import orjson
import psutil
from pymilvus.grpc_gen import milvus_pb2

from kmilvus import __version__
from kmilvus.util import merr

SYSTEM_INFO = "system_info"
FORWARD, MANAGE = "forward", "manage"  # Milvus' ConnectionType: Proxy → coordinator, coordinator → node
SERVER_VERSION = "v2.3.5"  # the Milvus API level kmilvus implements (GetVersion answers it)
_STARTED = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f %z UTC")


class Sessions(Protocol):
    """What these functions use of kmilvus.components.Registry."""

    async def address(self, role: str, server_id: int) -> str: ...

    async def clients(self, role: str) -> Mapping[int, Any]: ...


class Node(Protocol):
    """The component answering GetMetrics: its session names it."""

    @property
    def role(self) -> str: ...
    @property
    def server_id(self) -> int: ...
    @property
    def registry(self) -> Sessions: ...


def metric_type(req: milvus_pb2.GetMetricsRequest) -> str:
    """Milvus' ParseMetricType: `{"metric_type": "..."}`."""
    try:
        parsed = orjson.loads(req.request or b"{}")
    except orjson.JSONDecodeError as exc:
        raise merr.invalid(f"failed to parse the metric request: {exc}") from None
    value = parsed.get("metric_type") if isinstance(parsed, dict) else None
    if not isinstance(value, str) or not value:
        raise merr.invalid("metric_type not found in request")
    return value


def require_system_info(req: milvus_pb2.GetMetricsRequest) -> None:
    kind = metric_type(req)
    if kind != SYSTEM_INFO:
        raise merr.MilvusError(merr.METRIC_NOT_FOUND, f"metric not found[metric={kind}]")


def hardware(ip: str) -> dict[str, Any]:
    """HardwareMetrics: the machine (memory and disk in bytes, CPU usage in percent)."""
    mem = psutil.virtual_memory()
    disk = psutil.disk_usage("/")
    return {
        "ip": ip,
        "cpu_core_count": psutil.cpu_count() or 1,
        "cpu_core_usage": psutil.cpu_percent(interval=None),
        "memory": mem.total,
        "memory_usage": mem.total - mem.available,
        "disk": float(disk.total),
        "disk_usage": float(disk.used),
        "io_wait_percentage": float(getattr(psutil.cpu_times_percent(interval=None), "iowait", 0.0)),
    }


def deploy_mode() -> str:
    return os.environ.get("DEPLOY_MODE", "STANDALONE")


def component_infos(role: str, server_id: int, ip: str, configuration: dict[str, Any]) -> dict[str, Any]:
    """BaseComponentInfos + SystemConfigurations of one component, named as Milvus names it
    (`ConstructComponentName`: role + ID)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f %z UTC")
    return {
        "has_error": False,
        "error_reason": "",
        "name": f"{role}{server_id}",
        "hardware_infos": hardware(ip),
        "system_info": {
            "system_version": __version__,
            "deploy_mode": deploy_mode(),
            "build_version": SERVER_VERSION,
            "build_time": "",
            "used_go_version": "",
        },
        "created_time": _STARTED,
        "updated_time": now,
        "type": role,
        "id": server_id,
        "system_configurations": configuration,
    }


def failed_infos(role: str, server_id: int, reason: str) -> dict[str, Any]:
    """A node that did not answer: listed with `has_error`, as Milvus lists it."""
    return {"has_error": True, "error_reason": reason, "name": f"{role}{server_id}", "type": role, "id": server_id}


def response(component: str, body: dict[str, Any]) -> milvus_pb2.GetMetricsResponse:
    return milvus_pb2.GetMetricsResponse(response=orjson.dumps(body).decode(), component_name=component)


async def self_metrics(
    comp: Node, req: milvus_pb2.GetMetricsRequest, configuration: dict[str, Any]
) -> milvus_pb2.GetMetricsResponse:
    """A node's answer: its ComponentInfos."""
    require_system_info(req)
    ip = await comp.registry.address(comp.role, comp.server_id)
    return response(f"{comp.role}{comp.server_id}", component_infos(comp.role, comp.server_id, ip, configuration))


async def coordinator_metrics(
    comp: Node,
    req: milvus_pb2.GetMetricsRequest,
    configuration: dict[str, Any],
    node_role: str | None,
    connects_to: tuple[str, ...],
    cluster_key: str,
    more_nodes: tuple[tuple[str, str], ...] = (),
) -> milvus_pb2.GetMetricsResponse:
    """A coordinator's topology: itself, the nodes of `node_role` it manages (each asked for
    its own infos) under `cluster_key`, those of each (role, key) of `more_nodes` (DataCoord's
    IndexNodes), and the coordinators it talks to (Milvus' ConnTopology)."""
    require_system_info(req)
    ip = await comp.registry.address(comp.role, comp.server_id)
    me = component_infos(comp.role, comp.server_id, ip, configuration)
    name = f"{comp.role}{comp.server_id}"
    connections = {"name": name, "connected_components": [{"target_name": "", "target_type": t} for t in connects_to]}
    if cluster_key == "self":  # RootCoordTopology has no cluster
        return response(name, {"self": me, "connections": connections})
    cluster: dict[str, Any] = {"self": me}
    managed = ((node_role, cluster_key),) if node_role is not None else ()
    for role, key in (*managed, *more_nodes):
        cluster[key] = await _node_infos(comp, req, role)
    return response(name, {"cluster": cluster, "connections": connections})


async def _node_infos(comp: Node, req: milvus_pb2.GetMetricsRequest, role: str) -> list[Any]:
    """Each live node of `role`'s own ComponentInfos."""
    nodes = []
    for sid, client in (await comp.registry.clients(role)).items():
        try:
            r = await client.GetMetrics(req)
            merr.check(r.status)
            nodes.append(orjson.loads(r.response))
        except Exception as exc:  # noqa: BLE001 - a node that does not answer is shown as failed
            nodes.append(failed_infos(role, sid, str(exc)))
    return nodes


def system_topology(proxy_infos: dict[str, Any], coordinators: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Milvus' getSystemInfoMetrics: the Proxy, each coordinator that answered with its
    connections, and the nodes each coordinator manages ("manage" edges)."""
    nodes_info: list[dict[str, Any]] = []
    ids = {role: topo_self(topo)["id"] for role, topo in coordinators.items()}
    proxy = {"identifier": proxy_infos["id"], "connected": [], "infos": proxy_infos}
    for role, topo in coordinators.items():
        proxy["connected"].append({"connected_identifier": ids[role], "type": FORWARD, "target_type": role})
        node = {"identifier": ids[role], "connected": [], "infos": topo_self(topo)}
        for edge in topo.get("connections", {}).get("connected_components", []):
            target = edge["target_type"]
            if target in ids:
                node["connected"].append({"connected_identifier": ids[target], "type": FORWARD, "target_type": target})
        cluster = topo.get("cluster", {})
        for key in ("connected_nodes", "connected_data_nodes", "connected_index_nodes"):
            for child in cluster.get(key, []):
                nodes_info.append({"identifier": child["id"], "connected": None, "infos": child})
                node["connected"].append(
                    {"connected_identifier": child["id"], "type": MANAGE, "target_type": child["type"]}
                )
        nodes_info.append(node)
    nodes_info.append(proxy)
    return {"nodes_info": nodes_info}


def topo_self(topo: dict[str, Any]) -> dict[str, Any]:
    me: dict[str, Any] = topo["self"] if "self" in topo else topo["cluster"]["self"]
    return me
