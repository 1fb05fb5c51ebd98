"""Search with a selective filter through pymilvus: the answer is as good as Milvus' — the exact
top-k of the rows the filter keeps — however few rows that is. An approximate index walked with
a filter that keeps 1 % of its rows finds few of them (an HNSW graph walk or the probed IVF lists
reach mostly rows the filter drops); knowhere then ranks the kept rows' vectors exactly, and so
does kmilvus. Plain, range and group-by searches alike, against numpy over every row."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

from tests.util import load_indexed

DIM = 64
ROWS = 20_000
INDEX = {
    "HNSW": ({"M": 16, "efConstruction": 64}, {"ef": 64}),
    "IVF_FLAT": ({"nlist": 128}, {"nprobe": 8}),
}
# filter → the rows it keeps (of ids 0..ROWS-1)
FILTERS = {
    'tag == "t7"': lambda ids: ids % 100 == 7,  # 1 %
    "bucket == 7": lambda ids: ids % 1000 == 7,  # 0.1 %
}


def l2(vecs: np.ndarray, q: np.ndarray) -> np.ndarray:
    return ((vecs - q) ** 2).sum(axis=1)


def exact_top(vecs: np.ndarray, keep: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    rows = np.flatnonzero(keep)
    return rows[np.argsort(l2(vecs[rows], q), kind="stable")[:k]].tolist()


def recall(got: list[list[int]], want: list[list[int]]) -> float:
    return float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, want, strict=True)]))


@pytest.mark.parametrize("index_type", list(INDEX))
def test_selective_filter_finds_the_exact_top_k(client, node, index_type):
    build, search = INDEX[index_type]
    rng = np.random.default_rng(29)
    vecs = rng.random((ROWS, DIM), dtype=np.float32)
    ids = np.arange(ROWS)
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("tag", DataType.VARCHAR, max_length=8)
    schema.add_field("bucket", DataType.INT64)
    schema.add_field("doc", DataType.INT64)
    index = client.prepare_index_params()
    index.add_index("vec", index_type=index_type, metric_type="L2", params=build)
    client.create_collection("f", schema=schema, index_params=index, num_shards=1, consistency_level="Strong")
    for start in range(0, ROWS, 5000):
        client.insert(
            "f",
            [
                {"id": i, "vec": vecs[i], "tag": f"t{i % 100}", "bucket": i % 1000, "doc": i // 10}
                for i in range(start, start + 5000)
            ],
        )
    client.flush("f")
    load_indexed(client, node, "f", "vec", ROWS, index_type)
    queries = rng.random((20, DIM), dtype=np.float32)
    params = {"metric_type": "L2", "params": search}

    for expr, kept in FILTERS.items():
        keep = kept(ids)
        want = [exact_top(vecs, keep, q, 10) for q in queries]
        res = client.search("f", data=list(queries), filter=expr, limit=10, search_params=params)
        got = [[h["id"] for h in hits] for hits in res]
        assert all(keep[g].all() for g in got), expr
        assert recall(got, want) >= 0.99, (expr, recall(got, want))

        # Group-by: the filter keeps one row per doc, so the top 10 docs are the top 10 rows.
        res = client.search(
            "f", data=list(queries[:5]), filter=expr, limit=10, search_params=params, group_by_field="doc"
        )
        got = [[h["id"] for h in hits] for hits in res]
        assert recall(got, want[:5]) >= 0.99, (expr, "group-by")

    # Range search: the kept rows within the radius, best first, up to the limit.
    keep = FILTERS['tag == "t7"'](ids)
    rows = np.flatnonzero(keep)
    for q in queries[:5]:
        d = np.sort(l2(vecs[rows], q))
        radius, range_filter = float(d[20]), float(d[2])  # about 18 kept rows between the two
        inside = rows[(l2(vecs[rows], q) < radius) & (l2(vecs[rows], q) >= range_filter)]
        res = client.search(
            "f",
            data=[q],
            filter='tag == "t7"',
            limit=50,
            search_params={"metric_type": "L2", "params": {**search, "radius": radius, "range_filter": range_filter}},
        )
        got = [h["id"] for h in res[0]]
        assert keep[got].all()
        assert set(got) <= set(inside.tolist())
        assert len(got) >= 0.99 * len(inside), (len(got), len(inside))
