"""Query, Get and count(*) through pymilvus: expressions in Milvus' grammar over flushed and
growing rows, deletes applied (Strong reads see a delete acknowledged just before), and Milvus'
answers to bad input."""

from __future__ import annotations

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException

DIM = 8


def make(client: MilvusClient, name: str, pk: str = "int", dynamic: bool = True) -> None:
    schema = MilvusClient.create_schema(enable_dynamic_field=dynamic)
    if pk == "int":
        schema.add_field("id", DataType.INT64, is_primary=True)
    else:
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=16)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("name", DataType.VARCHAR, max_length=32)
    schema.add_field("age", DataType.INT32)
    schema.add_field("meta", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index("vec", index_type="FLAT", metric_type="L2")
    client.create_collection(name, schema=schema, index_params=index, consistency_level="Strong")


def rows(start: int, n: int, pk: str = "int") -> list[dict]:
    rng = np.random.default_rng(start)
    vecs = rng.random((n, DIM), dtype=np.float32)
    return [
        {
            "id": (start + i) if pk == "int" else f"k{start + i}",
            "vec": vecs[i],
            "name": f"{'alice' if (start + i) % 3 == 0 else 'bob'}-{start + i}",
            "age": (start + i) % 50,
            "meta": {"color": "red" if (start + i) % 2 else "blue", "n": start + i},
        }
        for i in range(n)
    ]


@pytest.fixture
def loaded(client):
    """600 flushed + 150 growing rows, loaded."""
    make(client, "q")
    client.insert("q", rows(0, 600))
    client.flush("q")
    client.insert("q", rows(600, 150))
    client.load_collection("q")
    return client


def ids(res) -> list:
    return sorted(r["id"] for r in res)


def test_query_expressions_over_flushed_and_growing_rows(loaded):
    c = loaded
    assert c.query("q", filter="", output_fields=["count(*)"])[0]["count(*)"] == 750
    assert ids(c.query("q", filter="id in [3, 640, 9999]")) == [3, 640]
    got = c.get("q", ids=[5, 700], output_fields=["name", "meta", "vec"])
    assert sorted(r["id"] for r in got) == [5, 700]
    by_id = {r["id"]: r for r in got}
    assert by_id[700]["name"] == "bob-700" and by_id[700]["meta"] == {"color": "blue", "n": 700}
    assert np.allclose(by_id[5]["vec"], rows(0, 600)[5]["vec"])
    assert ids(c.query("q", filter='name == "alice-3"')) == [3]
    assert ids(c.query("q", filter='name like "alice-7%"')) == [
        i for i in range(750) if i % 3 == 0 and str(i).startswith("7")
    ]
    assert ids(c.query("q", filter='meta["color"] == "red" and age < 3')) == [
        i for i in range(750) if i % 2 and i % 50 < 3
    ]
    assert ids(c.query("q", filter="age not in [0, 1] and id < 60")) == [i for i in range(60) if i % 50 > 1]
    assert c.query("q", filter="age == 7", output_fields=["count(*)"])[0]["count(*)"] == 15
    page = c.query("q", filter="id >= 0", limit=5, offset=10, output_fields=["id"])
    assert [r["id"] for r in page] == list(range(10, 15))


def test_delete_is_seen_by_a_strong_read_and_count(loaded):
    c = loaded
    c.delete("q", ids=[1, 2, 610])  # two flushed rows and one growing row
    assert c.query("q", filter="", output_fields=["count(*)"])[0]["count(*)"] == 747
    assert ids(c.query("q", filter="id in [1, 2, 3, 610, 611]")) == [3, 611]
    hits = c.search("q", data=[rows(0, 600)[1]["vec"]], limit=3)[0]
    assert 1 not in [h["id"] for h in hits]
    c.flush("q")  # the deletes reach delta logs; the growing rows become sealed
    c.release_collection("q")
    c.load_collection("q")  # reloaded from binlogs and delta logs
    assert c.query("q", filter="", output_fields=["count(*)"])[0]["count(*)"] == 747
    assert ids(c.query("q", filter="id in [1, 2, 610]")) == []


def test_varchar_primary_key_get_and_in(client):
    make(client, "v", pk="str")
    client.insert("v", rows(0, 50, pk="str"))
    client.load_collection("v")
    assert ids(client.get("v", ids=["k3", "k40", "nope"])) == ["k3", "k40"]
    assert ids(client.query("v", filter='id in ["k1", "k2"]')) == ["k1", "k2"]


def test_query_bad_input_is_refused_as_milvus_does(client):
    make(client, "bad", dynamic=False)  # MilvusClient loads a collection created with an index
    client.insert("bad", rows(0, 10))
    client.release_collection("bad")
    with pytest.raises(MilvusException) as e:
        client.query("bad", filter="id > 0")
    assert e.value.code == 101 and "collection not loaded" in e.value.message
    client.load_collection("bad")
    with pytest.raises(MilvusException) as e:
        client.query("bad", filter="id >> 0")
    assert e.value.code == 1100 and "cannot parse expression" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.query("bad", filter="nope > 0")
    assert e.value.code == 1100 or "nope" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.query("bad", filter="id > 0", output_fields=["nope"])
    assert e.value.code == 1700 and "field nope not exist" in e.value.message


def test_load_release_partitions(client):
    make(client, "p")
    client.create_partition("p", "p1")
    client.create_partition("p", "p2")
    client.insert("p", rows(0, 3), partition_name="p1")
    client.insert("p", rows(3, 3), partition_name="p2")
    client.release_collection("p")
    client.load_partitions("p", ["p1", "p2"])
    assert ids(client.query("p", filter="id >= 0")) == [0, 1, 2, 3, 4, 5]
    assert ids(client.query("p", filter="id >= 0", partition_names=["p2"])) == [3, 4, 5]
    client.release_partitions("p", ["p1"])
    assert ids(client.query("p", filter="id >= 0")) == [3, 4, 5]
    with pytest.raises(MilvusException) as e:
        client.query("p", filter="id >= 0", partition_names=["p1"])
    assert "partition not loaded" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.drop_partition("p", "p2")
    assert "partition cannot be dropped, partition is loaded, please release it first" in e.value.message
    client.drop_partition("p", "p1")
    assert ids(client.get("p", ids=[1, 4])) == [4]


def test_delete_by_any_expression(loaded):
    c = loaded
    res = c.delete("q", filter='name like "alice-%" and id < 30')
    assert res["delete_count"] == 10
    assert c.query("q", filter='name like "alice-%" and id < 30') == []
    assert c.query("q", filter="", output_fields=["count(*)"])[0]["count(*)"] == 740


def _shop(client: MilvusClient) -> list[dict]:
    """A collection with sortable fields over two flushed segments and growing rows: price has
    repeats and nulls, rating has many ties."""
    schema = MilvusClient.create_schema()
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("category", DataType.VARCHAR, max_length=16)
    schema.add_field("price", DataType.DOUBLE, nullable=True)
    schema.add_field("rating", DataType.INT32)
    schema.add_field("sale", DataType.BOOL)
    schema.add_field("meta", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index("vec", index_type="FLAT", metric_type="L2")
    client.create_collection("shop", schema=schema, index_params=index, consistency_level="Strong")
    rng = np.random.default_rng(7)
    data = [
        {
            "pk": i,
            "vec": rng.random(DIM, dtype=np.float32),
            "category": ["books", "food", "toys", "garden"][int(rng.integers(4))],
            "price": None if i % 11 == 0 else float(rng.integers(0, 40)) / 4,
            "rating": int(rng.integers(1, 6)),
            "sale": bool(i % 3 == 0),
            "meta": {"i": i},
        }
        for i in range(300)
    ]
    client.insert("shop", data[:120])
    client.flush("shop")
    client.insert("shop", data[120:240])
    client.flush("shop")
    client.load_collection("shop")
    client.insert("shop", data[240:])  # growing
    return data


def _expect(data: list[dict], keys: list[tuple[str, bool, bool]], where=lambda r: True) -> list[int]:
    """The pks in ORDER BY order, each key (field, ascending, nulls first), ties by pk."""
    rows = [r for r in data if where(r)]
    for field, asc, nulls_first in reversed(keys):  # least significant first; sorts are stable
        present = sorted((r for r in rows if r[field] is not None), key=lambda r: r[field], reverse=not asc)
        nulls = [r for r in rows if r[field] is None]
        rows = nulls + present if nulls_first else present + nulls
    return [r["pk"] for r in rows]


def _pks(res) -> list[int]:
    return [r["pk"] for r in res]


def test_query_order_by(client):
    """Milvus 2.6's query ORDER BY (the `order_by_fields` query param pymilvus' `order_by`
    sends): rows sorted by the fields (asc, desc; nulls last ascending and first descending, or
    as `:nulls_first` / `:nulls_last` say), over flushed and growing segments, with limit and
    offset, the sort field shown or not; equal keys in primary key order."""
    data = _shop(client)
    got = client.query("shop", filter="", output_fields=["price"], limit=10, order_by=["price:asc"])
    assert _pks(got) == _expect(data, [("price", True, False), ("pk", True, False)])[:10]
    assert [r["price"] for r in got] == sorted(r["price"] for r in got)
    got = client.query("shop", filter="", output_fields=["price"], limit=10, order_by=["price:desc"])
    assert _pks(got) == _expect(data, [("price", False, True), ("pk", True, False)])[:10]
    assert all(r["price"] is None for r in got[:5])  # DESC: nulls first
    keys = [("rating", False, True), ("price", True, False), ("pk", True, False)]
    for offset, limit in ((0, 20), (20, 20), (290, 20)):
        got = client.query(
            "shop",
            filter="pk >= 0",
            output_fields=["rating", "price"],
            limit=limit,
            offset=offset,
            order_by=["rating:desc", "price:asc"],
        )
        assert _pks(got) == _expect(data, keys)[offset : offset + limit]
    got = client.query(
        "shop",
        filter="rating >= 3",
        output_fields=["category"],
        limit=15,
        order_by=["category", "price:desc:nulls_last"],
    )
    assert (
        _pks(got)
        == _expect(
            data, [("category", True, False), ("price", False, False), ("pk", True, False)], lambda r: r["rating"] >= 3
        )[:15]
    )
    assert "price" not in got[0]  # a sort field not asked for is not shown
    got = client.query("shop", filter="", output_fields=["sale"], limit=5, order_by=["sale:desc", "pk:desc"])
    assert _pks(got) == sorted((r["pk"] for r in data if r["sale"]), reverse=True)[:5]
    got = client.query("shop", filter="", output_fields=["price"], limit=3, order_by=["price:asc:nulls_first"])
    assert _pks(got) == [0, 11, 22]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"order_by": ["price:asc"]}, "ORDER BY requires explicit limit"),
        (
            {"order_by": ["price:up"], "limit": 3},
            "invalid order direction 'up' for field 'price', must be 'asc' or 'desc'",
        ),
        ({"order_by": ["nope"], "limit": 3}, "order_by field 'nope' does not exist in collection schema"),
        ({"order_by": ["vec"], "limit": 3}, "order_by field 'vec' has type FloatVector which is not sortable"),
        ({"order_by": ["meta"], "limit": 3}, "order_by field 'meta' has type JSON which is not sortable"),
        ({"order_by": ["price:asc:nulls_middle"], "limit": 3}, "invalid null ordering 'nulls_middle'"),
        ({"order_by_fields": "price:asc", "limit": 3, "iterator": "True"}, "ORDER BY with iterator is not supported"),
    ],
)
def test_query_order_by_refused_as_milvus(client, kwargs, needle):
    _shop(client)
    with pytest.raises(MilvusException) as e:
        client.query("shop", filter="pk >= 0", output_fields=["price"], **kwargs)
    assert e.value.code == 1100 and needle in e.value.message, e.value
