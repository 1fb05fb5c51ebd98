"""The coordinators' facade for the operator (kmilvus.coordinator.CoordinatorClient): the same
answers in-process (the component objects) and over gRPC (clients found through sessions), and the
segment change feed pushed on every segment meta change — on real etcd, JetStream and storage."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient
from pymilvus.grpc_gen import common_pb2

from kmilvus import components as roles
from kmilvus.coordinator import CoordinatorClient, DropState
from kmilvus.datacoord.segment_feed import FeedOverflow, SegmentFeed
from kmilvus.meta import EtcdKV
from kmilvus.proto import internal_pb2
from kmilvus.util import merr
from tests.util import eventually

STATE = common_pb2.SegmentState


async def _reads(co: CoordinatorClient, name: str) -> dict:
    desc = await co.describe_collection("default", name)
    by_id = await co.describe_collection(collection_id=desc.collectionID)
    listed = [d for d in await co.list_collections() if d.collectionID == desc.collectionID]
    return {
        "id": desc.collectionID,
        "by_id_name": by_id.collection_name,
        "vchannels": list(desc.virtual_channel_names),
        "listed": [(d.db_name, d.collection_name, {kv.key: kv.value for kv in d.properties}) for d in listed],
        "missing": await co.describe_collection("default", "no_such_collection"),
        "missing_id": await co.describe_collection(collection_id=desc.collectionID + 10_000),
        "drop_state": await co.drop_state(desc.collectionID),
    }


async def _collect(feed, out: list) -> None:
    async for ev in feed:
        out.append(ev)


@pytest.fixture
async def remote(node, etcd_endpoint):
    """A facade with no component in this process: every call is gRPC (sessions in etcd)."""
    kv = await EtcdKV.connect([etcd_endpoint], f"{node.cfg.cluster}/meta")
    registry = roles.Registry(kv)
    yield CoordinatorClient.from_registry(registry)
    await registry.close()
    await kv.close()


async def test_facade_in_process_and_remote_agree_and_feed_segment_changes(node, remote):
    local = CoordinatorClient.from_registry(node.node.registry)
    client = MilvusClient(uri=node.uri)
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=8)
    await asyncio.to_thread(client.create_collection, "feed", schema=schema)

    want = await _reads(remote, "feed")
    assert node.call(_reads(local, "feed")) == want
    assert want["by_id_name"] == "feed" and want["listed"] == [("default", "feed", {})]
    assert want["missing"] is None and want["missing_id"] is None
    assert want["drop_state"] == DropState(exists=True, dropping=False)
    cid = want["id"]

    # Both feeds subscribed before anything changes.
    feed = node.component(roles.DATACOORD).meta.feed
    remote_events: list = []
    local_events: list = []
    remote_task = asyncio.create_task(_collect(remote.watch_segments([cid]), remote_events))
    local_fut = asyncio.run_coroutine_threadsafe(_collect(local.watch_segments(), local_events), node.loop)
    try:
        await eventually(lambda: feed.subscribers == 2, 10, "both feeds subscribed")
        rows = [{"id": i, "vec": np.random.rand(8).astype("float32")} for i in range(100)]
        await asyncio.to_thread(client.insert, "feed", rows)
        await asyncio.to_thread(client.flush, "feed")

        segs = await remote.list_segments(cid)
        assert [s.state for s in segs] == [STATE.Flushed] and segs[0].num_of_rows == 100
        assert node.call(local.list_segments(cid)) == segs
        assert await remote.segment_infos([segs[0].ID, 424242]) == segs
        sid = segs[0].ID

        def states(events: list) -> list:
            return [e.info.state for e in events if e.segmentID == sid and not e.removed]

        # Created (Growing), sealed by the flush, flushed with its binlogs: each pushed.
        for events in (remote_events, local_events):
            await eventually(
                lambda events=events: STATE.Flushed in states(events), 20, "the flushed segment in the feed"
            )
            got = states(events)
            assert got[0] == STATE.Growing and STATE.Sealed in got and got[-1] == STATE.Flushed
            assert all(e.collectionID == cid for e in events if e.segmentID == sid)
        flushed = [e for e in remote_events if e.info.state == STATE.Flushed][-1]
        assert flushed.info.num_of_rows == 100 and flushed.info.binlog_count >= 1

        # Flush through the facade: nothing Growing is left, so nothing is sealed; flushed already.
        rsp = await remote.flush(cid)
        assert list(rsp.segmentIDs) == [] and list(rsp.flushSegmentIDs) == [sid]
        assert await remote.flush_state(cid, [sid], rsp.flush_ts, wait_ms=5000) is True

        # Drop through the facade: the drop finishes, and the segment's removal is pushed.
        await remote.drop_collection("default", "feed")

        async def dropped() -> bool:
            return await remote.drop_state(cid) == DropState(exists=False, dropping=False)

        await eventually(dropped, 30, "the drop to finish")
        assert await remote.describe_collection(collection_id=cid) is None
        assert await remote.list_segments(cid) == []
        for events in (remote_events, local_events):
            await eventually(
                lambda events=events: any(e.removed and e.segmentID == sid for e in events), 20, "the removal"
            )
        assert not [e for e in remote_events if e.collectionID != cid]  # filtered by collection
    finally:
        remote_task.cancel()
        await asyncio.gather(remote_task, return_exceptions=True)
        local_fut.cancel()
        client.close()
    await eventually(lambda: feed.subscribers == 0, 10, "both feeds unsubscribed")


async def test_feed_cuts_off_a_subscriber_that_falls_behind():
    feed = SegmentFeed(maxsize=2)
    sub = feed.subscribe([7])
    first = asyncio.ensure_future(sub.__anext__())
    await asyncio.sleep(0)  # subscribed: waiting for its first event
    infos = [internal_pb2.SegmentInfo(ID=i, collectionID=7) for i in range(1, 5)]
    feed.publish([internal_pb2.SegmentInfo(ID=99, collectionID=8)])  # another collection: not queued
    feed.publish(infos)
    assert feed.subscribers == 0  # cut off when its queue filled
    assert (await first).segmentID == 1
    assert (await sub.__anext__()).segmentID == 2  # what was queued still comes
    with pytest.raises(FeedOverflow):
        await sub.__anext__()


@pytest.mark.parametrize("where", ["local", "remote"])
async def test_index_calls_reach_datacoord_checked_as_the_proxy_checks(node, remote, where):
    """create_index / describe_indexes / drop_index: what pymilvus then sees; bad params are
    refused with Milvus' messages before DataCoord is asked; a retried create is a no-op."""
    name = f"ix_{where}"
    client = MilvusClient(uri=node.uri)
    try:
        schema = MilvusClient.create_schema()
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=8)
        await asyncio.to_thread(client.create_collection, name, schema=schema)
        if where == "local":  # the component objects answer on the node's loop
            await asyncio.to_thread(
                node.call, _index_flow(CoordinatorClient.from_registry(node.node.registry), client, name)
            )
        else:
            await _index_flow(remote, client, name)
    finally:
        client.close()


async def _index_flow(co: CoordinatorClient, client: MilvusClient, name: str) -> None:
    desc = await co.describe_collection("default", name)
    assert await co.describe_indexes(desc.collectionID) == []
    with pytest.raises(merr.MilvusError, match=r"M out of range: \[4, 64\]"):
        await co.create_index(desc, "vec", {"index_type": "HNSW", "M": 100, "efConstruction": 64})
    with pytest.raises(merr.MilvusError, match=r"field not found\[field=nope\]"):
        await co.create_index(desc, "nope", {"index_type": "FLAT"})
    assert await co.describe_indexes(desc.collectionID) == []
    params = {"index_type": "HNSW", "metric_type": "L2", "M": 16, "efConstruction": 64}
    await co.create_index(desc, "vec", params)
    await co.create_index(desc, "vec", params)  # the same again: nothing changes
    (ix,) = await co.describe_indexes(desc.collectionID)
    assert (ix.name, ix.index_type, ix.metric_type, ix.state) == ("vec", "HNSW", "L2", "Finished")
    assert ix.params["M"] == "16" and ix.params["dim"] == "8"
    seen = await asyncio.to_thread(client.describe_index, name, "vec")
    assert seen["index_type"] == "HNSW" and seen["metric_type"] == "L2", seen
    assert "M" in str(seen) and "16" in str(seen), seen
    with pytest.raises(merr.MilvusError, match="parameters are inconsistent"):
        await co.create_index(desc, "vec", {**params, "M": 8})
    await co.drop_index(desc.collectionID, "vec")
    assert await co.describe_indexes(desc.collectionID) == []
    assert await asyncio.to_thread(client.list_indexes, name) == []
