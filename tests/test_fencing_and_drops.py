"""Exactly once for drops and deletions (docs/architecture/fencing.md, drop.md), with the
coordinators in the test's event loop on real etcd, NATS and storage:

- a drop whose broadcast failed is finished by the running RootCoord, and the client's retry
  waits for it.
"""

from __future__ import annotations

import pytest
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import metrics
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.storage import paths
from kmilvus.util import failpoint, merr
from tests.coordutil import Coords
from tests.harness import make_config
from tests.util import eventually

COORDS = ("rootcoord", "datacoord", "querycoord")
IS = common_pb2.ImportState
ROWS = 100
FINISHED = (IS.ImportCompleted, IS.ImportFailed)


@pytest.fixture
def cfg(etcd_endpoint, nats_url, root, tmp_path):
    # The collector runs when a test says so, and deletes what it finds at once.
    return make_config(root, etcd_endpoint, nats_url, tmp_path / "storage", gc_interval=3600, gc_tolerance=0)


@pytest.fixture
async def coords(cfg):
    c = await Coords.start(cfg)
    yield c
    await c.stop()


def _binlog(key: str, log_id: int) -> internal_pb2.Binlog:
    return internal_pb2.Binlog(logID=log_id, entries_num=1, log_path=key, log_size=4)


def _coll_part(rc, name: str = "c", partition: str = "_default") -> tuple[int, int]:
    coll = rc.names[("default", name)]
    return coll, next(p.partitionID for p in rc.collections[coll].partitions if p.partitionName == partition)


# ---------------------------------------------------------------------------- drops finished (item 8)


async def _data_in(c: Coords, coll: int, part: int, ch: str, log_id: int) -> int:
    """A segment of the partition with an insert, a delta and a stats log committed."""
    sid = (await c.assign(coll, ch, 5, partition=part)).segIDAssignments[0].segID
    logs = {
        "insert": paths.insert_log_key(coll, part, sid, log_id),
        "delta": paths.delta_log_key(coll, part, sid, log_id + 1),
        "stats": paths.stats_log_key(coll, part, sid, log_id + 2),
    }
    for key in logs.values():
        await c.store.write(key, b"PAR1")
    save = internal_pb2.SaveBinlogPathsRequest(
        segmentID=sid,
        collectionID=coll,
        partitionID=part,
        binlogs=[_binlog(logs["insert"], log_id)],
        deltalogs=[_binlog(logs["delta"], log_id + 1)],
        statslogs=[_binlog(logs["stats"], log_id + 2)],
    )
    merr.check(await c.dc.SaveBinlogPaths(save))
    return sid


async def _with_partition_p(c: Coords, shards: int = 1) -> milvus_pb2.DescribeCollectionResponse:
    """Collection `c` with a partition `p`."""
    desc = await c.create_collection("c", shards=shards)
    merr.check(await c.rc.CreatePartition(milvus_pb2.CreatePartitionRequest(collection_name="c", partition_name="p")))
    return desc


async def _partition_drop_done(c: Coords, coll: int, part: int) -> None:
    async def finished() -> bool:
        return await c.kv.get(keys.drop_partition_task_key(coll, part)) is None

    await eventually(finished, what="the partition drop to finish")


async def _owned(c: Coords, coll: int, vchans: list[str]) -> list[str]:
    return [k for p in keys.collection_owned_prefixes(coll, vchans) for k, _ in await c.kv.get_prefix(p)]


async def test_a_drop_whose_broadcast_failed_is_finished_by_the_running_rootcoord(coords):
    """The broadcast of a DropCollection fails after its meta transaction: the client's retry
    must not be answered success while the collection's segments, files and keys remain until
    the next RootCoord start — the running RootCoord finishes the drop."""
    c = coords
    desc = await c.create_collection("c", shards=2)
    coll, vchans = desc.collectionID, list(desc.virtual_channel_names)
    _, part = _coll_part(c.rc)
    await _data_in(c, coll, part, vchans[0], 900)
    retries = metrics.DROP_RETRIES.labels("collection")._value.get()
    with failpoint.activate("rootcoord.drop.broadcast=raise(1)"):
        first = await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c"))
        assert first.code != 0  # the broadcast failed: the client is told
        merr.check(await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c")))

    async def finished() -> bool:
        return await c.kv.get(keys.drop_task_key(coll)) is None

    await eventually(finished, what="the drop finished by the running RootCoord")
    assert c.dc.meta.by_collection(coll) == []
    assert await _owned(c, coll, vchans) == []
    assert not await c.store.list(paths.insert_log_prefix(coll))
    assert metrics.DROP_RETRIES.labels("collection")._value.get() > retries


async def test_a_partition_drop_whose_broadcast_failed_is_finished_by_the_running_rootcoord(coords):
    c = coords
    desc = await _with_partition_p(c)
    coll, ch = desc.collectionID, desc.virtual_channel_names[0]
    _, part = _coll_part(c.rc, partition="p")
    await _data_in(c, coll, part, ch, 910)
    drop = milvus_pb2.DropPartitionRequest(collection_name="c", partition_name="p")
    with failpoint.activate("rootcoord.drop_partition.broadcast=raise(1)"):
        assert (await c.rc.DropPartition(drop)).code != 0
        merr.check(await c.rc.DropPartition(drop))
    await _partition_drop_done(c, coll, part)
    assert [s for s in c.dc.meta.by_collection(coll) if s.info.partitionID == part] == []
    assert not await c.store.list(paths.partition_prefix(coll, part))
