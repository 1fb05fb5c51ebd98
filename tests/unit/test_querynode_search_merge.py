"""A QueryNode's top-k over several segments (`reduce.search_segments`) is the exact answer over
all their rows: per query the best `topk` primary keys, each once (the best of its copies),
best first, with each hit's output fields read from the segment that holds it — whichever
segments the kept hits come from and in whatever order they interleave."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pymilvus.grpc_gen import schema_pb2

from kmilvus.querynode import reduce
from kmilvus.querynode.filter import compile_filter
from kmilvus.querynode.search_plan import SearchPlan
from kmilvus.querynode.segments import SegmentData

DT = schema_pb2.DataType
DIM = 8


def _schema(varchar: bool) -> schema_pb2.CollectionSchema:
    schema = schema_pb2.CollectionSchema(
        fields=[
            schema_pb2.FieldSchema(fieldID=1, name="Timestamp", data_type=DT.Int64),
            schema_pb2.FieldSchema(
                fieldID=100, name="id", data_type=DT.VarChar if varchar else DT.Int64, is_primary_key=True
            ),
            schema_pb2.FieldSchema(fieldID=101, name="tag", data_type=DT.Int64),
            schema_pb2.FieldSchema(fieldID=102, name="vec", data_type=DT.FloatVector),
        ]
    )
    schema.fields[3].type_params.add(key="dim", value=str(DIM))
    return schema


def _segment(sid: int, keys: np.ndarray, vecs: np.ndarray, varchar: bool) -> SegmentData:
    table = pa.table(
        {
            "1": pa.array(np.full(len(keys), 1000, dtype=np.int64)),
            "100": pa.array([f"k{k}" for k in keys]) if varchar else pa.array(keys.astype(np.int64)),
            "101": pa.array(keys * 10 + sid),
            "102": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM),
        }
    )
    return SegmentData.build(sid, 1, table, _schema(varchar))


@pytest.mark.parametrize("outputs", [[], [101]])
@pytest.mark.parametrize("varchar", [False, True])
@pytest.mark.parametrize("topk", [1, 7, 40])
def test_the_merge_over_segments_is_the_exact_top_k(varchar: bool, topk: int, outputs: list[int]) -> None:
    rng = np.random.default_rng(topk)
    # Three segments; keys 0..59 with some keys in two of them (other vectors: one copy wins).
    keys = [np.arange(0, 30), np.arange(20, 50), np.arange(45, 60)]
    vecs = [rng.random((len(k), DIM), dtype=np.float32) for k in keys]
    segs = [_segment(i + 1, k, v, varchar) for i, (k, v) in enumerate(zip(keys, vecs, strict=True))]
    queries = rng.random((3, DIM), dtype=np.float32)
    plan = SearchPlan(
        anns_field=102,
        queries=queries,
        topk=topk,
        metric="L2",
        filter=compile_filter("", _schema(varchar), 0, None),
        pk_field=100,
        output_ids=outputs,
    )
    got = reduce.search_segments([(s, ()) for s in segs], plan)

    all_keys = np.concatenate(keys)
    all_tags = np.concatenate([k * 10 + i + 1 for i, k in enumerate(keys)])
    all_vecs = np.concatenate(vecs)
    want_nq, want_pk, want_tag = [], [], []
    for q in range(len(queries)):
        d = ((all_vecs - queries[q]) ** 2).sum(axis=1)
        seen: set[int] = set()
        for row in np.argsort(d, kind="stable"):
            if all_keys[row] in seen:
                continue
            seen.add(all_keys[row])
            want_nq.append(q)
            want_pk.append(f"k{all_keys[row]}" if varchar else int(all_keys[row]))
            want_tag.append(int(all_tags[row]))
            if len(seen) == topk:
                break
    assert got.column("nq").to_pylist() == want_nq
    assert got.column("pk").to_pylist() == want_pk
    assert got.column_names == ["nq", "score", "pk", *[str(f) for f in outputs]]
    if outputs:
        assert got.column("101").to_pylist() == want_tag
    scores = got.column("score").to_numpy()
    for q in range(len(queries)):
        mine = scores[np.asarray(want_nq) == q]
        assert np.all(np.diff(mine) >= 0)  # best (smallest L2) first


@pytest.mark.parametrize("outputs", [[], [101]])
def test_segments_searched_without_a_hit_merge_to_an_empty_answer(outputs: list[int]) -> None:
    """A segment whose search found no row (a BM25 query none of its documents matches) still
    answers its (empty) hits: several of them merge to no row, with the answer's columns."""
    seg = _segment(1, np.arange(5), np.zeros((5, DIM), np.float32), varchar=False)
    plan = SearchPlan(
        anns_field=102,
        queries=np.zeros((1, DIM), np.float32),
        topk=3,
        metric="L2",
        filter=compile_filter("", _schema(False), 0, None),
        pk_field=100,
        output_ids=outputs,
    )
    none = np.array([], np.int64)
    empty = [reduce._Hits(seg, none.astype(np.int32), none.astype(np.float32), none) for _ in range(2)]
    got = reduce._merge_hits(empty, plan)
    assert got.num_rows == 0
    assert got.column_names == ["nq", "score", "pk", *[str(f) for f in outputs]]
