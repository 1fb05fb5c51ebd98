"""Collection aliases through pymilvus 3.0 (MilvusClient and ORM): an alias resolves wherever a
collection name is accepted, moves with AlterAlias (every Proxy's cache follows), blocks
dropping its collection, and bad input gets Milvus 2.4's codes and messages with nothing written."""

from __future__ import annotations

import pytest
from pymilvus import Collection, MilvusClient, MilvusException, utility

from tests.system.test_dynamic_field import repro_schema


def _rows(start, n):
    return [{"id": i, "vec": [0.1, 0.2, 0.3, 0.4]} for i in range(start, start + n)]


def _alias_keys(node):
    return node.call(node.node.kv.get_prefix("root-coord/aliases/"))


def test_alias_resolves_everywhere_and_moves(node, client, orm):
    client.create_collection("c1", schema=repro_schema())
    client.create_collection("c2", schema=repro_schema())
    client.create_alias("c1", "prod")
    client.create_alias("c1", "prod")  # the same alias again is fine
    assert client.describe_alias("prod")["collection_name"] == "c1"
    assert client.list_aliases("c1")["aliases"] == ["prod"]
    assert client.has_collection("prod")
    desc = client.describe_collection("prod")
    assert desc["collection_name"] == "c1" and desc["aliases"] == ["prod"]
    assert Collection("prod", using=orm).name == "prod" and utility.list_aliases("c1", using=orm) == ["prod"]
    # Insert, flush and statistics through the alias land in c1.
    assert client.insert("prod", _rows(0, 3))["insert_count"] == 3
    client.flush("prod")
    assert client.get_collection_stats("c1")["row_count"] == 3
    assert client.get_collection_stats("prod")["row_count"] == 3
    # AlterAlias: the Proxy that cached prod → c1 follows at once.
    client.alter_alias("c2", "prod")
    client.insert("prod", _rows(10, 2))
    client.flush("prod")
    assert client.get_collection_stats("c2")["row_count"] == 2
    assert client.get_collection_stats("c1")["row_count"] == 3
    assert client.list_aliases("c1")["aliases"] == [] and client.list_aliases("c2")["aliases"] == ["prod"]
    # Dropping a collection that has aliases is refused (as in Milvus), nothing changes.
    with pytest.raises(MilvusException) as err:
        client.drop_collection("c2")
    assert err.value.code == 65535
    assert (
        "unable to drop the collection [c2] because it has associated aliases [prod], please remove all "
        "aliases before dropping the collection"
    ) in err.value.message
    with pytest.raises(MilvusException) as err:
        client.drop_collection("prod")
    assert "cannot drop the collection via alias = prod" in err.value.message
    assert client.has_collection("c2") and client.describe_alias("prod")["collection_name"] == "c2"
    client.drop_alias("prod")
    client.drop_alias("prod")  # unknown alias: success, as in Milvus 2.4
    assert not client.has_collection("prod") and _alias_keys(node) == []
    client.drop_collection("c2")
    assert not client.has_collection("c2")


def test_alias_survives_a_restart(node_factory):
    n = node_factory()
    c = MilvusClient(uri=n.uri)
    c.create_collection("c1", schema=repro_schema())
    c.create_alias("c1", "a1")
    c.close()
    n.stop()
    n2 = node_factory()
    c = MilvusClient(uri=n2.uri)
    assert c.describe_alias("a1")["collection_name"] == "c1"
    assert c.describe_collection("a1")["aliases"] == ["a1"]
    c.close()


@pytest.mark.parametrize(
    "call,code,needle",
    [
        (lambda c: c.create_alias("c1", "c2"), 1601, "alias and collection name conflict[database=default][alias=c2]"),
        (lambda c: c.create_alias("nope", "a2"), 100, "collection not found[database=default][collection=nope]"),
        (
            lambda c: c.create_alias("c2", "a1"),
            1602,
            "alias already exist[database=default][alias=a1 is alias to another collection: c1]",
        ),
        (lambda c: c.alter_alias("c1", "nope"), 1600, "alias not found[database=default][alias=nope]"),
        (lambda c: c.alter_alias("c1", "c2"), 1601, "alias and collection name conflict"),
        (lambda c: c.alter_alias("nope", "a1"), 100, "collection not found"),
        (lambda c: c.describe_alias("nope"), 1600, "alias not found[database=default][alias=nope]"),
        (lambda c: c.create_alias("c1", "1bad"), 1100, "Invalid alias name: 1bad"),
        (
            lambda c: c.create_collection("a1", schema=repro_schema()),
            65535,
            "collection name [a1] conflicts with an existing alias, please choose a unique name",
        ),
    ],
)
def test_bad_alias_input_is_refused_and_nothing_written(node, client, call, code, needle):
    client.create_collection("c1", schema=repro_schema())
    client.create_collection("c2", schema=repro_schema())
    client.create_alias("c1", "a1")
    before = node.call(node.node.kv.get_prefix("root-coord/"))
    with pytest.raises(MilvusException) as err:
        call(client)
    assert err.value.code == code and needle in err.value.message, err.value
    assert node.call(node.node.kv.get_prefix("root-coord/")) == before
