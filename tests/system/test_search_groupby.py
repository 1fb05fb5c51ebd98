"""Group-by search through pymilvus (`group_by_field`, `group_size`, `strict_group_size`) with
Milvus' semantics: each segment searches until its groups can fill, segments and QueryNodes are
reduced by group, results are grouped (groups by their best hit, hits of a group best first), an
offset skips whole groups. The data are tight clusters: the ungrouped top 10 all belong to one
document, so a search that ignores the grouping shows at once."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.client.prepare import Prepare
from pymilvus.grpc_gen import milvus_pb2_grpc, schema_pb2

from tests.util import load_indexed

DIM = 16
DOCS = 14
CHUNKS = 24  # rows per document


def clusters(rng) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, doc of each row): DOCS tight clusters far apart, rows shuffled."""
    centers = rng.normal(size=(DOCS, DIM)).astype(np.float32) * 10
    doc = np.repeat(np.arange(DOCS), CHUNKS)
    vecs = centers[doc] + rng.normal(scale=0.01, size=(len(doc), DIM)).astype(np.float32)
    order = rng.permutation(len(doc))
    return vecs[order].astype(np.float32), doc[order]


def make(
    client: MilvusClient, name: str, rng, group_type=DataType.INT64, shards: int = 2, index_type="FLAT", node=None
):
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    if group_type == DataType.VARCHAR:
        schema.add_field("doc", DataType.VARCHAR, max_length=16)
    else:
        schema.add_field("doc", group_type)
    schema.add_field("flag", DataType.BOOL)
    schema.add_field("weight", DataType.FLOAT)
    index = client.prepare_index_params()
    params = {"HNSW": {"M": 8, "efConstruction": 64}, "IVF_FLAT": {"nlist": 16}}.get(index_type, {})
    index.add_index("vec", index_type=index_type, metric_type="L2", params=params)
    client.create_collection(name, schema=schema, index_params=index, num_shards=shards, consistency_level="Strong")
    vecs, doc = clusters(rng)

    def value(d: int):
        return f"doc{d}" if group_type == DataType.VARCHAR else int(d)

    rows = [
        {"id": i, "vec": vecs[i], "doc": value(doc[i]), "flag": bool(doc[i] % 2), "weight": float(doc[i])}
        for i in range(len(doc))
    ]
    half = len(rows) // 2
    client.insert(name, rows[:half])
    client.flush(name)  # sealed segments ...
    load_indexed(client, node, name, "vec", half, index_type)
    client.insert(name, rows[half:])  # ... and growing ones
    return vecs, np.array([value(d) for d in doc], dtype=object)


def best_docs(vecs: np.ndarray, doc: np.ndarray, q: np.ndarray) -> list:
    """Documents by their closest row (exact L2)."""
    d = ((vecs - q) ** 2).sum(1)
    order = np.argsort(d, kind="stable")
    seen: dict = {}
    for i in order:
        seen.setdefault(doc[i], d[i])
    return list(seen)


def groups_of(hits) -> list[list]:
    """The hits' documents, consecutive runs collapsed: [[doc, count], ...]."""
    out: list[list] = []
    for h in hits:
        d = h["entity"]["doc"]
        if out and out[-1][0] == d:
            out[-1][1] += 1
        else:
            out.append([d, 1])
    return out


def test_group_by_returns_distinct_groups_across_sealed_and_growing(client):
    rng = np.random.default_rng(3)
    vecs, doc = make(client, "g", rng)
    queries = [vecs[5] + 0.001, vecs[77] + 0.001]  # nq = 2
    plain = client.search("g", data=queries, limit=10, output_fields=["doc"])
    assert all(len({h["entity"]["doc"] for h in hits}) == 1 for hits in plain)  # one document only

    res = client.search("g", data=queries, limit=10, output_fields=["doc"], group_by_field="doc")
    assert len(res) == 2
    for hits, q in zip(res, queries, strict=True):
        assert len(hits) == 10
        got = [h["entity"]["doc"] for h in hits]
        assert got == best_docs(vecs, doc, q)[:10]  # ten documents, nearest first
        dists = [h["distance"] for h in hits]
        assert dists == sorted(dists)
        for h in hits:  # each hit is its document's nearest row
            rows = np.nonzero(doc == h["entity"]["doc"])[0]
            nearest = rows[np.argmin(((vecs[rows] - q) ** 2).sum(1))]
            assert h["id"] == nearest


@pytest.mark.parametrize("index_type", ["FLAT", "HNSW", "IVF_FLAT"])
def test_group_size_strict_and_offset(client, node, index_type):
    """Through an index too: a group-by walks past the user's top-k (HNSW's ef, IVF's nprobe
    widen as the walk goes on)."""
    rng = np.random.default_rng(4)
    vecs, doc = make(client, "gs", rng, index_type=index_type, node=node)
    q = vecs[9] + 0.001
    order = best_docs(vecs, doc, q)

    loose = client.search("gs", data=[q], limit=6, output_fields=["doc"], group_by_field="doc", group_size=3)[0]
    runs = groups_of(loose)
    assert [r[0] for r in runs] == order[:6]  # grouped: a document's hits are together
    assert all(1 <= n <= 3 for _, n in runs) and all(n == 3 for _, n in runs[:5])

    strict = client.search(
        "gs", data=[q], limit=6, output_fields=["doc"], group_by_field="doc", group_size=3, strict_group_size=True
    )[0]
    runs = groups_of(strict)
    assert [r[0] for r in runs] == order[:6] and all(n == 3 for _, n in runs)
    for d, _ in runs:  # the three nearest rows of each document, best first
        hits = [h for h in strict if h["entity"]["doc"] == d]
        rows = np.nonzero(doc == d)[0]
        want = rows[np.argsort(((vecs[rows] - q) ** 2).sum(1))[:3]]
        assert [h["id"] for h in hits] == list(want)

    paged = client.search("gs", data=[q], limit=3, offset=2, output_fields=["doc"], group_by_field="doc", group_size=2)[
        0
    ]
    assert [r[0] for r in groups_of(paged)] == order[2:5]  # offset and limit count groups


@pytest.mark.parametrize("group_type", [DataType.INT8, DataType.INT16, DataType.INT32, DataType.VARCHAR, DataType.BOOL])
def test_group_by_field_types(client, group_type):
    rng = np.random.default_rng(5)
    vecs, doc = make(client, "gt", rng, group_type=group_type if group_type != DataType.BOOL else DataType.INT64)
    q = vecs[11] + 0.001
    field = "flag" if group_type == DataType.BOOL else "doc"
    hits = client.search("gt", data=[q], limit=10, output_fields=[field], group_by_field=field)[0]
    values = [h["entity"][field] for h in hits]
    if group_type == DataType.BOOL:
        assert sorted(values) == [False, True]  # two groups exist
    else:
        assert values == best_docs(vecs, doc, q)[:10]


def test_group_by_value_is_returned_as_milvus_does(client, node):
    """Milvus answers the group values in `SearchResultData.group_by_field_value` (named, typed)."""
    rng = np.random.default_rng(6)
    vecs, doc = make(client, "gv", rng, group_type=DataType.VARCHAR)
    req = Prepare.search_requests_with_expr(
        "gv", "vec", {"metric_type": "L2", "params": {}}, 5, data=[vecs[0].tolist()], group_by_field="doc"
    )
    import grpc

    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        resp = milvus_pb2_grpc.MilvusServiceStub(ch).Search(req)
    assert resp.status.code == 0, resp.status.reason
    gv = resp.results.group_by_field_value
    assert gv.field_name == "doc" and gv.type == schema_pb2.VarChar
    values = list(gv.scalars.string_data.data)
    assert len(values) == 5 and len(set(values)) == 5
    assert values == best_docs(vecs, doc, vecs[0])[:5]


def test_group_by_refusals_as_milvus(client):
    rng = np.random.default_rng(7)
    vecs, _ = make(client, "gr", rng)
    q = [vecs[0]]
    with pytest.raises(MilvusException) as e:
        client.search("gr", data=q, limit=5, group_by_field="nope")
    assert e.value.code == 1700 and "groupBy field not found in schema" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.search("gr", data=q, limit=5, group_by_field="doc", group_size=0)
    assert e.value.code == 1100 and "input group size:0 is negative, failed to do search_groupby" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.search("gr", data=q, limit=5, group_by_field="doc", group_size=11)
    assert e.value.code == 1100 and "input group size:11 exceeds configured max group size:10" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.search("gr", data=q, limit=5, group_by_field="weight")
    assert e.value.code == 2003 and "unsupported data type Float for group by operator" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.search("gr", data=q, limit=5, group_by_field="doc", search_params={"params": {"radius": 10.0}})
    assert e.value.code == 1100 and "Not allowed to do range-search when doing search-group-by" in e.value.message
