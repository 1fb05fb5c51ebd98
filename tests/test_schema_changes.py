"""The schema and data changes Milvus 2.5–2.6 users make, through pymilvus 3.0: partial-update
upserts (only the given fields change), fields added to a collection, and what is refused."""

from __future__ import annotations

import pytest
from pymilvus import DataType, MilvusClient, MilvusException


def _products(client: MilvusClient, dynamic: bool = False):
    schema = client.create_schema(enable_dynamic_field=dynamic)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    schema.add_field("name", DataType.VARCHAR, max_length=100)
    schema.add_field("price", DataType.FLOAT)
    schema.add_field("note", DataType.VARCHAR, max_length=100, nullable=True)
    client.create_collection("p", schema=schema, consistency_level="Strong")
    ip = client.prepare_index_params()
    ip.add_index("vec", metric_type="L2")
    client.create_index("p", ip)
    client.load_collection("p")


def _rows(client) -> dict[int, dict]:
    return {r["id"]: r for r in client.query("p", "id >= 0", output_fields=["*"])}


@pytest.mark.parametrize("flushed", [False, True])
def test_partial_update_changes_only_the_given_fields(client, flushed):
    _products(client)
    client.insert(
        "p",
        [
            {"id": 1, "vec": [1.0, 2.0], "name": "A", "price": 100.0, "note": "n1"},
            {"id": 2, "vec": [3.0, 4.0], "name": "B", "price": 200.0, "note": None},
        ],
    )
    if flushed:
        client.flush("p")
    client.upsert("p", [{"id": 1, "price": 80.0}, {"id": 2, "price": 150.0}], partial_update=True)
    rows = _rows(client)
    assert (rows[1]["name"], rows[1]["price"], rows[1]["note"], rows[1]["vec"]) == ("A", 80.0, "n1", [1.0, 2.0])
    assert (rows[2]["name"], rows[2]["price"], rows[2]["note"], rows[2]["vec"]) == ("B", 150.0, None, [3.0, 4.0])
    client.upsert("p", [{"id": 2, "name": "B2", "note": "set"}], partial_update=True)
    rows = _rows(client)
    assert (rows[2]["name"], rows[2]["price"], rows[2]["note"]) == ("B2", 150.0, "set")
    assert len(rows) == 2


def test_partial_update_of_a_new_key_inserts_it_or_names_the_missing_field(client):
    _products(client)
    client.insert("p", [{"id": 1, "vec": [1.0, 2.0], "name": "A", "price": 1.0, "note": "n"}])
    client.upsert("p", [{"id": 3, "vec": [0.0, 0.0], "name": "C", "price": 3.0}], partial_update=True)
    assert _rows(client)[3]["note"] is None  # nullable: null
    with pytest.raises(MilvusException) as err:
        client.upsert("p", [{"id": 4, "price": 4.0}], partial_update=True)
    assert "insert missed an field `vec`" in err.value.message
    assert sorted(_rows(client)) == [1, 3]


def test_partial_update_merges_dynamic_keys(client):
    _products(client, dynamic=True)
    client.insert("p", [{"id": 1, "vec": [1.0, 2.0], "name": "A", "price": 1.0, "color": "red", "size": 3}])
    client.upsert("p", [{"id": 1, "price": 2.0, "size": 4}], partial_update=True)
    row = _rows(client)[1]
    assert (row["price"], row["color"], row["size"], row["name"]) == (2.0, "red", 4, "A")
