"""Milvus' RESTful API v2 on the Proxy, called as curl calls it (httpx, JSON bodies): every route,
the same data as gRPC (pymilvus) for the same operations, Milvus' error codes, auth on and off,
and pymilvus' bulk_writer.bulk_import with its files on S3 (moto)."""

from __future__ import annotations

import base64
import ssl
import uuid

import grpc
import httpx
import numpy as np
import pytest
from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from tests.system.test_security import certs  # noqa: F401 - the certificates fixture
from tests.util import wait_until

DIM = 8


@pytest.fixture
def rest(node):
    with httpx.Client(base_url=node.rest_uri + "/v2/vectordb", timeout=60) as c:
        yield c


def post(c: httpx.Client, path: str, body=None, expect_status: int = 200, **kw) -> dict:
    resp = c.post(path, json=body if body is not None else {}, **kw)
    assert resp.status_code == expect_status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    return resp.json()


def ok(c: httpx.Client, path: str, body=None, **kw):
    out = post(c, path, body, **kw)
    assert out["code"] == 0, out
    return out["data"]


def wait_loaded(c: httpx.Client, name: str, **body) -> None:
    """Loading is asynchronous: follow get_load_state until Loaded (as a client does)."""

    def state() -> dict:
        return ok(c, "/collections/get_load_state", {"collectionName": name, **body})

    wait_until(lambda: state()["loadState"] == "LoadStateLoaded", 60, 0.05, lambda: f"{name} loaded: {state()}")


def create_flat(c: httpx.Client, name: str, schema: dict, index: str) -> None:
    """A collection of `schema` with a FLAT L2 index on `vec`, Strong, created and loaded through REST."""
    body = {
        "collectionName": name,
        "schema": schema,
        "indexParams": [{"fieldName": "vec", "indexName": index, "metricType": "L2", "indexType": "FLAT"}],
        "params": {"consistencyLevel": "Strong"},
    }
    assert ok(c, "/collections/create", body) == {}
    wait_loaded(c, name)


def vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, DIM), dtype=np.float32)


def test_quick_setup_collection_routes(rest, node):
    client = MilvusClient(uri=node.uri)
    assert ok(rest, "/collections/create", {"collectionName": "quick", "dimension": DIM}) == {}
    assert ok(rest, "/collections/has", {"collectionName": "quick"}) == {"has": True}
    assert ok(rest, "/collections/has", {"collectionName": "nope"}) == {"has": False}
    assert ok(rest, "/collections/list", {}) == ["quick"] == client.list_collections()
    wait_loaded(rest, "quick")
    out = post(rest, "/collections/describe", {"collectionName": "quick"})
    assert out["code"] == 0 and out["message"] == ""
    d = out["data"]
    grpc_d = client.describe_collection("quick")
    assert d["collectionName"] == "quick" and d["collectionID"] == grpc_d["collection_id"]
    assert d["enableDynamicField"] is True and d["autoId"] is False
    assert [(f["name"], f["type"], f["primaryKey"]) for f in d["fields"]] == [
        ("id", "Int64", True),
        ("vector", "FloatVector", False),
    ]
    assert d["fields"][1]["params"] == [{"key": "dim", "value": str(DIM)}]
    assert d["indexes"] == [{"indexName": "vector", "fieldName": "vector", "metricType": "COSINE"}]
    assert d["load"] == "LoadStateLoaded" and d["shardsNum"] == 1 and d["consistencyLevel"] == "Bounded"
    assert ok(rest, "/collections/get_load_state", {"collectionName": "quick"}) == {
        "loadState": "LoadStateLoaded",
        "loadProgress": 100,
    }
    assert ok(rest, "/collections/get_stats", {"collectionName": "quick"}) == {"rowCount": 0}
    assert ok(rest, "/collections/release", {"collectionName": "quick"}) == {}
    assert ok(rest, "/collections/get_load_state", {"collectionName": "quick"}) == {"loadState": "LoadStateNotLoad"}
    assert ok(rest, "/collections/rename", {"collectionName": "quick", "newCollectionName": "quick2"}) == {}
    assert client.list_collections() == ["quick2"]
    assert ok(rest, "/collections/load", {"collectionName": "quick2"}) == {}
    wait_loaded(rest, "quick2")
    assert ok(rest, "/collections/drop", {"collectionName": "quick2"}) == {}
    assert client.list_collections() == []


SCHEMA = {
    "autoID": False,
    "enableDynamicField": True,
    "fields": [
        {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
        {"fieldName": "vec", "dataType": "FloatVector", "elementTypeParams": {"dim": DIM}},
        {"fieldName": "tag", "dataType": "VarChar", "elementTypeParams": {"max_length": 64}},
        {"fieldName": "score", "dataType": "Float"},
        {"fieldName": "meta", "dataType": "JSON"},
        {
            "fieldName": "nums",
            "dataType": "Array",
            "elementDataType": "Int64",
            "elementTypeParams": {"max_capacity": 4},
        },
    ],
}


def make_rows(ids, seed: int) -> list[dict]:
    vecs = vectors(len(ids), seed)
    return [
        {
            "id": int(i),
            "vec": vecs[k].tolist(),
            "tag": f"t{i % 3}",
            "score": float(np.float32(i / 7)),
            "meta": {"i": int(i), "even": i % 2 == 0},
            "nums": [int(i), int(i) + 1],
            "color": f"c{i % 5}",  # a dynamic key
        }
        for k, i in enumerate(ids)
    ]


def same_row(rest_row: dict, grpc_row: dict) -> None:
    """A row as REST answers it equals the row pymilvus reads (float32 compared as float32)."""
    assert set(rest_row) == set(grpc_row), (rest_row, grpc_row)
    for k, v in grpc_row.items():
        got = rest_row[k]
        if k == "meta":
            import json

            assert json.loads(got) == v  # Milvus' REST answers a JSON field as its JSON text
        elif isinstance(v, float):
            assert np.float32(got) == np.float32(v), (k, got, v)
        elif isinstance(v, list) and v and isinstance(v[0], float):
            assert np.array_equal(np.asarray(got, np.float32), np.asarray(v, np.float32)), k
        else:
            assert got == v, (k, got, v)


@pytest.fixture
def entities(rest, node):
    """A collection made through REST (schema, index params, Strong) holding rows inserted both
    ways: ids 0..39 through REST, 100..139 through pymilvus."""
    create_flat(rest, "ents", SCHEMA, "vec_idx")
    client = MilvusClient(uri=node.uri)
    out = ok(rest, "/entities/insert", {"collectionName": "ents", "data": make_rows(range(40), 1)})
    assert out == {"insertCount": 40, "insertIds": list(range(40))}
    res = client.insert("ents", make_rows(range(100, 140), 2))
    assert res["insert_count"] == 40
    return client


def test_entities_rest_and_grpc_answer_the_same(rest, entities):
    client = entities
    fields = ["id", "vec", "tag", "score", "meta", "nums", "color"]
    flt = "id in [1, 2, 3, 101, 102] or tag == 't1' and id > 130"
    rest_rows = ok(rest, "/entities/query", {"collectionName": "ents", "filter": flt, "outputFields": fields})
    grpc_rows = client.query("ents", filter=flt, output_fields=fields)
    assert len(rest_rows) == len(grpc_rows) > 5
    by_id = {r["id"]: r for r in rest_rows}
    for g in grpc_rows:
        same_row(by_id[g["id"]], dict(g))
    # get by primary key, a list and a single key
    got = ok(rest, "/entities/get", {"collectionName": "ents", "id": [3, 103], "outputFields": ["tag", "color"]})
    want = client.get("ents", ids=[3, 103], output_fields=["tag", "color"])
    assert sorted(got, key=lambda r: r["id"]) == sorted((dict(r) for r in want), key=lambda r: r["id"])
    assert ok(rest, "/entities/get", {"collectionName": "ents", "id": 7, "outputFields": ["tag"]}) == [
        {"id": 7, "tag": "t1"}
    ]
    # search: two queries, the same hits and distances both ways
    q = vectors(2, 9)
    rest_hits = ok(
        rest,
        "/entities/search",
        {
            "collectionName": "ents",
            "data": q.tolist(),
            "annsField": "vec",
            "limit": 5,
            "outputFields": ["tag"],
            "filter": "id != 0",
        },
    )
    grpc_hits = client.search(
        "ents", data=q.tolist(), anns_field="vec", limit=5, output_fields=["tag"], filter="id != 0"
    )
    flat = [h for hits in grpc_hits for h in hits]
    assert len(rest_hits) == len(flat) == 10
    for r, g in zip(rest_hits, flat, strict=True):
        assert r["id"] == g["id"] and r["tag"] == g["entity"]["tag"]
        assert np.float32(r["distance"]) == np.float32(g["distance"])
    # every field (the default outputFields, "*"), the dynamic keys spread into the row
    rest_all = ok(rest, "/entities/query", {"collectionName": "ents", "filter": "id in [4, 104]"})
    grpc_all = client.query("ents", filter="id in [4, 104]", output_fields=["*"])
    assert len(rest_all) == len(grpc_all) == 2
    by_id = {r["id"]: r for r in rest_all}
    for g in grpc_all:
        same_row(by_id[g["id"]], dict(g))
    # count(*) both ways
    count = ok(rest, "/entities/query", {"collectionName": "ents", "filter": "", "outputFields": ["count(*)"]})
    assert count == [{"count(*)": 80}] == [dict(r) for r in client.query("ents", output_fields=["count(*)"])]


def test_entities_upsert_delete(rest, entities):
    client = entities
    rows = make_rows([5, 6, 200], 3)
    rows[0]["tag"] = "changed"
    out = ok(rest, "/entities/upsert", {"collectionName": "ents", "data": rows})
    assert out == {"upsertCount": 3, "upsertIds": [5, 6, 200]}
    assert client.get("ents", ids=[5], output_fields=["tag"])[0]["tag"] == "changed"
    assert ok(rest, "/entities/delete", {"collectionName": "ents", "filter": "id in [5, 6, 105]"}) == {"deleteCount": 3}
    assert client.get("ents", ids=[5, 6, 105]) == []
    left = ok(rest, "/entities/query", {"collectionName": "ents", "outputFields": ["count(*)"]})
    assert left == [{"count(*)": 78}]
    # ids as strings when the client cannot take int64 numbers
    got = ok(
        rest,
        "/entities/get",
        {"collectionName": "ents", "id": ["7"], "outputFields": ["id"]},
        headers={"Accept-Type-Allow-Int64": "false"},
    )
    assert got == [{"id": "7"}]


def test_flush_and_compaction_routes(rest, entities):
    """collections/flush answers once flushed (Milvus' waitForFlush); compact and
    get_compaction_state answer as gRPC; a compaction nobody started is Completed, as in Milvus."""
    client = entities
    assert ok(rest, "/collections/flush", {"collectionName": "ents"}) == {}
    assert client.get_collection_stats("ents")["row_count"] == 80
    job = ok(rest, "/collections/compact", {"collectionName": "ents"})["compactionID"]
    assert job > 0
    state = ok(rest, "/collections/get_compaction_state", {"jobID": job})
    assert state["compactionID"] == job and state["state"] in ("Executing", "Completed")
    unknown = ok(rest, "/collections/get_compaction_state", {"jobID": 12345})
    assert unknown["state"] == "Completed" == client.get_compaction_state(12345)
    refused = post(rest, "/collections/compact", {"collectionName": "ents", "isClustering": True})
    assert refused["code"] == 1100 and "mix compaction" in refused["message"]


def test_partitions_indexes_aliases(rest, entities):
    client = entities
    c = {"collectionName": "ents"}
    assert ok(rest, "/partitions/create", {**c, "partitionName": "p1"}) == {}
    assert ok(rest, "/partitions/list", c) == ["_default", "p1"] == client.list_partitions("ents")
    assert ok(rest, "/partitions/has", {**c, "partitionName": "p1"}) == {"has": True}
    assert ok(rest, "/partitions/has", {**c, "partitionName": "p9"}) == {"has": False}
    ok(rest, "/entities/insert", {**c, "partitionName": "p1", "data": make_rows(range(300, 305), 4)})
    client.flush("ents")
    assert ok(rest, "/partitions/get_stats", {**c, "partitionName": "p1"}) == {"rowCount": 5}
    assert ok(rest, "/collections/get_stats", c) == {"rowCount": client.get_collection_stats("ents")["row_count"]}
    assert ok(rest, "/partitions/release", {**c, "partitionNames": ["p1"]}) == {}
    assert ok(rest, "/partitions/load", {**c, "partitionNames": ["p1"]}) == {}
    wait_loaded(rest, "ents", partitionNames=["p1"])
    rows = ok(rest, "/entities/query", {**c, "partitionNames": ["p1"], "outputFields": ["count(*)"]})
    assert rows == [{"count(*)": 5}]
    ok(rest, "/partitions/release", {**c, "partitionNames": ["p1"]})
    assert ok(rest, "/partitions/drop", {**c, "partitionName": "p1"}) == {}
    assert not client.has_partition("ents", "p1")

    assert ok(rest, "/indexes/list", c) == ["vec_idx"]
    (idx,) = ok(rest, "/indexes/describe", {**c, "indexName": "vec_idx"})
    assert idx["fieldName"] == "vec" and idx["indexType"] == "FLAT" and idx["metricType"] == "L2"
    assert idx["indexState"] in ("Finished", "InProgress", "Unissued") and "totalRows" in idx
    assert client.describe_index("ents", "vec_idx")["index_type"] == "FLAT"
    ok(rest, "/collections/release", c)
    assert ok(rest, "/indexes/drop", {**c, "indexName": "vec_idx"}) == {}
    assert ok(rest, "/indexes/list", c) == [] == client.list_indexes("ents")
    ok(
        rest,
        "/indexes/create",
        {
            **c,
            "indexParams": [
                {
                    "fieldName": "vec",
                    "indexName": "v2",
                    "metricType": "IP",
                    "indexType": "HNSW",
                    "params": {"M": 8, "efConstruction": 32},
                }
            ],
        },
    )
    assert client.describe_index("ents", "v2")["metric_type"] == "IP"

    assert ok(rest, "/aliases/create", {**c, "aliasName": "a1"}) == {}
    assert ok(rest, "/aliases/list", {}) == ["a1"] == client.list_aliases()["aliases"]
    assert ok(rest, "/aliases/describe", {"aliasName": "a1"}) == {
        "dbName": "default",
        "collectionName": "ents",
        "aliasName": "a1",
    }
    ok(rest, "/collections/create", {"collectionName": "other", "dimension": DIM})
    assert ok(rest, "/aliases/alter", {"collectionName": "other", "aliasName": "a1"}) == {}
    assert client.describe_alias("a1")["collection_name"] == "other"
    assert ok(rest, "/aliases/drop", {"aliasName": "a1"}) == {}
    assert ok(rest, "/aliases/list", {}) == []


def test_databases_by_body_and_header(rest, node):
    client = MilvusClient(uri=node.uri)
    assert ok(rest, "/databases/create", {"dbName": "db1"}) == {}
    assert sorted(ok(rest, "/databases/list", {})) == ["db1", "default"] == sorted(client.list_databases())
    d = ok(rest, "/databases/describe", {"dbName": "db1"})
    assert d["dbName"] == "db1" and d["dbID"] > 0 and isinstance(d["properties"], list)
    ok(rest, "/databases/alter", {"dbName": "db1", "properties": {"database.max.collections": 5}})
    assert client.describe_database("db1")["database.max.collections"] == "5"
    ok(rest, "/collections/create", {"dbName": "db1", "collectionName": "in_db1", "dimension": DIM})
    # the database from the body, else from the DB-Name header; never another one
    assert ok(rest, "/collections/list", {"dbName": "db1"}) == ["in_db1"]
    assert ok(rest, "/collections/list", {}, headers={"DB-Name": "db1"}) == ["in_db1"]
    assert ok(rest, "/collections/list", {}) == []
    client.use_database("db1")
    assert client.list_collections() == ["in_db1"]
    ok(rest, "/collections/drop", {"collectionName": "in_db1"}, headers={"DB-Name": "db1"})
    assert ok(rest, "/databases/drop", {"dbName": "db1"}) == {}
    gone = post(rest, "/collections/list", {"dbName": "db1"})
    assert gone["code"] == 800 and "database not found" in gone["message"]


def test_errors_with_milvus_codes(rest, entities):
    # bodies Milvus' binding refuses: 1801 (not the struct), 1802 (a required field empty)
    assert post(rest, "/collections/has", {})["code"] == 1802
    out = post(rest, "/collections/has", {"collectionName": ""})
    assert out == {
        "code": 1802,
        "message": "missing required parameters, error: Key: 'CollectionNameReq.CollectionName' "
        "Error:Field validation for 'CollectionName' failed on the 'required' tag",
    }
    bad = rest.post("/collections/has", content=b"not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 200 and bad.json()["code"] == 1801
    empty = rest.post("/collections/has", content=b"")
    assert empty.json()["code"] == 1801 and "the request body should be nil" in empty.json()["message"]
    assert post(rest, "/entities/query", {"collectionName": "ents", "limit": "10"})["code"] == 1801
    # the Proxy's own errors, as gRPC answers them
    out = post(rest, "/collections/describe", {"collectionName": "missing"})
    assert out["code"] == 100 and "collection not found" in out["message"]
    with pytest.raises(MilvusException) as grpc_err:
        entities.describe_collection("missing")
    assert grpc_err.value.code == 100
    out = post(rest, "/collections/get_load_state", {"collectionName": "missing"})
    assert out["code"] == 100
    out = post(rest, "/entities/query", {"collectionName": "ents", "filter": "id >>> 1"})
    assert out["code"] != 0
    with pytest.raises(MilvusException) as grpc_err:
        entities.query("ents", filter="id >>> 1")
    assert out["code"] == grpc_err.value.code and out["message"] == grpc_err.value.message
    # rows and vectors the REST layer refuses
    row = make_rows([900], 5)[0]
    out = post(rest, "/entities/insert", {"collectionName": "ents", "data": [{**row, "vec": [0.1, 0.2]}]})
    assert out["code"] == 1804 and "fail to deal the insert data" in out["message"]
    out = post(
        rest, "/entities/insert", {"collectionName": "ents", "data": [{k: v for k, v in row.items() if k != "tag"}]}
    )
    assert out["code"] == 1804 and "does not has field tag" in out["message"]
    out = post(rest, "/entities/search", {"collectionName": "ents", "data": [[0.1, 0.2]], "annsField": "vec"})
    assert out["code"] == 1801 and "dimension: 8, but length of []float: 2" in out["message"]
    out = post(rest, "/entities/search", {"collectionName": "ents", "data": [[0.0] * DIM], "consistencyLevel": "Now"})
    assert out["code"] == 1100
    out = post(rest, "/entities/get", {"collectionName": "ents", "id": ["x"]})
    assert out["code"] == 1806
    out = post(rest, "/collections/create", {"collectionName": "q"})
    assert out["code"] == 1100 and "dimension is required" in out["message"]
    out = post(
        rest,
        "/collections/create",
        {"collectionName": "q", "schema": {"fields": [{"fieldName": "id", "dataType": "int64", "isPrimary": True}]}},
    )
    assert out["code"] == 1100 and "is invalid(case sensitive)" in out["message"]
    # a Request-Timeout that has passed: 408, Milvus' timeout code
    out = post(
        rest,
        "/entities/insert",
        {"collectionName": "ents", "data": make_rows([901], 6)},
        expect_status=408,
        headers={"Request-Timeout": "0"},
    )
    assert out == {"code": 10001, "message": "request timeout"}
    assert rest.post("/collections/nosuch", json={}).status_code == 404


def test_hybrid_search_answers_as_grpc(rest, entities):
    """entities/hybrid_search reaches the Proxy's HybridSearch: the same hits as pymilvus'
    hybrid_search, or the same refusal while the Proxy does not build it."""
    from pymilvus import AnnSearchRequest, RRFRanker

    q = vectors(1, 11).tolist()
    body = {
        "collectionName": "ents",
        "search": [
            {"data": q, "annsField": "vec", "limit": 5},
            {"data": q, "annsField": "vec", "limit": 5, "filter": "id > 10"},
        ],
        "rerank": {"strategy": "rrf", "params": {"k": 60}},
        "limit": 4,
        "outputFields": ["tag"],
    }
    out = post(rest, "/entities/hybrid_search", body)
    reqs = [AnnSearchRequest(q, "vec", {}, 5), AnnSearchRequest(q, "vec", {}, 5, expr="id > 10")]
    try:
        grpc_hits = entities.hybrid_search("ents", reqs, RRFRanker(60), limit=4, output_fields=["tag"])[0]
    except grpc.RpcError as exc:  # not built yet: REST answers what gRPC answers
        assert exc.code() == grpc.StatusCode.UNIMPLEMENTED
        assert out == {"code": 65535, "message": f"rpc error: code = Unimplemented desc = {exc.details()}"}
        return
    assert out["code"] == 0
    assert [(r["id"], r["tag"]) for r in out["data"]] == [(h["id"], h["entity"]["tag"]) for h in grpc_hits]
    assert post(rest, "/entities/advanced_search", body)["data"] == out["data"]


ROOT_PW = "Root-pw-123"


@pytest.fixture
def authed(node_factory):
    n = node_factory(auth=True, root_password=ROOT_PW)
    with httpx.Client(base_url=n.rest_uri + "/v2/vectordb", timeout=60) as c:
        yield n, c


def bearer(user: str, password: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user}:{password}"}


def test_auth_users_roles_privileges(authed):
    n, rest = authed
    root = bearer("root", ROOT_PW)
    # no credentials, wrong ones: 401 and Milvus' 1800
    for headers in ({}, bearer("root", "wrong"), {"Authorization": "Bearer nocolon"}):
        out = post(rest, "/collections/list", {}, expect_status=401, headers=headers)
        assert out == {"code": 1800, "message": "user hasn't authenticated"}
    basic = "Basic " + base64.b64encode(f"root:{ROOT_PW}".encode()).decode()
    assert ok(rest, "/collections/list", {}, headers={"Authorization": basic}) == []
    # users and roles
    assert ok(rest, "/users/create", {"userName": "alice", "password": "alice-pw-1"}, headers=root) == {}
    assert sorted(ok(rest, "/users/list", {}, headers=root)) == ["alice", "root"]
    assert ok(rest, "/roles/create", {"roleName": "reader"}, headers=root) == {}
    assert sorted(ok(rest, "/roles/list", {}, headers=root)) == ["admin", "public", "reader"]
    assert ok(rest, "/users/grant_role", {"userName": "alice", "roleName": "reader"}, headers=root) == {}
    assert ok(rest, "/users/describe", {"userName": "alice"}, headers=root) == ["reader"]
    ok(rest, "/collections/create", {"collectionName": "guarded", "dimension": DIM}, headers=root)
    alice = bearer("alice", "alice-pw-1")
    # alice may not query before the grant: 403 with the Proxy's refusal text
    out = post(
        rest, "/entities/query", {"collectionName": "guarded", "filter": "id > 0"}, expect_status=403, headers=alice
    )
    assert out["code"] == 65535 and "PrivilegeQuery: permission deny to alice" in out["message"]
    grant = {"roleName": "reader", "objectType": "Collection", "objectName": "guarded", "privilege": "Query"}
    assert ok(rest, "/roles/grant_privilege", grant, headers=root) == {}
    assert ok(rest, "/roles/describe", {"roleName": "reader"}, headers=root) == [
        {
            "objectType": "Collection",
            "objectName": "guarded",
            "privilege": "Query",
            "dbName": "default",
            "grantor": "root",
        }
    ]
    assert ok(rest, "/entities/query", {"collectionName": "guarded", "filter": "id > 0"}, headers=alice) == []
    # the same refusal through gRPC for what REST refuses
    grpc_alice = MilvusClient(uri=n.uri, token="alice:alice-pw-1")
    with pytest.raises(grpc.RpcError) as refused:
        grpc_alice.drop_collection("guarded")
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    out = post(rest, "/collections/drop", {"collectionName": "guarded"}, expect_status=403, headers=alice)
    assert out == {"code": 65535, "message": refused.value.details()}
    assert ok(rest, "/roles/revoke_privilege", grant, headers=root) == {}
    post(rest, "/entities/query", {"collectionName": "guarded", "filter": "id > 0"}, expect_status=403, headers=alice)
    assert (
        ok(
            rest,
            "/users/update_password",
            {"userName": "alice", "password": "alice-pw-1", "newPassword": "alice-pw-2"},
            headers=root,
        )
        == {}
    )
    post(rest, "/collections/list", {}, expect_status=401, headers=alice)
    assert ok(rest, "/collections/list", {}, headers=bearer("alice", "alice-pw-2")) == ["guarded"]
    assert ok(rest, "/users/revoke_role", {"userName": "alice", "roleName": "reader"}, headers=root) == {}
    assert ok(rest, "/users/describe", {"userName": "alice"}, headers=root) == []
    assert ok(rest, "/roles/drop", {"roleName": "reader"}, headers=root) == {}
    assert ok(rest, "/users/drop", {"userName": "alice"}, headers=root) == {}
    assert ok(rest, "/users/list", {}, headers=root) == ["root"]


def test_pymilvus_bulk_import_from_s3(node_factory, moto_endpoint):
    """pymilvus' bulk_writer writes Parquet files to S3 (moto) and imports them through the
    RESTful API's jobs/import routes: create, describe (get_import_progress), list."""
    import boto3
    from pymilvus import CollectionSchema, FieldSchema
    from pymilvus import DataType as PDT
    from pymilvus.bulk_writer import (
        BulkFileType,
        RemoteBulkWriter,
        bulk_import,
        get_import_progress,
        list_import_jobs,
    )

    bucket = f"imp-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    n = node_factory(storage_uri=f"s3://{bucket}?endpoint={moto_endpoint}&region=us-east-1")
    with httpx.Client(base_url=n.rest_uri + "/v2/vectordb", timeout=60) as rest:
        schema = {
            "fields": [
                {"fieldName": "id", "dataType": "Int64", "isPrimary": True},
                {"fieldName": "vec", "dataType": "FloatVector", "elementTypeParams": {"dim": DIM}},
                {"fieldName": "tag", "dataType": "VarChar", "elementTypeParams": {"max_length": 16}},
            ]
        }
        create_flat(rest, "imp", schema, "v")
        py_schema = CollectionSchema(
            [
                FieldSchema("id", PDT.INT64, is_primary=True),
                FieldSchema("vec", PDT.FLOAT_VECTOR, dim=DIM),
                FieldSchema("tag", PDT.VARCHAR, max_length=16),
            ]
        )
        conn = RemoteBulkWriter.S3ConnectParam(
            endpoint=moto_endpoint.removeprefix("http://"),
            access_key="testing",
            secret_key="testing",
            bucket_name=bucket,
            secure=False,
        )
        vecs = vectors(500, 21)
        with RemoteBulkWriter(py_schema, "bulk", conn, file_type=BulkFileType.PARQUET) as writer:
            for i in range(500):
                writer.append_row({"id": i, "vec": vecs[i].tolist(), "tag": f"t{i % 4}"})
            writer.commit()
            files = writer.batch_files
        assert files and all(len(f) == 1 for f in files)

        resp = bulk_import(url=n.rest_uri, collection_name="imp", files=files, api_key="")
        job = resp.json()["data"]["jobId"]
        assert isinstance(job, str) and int(job) > 0

        def completed() -> dict | None:
            progress = get_import_progress(url=n.rest_uri, job_id=job).json()["data"]
            assert progress["state"] != "Failed", progress
            return progress if progress["state"] == "Completed" else None

        progress = wait_until(completed, 180, 0.2, "the import completed")
        assert progress["progress"] == 100 and progress["collectionName"] == "imp"
        assert progress["importedRows"] == 500 and progress["totalRows"] == 500
        assert [d["fileName"] for d in progress["details"]] == [f[0] for f in files]
        records = list_import_jobs(url=n.rest_uri, collection_name="imp").json()["data"]["records"]
        assert [(r["jobId"], r["state"], r["progress"]) for r in records] == [(job, "Completed", 100)]

        # the imported rows are served: query until the loaded collection has them
        def count() -> list:
            return ok(rest, "/entities/query", {"collectionName": "imp", "outputFields": ["count(*)"]})

        wait_until(lambda: count() == [{"count(*)": 500}], 180, 0.2, lambda: f"the rows served: {count()}")
        got = ok(rest, "/entities/get", {"collectionName": "imp", "id": [7], "outputFields": ["tag", "vec"]})
        assert got[0]["tag"] == "t3" and np.array_equal(np.asarray(got[0]["vec"], np.float32), vecs[7])
        # an unknown job, a job ID that is no number: Milvus' import error (2100)
        out = post(rest, "/jobs/import/get_progress", {"jobId": "123456789"})
        assert out["code"] == 2100
        out = post(rest, "/jobs/import/describe", {"jobId": "abc"})
        assert out["code"] == 2100 and "parse job id failed" in out["message"]
        out = post(rest, "/jobs/import/create", {"collectionName": "imp", "files": [["a.npy", "b.npy"]]})
        assert out["code"] == 2100


def _tls(certs) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certs["ca"])


def test_tls_one_way(node_factory, certs):
    """With the Milvus API's TLS settings the RESTful API is HTTPS, with the same certificate."""
    n = node_factory(tls_cert=certs["server_crt"], tls_key=certs["server_key"])
    base = f"https://localhost:{n.node.http_port}/v2/vectordb"
    with httpx.Client(base_url=base, verify=_tls(certs), timeout=30) as c:
        assert ok(c, "/collections/list", {}) == []
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port is no conversation
        httpx.post(f"http://localhost:{n.node.http_port}/v2/vectordb/collections/list", json={}, timeout=10).json()


def test_tls_mutual(node_factory, certs):
    """Mutual TLS: a client certificate the CA signed is required, as on the gRPC port."""
    n = node_factory(tls_cert=certs["server_crt"], tls_key=certs["server_key"], tls_ca=certs["ca"])
    base = f"https://localhost:{n.node.http_port}/v2/vectordb"
    with httpx.Client(base_url=base, verify=_tls(certs), timeout=30) as c, pytest.raises(httpx.HTTPError):
        c.post("/collections/list", json={})
    signed = _tls(certs)
    signed.load_cert_chain(certs["client_crt"], certs["client_key"])
    with httpx.Client(base_url=base, verify=signed, timeout=30) as c:
        assert ok(c, "/collections/list", {}) == []
