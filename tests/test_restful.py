"""Milvus' RESTful API v2 on the Proxy, called as curl calls it (httpx, JSON bodies): every route,
the same data as gRPC (pymilvus) for the same operations, Milvus' error codes, auth on and off,
and pymilvus' bulk_writer.bulk_import with its files on S3 (moto)."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from pymilvus import MilvusClient

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
    deadline = time.monotonic() + 60
    while True:
        data = ok(c, "/collections/get_load_state", {"collectionName": name, **body})
        if data["loadState"] == "LoadStateLoaded":
            return
        assert time.monotonic() < deadline, data
        time.sleep(0.05)


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
