"""Collection alteration through pymilvus 3.0: properties, field parameters and rename change the
meta in etcd and every Proxy's view at once; bad input gets Milvus' messages with nothing written."""

from __future__ import annotations

import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from kmilvus.proto import internal_pb2


def _schema(client: MilvusClient):
    schema = client.create_schema(enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=4)
    schema.add_field("title", DataType.VARCHAR, max_length=8)
    return schema


def _rows(start: int, n: int, title: str = "t"):
    return [{"id": i, "vec": [0.1, 0.2, 0.3, 0.4], "title": title} for i in range(start, start + n)]


def _stored_info(node, coll_id: int) -> internal_pb2.CollectionInfo:
    raw = node.call(node.node.kv.get(f"root-coord/collection/{coll_id}"))
    return internal_pb2.CollectionInfo.FromString(raw)


def test_alter_collection_properties_are_kept_and_dropped(node, client):
    client.create_collection("c", schema=_schema(client))
    client.alter_collection_properties("c", properties={"mmap.enabled": True, "team": "search"})
    desc = client.describe_collection("c")
    assert desc["properties"]["mmap.enabled"] == "True" and desc["properties"]["team"] == "search"
    stored = {kv.key: kv.value for kv in _stored_info(node, desc["collection_id"]).properties}
    assert stored == {"mmap.enabled": "True", "team": "search"}

    client.drop_collection_properties("c", property_keys=["mmap.enabled"])
    assert client.describe_collection("c")["properties"] == {"team": "search"}

    with pytest.raises(MilvusException) as err:
        client.alter_collection_properties("c", properties={"mmap.enabled": "maybe"})
    assert "invalid mmap.enabled value: maybe, expected: true, false" in err.value.message
    assert client.describe_collection("c")["properties"] == {"team": "search"}

    with pytest.raises(MilvusException) as err:
        client.alter_collection_properties("nosuch", properties={"mmap.enabled": True})
    assert err.value.code == 100 and "collection not found[collection=nosuch]" in err.value.message


def test_a_collection_ttl_is_validated_and_kept(node, client):
    client.create_collection("c", schema=_schema(client))
    with pytest.raises(MilvusException) as err:
        client.alter_collection_properties("c", properties={"collection.ttl.seconds": "soon"})
    assert "collection TTL is not a valid positive integer: soon" in err.value.message
    assert client.describe_collection("c")["properties"] == {}
    client.alter_collection_properties("c", properties={"collection.ttl.seconds": 500})
    assert client.describe_collection("c")["properties"] == {"collection.ttl.seconds": "500"}
    client.create_collection("t", schema=_schema(client), properties={"collection.ttl.seconds": 60})
    assert client.describe_collection("t")["properties"] == {"collection.ttl.seconds": "60"}


def test_alter_index_properties(node, client):
    """Milvus 2.5's AlterIndex: mmap.enabled set and removed; other keys and mixed requests refused."""
    client.create_collection("c", schema=_schema(client))
    params = client.prepare_index_params()
    params.add_index(field_name="vec", index_name="v", index_type="FLAT", metric_type="L2")
    client.create_index("c", params)
    client.alter_index_properties("c", index_name="v", properties={"mmap.enabled": True})
    desc = client.describe_index("c", "v")
    assert desc["mmap.enabled"] == "true" and desc["index_type"] == "FLAT"
    client.drop_index_properties("c", index_name="v", property_keys=["mmap.enabled"])
    assert "mmap.enabled" not in client.describe_index("c", "v")
    for props, needle in (
        ({"nlist": 8}, "nlist is not configable index param"),
        ({"mmap.enabled": "maybe"}, "invalid mmap.enabled value: maybe"),
    ):
        with pytest.raises(MilvusException) as err:
            client.alter_index_properties("c", index_name="v", properties=props)
        assert needle in err.value.message
    with pytest.raises(MilvusException) as err:
        client.alter_index_properties("c", index_name="nope", properties={"mmap.enabled": True})
    assert err.value.code == 700 and "index not found" in err.value.message
    assert "mmap.enabled" not in client.describe_index("c", "v")
    # A retried CreateIndex with the same params still matches: properties are not build params.
    client.alter_index_properties("c", index_name="v", properties={"mmap.enabled": False})
    client.create_index("c", params)
    assert client.list_indexes("c") == ["v"]


def test_alter_field_max_length_takes_effect_in_the_proxy_at_once(node, client):
    client.create_collection("c", schema=_schema(client))
    with pytest.raises(MilvusException) as err:  # the Proxy caches the schema: max_length 8
        client.insert("c", _rows(0, 1, title="x" * 20))
    assert "length" in err.value.message

    client.alter_collection_field("c", field_name="title", field_params={"max_length": 64, "mmap.enabled": True})
    assert client.insert("c", _rows(0, 2, title="x" * 20))["insert_count"] == 2
    field = next(f for f in client.describe_collection("c")["fields"] if f["name"] == "title")
    assert field["params"]["max_length"] == 64

    with pytest.raises(MilvusException) as err:
        client.alter_collection_field("c", field_name="id", field_params={"max_length": 64})
    assert "can not modify the maxlength for non-string types, field: id" in err.value.message
    with pytest.raises(MilvusException) as err:
        client.alter_collection_field("c", field_name="title", field_params={"max_length": 70000})
    assert "should be in (0, 65535]" in err.value.message
    with pytest.raises(MilvusException) as err:
        client.alter_collection_field("c", field_name="nosuch", field_params={"mmap.enabled": True})
    assert "field not found in collection[field=nosuch]" in err.value.message
    field = next(f for f in client.describe_collection("c")["fields"] if f["name"] == "title")
    assert field["params"]["max_length"] == 64  # nothing written by the refused calls


def test_rename_moves_the_name_and_keeps_the_data(node, client):
    client.create_collection("old", schema=_schema(client))
    client.create_collection("other", schema=_schema(client))
    client.insert("old", _rows(0, 3))
    client.flush("old")
    coll_id = client.describe_collection("old")["collection_id"]

    client.rename_collection("old", "new")
    assert not client.has_collection("old") and client.has_collection("new")
    assert client.describe_collection("new")["collection_id"] == coll_id
    assert client.get_collection_stats("new")["row_count"] == 3
    client.insert("new", _rows(10, 2))  # the Proxy routes the new name to the same collection
    client.flush("new")
    assert client.get_collection_stats("new")["row_count"] == 5
    assert _stored_info(node, coll_id).schema.name == "new"
    names = node.call(node.node.kv.get_prefix("root-coord/collection-name/default/"))
    assert sorted(k.rsplit("/", 1)[-1] for k, _ in names) == ["new", "other"]

    with pytest.raises(MilvusException) as err:
        client.insert("old", _rows(20, 1))
    assert err.value.code == 100
    with pytest.raises(MilvusException) as err:
        client.rename_collection("new", "other")
    assert "duplicated new collection name other in database default with other collection name" in err.value.message
    with pytest.raises(MilvusException) as err:
        client.rename_collection("nosuch", "x")
    assert "collection not found[collection=nosuch]" in err.value.message
    assert client.describe_collection("new")["collection_id"] == coll_id


def _mapping_of(address: int) -> str:
    """The /proc/self/maps line of the mapping holding `address` ("" when none does)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return line.strip()
    return ""


def test_alter_field_mmap_maps_its_data_and_is_refused_while_loaded(node, client):
    """Milvus' field-level `mmap.enabled` (also spelt `mmap_enabled`) is honoured: a loaded
    sealed segment's data of the field lives in a memory-mapped file, not in the heap; Milvus
    refuses to change it while the collection is loaded, and refuses keys it does not alter."""
    client.create_collection("c", schema=_schema(client))
    params = client.prepare_index_params()
    params.add_index(field_name="vec", index_type="FLAT", metric_type="L2")
    client.create_index("c", params)
    client.alter_collection_field("c", field_name="title", field_params={"mmap_enabled": True})
    client.alter_collection_field("c", field_name="title", field_params={"field.description": "the title"})
    title = next(f for f in client.describe_collection("c")["fields"] if f["name"] == "title")
    assert title["params"]["mmap_enabled"] is True and title["description"] == "the title"
    client.insert("c", _rows(0, 50, title="mapped"))
    client.flush("c")
    client.load_collection("c")
    coll_id = client.describe_collection("c")["collection_id"]
    (seg,) = node.component("querynode").collections[coll_id].sealed.values()
    fid = {f.name: f.fieldID for f in node.component("querynode").collections[coll_id].schema.fields}
    mapped = _mapping_of(seg.table.column(str(fid["title"])).chunks[0].buffers()[-1].address)
    assert "kmilvus-mmap" in mapped and "(deleted)" in mapped, mapped
    assert "kmilvus-mmap" not in _mapping_of(seg.table.column(str(fid["id"])).chunks[0].buffers()[-1].address)
    assert {r["title"] for r in client.query("c", "id >= 0", output_fields=["title"])} == {"mapped"}
    assert len(client.query("c", 'title == "mapped"', output_fields=["id"])) == 50

    for props in ({"mmap.enabled": False}, {"mmap_enabled": False}):
        with pytest.raises(MilvusException) as err:
            client.alter_collection_field("c", field_name="title", field_params=props)
        assert err.value.code == 104
        assert "can not alter collection field properties if collection loaded" in err.value.message
    with pytest.raises(MilvusException) as err:
        client.alter_collection_field("c", field_name="title", field_params={"analyzer_params": "{}"})
    assert err.value.code == 1100
    assert "analyzer_params does not allow update in collection field param" in err.value.message
    client.release_collection("c")
    client.alter_collection_field("c", field_name="title", field_params={"mmap.enabled": False})
    client.load_collection("c")
    (seg,) = node.component("querynode").collections[coll_id].sealed.values()
    assert "kmilvus-mmap" not in _mapping_of(seg.table.column(str(fid["title"])).chunks[0].buffers()[-1].address)
