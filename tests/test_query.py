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
