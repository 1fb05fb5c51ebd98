"""search_iterator (v2: the token and last bound Milvus 2.5 answers, so pymilvus never falls back to
its range-search emulation) and query_iterator through pymilvus: every row matching the filter
exactly once, in order — with tied scores, and with a compaction and new inserts between pages
(the first page pins a snapshot: rows inserted later stay invisible, compacted rows keep their
place)."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.client.iterator.search_iterator import SearchIteratorV2

from tests.util import load_indexed, wait_until

DIM = 8


INDEX = {"FLAT": {}, "HNSW": {"M": 8, "efConstruction": 64}, "IVF_FLAT": {"nlist": 32}}


def make(
    client: MilvusClient,
    name: str,
    n: int,
    rng,
    batches: int = 4,
    metric: str = "L2",
    dup: int = 0,
    index_type: str = "FLAT",
    node=None,
):
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("num", DataType.INT64)
    index = client.prepare_index_params()
    index.add_index("vec", index_type=index_type, metric_type=metric, params=INDEX[index_type])
    client.create_collection(name, schema=schema, index_params=index, num_shards=2, consistency_level="Strong")
    vecs = rng.random((n, DIM), dtype=np.float32)
    if dup:
        vecs[:dup] = vecs[0]  # `dup` rows tie at every distance
    rows = [{"id": i, "vec": vecs[i], "num": i % 10} for i in range(n)]
    step = n // batches
    for b in range(batches):  # several flushed segments
        client.insert(name, rows[b * step : (b + 1) * step])
        client.flush(name)
    load_indexed(client, node, name, "vec", n, index_type)
    return vecs


def drain(it) -> tuple[list[int], list[float]]:
    ids: list[int] = []
    dist: list[float] = []
    while True:
        page = it.next()
        if not page:
            break
        ids += [h["id"] for h in page]
        dist += [h["distance"] for h in page]
    it.close()
    return ids, dist


@pytest.mark.parametrize(("metric", "index_type"), [("L2", "FLAT"), ("IP", "FLAT"), ("L2", "HNSW"), ("IP", "IVF_FLAT")])
def test_search_iterator_v2_every_row_once_in_order(client, node, metric, index_type):
    rng = np.random.default_rng(1)
    vecs = make(client, "it", 1000, rng, metric=metric, index_type=index_type, node=node)
    q = rng.random(DIM, dtype=np.float32)
    params = {"metric_type": metric, "params": {"ef": 64} if index_type == "HNSW" else {"nprobe": 2}}
    it = client.search_iterator("it", data=[q], batch_size=64, filter="num < 7", search_params=params)
    assert isinstance(it, SearchIteratorV2)  # the server answered a token: no fallback
    ids, dist = drain(it)
    want = {i for i in range(1000) if i % 10 < 7}
    assert len(ids) == len(want) and set(ids) == want
    assert dist == (sorted(dist) if metric == "L2" else sorted(dist, reverse=True))
    order = np.argsort(((vecs - q) ** 2).sum(1)) if metric == "L2" else np.argsort(-(vecs @ q))
    if index_type == "FLAT":
        assert ids[:20] == [int(i) for i in order if i % 10 < 7][:20]


def test_search_iterator_with_tied_scores_and_a_limit(client):
    rng = np.random.default_rng(2)
    make(client, "tie", 400, rng, dup=150)  # 150 rows at exactly the same distance from any query
    q = rng.random(DIM, dtype=np.float32)
    ids, _ = drain(client.search_iterator("tie", data=[q], batch_size=40))
    assert len(ids) == 400 and len(set(ids)) == 400
    limited, _ = drain(client.search_iterator("tie", data=[q], batch_size=40, limit=130))
    assert len(limited) == 130 and limited == ids[:130]


def test_iterators_across_a_compaction_and_new_inserts(client, node):
    rng = np.random.default_rng(3)
    make(client, "c", 800, rng, batches=8)
    q = rng.random(DIM, dtype=np.float32)
    sit = client.search_iterator("c", data=[q], batch_size=50, filter="num != 3")
    qit = client.query_iterator("c", batch_size=50, filter="num != 3", output_fields=["num"])
    s_ids = [h["id"] for h in sit.next()]
    q_ids = [r["id"] for r in qit.next()]
    # rows inserted after the iterators began: not part of their snapshot
    client.insert("c", [{"id": 10_000 + i, "vec": q + 1e-4 * i, "num": 1} for i in range(30)])
    client.flush("c")
    job = client.compact("c")
    wait_until(lambda: client.get_compaction_state(job) == "Completed", 120, what="compaction completed")
    more, _ = drain(sit)
    s_ids += more
    while True:
        page = qit.next()
        if not page:
            break
        q_ids += [r["id"] for r in page]
    qit.close()
    want = {i for i in range(800) if i % 10 != 3}
    assert len(s_ids) == len(want) and set(s_ids) == want
    assert len(q_ids) == len(want) and set(q_ids) == want
    assert q_ids == sorted(q_ids)  # the query iterator pages in primary-key order
    fresh = client.query("c", filter="id >= 10000", output_fields=["count(*)"])[0]["count(*)"]
    assert fresh == 30  # the new rows are there for a new read


def test_iterator_refusals_as_milvus(client, node):
    rng = np.random.default_rng(4)
    make(client, "r", 100, rng, batches=1)
    q = [rng.random(DIM, dtype=np.float32)]
    with pytest.raises(MilvusException) as e:
        client.search("r", data=q, limit=5, search_params={"params": {}}, group_by_field="num", iterator="True")
    assert e.value.code == 1100 and "Not allowed to do groupBy when doing iteration" in e.value.message
    from pymilvus.client.prepare import Prepare

    req = Prepare.search_requests_with_expr(
        "r", "vec", {"params": {}}, 5, data=[q[0].tolist()], search_iter_v2=True, search_iter_batch_size=5
    )
    import grpc
    from pymilvus.grpc_gen import milvus_pb2_grpc

    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        resp = milvus_pb2_grpc.MilvusServiceStub(ch).Search(req)
    assert resp.status.code == 65535
    assert (
        resp.status.reason == "parse iterator v2 info failed: both iterator and search_iter_v2 must be set in the SDK"
    )


def test_a_stale_load_of_a_compacted_segment_is_ignored(client, node):
    """The QueryCoord can send a LoadSegments it prepared before a compaction swapped the segment
    out (its index check, a feed catch-up): the QueryNode must not serve the source beside its
    compacted target — the rows would show twice."""
    from kmilvus.proto import query_node_pb2
    from kmilvus.querycoord import recovery

    rng = np.random.default_rng(5)
    make(client, "s", 400, rng, batches=4)
    coll_id = client.describe_collection("s")["collection_id"]
    qc = node.component("querycoord").loads
    infos = list(node.call(recovery.segments_of(qc.datacoord, coll_id)))
    stale = node.call(recovery.load_info(qc.kv, qc.datacoord, infos[0]))  # prepared before the compaction
    job = client.compact("s")
    wait_until(lambda: client.get_compaction_state(job) == "Completed", 120, what="compaction completed")
    qn = node.component("querynode")
    coll = qn.collections[coll_id]
    wait_until(lambda: infos[0].ID not in coll.sealed, 30, what="the source swapped out")
    req = query_node_pb2.LoadSegmentsRequest(collectionID=coll_id, schema=qc.loads[coll_id].schema)
    req.segments.append(stale)
    status = node.call(qn.LoadSegments(req))
    assert status.code == 0
    assert infos[0].ID not in coll.sealed
    assert client.query("s", filter="id >= 0", output_fields=["count(*)"])[0]["count(*)"] == 400
    assert len(client.query("s", filter="id >= 0", limit=1000)) == 400
