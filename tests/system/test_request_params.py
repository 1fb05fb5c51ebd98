"""The audit of every search, hybrid search and query parameter pymilvus can send: each one is
honoured (and a test shows it) or refused with Milvus' code — none is dropped silently.

The lists are read from the installed pymilvus itself (its request messages' fields, and the keys
its `Prepare` functions write into search / rank / query params), so a parameter a later pymilvus
adds fails this test until the Proxy classifies it (kmilvus/proxy/search_util.py)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import grpc
import pytest
from pymilvus import DataType, MilvusClient, RRFRanker, WeightedRanker
from pymilvus.client import constants, prepare
from pymilvus.client.prepare import Prepare
from pymilvus.grpc_gen import common_pb2, milvus_pb2, milvus_pb2_grpc

from kmilvus.proxy import search_util as su

TESTS = Path(__file__).resolve().parent
DIM = 4

# Where each honoured parameter's behaviour is shown (the file must mention the key).
HONOURED_BY = {
    "topk": "test_search.py",
    "offset": "test_search.py",
    "round_decimal": "test_search.py",
    "ignore_growing": "test_request_params.py",
    "metric_type": "test_search.py",
    "anns_field": "test_hybrid_search.py",
    "params": "test_search.py",
    "hints": "test_request_params.py",
    "group_by_field": "test_search_groupby.py",
    "group_size": "test_search_groupby.py",
    "strict_group_size": "test_search_groupby.py",
    "iterator": "test_iterators.py",
    "collection_id": "test_request_params.py",
    "search_iter_v2": "test_iterators.py",
    "search_iter_batch_size": "test_iterators.py",
    "search_iter_last_bound": "test_iterators.py",
    "search_iter_id": "test_iterators.py",
    "limit": "test_query.py",
    "reduce_stop_for_best": "test_iterators.py",
    "strategy": "test_hybrid_search.py",
    "rank_group_scorer": "test_request_params.py",
    "radius": "test_hybrid_search.py",
    "range_filter": "test_hybrid_search.py",
    "page_retain_order": "test_request_params.py",
    "order_by_fields": "test_query.py",
}
# What a honoured key is named in the test that shows it, when not by itself.
SPELLED = {
    "topk": "limit=",
    "search_iter_v2": "SearchIteratorV2",
    "search_iter_batch_size": "batch_size",
    "search_iter_last_bound": "search_iterator",
    "search_iter_id": "search_iterator",
    "reduce_stop_for_best": "query_iterator",
    "iterator": "iterator",
    "strategy": "RRFRanker",
    "params": "search_params",
    "metric_type": "metric_type",
}


def _constant(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        value = getattr(constants, node.id, None)
        return value if isinstance(value, str) else None
    return None


def _keys_written(fn) -> set[str]:
    """Keys a pymilvus Prepare function puts into a request's params: `x[KEY] = ...` on a params
    dict, dict literals assigned to one, `KeyValuePair(key=KEY, ...)`, and `for k in (A, B)`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    keys: set[str] = set()
    dict_names = {"search_params", "rerank_param", "params", "search_param"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in dict_names:
                    k = _constant(t.slice)
                    if k:
                        keys.add(k)
                if isinstance(t, ast.Name) and t.id in dict_names and isinstance(node.value, ast.Dict):
                    keys.update(k for k in map(_constant, node.value.keys) if k)
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "KeyValuePair":
                for kw in node.keywords:
                    if kw.arg == "key":
                        k = _constant(kw.value)
                        if k:
                            keys.add(k)
        elif isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            keys.update(k for k in map(_constant, node.iter.elts) if k)
    return keys


def pymilvus_search_keys() -> set[str]:
    return _keys_written(Prepare.search_requests_with_expr)


def pymilvus_rank_keys() -> set[str]:
    keys = _keys_written(Prepare.hybrid_search_request_with_ranker)
    for ranker in (RRFRanker(), WeightedRanker(1.0)):
        keys |= set(ranker.dict())
    return keys


def pymilvus_query_keys() -> set[str]:
    return _keys_written(Prepare.query_request)


def test_pymilvus_is_read():
    """The extraction finds what pymilvus 3.0 is known to send (a sanity check of the reader)."""
    assert {"topk", "group_by_field", "search_iter_v2", "hints", "params", "order_by_fields"} <= pymilvus_search_keys()
    assert {"strategy", "limit", "rank_group_scorer", "group_size"} <= pymilvus_rank_keys()
    assert {"limit", "iterator", "reduce_stop_for_best", "ignore_growing"} <= pymilvus_query_keys()
    assert prepare.__file__.endswith("prepare.py")


@pytest.mark.parametrize(
    ("keys", "honoured", "refused"),
    [
        (pymilvus_search_keys, su.SEARCH_HONOURED | su.SEARCH_PARAMS_HONOURED, su.SEARCH_REFUSED),
        (pymilvus_rank_keys, su.RANK_HONOURED, su.RANK_REFUSED),
        (pymilvus_query_keys, su.QUERY_HONOURED, su.QUERY_REFUSED),
    ],
)
def test_every_key_pymilvus_sends_is_classified(keys, honoured, refused):
    missing = keys() - set(honoured) - set(refused)
    assert not missing, f"pymilvus sends keys kmilvus has not classified: {sorted(missing)}"


@pytest.mark.parametrize(
    ("message", "honoured", "refused"),
    [
        (milvus_pb2.SearchRequest, su.SEARCH_FIELDS_HONOURED, su.SEARCH_FIELDS_REFUSED),
        (milvus_pb2.HybridSearchRequest, su.HYBRID_FIELDS_HONOURED, su.HYBRID_FIELDS_REFUSED),
        (milvus_pb2.SubSearchRequest, su.SUB_FIELDS_HONOURED, su.SUB_FIELDS_REFUSED),
        (milvus_pb2.QueryRequest, su.QUERY_FIELDS_HONOURED, su.QUERY_FIELDS_REFUSED),
    ],
)
def test_every_request_field_is_classified(message, honoured, refused):
    fields = {f.name for f in message.DESCRIPTOR.fields}
    missing = fields - set(honoured) - set(refused)
    assert not missing, f"{message.DESCRIPTOR.name} has fields kmilvus has not classified: {sorted(missing)}"
    assert not (set(honoured) & set(refused))


def test_every_honoured_key_is_shown_by_a_test():
    for key in su.SEARCH_HONOURED | su.SEARCH_PARAMS_HONOURED | su.RANK_HONOURED | su.QUERY_HONOURED:
        where = HONOURED_BY.get(key)
        if where is None:  # keys shared with another table are shown once
            continue
        text = (TESTS / where).read_text()
        assert SPELLED.get(key, key) in text, f"{key}: {where} does not show it"
    assert set(HONOURED_BY) <= su.SEARCH_HONOURED | su.SEARCH_PARAMS_HONOURED | su.RANK_HONOURED | su.QUERY_HONOURED


@pytest.fixture
def coll(client):
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("n", DataType.INT64)
    index = client.prepare_index_params()
    index.add_index("vec", index_type="FLAT", metric_type="L2")
    client.create_collection("p", schema=schema, index_params=index, consistency_level="Strong")
    client.insert("p", [{"id": i, "vec": [i, 0, 0, 0], "n": i} for i in range(20)])
    client.flush("p")
    client.load_collection("p")
    client.insert("p", [{"id": 100 + i, "vec": [0.5 + i, 0, 0, 0], "n": i} for i in range(5)])  # growing
    return client.describe_collection("p")["collection_id"]


def _stub(node):
    return milvus_pb2_grpc.MilvusServiceStub(grpc.insecure_channel(node.uri.removeprefix("http://")))


def _search_req(param: dict | None = None, **kwargs) -> milvus_pb2.SearchRequest:
    return Prepare.search_requests_with_expr(
        "p", "vec", param or {"params": {}}, 3, data=[[0.0] * DIM], consistency_level=common_pb2.Strong, **kwargs
    )


def _with_key(req, key: str, value: str):
    req.search_params.append(common_pb2.KeyValuePair(key=key, value=value))
    return req


@pytest.mark.parametrize("key", sorted(su.SEARCH_REFUSED))
def test_refused_search_keys_answer_unimplemented(node, coll, key):
    resp = _stub(node).Search(_with_key(_search_req(), key, "x"))
    assert resp.status.code == 10 and "service unimplemented" in resp.status.reason and key in resp.status.reason


@pytest.mark.parametrize("key", sorted(su.QUERY_REFUSED))
def test_refused_query_keys_answer_unimplemented(node, coll, key):
    req = Prepare.query_request("p", "id >= 0", [], [], limit=3)
    req.query_params.append(common_pb2.KeyValuePair(key=key, value="x"))
    resp = _stub(node).Query(req)
    assert resp.status.code == 10 and key in resp.status.reason


def test_refused_rank_key_and_unknown_keys(node, coll):
    req = Prepare.hybrid_search_request_with_ranker("p", [_search_req()], RRFRanker(), 3, cluster_id="c1")
    assert _stub(node).HybridSearch(req).status.code == 10
    resp = _stub(node).Search(_with_key(_search_req(), "no_such_key", "1"))
    assert resp.status.code == 1100 and "unknown search_params key: no_such_key" in resp.status.reason
    # an index knob given beside `params` as well as in it (Milvus 2.5.2+ REST and SDKs): honoured there
    req = _search_req(param={"params": {"nprobe": 4}, "nprobe": 4})
    assert _stub(node).Search(_with_key(req, "nprobe", "4")).status.code == 0


@pytest.mark.parametrize("name", sorted(su.SEARCH_FIELDS_REFUSED))
def test_refused_request_fields_answer_unimplemented(node, coll, name):
    req = _search_req()
    if name == "travel_timestamp":
        req.travel_timestamp = 5
    elif name == "search_by_primary_keys":
        req.search_by_primary_keys = True
    elif name == "namespace":
        req.namespace = "ns"
    elif name == "ids":
        req.ids.int_id.data.append(1)
    elif name == "sub_reqs":
        req.sub_reqs.add(dsl="")
    elif name == "function_chains":
        req.function_chains.add()
    else:
        getattr(req, name).SetInParent()
    resp = _stub(node).Search(req)
    assert resp.status.code == 10 and "service unimplemented" in resp.status.reason


def test_ignore_growing_hints_collection_id_and_group_scorer(client, node, coll):
    q = [[0.4, 0, 0, 0]]
    all_ids = {h["id"] for h in client.search("p", q, limit=30)[0]}
    sealed_only = {h["id"] for h in client.search("p", q, limit=30, search_params={"ignore_growing": True})[0]}
    assert all_ids - sealed_only == {100, 101, 102, 103, 104} and sealed_only == set(range(20))
    rows = client.query("p", filter="id >= 0", limit=100, ignore_growing=True)
    assert {r["id"] for r in rows} == set(range(20))
    # page_retain_order: a range search's pages keep the distance order (always, here)
    ranged = client.search(
        "p", q, limit=4, offset=2, search_params={"params": {"radius": 50.0}}, page_retain_order=True
    )[0]
    full = client.search("p", q, limit=6, search_params={"params": {"radius": 50.0}})[0]
    assert [h["id"] for h in ranged] == [h["id"] for h in full][2:]
    hinted = client.search("p", q, limit=5, search_params={"hints": "iterative_filter"}, filter="n > 2")
    assert [h["id"] for h in hinted[0]] == [h["id"] for h in client.search("p", q, limit=5, filter="n > 2")[0]]
    wrong = _search_req(collection_id=coll + 1)
    resp = _stub(node).Search(wrong)
    assert resp.status.code == 1100 and "is not consistent to that in the search context" in resp.status.reason
    req = Prepare.query_request("p", "id >= 0", [], [], limit=3, collection_id=coll + 1)
    resp = _stub(node).Query(req)
    assert resp.status.code == 1100 and "Input collection id is not consistent" in resp.status.reason
    bad = Prepare.hybrid_search_request_with_ranker(
        "p", [_search_req()], RRFRanker(), 3, group_by_field="n", rank_group_scorer="median"
    )
    resp = _stub(node).HybridSearch(bad)
    assert resp.status.code == 1100 and "input group scorer type: median is not supported!" in resp.status.reason
    for scorer in ("max", "sum", "avg"):
        ok = Prepare.hybrid_search_request_with_ranker(
            "p", [_search_req(), _search_req()], RRFRanker(), 3, group_by_field="n", rank_group_scorer=scorer
        )
        resp = _stub(node).HybridSearch(ok)
        assert resp.status.code == 0 and len(set(resp.results.group_by_field_value.scalars.long_data.data)) == 3


def test_query_window_and_expression_errors_as_milvus_2_5(client, coll):
    from pymilvus import MilvusException

    with pytest.raises(MilvusException) as e:
        client.query("p", filter="id >= 0", limit=16000, offset=1000)
    assert e.value.code == 65535
    assert e.value.message == (
        "invalid max query result window, (offset+limit) should be in range [1, 16384], but got 17000"
    )
    with pytest.raises(MilvusException) as e:
        client.query("p", filter="id >=", limit=3)
    assert e.value.code == 1100 and e.value.message.startswith("failed to create query plan: cannot parse expression:")
    with pytest.raises(MilvusException) as e:
        client.query("p", filter="nope > 1", limit=3)
    assert e.value.code == 1100
    assert e.value.message == (
        "failed to create query plan: cannot parse expression: nope > 1, error: field nope not exist: invalid parameter"
    )
