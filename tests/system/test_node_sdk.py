"""Milvus' Node.js SDK (`@zilliz/milvus2-sdk-node` 3.x, pinned in tests/node/package-lock.json)
against kmilvus, unchanged: each script in tests/node/ drives one area and prints what the SDK
saw; these tests check it against what was written and against pymilvus' view of the same data.
The differences found are listed in docs/user-guide/clients.md."""

from __future__ import annotations

from tests.nodejs import failed_steps, run_script, sdk_version


def _address(node) -> str:
    return node.uri.removeprefix("http://")


def test_the_pinned_sdk_is_3x():
    assert sdk_version().startswith("3."), sdk_version()


def test_grpc_data_path(node, client):
    rec = run_script("grpc_crud.mjs", _address(node))
    assert not failed_steps(rec), failed_steps(rec)
    v = {k: s["value"] for k, s in rec.items()}
    # Every answer carries its status, as Milvus' do: the SDK reads `status.error_code`.
    for name in ("describe", "insert", "search", "query", "get", "loadState", "stats"):
        assert v[name]["status"]["error_code"] == "Success", (name, v[name])
    assert v["has"]["value"] is True and v["hasAfterDrop"]["value"] is False
    assert [f["name"] for f in v["describe"]["schema"]["fields"]] == ["id", "vec", "tag"]
    assert v["insert"]["insert_cnt"] == "20"
    assert v["stats"]["data"]["row_count"] == "20"
    assert v["describeIndex"]["index_descriptions"][0]["field_name"] == "vec"
    assert v["loadState"]["state"] == "LoadStateLoaded"
    hits = v["search"]["results"]  # output fields `*`, the SDK's default: the key and every field
    assert hits[0] == {"score": 0, "id": "5", "vec": [5, 6, 7, 8], "tag": "t2"}
    assert {h["id"] for h in hits[1:]} == {"4", "6"} and [h["score"] for h in hits] == [0, 4, 4]
    # Without the key among the output fields Milvus leaves it out, and so the SDK shows no id.
    assert [sorted(h) for h in v["searchTagOnly"]["results"]] == [["score", "tag"]] * 3
    assert sorted(int(row["id"]) for row in v["query"]["data"]) == [0, 1, 2]
    row0 = next(r for r in v["query"]["data"] if int(r["id"]) == 0)
    assert row0["tag"] == "t0" and row0["vec"] == [0, 1, 2, 3]
    assert sorted((int(r["id"]), r["tag"]) for r in v["get"]["data"]) == [(4, "t1"), (5, "t2")]
    assert int(v["count"]["data"]) == 20
    assert v["delete"]["delete_cnt"] == "2"
    assert sorted(int(r["id"]) for r in v["queryAfterDelete"]["data"]) == [0, 3]
    assert v["queryAfterUpsert"]["data"][0]["tag"] == "up"
    # pymilvus on the same server sees what Node left: nothing.
    assert not client.has_collection("node_crud")


def test_grpc_partitions_aliases_databases_users(node, client):
    rec = run_script("grpc_admin.mjs", _address(node))
    assert not failed_steps(rec), failed_steps(rec)
    v = {k: s["value"] for k, s in rec.items()}
    for name, step in v.items():  # every answer is a success with its status present
        status = step.get("status", step)
        assert status.get("error_code") == "Success", (name, step)
    assert v["listPartitions"]["partition_names"] == ["_default", "p1"] and v["hasPartition"]["value"] is True
    assert v["partitionStats"]["data"]["row_count"] == "2"
    assert sorted(int(r["id"]) for r in v["queryP1"]["data"]) == [1, 2]
    assert v["listPartitionsAfterDrop"]["partition_names"] == ["_default"]
    assert v["describeAlias"]["collection"] == "node_admin" and v["listAliases"]["aliases"] == ["node_alias"]
    assert v["describeByAlias"]["schema"]["name"] == "node_admin"
    assert "node_db" in v["listDatabases"]["db_names"] and v["describeDatabase"]["db_name"] == "node_db"
    assert v["showInDb"]["collection_names"] == ["in_db"] and v["showAfterUse"]["collection_names"] == ["in_db"]
    assert v["showDefault"]["collection_names"] == ["node_admin"]
    assert "node_user" in v["listUsers"]["usernames"] and v["hasRole"]["hasRole"] is True
    # Milvus' built-in roles exist with auth off too (its RootCoord's initRbac always runs).
    assert {r["role"]["name"] for r in v["listRoles"]["results"]} == {"admin", "public", "node_role"}
    assert [r["name"] for r in v["selectUser"]["results"][0]["roles"]] == ["node_role"]
    # The SDK's listGrants asks for database `*`: every database's grants, as Milvus answers.
    grants = v["listGrants"]["entities"]
    assert [(g["object"]["name"], g["object_name"], g["grantor"]["privilege"]["name"]) for g in grants] == [
        ("Collection", "node_admin", "Search")
    ]
    assert grants[0]["db_name"] == "default"
    # pymilvus sees what the SDK left behind: nothing.
    assert "node_admin" not in client.list_collections() and "node_db" not in client.list_databases()
    assert "node_user" not in client.list_users() and "node_role" not in client.list_roles()


def test_http_client_on_the_restful_api(node, client):
    rec = run_script("http_client.mjs", _address(node), node.rest_uri)
    assert not failed_steps(rec), failed_steps(rec)
    v = {k: s["value"] for k, s in rec.items()}
    for name, body in v.items():
        assert body["code"] == 0, (name, body)
    assert v["hasCollection"]["data"] == {"has": True} and v["hasAfterDrop"]["data"] == {"has": False}
    assert [f["name"] for f in v["describeCollection"]["data"]["fields"]] == ["id", "vec", "tag"]
    assert v["insert"]["data"]["insertCount"] == 10
    assert v["stats"]["data"] == {"rowCount": 10}  # collections/flush waited until flushed
    assert v["loadState"]["data"]["loadState"] == "LoadStateLoaded"
    assert v["listIndexes"]["data"] == ["vec_idx"] and v["describeIndex"]["data"][0]["indexType"] == "FLAT"
    assert v["search"]["data"] == [{"id": "2", "tag": "t0", "distance": 0}, {"id": "1", "tag": "t1", "distance": 4}]
    assert v["query"]["data"] == [{"id": str(i), "tag": f"t{i % 2}"} for i in range(3)]
    assert v["get"]["data"] == [{"id": "7", "tag": "t1"}, {"id": "8", "tag": "t0"}]
    assert v["delete"]["data"] == {"deleteCount": 2}
    assert v["queryAfter"]["data"] == [{"id": "0", "tag": "t0"}, {"id": "1", "tag": "up"}]
    assert v["listPartitions"]["data"] == ["_default", "hp"] and v["hasPartition"]["data"] == {"has": True}
    assert v["describeAlias"]["data"]["collectionName"] == "node_http"
    assert "node_http_db" in v["listDatabases"]["data"]
    assert v["describeRole"]["data"][0]["privilege"] == "Search"
    assert v["describeUser"]["data"] == ["node_http_role"]
    assert v["compact"]["data"]["compactionID"] > 0
    assert sorted(v["compactionState"]["data"]) == [
        "compactionID",
        "completedPlanNumber",
        "executingPlanNumber",
        "state",
        "timeoutPlanNumber",
    ]
    assert "node_http" not in client.list_collections()
