"""RootCoord's DDL decisions, in-process on real etcd and NATS (with DataCoord beside it): the
collection's IDs, DropCollection's one meta transaction, and the drop task that finishes a drop
after a crash."""

from __future__ import annotations

import pytest
from pymilvus.grpc_gen import milvus_pb2

from kmilvus import components as roles
from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.msgstream import MsgStream
from kmilvus.proto import internal_pb2
from kmilvus.rootcoord import RootCoord, root_coord
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_PARTITION
from tests.coordutil import Coords
from tests.harness import make_config
from tests.util import eventually


@pytest.fixture
def cfg(etcd_endpoint, nats_url, root, tmp_path):
    return make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")


@pytest.fixture
async def coords(cfg):
    c = await Coords.start(cfg)
    yield c
    await c.stop()


async def _owned_keys(c: Coords, coll: int, vchans: list[str]) -> list[str]:
    found = []
    for prefix in keys.collection_owned_prefixes(coll, vchans):
        found += [k for k, _ in await c.kv.get_prefix(prefix)]
    return found


async def _collection_with_data(c: Coords):
    desc = await c.create_collection("c", shards=2)
    coll, vchans = desc.collectionID, list(desc.virtual_channel_names)
    for ch in vchans:
        merr.check((await c.assign(coll, ch, 10)).status)
    assert len(c.dc.meta.by_collection(coll)) == 2
    return coll, vchans


async def test_create_records_default_partition_with_an_allocated_id(coords):
    desc = await coords.create_collection("c", shards=2)
    info = internal_pb2.CollectionInfo.FromString(await coords.kv.get(keys.collection_key(desc.collectionID)))
    [part] = info.partitions
    assert part.partitionName == DEFAULT_PARTITION and part.partitionID not in (0, desc.collectionID)
    shown = await coords.rc.ShowPartitions(milvus_pb2.ShowPartitionsRequest(collection_name="c"))
    assert list(shown.partition_names) == [DEFAULT_PARTITION] and list(shown.partitionIDs) == [part.partitionID]
    assert len(desc.virtual_channel_names) == 2 and desc.db_name == "default"


async def test_drop_removes_meta_in_one_step_then_finishes_its_task(coords):
    c = coords
    coll, vchans = await _collection_with_data(c)
    merr.check(await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c")))
    # Answered: the schema and name keys are gone, the name is free.
    assert await c.kv.get(keys.collection_key(coll)) is None
    assert await c.kv.get(keys.collection_name_key("default", "c")) is None
    desc = await c.rc.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name="c"))
    assert desc.status.code == merr.COLLECTION_NOT_FOUND[0]
    # The drop task ends once DataCoord removed everything of the collection.
    await _wait_drop_done(c, coll, "drop task finished")
    assert c.dc.meta.by_collection(coll) == []
    assert await _owned_keys(c, coll, vchans) == []


async def _wait_drop_done(c: Coords, coll: int, what: str) -> None:
    async def done() -> bool:
        return await c.kv.get(keys.drop_task_key(coll)) is None

    await eventually(done, what=what)


async def test_drop_of_unknown_name_succeeds_and_writes_nothing(coords):
    before = await coords.kv.get_prefix(keys.DROP_TASK_PREFIX)
    merr.check(await coords.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="nope")))
    assert await coords.kv.get_prefix(keys.DROP_TASK_PREFIX) == before == []


class _Crash(BaseException):
    """Stands for the process dying at the failpoint: nothing after it runs."""


async def test_drop_interrupted_after_meta_txn_is_finished_by_the_next_rootcoord(cfg, monkeypatch):
    c = await Coords.start(cfg)
    try:
        coll, vchans = await _collection_with_data(c)

        def crash(name: str) -> None:
            if name == "rootcoord.drop.after_meta_txn":
                raise _Crash(name)

        monkeypatch.setattr(root_coord, "failpoint", crash)
        with pytest.raises(_Crash):
            await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c"))
        monkeypatch.undo()
        # The one transaction happened: schema gone, the drop's remaining steps recorded.
        assert await c.kv.get(keys.collection_key(coll)) is None
        task = internal_pb2.CollectionInfo.FromString(await c.kv.get(keys.drop_task_key(coll)))
        assert task.state == internal_pb2.CollectionInfo.Dropping and task.drop_time > 0
        assert len(c.dc.meta.by_collection(coll)) == 2  # nothing after the txn ran
        await c.stop(close=False)

        # The restarted coordinators find the task and finish the drop.
        c = await Coords.start(cfg, kv=c.kv, stream=c.stream)
        await _wait_drop_done(c, coll, "resumed drop finished")
        assert c.dc.meta.by_collection(coll) == []
        assert await _owned_keys(c, coll, vchans) == []
        desc = await c.rc.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name="c"))
        assert desc.status.code == merr.COLLECTION_NOT_FOUND[0]
    finally:
        await c.stop()


async def test_time_tick_rpcs_before_start_answer_not_ready(cfg):
    """The internal server answers before RootCoord has started (its time-tick loop exists only
    from `start()`): a Proxy's tick report or a QueryNode's tick demand then gets Milvus'
    "not ready" (code 1, NotReadyServe) to retry on, not an internal error."""
    kv = await EtcdKV.connect(cfg.etcd_endpoints, f"{cfg.cluster}/meta")
    stream = await MsgStream.connect(cfg.nats_url, cfg.cluster)
    try:
        rc = RootCoord(cfg, kv, stream, roles.Registry(kv), 1)
        tick = await rc.UpdateChannelTimeTick(internal_pb2.ChannelTimeTickMsg(sourceID=7, timestamp=1))
        demand = await rc.DemandTimeTick(internal_pb2.TimeTickDemand(channels=["ch"], timestamp=1))
        for st in (tick, demand):
            assert (st.code, st.error_code) == merr.SERVICE_NOT_READY, st
    finally:
        await stream.close()
        await kv.close()
