"""DataCoord's segment meta in-process on real etcd: concurrent writers of one segment."""

from __future__ import annotations

import asyncio

import pytest
from pymilvus.grpc_gen import common_pb2

from kmilvus.config import Config
from kmilvus.datacoord.meta import SegmentMeta
from kmilvus.datacoord.segment_manager import SegmentManager
from kmilvus.meta import EtcdKV
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
    """Issue 11 defect 7: a pressure write's SaveBinlogPaths copied the segment's info, waited
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
