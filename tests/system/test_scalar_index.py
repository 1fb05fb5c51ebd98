"""Scalar indexes (INVERTED, BITMAP, STL_SORT, Trie, AUTOINDEX → HYBRID): Milvus 2.5's rules and
texts for CreateIndex, and the filter evaluator's index path giving exactly the scan's rows —
proved on every index type and predicate form, with the column removed so only the index can
answer — then end to end through pymilvus: built per flushed segment, listed / described /
dropped, loaded by the QueryNode and used by query and search, kept through compaction."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pymilvus import DataType, MilvusClient, MilvusException
from pymilvus.grpc_gen import schema_pb2

from kmilvus import metrics
from kmilvus.index import params as P
from kmilvus.index import scalar_index as SI
from kmilvus.index import scalar_params as SP
from kmilvus.parser import evaluate, parse
from kmilvus.storage import paths
from kmilvus.util.merr import MilvusError
from tests.util import wait_until

DT = schema_pb2.DataType
N = 3_000


def schema() -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="sx")
    s.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    s.fields.add(fieldID=101, name="i", data_type=DT.Int32, nullable=True)
    s.fields.add(fieldID=102, name="d", data_type=DT.Double)
    s.fields.add(fieldID=103, name="s", data_type=DT.VarChar, nullable=True)
    s.fields.add(fieldID=104, name="b", data_type=DT.Bool)
    s.fields.add(fieldID=105, name="tags", data_type=DT.Array, element_type=DT.VarChar)
    s.fields.add(fieldID=106, name="nums", data_type=DT.Array, element_type=DT.Int64, nullable=True)
    s.fields.add(fieldID=107, name="vec", data_type=DT.FloatVector)
    return s


SCHEMA = schema()


def table(seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    i = rng.integers(-20, 20, N)
    d = rng.normal(size=N).round(1)
    d[::97] = np.nan
    words = np.array(["apple", "apricot", "banana", "band", "b", "", "cherry", "ché", "z\U0010ffff"])
    s = words[rng.integers(0, len(words), N)]
    tags = [list(words[rng.integers(0, len(words), k)]) for k in rng.integers(0, 4, N)]
    nums = [None if k == 3 else list(rng.integers(0, 6, k)) for k in rng.integers(0, 4, N)]
    return pa.table(
        {
            "100": pa.array(np.arange(N)),
            "101": pa.array(i.astype(np.int32), mask=rng.random(N) < 0.1),
            "102": pa.array(d),
            "103": pa.array(s.tolist(), mask=rng.random(N) < 0.05),
            "104": pa.array(rng.random(N) < 0.3),
            "105": pa.array(tags, pa.list_(pa.string())),
            "106": pa.array(nums, pa.list_(pa.int64())),
        }
    )


EXPRS = {
    101: [
        "i == 3",
        "i != 3",
        "i < -5",
        "i <= 0",
        "i > 17",
        "i >= 19",
        "-3 < i <= 4",
        "i in [1, 2, 99]",
        "i not in [1, 2]",
        "not (i > 2)",
        "i > 2.5",
        "i == 3 and d > 0",
    ],
    102: ["d == 0.1", "d != 0.1", "d < -1.5", "d >= 2", "d in [0.0, 1.1]", "d > 1 or i == 2"],
    103: [
        's == "apple"',
        's != "band"',
        's like "ap%"',
        's like "b%"',
        's like "%"',
        's like "z%"',
        's like "ch%"',
        's like "apple"',
        's like "%an%"',
        's in ["apple", "cherry", "nope"]',
        's > "b"',
        's <= "band"',
        's not in ["b", ""]',
    ],
    104: ["b == true", "b != true", "b in [false]"],
    105: [
        'array_contains(tags, "apple")',
        'array_contains_any(tags, ["b", "band"])',
        'array_contains_all(tags, ["apple", "banana"])',
        "array_contains_all(tags, [])",
    ],
    106: ["array_contains(nums, 3)", "array_contains_any(nums, [0, 5])", "array_contains_all(nums, [1, 2])"],
}
TYPES = {
    101: ["INVERTED", "STL_SORT", "BITMAP", "HYBRID"],
    102: ["INVERTED", "STL_SORT"],
    103: ["INVERTED", "Trie", "BITMAP", "HYBRID"],
    104: ["INVERTED", "BITMAP"],
    105: ["INVERTED", "BITMAP", "HYBRID"],
    106: ["INVERTED", "BITMAP"],
}


def _build(t: pa.Table, fid: int, index_type: str, **extra: str) -> SI.ScalarIndex:
    built = SI.build(t.column(str(fid)), {SP.INDEX_TYPE: index_type, **extra})
    assert SI.is_scalar_index_file(built.data) and built.num_rows == N
    return SI.load(built.data)


@pytest.mark.parametrize("fid", sorted(EXPRS))
def test_index_path_gives_the_scans_rows(fid):
    """Every index type over the field answers each expression exactly as the column scan does
    (nulls, NaNs, empty strings and lists, code points past the BMP); a predicate on the indexed
    field alone is answered with the column gone, so the index alone answered it."""
    t = table()
    for index_type in TYPES[fid]:
        for limit in ("1000", "3") if index_type == "HYBRID" else ("",):
            ix = _build(t, fid, index_type, **({SP.BITMAP_CARDINALITY_LIMIT: limit} if limit else {}))
            for expr in EXPRS[fid]:
                plan = parse(expr, SCHEMA)
                scan = evaluate(plan, t)
                with_index = evaluate(plan, t, indexes={fid: ix})
                assert with_index.equals(scan), (index_type, limit, expr)
                if "and" not in expr and "or" not in expr and "%an%" not in expr:
                    alone = evaluate(plan, t.drop_columns([str(fid)]), indexes={fid: ix})
                    assert alone.equals(scan), (index_type, expr)


def test_several_indexed_fields_in_one_filter():
    """Ranges on two indexed fields, a term on a third and a scanned rest: the scan's rows."""
    t = table()
    indexes = {101: _build(t, 101, "STL_SORT"), 102: _build(t, 102, "INVERTED"), 103: _build(t, 103, "Trie")}
    for expr in [
        "-3 < i <= 4 and 0 < d < 1",
        "-3 < i <= -2 and 0 < d < 1",
        '-3 < i <= 4 and 0 < d < 1 and s in ["apple", "band"] and b == true',
        "i > 100 and i < -100 and d > 0",
        '(i >= 0 and i < 5) or (s like "ap%" and d < 0)',
        'b == true and s like "b%" and i > 0 and i < 10',
    ]:
        plan = parse(expr, SCHEMA)
        assert evaluate(plan, t, indexes=indexes).equals(evaluate(plan, t)), expr


def test_hybrid_picks_bitmap_below_its_cardinality_limit():
    t = table()
    assert _build(t, 101, "HYBRID").index_type == "BITMAP"  # 40 distinct < 500
    assert _build(t, 101, "HYBRID", bitmap_cardinality_limit="10").index_type == "STL_SORT"
    assert _build(t, 103, "HYBRID", bitmap_cardinality_limit="2").index_type == "Trie"
    assert _build(t, 105, "HYBRID", bitmap_cardinality_limit="2").index_type == "INVERTED"
    assert _build(t, 100, "HYBRID").index_type == "STL_SORT"  # a primary key: every value distinct


def test_a_literal_the_index_cannot_hold_falls_back_to_the_scan():
    ix = _build(table(), 101, "INVERTED")
    assert ix.compare("==", "x") is None and ix.equal_any(["x"]) is None and ix.prefix("a") is None


# -- CreateIndex rules (Milvus 2.5's checkers) --------------------------------------------------


def field(name: str) -> schema_pb2.FieldSchema:
    return next(f for f in SCHEMA.fields if f.name == name)


@pytest.mark.parametrize(
    ("name", "given", "built", "shown"),
    [
        ("i", {}, {"index_type": "HYBRID", "user_index_type": ""}, {}),
        ("s", {"index_type": "AUTOINDEX"}, {"index_type": "HYBRID", "user_index_type": "AUTOINDEX"}, None),
        ("b", {}, {"index_type": "BITMAP", "user_index_type": ""}, {}),
        ("d", {"index_type": "AUTOINDEX"}, {"index_type": "INVERTED", "user_index_type": "AUTOINDEX"}, None),
        ("tags", {}, {"index_type": "HYBRID", "user_index_type": ""}, {}),
        ("s", {"index_type": "TRIE"}, {"index_type": "Trie", "user_index_type": "TRIE"}, None),
        ("s", {"index_type": "marisa-trie"}, {"index_type": "Trie", "user_index_type": "marisa-trie"}, None),
        ("d", {"index_type": "STL_SORT"}, {"index_type": "STL_SORT"}, None),
        ("i", {"index_type": "BITMAP"}, {"index_type": "BITMAP"}, None),
        ("tags", {"index_type": "INVERTED"}, {"index_type": "INVERTED"}, None),
    ],
)
def test_create_index_accepts_and_resolves_autoindex(name, given, built, shown):
    f, checked = P.check_field_index(SCHEMA, name, given)
    assert f.name == name and checked == built
    assert P.user_params(checked) == (given if shown is None else shown)  # DescribeIndex: as given


@pytest.mark.parametrize(
    ("name", "given", "message"),
    [
        ("d", {"index_type": "BITMAP"}, "bitmap index are only supported on bool, int, string and array field"),
        ("id", {"index_type": "BITMAP"}, "create bitmap index on primary key not supported"),
        ("vec", {"index_type": "INVERTED"}, "INVERTED are not supported on FloatVector field"),
        ("s", {"index_type": "STL_SORT"}, "STL_SORT are only supported on numeric field"),
        ("i", {"index_type": "Trie"}, "TRIE are only supported on varchar field"),
        (
            "i",
            {"index_type": "AUTOINDEX", "bitmap_cardinality_limit": "0"},
            "failed to check bitmap cardinality limit, should be larger than 0 and smaller than 1000",
        ),
    ],
)
def test_create_index_refusals(name, given, message):
    with pytest.raises(MilvusError) as e:
        P.check_field_index(SCHEMA, name, given)
    assert e.value.code == 1100
    assert e.value.message == f"{message}: invalid parameter[expected=valid index params][actual=invalid index params]"


def test_create_index_refuses_hybrid_and_autoindex_on_json():
    s = schema_pb2.CollectionSchema()
    s.CopyFrom(SCHEMA)
    s.fields.add(fieldID=108, name="meta", data_type=DT.JSON)
    with pytest.raises(MilvusError) as e:
        P.check_field_index(s, "i", {"index_type": "HYBRID"})
    assert (e.value.code, e.value.message) == (
        1100,
        "invalid parameter[expected=valid index][actual=invalid index type: HYBRID]",
    )
    with pytest.raises(MilvusError) as e:
        P.check_field_index(s, "meta", {})
    assert e.value.message == (
        "invalid parameter[expected=supported field][actual=create auto index on type:JSON is not supported]"
    )


# -- end to end ------------------------------------------------------------------------------------


def lookups() -> float:
    return sum(s.value for m in metrics.SCALAR_INDEX_LOOKUPS.collect() for s in m.samples if s.name.endswith("_total"))


def rows(seed: int, start: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    tags = np.array(["red", "green", "blue", "x"])
    return [
        {
            "id": start + k,
            "tag": str(tags[rng.integers(0, 3)]) if k % 50 else "x",
            "year": int(1900 + (start + k) % 120),
            "score": float(rng.normal()),
            "title": f"t{(start + k) % 37:02d}-{k}",
            "flag": bool(k % 3 == 0),
            "vec": rng.random(8).tolist(),
        }
        for k in range(n)
    ]


def test_scalar_indexes_end_to_end(node, client: MilvusClient):
    """Four scalar indexes beside the vector one: built per flushed segment (files under
    index_files/), listed and described as given, Finished with progress; the QueryNode loads them
    and query / search take the index path with the scan's answer (growing rows are scanned);
    compaction's target gets them built; DropIndex and DropCollection leave no file."""
    s = client.create_schema()
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("tag", DataType.VARCHAR, max_length=16)
    s.add_field("year", DataType.INT64)
    s.add_field("score", DataType.DOUBLE)
    s.add_field("title", DataType.VARCHAR, max_length=32)
    s.add_field("flag", DataType.BOOL)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=8)
    client.create_collection("sx", schema=s)
    for k in range(3):
        client.insert("sx", rows(k, k * 1000, 1000))
        client.flush("sx")
    ip = client.prepare_index_params()
    ip.add_index("vec", index_type="FLAT", metric_type="L2")
    ip.add_index("tag", index_type="BITMAP")
    ip.add_index("year", index_type="STL_SORT")
    ip.add_index("score", index_type="INVERTED", index_name="score_inv")
    ip.add_index("title", index_type="Trie")
    ip.add_index("flag")  # AUTOINDEX → BITMAP
    client.create_index("sx", ip)
    assert sorted(client.list_indexes("sx")) == ["flag", "score_inv", "tag", "title", "vec", "year"]
    assert client.list_indexes("sx", field_name="year") == ["year"]
    d = client.describe_index("sx", "score_inv")
    assert d["index_type"] == "INVERTED" and d["field_name"] == "score" and "metric_type" not in d
    assert "index_type" not in client.describe_index("sx", "flag")  # as given: nothing
    with pytest.raises(MilvusException, match="creating multiple indexes on same field is not supported"):
        client.create_index("sx", _one(client, "year", "INVERTED"))
    wait_until(lambda: client.describe_index("sx", "title")["state"] == "Finished", 60, what="scalar indexes built")
    d = client.describe_index("sx", "title")
    assert d["indexed_rows"] == d["total_rows"] == 3000 and d["pending_index_rows"] == 0
    coll_id = client.describe_collection("sx")["collection_id"]
    files = [k for k, _ in node.node.store.list_sync(paths.index_files_prefix(coll_id))]
    assert len(files) == 6 * 3  # six indexes × three flushed segments
    client.load_collection("sx")
    client.insert("sx", rows(9, 5000, 300))  # growing: no index, scanned
    everything = client.query("sx", filter="id >= 0", output_fields=["*"], limit=16384)
    data = {r["id"]: r for r in everything}
    filters = {
        'tag == "x"': lambda r: r["tag"] == "x",
        'tag in ["red", "blue"]': lambda r: r["tag"] in ("red", "blue"),
        "1950 <= year < 1960": lambda r: 1950 <= r["year"] < 1960,
        "score > 1.5": lambda r: r["score"] > 1.5,
        'title like "t07-%"': lambda r: r["title"].startswith("t07-"),
        'flag == true and tag != "x"': lambda r: r["flag"] and r["tag"] != "x",
    }
    for expr, want in filters.items():
        before = lookups()
        got = sorted(r["id"] for r in client.query("sx", filter=expr, output_fields=["id"], limit=16384))
        assert got == sorted(i for i, r in data.items() if want(r)), expr
        assert lookups() > before, f"{expr}: no scalar index answered"
    hits = client.search("sx", [[0.5] * 8], limit=20, filter='tag == "x"', output_fields=["tag"])[0]
    assert hits and all(h["entity"]["tag"] == "x" for h in hits)
    # Compaction: its target segment gets every index built.
    client.release_collection("sx")
    client.flush("sx")
    job = client.compact("sx")
    wait_until(lambda: client.get_compaction_state(job) == "Completed", 120, what="compaction")
    wait_until(
        lambda: (
            client.describe_index("sx", "tag")["indexed_rows"] == 3300
            and client.describe_index("sx", "tag")["state"] == "Finished"
        ),
        60,
        what="indexes of the compacted segment",
    )
    client.load_collection("sx")
    got = sorted(r["id"] for r in client.query("sx", filter='tag == "x"', output_fields=["id"], limit=16384))
    assert got == sorted(i for i, r in data.items() if r["tag"] == "x")
    client.release_collection("sx")
    client.drop_index("sx", "title")
    wait_until(lambda: "title" not in client.list_indexes("sx"), 30, what="title dropped")
    client.drop_collection("sx")
    wait_until(
        lambda: not list(node.node.store.list_sync(paths.index_files_prefix(coll_id))), 60, what="files collected"
    )


def _one(client: MilvusClient, field_name: str, index_type: str):
    ip = client.prepare_index_params()
    ip.add_index(field_name, index_type=index_type, index_name=f"{field_name}_2")
    return ip
