"""Load, Search and Release through pymilvus against real etcd, JetStream and storage: flushed
rows (sealed segments read from binlogs) and rows still growing (consumed from the stream by the
channel's delegator) alike."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from kmilvus.msgstream import pchannel_of
from kmilvus.proto import query_node_pb2
from tests.util import wait_until

DIM = 16


INDEX_PARAMS = {
    "FLAT": {},
    "HNSW": {"M": 16, "efConstruction": 64},
    "IVF_FLAT": {"nlist": 16},
    "IVF_SQ8": {"nlist": 16},
}
SEARCH_PARAMS = {"FLAT": {}, "HNSW": {"ef": 64}, "IVF_FLAT": {"nprobe": 16}, "IVF_SQ8": {"nprobe": 16}}


def make_collection(
    client: MilvusClient, name: str, shards: int = 2, index_type: str = "FLAT", metric: str = "L2"
) -> None:
    schema = MilvusClient.create_schema(enable_dynamic_field=True)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("tag", DataType.VARCHAR, max_length=32)
    schema.add_field("meta", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index("vec", index_type=index_type, metric_type=metric, params=INDEX_PARAMS[index_type])
    client.create_collection(name, schema=schema, num_shards=shards, consistency_level="Strong")
    client.create_index(name, index)


def rows(start: int, n: int, rng) -> list[dict]:
    vecs = rng.random((n, DIM), dtype=np.float32) - 0.5
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # unit length: a row is its own best match for IP too
    return [
        {"id": start + i, "vec": vecs[i], "tag": f"t{(start + i) % 7}", "meta": {"k": start + i}, "extra": start + i}
        for i in range(n)
    ]


def distribution(node, coll_id: int = 0) -> query_node_pb2.GetDataDistributionResponse:
    qn = node.component("querynode")
    return node.call(qn.GetDataDistribution(query_node_pb2.GetDataDistributionRequest(collectionID=coll_id)))


@pytest.mark.parametrize("index_type", ["FLAT", "HNSW", "IVF_FLAT"])
@pytest.mark.parametrize("metric", ["L2", "IP", "COSINE"])
def test_search_own_vector_flushed_and_growing(client, node, metric, index_type):
    rng = np.random.default_rng(7)
    make_collection(client, "s", index_type=index_type, metric=metric)
    flushed = rows(0, 1500, rng)
    client.insert("s", flushed)
    client.flush("s")
    wait_until(
        lambda: client.describe_index("s", "vec").get("indexed_rows") == 1500, 60, what="index built on flushed rows"
    )
    client.load_collection("s")
    coll_id = client.describe_collection("s")["collection_id"]
    segs = distribution(node, coll_id).segments
    assert segs and all(s.indexed_fieldIDs for s in segs)  # flushed rows are searched through the index
    assert client.get_load_state("s")["state"].name == "Loaded"
    growing = rows(1500, 300, rng)
    client.insert("s", growing)  # acknowledged just before a Strong search: must be seen
    probes = [flushed[3], flushed[1499], growing[0], growing[299]]
    res = client.search(
        "s",
        data=[r["vec"] for r in probes],
        limit=5,
        search_params={"metric_type": metric, "params": SEARCH_PARAMS[index_type]},
        output_fields=["tag", "meta", "vec", "extra"],
    )
    assert len(res) == len(probes)
    for hits, probe in zip(res, probes, strict=True):
        assert len(hits) == 5
        top = hits[0]
        assert top["id"] == probe["id"]
        if metric == "L2":
            assert top["distance"] == pytest.approx(0.0, abs=1e-4)
            assert [h["distance"] for h in hits] == sorted(h["distance"] for h in hits)
        else:
            assert top["distance"] == pytest.approx(1.0, abs=1e-4)
            assert [h["distance"] for h in hits] == sorted((h["distance"] for h in hits), reverse=True)
        ent = top["entity"]
        assert ent["tag"] == probe["tag"] and ent["meta"] == probe["meta"] and ent["extra"] == probe["extra"]
        assert np.allclose(ent["vec"], probe["vec"])
    if index_type != "FLAT":
        return
    # Exact answers: the same top 5 as numpy over every row.
    allv = np.stack([r["vec"] for r in flushed + growing])
    q = probes[0]["vec"]
    if metric == "L2":
        want = np.argsort(((allv - q) ** 2).sum(1))[:5]
    elif metric == "IP":
        want = np.argsort(-(allv @ q))[:5]
    else:
        want = np.argsort(-(allv @ q) / np.linalg.norm(allv, axis=1))[:5]
    assert [h["id"] for h in res[0]] == list(want)


@pytest.mark.parametrize(
    ("index_type", "metric", "holds_raw"),
    [
        ("HNSW", "L2", True),
        ("IVF_FLAT", "IP", True),
        ("FLAT", "L2", True),
        ("IVF_SQ8", "L2", False),  # 8-bit codes: not the inserted values
        ("HNSW", "COSINE", False),  # the index holds the vectors normalized
    ],
)
def test_vector_outputs_of_indexed_rows_without_the_raw_column(client, node, index_type, metric, holds_raw):
    """A loaded sealed segment whose index holds the raw vectors does not keep the vector column
    too (as Milvus 2.3 when the index "has raw data"); vector outputs of search and query are then
    read back from the index and still equal what was inserted, bit for bit."""
    rng = np.random.default_rng(21)
    make_collection(client, "o", shards=1, index_type=index_type, metric=metric)
    data = rows(0, 600, rng)
    for r in data:
        r["vec"] = r["vec"] * (1 + r["id"] % 5)  # not unit length: normalizing would show
    client.insert("o", data)
    client.flush("o")
    wait_until(lambda: client.describe_index("o", "vec").get("indexed_rows") == 600, 60, what="index built")
    client.load_collection("o")
    coll_id = client.describe_collection("o")["collection_id"]
    sealed = node.component("querynode").collections[coll_id].sealed
    assert sealed and all(s.indexes for s in sealed.values())
    vec_id = str(next(f["field_id"] for f in client.describe_collection("o")["fields"] if f["name"] == "vec"))
    assert all((vec_id in s.table.column_names) is not holds_raw for s in sealed.values())
    assert all(not s.vectors for s in sealed.values())  # search goes through the index
    growing = rows(600, 50, rng)
    client.insert("o", growing)  # growing rows beside the sealed ones in the same results

    ids = [0, 7, 599, 123, 600, 649]
    want = {r["id"]: np.asarray(r["vec"], np.float32) for r in data + growing}
    got = client.query("o", filter=f"id in {ids}", output_fields=["vec"])
    assert sorted(g["id"] for g in got) == sorted(ids)
    for g in got:
        assert np.array_equal(np.asarray(g["vec"], np.float32), want[g["id"]])
    probes = [data[7]["vec"], data[599]["vec"]]
    res = client.search(
        "o",
        data=probes,
        limit=5,
        search_params={"metric_type": metric, "params": SEARCH_PARAMS[index_type]},
        output_fields=["vec", "tag"],
    )
    for hits in res:
        assert len(hits) == 5
        for h in hits:
            assert np.array_equal(np.asarray(h["entity"]["vec"], np.float32), want[h["id"]])
            assert h["entity"]["tag"] == f"t{h['id'] % 7}"
    everything = client.query("o", filter="id >= 0", output_fields=["vec"], limit=1000)
    assert len(everything) == 650
    for g in everything:
        assert np.array_equal(np.asarray(g["vec"], np.float32), want[g["id"]])


def test_index_finished_after_load_drops_the_raw_column(client, node):
    """A segment loaded before its index was built: once the index arrives the column goes,
    and vector outputs still come back exactly."""
    rng = np.random.default_rng(23)
    make_collection(client, "late", shards=1, index_type="HNSW")
    client.load_collection("late")  # the index is defined, no segment is built yet
    data = rows(0, 300, rng)
    client.insert("late", data)
    client.flush("late")
    coll_id = client.describe_collection("late")["collection_id"]
    loaded = node.component("querynode").collections[coll_id]
    wait_until(lambda: loaded.sealed and all(s.indexes for s in loaded.sealed.values()), 60, what="index loaded")
    vec_id = str(next(f["field_id"] for f in client.describe_collection("late")["fields"] if f["name"] == "vec"))
    assert all(vec_id not in s.table.column_names and not s.vectors for s in loaded.sealed.values())
    got = client.query("late", filter="id in [0, 150, 299]", output_fields=["vec"])
    assert sorted(g["id"] for g in got) == [0, 150, 299]
    for g in got:
        assert np.array_equal(np.asarray(g["vec"], np.float32), np.asarray(data[g["id"]]["vec"], np.float32))


def test_search_limit_offset_round_decimal_and_growing_to_sealed_handoff(client, node):
    rng = np.random.default_rng(11)
    make_collection(client, "h", shards=1)
    data = rows(0, 400, rng)
    client.insert("h", data)
    client.load_collection("h")
    coll_id = client.describe_collection("h")["collection_id"]
    q = data[10]["vec"]
    full = client.search("h", data=[q], limit=10, search_params={"metric_type": "L2"})[0]
    page = client.search("h", data=[q], limit=5, offset=5, search_params={"metric_type": "L2"})[0]
    assert [h["id"] for h in page] == [h["id"] for h in full][5:]
    rounded = client.search("h", data=[q], limit=3, round_decimal=2, search_params={"metric_type": "L2"})[0]
    assert all(round(h["distance"], 2) == pytest.approx(h["distance"]) for h in rounded)
    d = distribution(node, coll_id)
    assert not d.segments and sum(len(c.growing_segmentIDs) for c in d.channels) >= 1
    client.flush("h")  # the growing segment becomes sealed on the query node
    wait_until(lambda: len(distribution(node, coll_id).segments) >= 1, 20, what="sealed copy loaded")
    d = distribution(node, coll_id)
    sealed = {s.segmentID for s in d.segments}
    assert not sealed & {g for c in d.channels for g in c.growing_segmentIDs}  # never both copies
    assert sum(s.num_rows for s in d.segments) == 400
    after = client.search("h", data=[q], limit=10, search_params={"metric_type": "L2"})[0]
    assert [h["id"] for h in after] == [h["id"] for h in full]  # no gap, no duplicate


def test_search_bad_input_is_refused_as_milvus_does(client, node):
    rng = np.random.default_rng(3)
    make_collection(client, "b", shards=1)
    client.insert("b", rows(0, 10, rng))
    q = rng.random(DIM, dtype=np.float32)
    with pytest.raises(MilvusException) as e:
        client.search("b", data=[q], limit=3)
    assert e.value.code == 101 and "collection not loaded" in e.value.message
    client.load_collection("b")
    with pytest.raises(MilvusException) as e:
        client.search("b", data=[rng.random(DIM + 1, dtype=np.float32)], limit=3)
    assert e.value.code == 1100 and f"is not equal to schema dim ({DIM})" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.search("b", data=[q], limit=16385)
    # Milvus 2.5 answers its parameter checks as plain errors (code 65535), with these texts.
    assert (
        e.value.code == 65535
        and e.value.message == "topk [16385] is invalid, it should be in range [1, 16384], but got 16385"
    )
    with pytest.raises(MilvusException) as e:
        client.search("b", data=[q], limit=16000, offset=1000)
    assert e.value.code == 65535
    assert e.value.message == "offset+topk [17000] is invalid, it should be in range [1, 16384], but got 17000"
    with pytest.raises(MilvusException) as e:
        client.search("b", data=[q], limit=3, search_params={"metric_type": "IP"})
    assert e.value.code == 1100 and "metric type not match" in e.value.message
    with pytest.raises(MilvusException) as e:
        client.search("b", data=[q], limit=3, filter="tag = = 'x'")
    assert e.value.code == 1100 and e.value.message.startswith("failed to create query plan: cannot parse expression")
    assert e.value.message.endswith(": invalid parameter")
    # Milvus refuses to load a vector field without an index.
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    client.create_collection("noindex", schema=schema)
    with pytest.raises(MilvusException) as e:
        client.load_collection("noindex")
    assert e.value.code == 700 and "there is no vector index on field: [vec]" in e.value.message


def test_release_and_drop_free_consumers_and_memory(client, node):
    rng = np.random.default_rng(5)
    make_collection(client, "r", shards=2)
    client.insert("r", rows(0, 500, rng))
    client.flush("r")
    client.insert("r", rows(500, 100, rng))
    client.load_collection("r")
    coll_id = client.describe_collection("r")["collection_id"]
    stream = node.node.stream
    vchannels = client.describe_collection("r")["num_shards"]
    d = distribution(node, coll_id)
    assert len(d.channels) == vchannels and d.memory_bytes > 0
    channels = [c.vchannel for c in d.channels]
    qn_consumers = lambda: [  # noqa: E731
        n for ch in {pchannel_of(c) for c in channels} for n in node.call(stream.consumer_names(ch)) if "-qn" in n
    ]
    assert len(qn_consumers()) == vchannels
    client.release_collection("r")
    assert client.get_load_state("r")["state"].name == "NotLoad"
    d = distribution(node, coll_id)
    assert not d.channels and not d.segments and d.memory_bytes == 0
    wait_until(lambda: not qn_consumers(), 10, what="query node consumers deleted")
    client.load_collection("r")
    assert client.query("r", filter="", output_fields=["count(*)"])[0]["count(*)"] == 600
    client.drop_collection("r")
    wait_until(lambda: not distribution(node, coll_id).channels, 10, what="dropped collection released")
    assert distribution(node).memory_bytes == 0
    wait_until(lambda: not qn_consumers(), 10, what="query node consumers deleted after drop")


@pytest.mark.parametrize("level", ["Strong", "Bounded"])
def test_a_read_on_an_idle_collection_asks_for_the_tick_it_waits_for(node_factory, level):
    """Idle vchannels are ticked only every `vchannel_idle_tick_interval` (an hour here, so only a
    tick on demand can serve the read): a QueryNode whose read waits for a channel's serviceable
    time asks RootCoord for the tick, and the read answers well within its timeout."""
    node = node_factory(time_tick_idle_interval=3600, vchannel_idle_tick_interval=3600)
    client = MilvusClient(uri=node.uri)
    try:
        make_collection(client, "idle")
        client.insert("idle", rows(0, 300, np.random.default_rng(3)))
        client.load_collection("idle")
        # Strong: a fresh timestamp; Bounded: 5 s of staleness, so the last tick must be older.
        time.sleep(1.5 if level == "Strong" else 6.5)  # the channel's last tick ages
        res = client.query("idle", filter="id >= 0", output_fields=["count(*)"], consistency_level=level, timeout=20)
        assert res[0]["count(*)"] == 300
        client.delete("idle", filter="id < 100")
        res = client.query("idle", filter="id >= 0", output_fields=["count(*)"], consistency_level="Strong")
        assert res[0]["count(*)"] == 200  # a delete acknowledged just before a Strong read
        assert node.component("rootcoord").tt_sync.on_demand >= 1
    finally:
        client.close()


@pytest.mark.parametrize("level", ["Strong", "Session"])
def test_a_read_after_a_write_does_not_wait_for_the_periodic_tick(node_factory, level):
    """Milvus' Strong and Session reads wait for the next time tick (up to its 200 ms interval;
    here up to two intervals: the Proxy's report, then RootCoord's publish). A Strong read's
    Proxy reports a tick past the read's timestamp at once, naming the collection's channels (as
    for a flush); a Session read's Proxy reports at once if its last report is older than the
    client's last write, and the QueryNode that must wait asks for the tick. With the periodic
    ticks an hour apart, the reads still see every acknowledged write."""
    node = node_factory(time_tick_interval=3600)
    client = MilvusClient(uri=node.uri)
    try:
        make_collection(client, "rw")
        client.load_collection("rw")
        data = rows(0, 300, np.random.default_rng(5))
        for i in range(3):
            client.insert("rw", data[i * 100 : (i + 1) * 100])
            res = client.query("rw", filter="id >= 0", output_fields=["count(*)"], consistency_level=level, timeout=20)
            assert res[0]["count(*)"] == (i + 1) * 100
        hits = client.search("rw", data=[data[42]["vec"]], limit=1, consistency_level=level, timeout=20)
        assert hits[0][0]["id"] == 42
    finally:
        client.close()


def test_get_query_segment_info_lists_the_loaded_segments(client, node):
    """GetQuerySegmentInfo (MilvusClient.list_loaded_segments, utility.get_query_segment_info;
    Attu's segment view): each sealed segment a QueryNode serves, as Milvus answers it."""
    rng = np.random.default_rng(9)
    make_collection(client, "qs", shards=2, index_type="HNSW")
    with pytest.raises(MilvusException) as e:
        client.list_loaded_segments("qs")
    assert e.value.code == 101
    client.insert("qs", rows(0, 1200, rng))
    client.flush("qs")
    wait_until(lambda: client.describe_index("qs", "vec").get("indexed_rows") == 1200, 60, what="index built")
    client.load_collection("qs")
    client.insert("qs", rows(1200, 50, rng))  # growing rows are not listed (Milvus lists sealed ones)
    coll_id = client.describe_collection("qs")["collection_id"]
    wait_until(lambda: all(s.indexed_fieldIDs for s in distribution(node, coll_id).segments), 60, what="indexes")
    infos = client.list_loaded_segments("qs")
    persistent = {s.segment_id for s in client.list_persistent_segments("qs")}
    assert {i.segment_id for i in infos} == persistent and sum(i.num_rows for i in infos) == 1200
    for i in infos:
        assert i.collection_id == coll_id and i.collection_name == "qs"
        assert i.state_name == "Sealed" and i.level_name == "L1"
        assert i.index_name == "vec" and i.index_id > 0 and i.mem_size > 0
        assert i.node_ids == [node.component("querynode").server_id]
    with pytest.raises(MilvusException) as e:
        client.list_loaded_segments("nope")
    assert e.value.code == 100
