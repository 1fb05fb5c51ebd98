"""The Proxy's system RPCs that tools such as Attu call (docs/user-guide/clients.md):

    GetMetrics {"metric_type": "system_info"}   → the system topology (kmilvus.util.metricsinfo)
    ListResourceGroups / DescribeResourceGroup  → the one resource group kmilvus has

kmilvus has no resource-group management: every QueryNode serves in Milvus' default group
(`__default_resource_group`), and that is what these answer; creating or changing a group
stays UNIMPLEMENTED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.proto import query_coord_pb2
from kmilvus.sessionutil import list_sessions
from kmilvus.util import merr, metricsinfo

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

log = get_logger(__name__)
DEFAULT_RESOURCE_GROUP = "__default_resource_group"
DEFAULT_RESOURCE_GROUP_CAPACITY = 1000000  # Milvus' meta.DefaultResourceGroupCapacity
RESOURCE_GROUP_NOT_FOUND = (300, merr.EC.UnexpectedError)
COORDINATORS = (roles.QUERYCOORD, roles.DATACOORD, roles.ROOTCOORD)  # Milvus' order in the graph


class ProxySystemMixin(ProxyHost):
    @merr.rpc(milvus_pb2.GetMetricsResponse)
    async def GetMetrics(self, req: milvus_pb2.GetMetricsRequest, context=None):
        """Milvus' getSystemInfoMetrics: this Proxy, each coordinator's topology, and the
        nodes they manage; a coordinator that does not answer is left out of the graph."""
        metricsinfo.require_system_info(req)
        ip = await self.registry.address(self.role, self.server_id)
        config = {"default_partition_name": "_default", "default_index_name": "_default_idx"}
        me = metricsinfo.component_infos(self.role, self.server_id, ip, config)
        topologies = {}
        for role in COORDINATORS:
            try:
                resp = await self.registry.client(role).GetMetrics(req)
                merr.check(resp.status)
                topologies[role] = orjson.loads(resp.response)
            except Exception as exc:  # noqa: BLE001 - Milvus leaves an unreachable coordinator out
                log.warning("coordinator metrics unavailable", role=role, error=repr(exc))
        body = metricsinfo.system_topology(me, topologies)
        return metricsinfo.response(me["name"], body)

    @merr.rpc(milvus_pb2.ListResourceGroupsResponse)
    async def ListResourceGroups(self, req, context=None):
        return milvus_pb2.ListResourceGroupsResponse(resource_groups=[DEFAULT_RESOURCE_GROUP])

    @merr.rpc(milvus_pb2.DescribeResourceGroupResponse)
    async def DescribeResourceGroup(self, req: milvus_pb2.DescribeResourceGroupRequest, context=None):
        if req.resource_group != DEFAULT_RESOURCE_GROUP:
            raise merr.MilvusError(RESOURCE_GROUP_NOT_FOUND, f"resource group not found[rg={req.resource_group}]")
        nodes = await list_sessions(self.registry.kv, roles.QUERYNODE)
        resp = milvus_pb2.DescribeResourceGroupResponse()
        rg = resp.resource_group
        rg.name = DEFAULT_RESOURCE_GROUP
        rg.capacity = DEFAULT_RESOURCE_GROUP_CAPACITY
        rg.num_available_node = len(nodes)
        rg.config.requests.node_num = 0
        rg.config.limits.node_num = DEFAULT_RESOURCE_GROUP_CAPACITY
        for sid, info in sorted(nodes.items()):
            rg.nodes.add(node_id=sid, address=info.address, hostname=info.hostname)
        for name, replicas in (await self._loaded_replicas()).items():
            rg.num_loaded_replica[name] = replicas
        return resp

    async def _loaded_replicas(self) -> dict[str, int]:
        """Loaded collection name → replicas in the group (one each: kmilvus loads one replica)."""
        out = {}
        for db in (await self.rootcoord.ListDatabases(milvus_pb2.ListDatabasesRequest())).db_names:
            shown = await self.rootcoord.ShowCollections(milvus_pb2.ShowCollectionsRequest(db_name=db))
            for name, coll_id in zip(shown.collection_names, shown.collection_ids, strict=True):
                state = await self.querycoord.GetLoadState(query_coord_pb2.GetLoadStateRequest(collectionID=coll_id))
                if state.state == common_pb2.LoadState.LoadStateLoaded:
                    out[name] = 1
        return out
