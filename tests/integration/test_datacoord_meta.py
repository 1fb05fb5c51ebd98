"""DataCoord's segment meta in-process on real etcd: concurrent writers of one segment."""

from __future__ import annotations

import asyncio

import pytest
from pymilvus.grpc_gen import common_pb2

from kmilvus.config import Config
from kmilvus.datacoord.meta import Segment, SegmentMeta
from kmilvus.datacoord.segment_manager import SegmentManager
from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2

State = common_pb2.SegmentState


@pytest.fixture
async def kv(etcd_endpoint, root):
    kv = await EtcdKV.connect([etcd_endpoint], f"{root}/meta")
    yield kv
    await kv.close()


async def _growing(meta: SegmentMeta, seg_id: int = 7) -> None:
    await meta.add(
        internal_pb2.SegmentInfo(
            ID=seg_id, collectionID=1, partitionID=2, insert_channel="ch", state=State.Growing, max_row_num=1000
        ),
        now=0.0,
    )


def _pressure_save(seg_id: int = 7, log_id: int = 100) -> internal_pb2.SaveBinlogPathsRequest:
    req = internal_pb2.SaveBinlogPathsRequest(segmentID=seg_id, collectionID=1, partitionID=2, channel="ch")
    req.binlogs.add(logID=log_id, entries_num=10, log_path=f"insert_log/1/2/{seg_id}/{log_id}", log_size=5)
    return req


async def test_a_binlog_save_in_flight_never_undoes_a_seal(kv):
    """A pressure write's SaveBinlogPaths copied the segment's info, waited
    on etcd, then put the copy back — undoing a seal made meanwhile. flush() then found no
    sealed segment, returned once the checkpoints passed, and num_entities was 0."""
    meta = SegmentMeta(kv)
    manager = SegmentManager(Config(), meta, ids=None, tso=None)
    await _growing(meta)
    save = asyncio.create_task(meta.save_binlog_paths(_pressure_save()))
    await asyncio.sleep(0)  # the save is waiting on its etcd transaction
    sealed = await manager.seal([meta.segments[7]], ts=12345)
    await save
    assert [s.id for s in sealed] == [7]
    info = meta.segments[7].info
    assert (info.state, info.seal_timestamp, info.num_of_rows) == (State.Sealed, 12345, 10)
    reloaded = SegmentMeta(kv)
    await reloaded.load()
    assert reloaded.segments[7].info.state == State.Sealed
    assert reloaded.segments[7].info.num_of_rows == 10


async def test_a_binlog_save_in_flight_keeps_quota_granted_meanwhile(kv):
    """Quota grants happen in memory while a save waits on etcd; the save must not put back an
    older `last_expire_time` — DataCoord would then flush the segment before an insert it was
    promised to had arrived, and the DataNode would drop that insert as already flushed."""
    meta = SegmentMeta(kv)
    await _growing(meta)
    save = asyncio.create_task(meta.save_binlog_paths(_pressure_save()))
    await asyncio.sleep(0)
    live = meta.segments[7].info
    live.assigned_rows += 500
    live.last_expire_time = 999
    await save
    info = meta.segments[7].info
    assert (info.assigned_rows, info.last_expire_time, info.num_of_rows) == (500, 999, 10)


class _CountingSegment(Segment):
    """A segment that counts how often its info is read (what a scan over all segments costs)."""

    reads = 0

    def __getattribute__(self, name: str):
        if name == "info":
            _CountingSegment.reads += 1
        return super().__getattribute__(name)


async def test_a_channels_segments_are_found_without_reading_other_channels(kv):
    """DataCoord asks for a channel's segments on every tick of every channel
    (`handle_tt` → `_check_flushable`); a scan over every segment made idle work grow with
    channels × segments. The lookup reads only the channel's own segments, and follows
    additions, replacements and removals made through the segments mapping (compaction and
    import write it directly)."""
    meta = SegmentMeta(kv)
    for i in range(200):
        info = internal_pb2.SegmentInfo(ID=1000 + i, collectionID=1, insert_channel=f"other-{i}", state=State.Growing)
        meta.segments[info.ID] = _CountingSegment(info)
    await _growing(meta, 7)
    meta.segments[8] = Segment(internal_pb2.SegmentInfo(ID=8, insert_channel="ch", state=State.Sealed))
    _CountingSegment.reads = 0
    assert [s.id for s in meta.by_channel("ch")] == [7, 8]
    assert [s.id for s in meta.by_channel("ch", (State.Sealed,))] == [8]
    assert _CountingSegment.reads == 0
    assert [s.id for s in meta.by_channel("other-3")] == [1003]
    del meta.segments[7]
    assert meta.segments.pop(1003).id == 1003
    assert meta.segments.pop(1003, None) is None
    meta.segments[8] = Segment(internal_pb2.SegmentInfo(ID=8, insert_channel="ch2", state=State.Sealed))
    assert meta.by_channel("ch") == [] and meta.by_channel("other-3") == []
    assert [s.id for s in meta.by_channel("ch2")] == [8]
    reloaded = SegmentMeta(kv)
    await reloaded.load()
    assert [s.id for s in reloaded.by_channel("ch")] == [7]


async def test_a_collections_segments_are_found_without_reading_other_collections(kv):
    """The compaction policy asks for every collection's segments on each pass; a scan over every
    segment made the pass grow with collections × segments."""
    meta = SegmentMeta(kv)
    for i in range(200):
        info = internal_pb2.SegmentInfo(ID=1000 + i, collectionID=100 + i, insert_channel=f"o-{i}", state=State.Flushed)
        meta.segments[info.ID] = _CountingSegment(info)
    await _growing(meta, 7)  # collection 1
    meta.segments[8] = Segment(internal_pb2.SegmentInfo(ID=8, collectionID=1, insert_channel="ch", state=State.Sealed))
    _CountingSegment.reads = 0
    assert [s.id for s in meta.by_collection(1)] == [7, 8]
    assert [s.id for s in meta.by_collection(1, (State.Sealed,))] == [8]
    assert _CountingSegment.reads == 0
    del meta.segments[7]
    assert meta.segments.pop(1003).id == 1003
    assert meta.by_collection(103) == [] and [s.id for s in meta.by_collection(1)] == [8]
    reloaded = SegmentMeta(kv)
    await reloaded.load()
    assert [s.id for s in reloaded.by_collection(1)] == [7]


class _Untouchable:
    """A watch record another collection owns: reading it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"read another collection's channel watch ({name})")


async def test_a_collections_channels_and_schema_are_found_without_reading_other_collections(kv):
    """The compaction policy asks for each collection's schema, and Flush and DropCollection for
    its channels; a scan over every channel watch made each of these grow with the number of
    collections."""
    from pymilvus.grpc_gen import schema_pb2

    from kmilvus.datacoord.channel_manager import ChannelManager

    def info(coll: int, shard: int) -> internal_pb2.ChannelWatchInfo:
        schema = schema_pb2.CollectionSchema(name=f"c{coll}")
        return internal_pb2.ChannelWatchInfo(
            vchannel=f"p-dml_{shard}_{coll}v{shard}", collectionID=coll, schema=schema.SerializeToString()
        )

    cm = ChannelManager(kv, SegmentMeta(kv), registry=None)
    cm.nodes.add(0)  # no DataNode to hand channels to: watch() only registers them
    cm.rebalance = _nothing  # type: ignore[method-assign]
    for coll in (1, 2, 3):
        await kv.put(keys.collection_key(coll), b"")  # RootCoord has them: a watch is committed
        for shard in (0, 1):
            await cm.watch(info(coll, shard))
    for shard in (0, 1):
        cm.infos[f"p-dml_{shard}_3v{shard}"] = _Untouchable()  # type: ignore[assignment]
    assert cm.channels_of(1) == ["p-dml_0_1v0", "p-dml_1_1v1"]
    assert cm.schema_of(2).name == "c2" and cm.schema_of(9) is None
    assert cm.collections() == {1, 2, 3}
    for shard in (0, 1):
        cm.infos[f"p-dml_{shard}_3v{shard}"] = info(3, shard)
    await cm.unwatch(["p-dml_0_1v0"], drop=True)
    assert cm.channels_of(1) == ["p-dml_1_1v1"]
    await cm.unwatch(["p-dml_1_1v1"], drop=True)
    assert cm.channels_of(1) == [] and cm.collections() == {2, 3} and cm.schema_of(1) is None
    reloaded = ChannelManager(kv, SegmentMeta(kv), registry=None)
    await reloaded.load()
    assert reloaded.channels_of(3) == ["p-dml_0_3v0", "p-dml_1_3v1"] and reloaded.schema_of(3).name == "c3"


async def _nothing() -> None:
    return None


async def test_a_seal_in_flight_brings_no_segment_back_after_drop_collection(kv):
    """A seal (an idle or lifetime policy) had changed its segments in memory and was waiting on
    its timestamp when the collection's drop deleted every key of it; the seal's transaction then
    put the segment's key back — in etcd only, so nothing ever removed it again."""
    meta = SegmentMeta(kv)
    stamped, go = asyncio.Event(), asyncio.Event()

    class SlowTso:
        async def alloc(self) -> int:
            stamped.set()
            await go.wait()
            return 12345

    manager = SegmentManager(Config(), meta, ids=None, tso=SlowTso())
    await _growing(meta)
    seal = asyncio.create_task(manager.seal([meta.segments[7]]))
    await stamped.wait()  # the seal holds its segments, its etcd write still to come
    drop = asyncio.create_task(meta.drop_collection_meta(1, ["ch"]))
    while not drop.done() and not meta.write_lock._waiters:  # as far as the drop gets meanwhile
        await asyncio.sleep(0)
    go.set()
    await asyncio.gather(seal, drop)
    assert await kv.get_prefix(keys.segment_prefix(1)) == []
    assert meta.by_collection(1) == []
