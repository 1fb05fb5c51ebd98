"""Attu (Milvus' web GUI) can manage kmilvus: tests/node/attu_replay.mjs makes the calls Attu's
server makes through the Node.js SDK (zilliztech/attu server/src: connect, collections, data,
search, index, partition, segment, user/role and system pages), in its order, with auth on; each
answer is checked for what Attu reads from it. Attu itself ships only as a Docker image
(docs/user-guide/clients.md)."""

from __future__ import annotations

import pytest
from pymilvus import MilvusClient

from tests.nodejs import failed_steps, run_script

ROOT_PW = "Attu-root-pw1"


@pytest.fixture
def authed(node_factory):
    return node_factory(auth=True, root_password=ROOT_PW)


def _ok(step: dict) -> bool:
    status = step.get("status", step)
    return status.get("error_code") == "Success"


def test_attu_replay(authed):
    rec = run_script("attu_replay.mjs", authed.uri.removeprefix("http://"), "", "root", ROOT_PW)
    assert not failed_steps(rec), failed_steps(rec)
    v = {k: s["value"] for k, s in rec.items()}
    bad = {k: x for k, x in v.items() if isinstance(x, dict) and ("status" in x or "error_code" in x) and not _ok(x)}
    assert not bad, bad
    assert v["connect"] == 1 and v["checkHealth"]["isHealthy"] is True
    # Collections page: a loaded collection is listed as loaded at 100 % (Attu's LOADED state).
    loaded = v["showLoadedCollections"]["data"]
    assert [(c["name"], c["loadedPercentage"]) for c in loaded] == [("attu_coll", "100")]
    assert v["getLoadState"]["state"] == "LoadStateLoaded" and v["count"]["data"] == 30
    replica = v["getReplicas"]["replicas"][0]
    assert replica["resource_group_name"] == "__default_resource_group" and replica["shard_replicas"]
    # Segment page: sealed segments as the QueryNodes serve them, and as DataCoord keeps them.
    q = v["getQuerySegmentInfo"]["infos"]
    assert sum(int(s["num_rows"]) for s in q) == 30 and q[0]["index_name"] == "vec" and q[0]["state"] == "Sealed"
    assert {s["segmentID"] for s in q} == {s["segmentID"] for s in v["getPersistentSegmentInfo"]["infos"]}
    # System page: Milvus' topology JSON (Attu's parseJson): coordinators and the Proxy as nodes,
    # each worker as a child node joined to its coordinator by a "manage" edge.
    nodes = v["getMetric"]["response"]["nodes_info"]
    types = sorted(n["infos"]["type"] for n in nodes)
    assert types == ["datacoord", "datanode", "indexnode", "proxy", "querycoord", "querynode", "rootcoord"]
    by_id = {n["identifier"]: n for n in nodes}
    for n in nodes:
        infos = n["infos"]
        assert infos["has_error"] is False and infos["name"] == f"{infos['type']}{infos['id']}"
        assert infos["hardware_infos"]["memory"] > 0 and infos["hardware_infos"]["cpu_core_count"] > 0
        for edge in n["connected"] or []:
            assert by_id[edge["connected_identifier"]]["infos"]["type"] == edge["target_type"]
    proxy = next(n for n in nodes if n["infos"]["type"] == "proxy")
    assert sorted(e["target_type"] for e in proxy["connected"]) == ["datacoord", "querycoord", "rootcoord"]
    qc = next(n for n in nodes if n["infos"]["type"] == "querycoord")
    assert ("manage", "querynode") in {(e["type"], e["target_type"]) for e in qc["connected"]}
    dc = next(n for n in nodes if n["infos"]["type"] == "datacoord")
    managed = {(e["type"], e["target_type"]) for e in dc["connected"]}
    assert {("manage", "datanode"), ("manage", "indexnode")} <= managed
    rg = v["describeResourceGroup"]["resource_group"]
    assert v["listResourceGroups"]["resource_groups"] == ["__default_resource_group"]
    assert rg["num_available_node"] == 1 and rg["num_loaded_replica"] == {"attu_coll": 1}
    # User and role pages
    groups = {g["group_name"] for g in v["listPrivilegeGroups"]["privilege_groups"]}
    assert {"ClusterAdmin", "DatabaseReadOnly", "CollectionReadWrite"} <= groups
    assert {(g["object"]["name"], g["grantor"]["privilege"]["name"]) for g in v["listGrants"]["entities"]} == {
        ("Collection", "Insert"),
        ("Global", "attu_group"),
    }
    assert v["revokeAll"] == 0  # Attu's revokeAllRolePrivileges left no grant
    assert {r["role"]["name"] for r in v["listRoles"]["results"]} == {"admin", "public", "attu_role"}
    # Nothing is left behind, as pymilvus sees it.
    c = MilvusClient(uri=authed.uri, user="root", password=ROOT_PW)
    assert c.list_collections() == [] and c.list_users() == ["root"] and "attu_role" not in c.list_roles()


def test_get_metrics_requests_and_pymilvus_views(node, client):
    """GetMetrics answers system_info only (Milvus: 1200 metric not found for another type);
    pymilvus' list_loaded_segments / resource groups read what Attu reads."""
    import grpc
    from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        other = stub.GetMetrics(milvus_pb2.GetMetricsRequest(request='{"metric_type": "system_log"}'))
        assert (other.status.code, other.status.reason) == (1200, "metric not found[metric=system_log]")
        bad = stub.GetMetrics(milvus_pb2.GetMetricsRequest(request="not json"))
        assert bad.status.code == 1100
        ok = stub.GetMetrics(milvus_pb2.GetMetricsRequest(request='{"metric_type": "system_info"}'))
        assert ok.status.code == 0 and ok.component_name.startswith("proxy")
    client.create_collection("segs", dimension=4)  # quick setup: indexed and loaded
    client.insert("segs", [{"id": i, "vector": [float(i)] * 4} for i in range(10)])
    client.flush("segs")
    client.release_collection("segs")
    client.load_collection("segs")
    segs = client.list_loaded_segments("segs")
    assert sum(s.num_rows for s in segs) == 10
    assert client.list_resource_groups() == ["__default_resource_group"]
    rg = client.describe_resource_group("__default_resource_group")
    assert rg.num_available_node == 1 and rg.num_loaded_replica == {"segs": 1}
