"""Exactly once for drops and deletions (docs/architecture/fencing.md, drop.md), with the
coordinators in the test's event loop on real etcd, NATS and storage:

- a drop whose broadcast failed is finished by the running RootCoord, and the client's retry
  waits for it;
- a DataCoord that lost its leader lock, or etcd, deletes nothing its successor's meta refers to
  (its garbage collector and its jobs' clean-up decide on etcd, by the leader only), and an
  import commit whose answer is lost is read back from etcd, not cleaned up;
- drops leave nothing behind: a late SaveBinlogPaths after DropCollection is refused and what it
  wrote is collected, DropPartition fails the partition's jobs (and etcd refuses a commit into
  it), and no log key of a dropped partition's segments is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import metrics
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.storage import paths
from kmilvus.util import failpoint, merr
from tests.coordutil import DIM, Coords, watched_by_a_datanode
from tests.harness import NodeThread, make_config
from tests.util import TcpRelay, eventually, wait_until

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


# ---------------------------------------------------------------------------- fencing (item 4)


def _parquet(path: Path, n: int = ROWS, start: int = 0) -> str:
    vec = np.random.default_rng(start).random((n, DIM), dtype=np.float32)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM),
            }
        ),
        path,
    )
    return str(path)


async def _import_request(rc, name: str, file: str, partition: str = "_default") -> data_coord_pb2.ImportJobRequest:
    """What a Proxy sends DataCoord for `do_bulk_insert`."""
    desc = await rc.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name))
    merr.check(desc.status)
    part = next(p for p in rc.collections[desc.collectionID].partitions if p.partitionName == partition)
    return data_coord_pb2.ImportJobRequest(
        collectionID=desc.collectionID,
        partitionID=part.partitionID,
        collection_name=name,
        partition_name=partition,
        schema=desc.schema.SerializeToString(),
        vchannels=list(desc.virtual_channel_names),
        files=[file],
    )


def _pause_commit(dc) -> tuple[threading.Event, threading.Event]:
    """Hold DataCoord's import commits before they start (a paused process): returns (reached,
    resume) — the first is set when a commit is held, the second lets it go on."""
    reached, resume = threading.Event(), threading.Event()
    commit = dc.imports.commit

    async def paused(job, manifest):
        reached.set()
        await asyncio.to_thread(resume.wait)
        return await commit(job, manifest)

    dc.imports.commit = paused
    return reached, resume


def _exists(store, key: str) -> bool:
    return store.info_sync(key).type == pafs.FileType.File


class _Roles:
    """Coords' helpers need only `rc` and `dc` (a NodeThread's components)."""

    def __init__(self, rc, dc=None):
        self.rc, self.dc = rc, dc


def test_a_deposed_datacoord_deletes_nothing_its_successor_references(etcd_endpoint, nats_url, root, tmp_path):
    """DataCoord A loses its lease (revoked: A does not know yet, its local deadline is far) and
    B takes over. B commits a binlog of a segment A knows as Growing, and commits the import A
    had paused at its commit. A then runs a garbage collection pass and its import's commit:
    the commit is fenced, and neither the collector nor the job's clean-up may delete a file
    B's meta refers to."""
    cfg = make_config(
        root, etcd_endpoint, nats_url, tmp_path / "storage", session_ttl=60, gc_interval=3600, gc_tolerance=0
    )
    a = NodeThread(cfg, COORDS).start()
    b = NodeThread(cfg, COORDS)
    standby = threading.Thread(target=b.start, daemon=True)
    rc_a, dc_a = a.component("rootcoord"), a.component("datacoord")
    reached, resume = _pause_commit(dc_a)
    try:
        a.call(Coords.create_collection(_Roles(rc_a), "c", shards=1))
        coll, part = _coll_part(rc_a)
        ch = rc_a.collections[coll].virtual_channel_names[0]
        sid = a.call(Coords.assign(_Roles(rc_a, dc_a), coll, ch, 5)).segIDAssignments[0].segID
        req = a.call(_import_request(rc_a, "c", _parquet(tmp_path / "in.parquet")))
        job_id = a.call(dc_a.Import(req)).jobID
        wait_until(reached.is_set, timeout=120, what="A's import written, its commit held")

        standby.start()
        a.node.leader._keeper.stop()  # A is paused: no keepalive; etcd drops its lease
        a.call(a.node.kv.revoke(a.node.leader.lease))
        wait_until(lambda: "datacoord" in b.node.components, timeout=60, what="B to take over")
        dc_b = b.component("datacoord")
        wait_until(
            lambda: (
                (j := dc_b.imports.jobs.get(job_id)) is not None and j.state in (IS.ImportCompleted, IS.ImportFailed)
            ),
            timeout=60,
            what="B to finish the import",
        )
        done = dc_b.imports.jobs[job_id]
        assert done.state == IS.ImportCompleted, done.reason
        imported = [bl.log_path for s in done.segmentIDs for bl in dc_b.meta.segments[s].binlogs.values()]
        assert imported
        store = b.node.store
        key = paths.insert_log_key(coll, part, sid, 777)  # a DataNode's flush of A's Growing segment
        store.write_sync(key, b"PAR1")
        save = internal_pb2.SaveBinlogPathsRequest(
            segmentID=sid, collectionID=coll, partitionID=part, binlogs=[_binlog(key, 777)]
        )
        merr.check(b.call(dc_b.SaveBinlogPaths(save)))

        # A resumes on what it knew: a collection pass, then its import's commit.
        with contextlib.suppress(Exception):  # refused (not the leader) or not: the files are the test
            a.call(dc_a.gc.collect())
        resume.set()
        wait_until(lambda: job_id not in dc_a.imports.tasks, timeout=60, what="A's import monitor to end")
        for k in [key, *imported]:
            assert _exists(store, k), f"{k} (in B's meta) deleted by the deposed DataCoord"
        stored = data_coord_pb2.ImportJob.FromString(b.call(b.node.kv.get(keys.import_job_key(coll, job_id))))
        assert stored.state == IS.ImportCompleted
    finally:
        resume.set()
        a.stop()
        standby.join(60)
        b.stop()


def test_a_datacoord_cut_off_from_etcd_deletes_nothing(etcd_endpoint, nats_url, root, tmp_path):
    """DataCoord A is cut off from etcd (a network partition), its lease expires and B takes
    over and commits a binlog of a segment A knows as Growing: A's garbage collector, working
    from memory, must not delete it."""
    relay = TcpRelay(etcd_endpoint)
    cfg_b = make_config(root, etcd_endpoint, nats_url, tmp_path / "storage", gc_interval=3600, gc_tolerance=0)
    a = NodeThread(cfg_b.replace(etcd_endpoints=[relay.endpoint]), COORDS).start()
    b = NodeThread(cfg_b, COORDS)
    standby = threading.Thread(target=b.start, daemon=True)
    rc_a, dc_a = a.component("rootcoord"), a.component("datacoord")
    try:
        a.call(Coords.create_collection(_Roles(rc_a), "c", shards=1))
        coll, part = _coll_part(rc_a)
        ch = rc_a.collections[coll].virtual_channel_names[0]
        sid = a.call(Coords.assign(_Roles(rc_a, dc_a), coll, ch, 5)).segIDAssignments[0].segID
        standby.start()
        relay.cut()
        wait_until(lambda: "datacoord" in b.node.components, timeout=60, what="B to take over")
        dc_b = b.component("datacoord")
        key = paths.insert_log_key(coll, part, sid, 778)
        b.node.store.write_sync(key, b"PAR1")
        save = internal_pb2.SaveBinlogPathsRequest(
            segmentID=sid, collectionID=coll, partitionID=part, binlogs=[_binlog(key, 778)]
        )
        merr.check(b.call(dc_b.SaveBinlogPaths(save)))
        with contextlib.suppress(Exception):  # etcd unreachable: it may fail, it must not delete
            a.call(dc_a.gc.collect())
        assert _exists(b.node.store, key), "a binlog in B's meta deleted by the isolated DataCoord"
    finally:
        relay.restore()
        a.stop()
        standby.join(60)
        b.stop()
        relay.cut()


async def test_the_collector_keeps_what_a_running_import_writes_and_removes_orphans(coords):
    """Files of a segment nobody knows are garbage — unless an unfinished import reserved that
    segment (its outputs are registered at its end); referenced files stay, unreferenced ones of
    a known segment go."""
    c = coords
    desc = await c.create_collection("c", shards=1)
    coll, ch = desc.collectionID, desc.virtual_channel_names[0]
    _, part = _coll_part(c.rc)
    sid = await _data_in(c, coll, part, ch, 940)
    kept = [
        b.log_path for s in [c.dc.meta.segments[sid]] for g in (s.binlogs, s.statslogs, s.deltalogs) for b in g.values()
    ]
    orphan = paths.insert_log_key(coll, part, sid, 950)  # a write that never committed
    unknown = paths.insert_log_key(coll, part, 123456, 951)  # a segment no meta knows
    reserved = paths.insert_log_key(coll, part, 777000, 952)  # an import being written
    job = data_coord_pb2.ImportJob(
        jobID=1,
        collectionID=coll,
        partitionID=part,
        state=IS.ImportStarted,
        spec='{"segment_id_start": 776999, "segment_count": 3}',
    )
    await c.kv.put(keys.import_job_key(coll, 1), job.SerializeToString())
    for key in (orphan, unknown, reserved):
        await c.store.write(key, b"PAR1")
    assert sorted(await c.dc.gc.collect()) == sorted([orphan, unknown])
    for key in [*kept, reserved]:
        assert await c.store.exists(key), key


# ---------------------------------------------------------------------------- uncertain commit (item 7)


async def test_an_import_whose_commit_answer_is_lost_stays_completed(coords, tmp_path):
    """etcd applies the import's commit and the answer is lost: DataCoord must learn the outcome
    from etcd, not delete the files it just registered and overwrite Completed with Failed."""
    c = coords
    await c.create_collection("c", shards=1)
    req = await _import_request(c.rc, "c", _parquet(tmp_path / "in.parquet"))
    with failpoint.activate("datacoord.import.commit.answer_lost=raise(1)"):
        job_id = (await c.dc.Import(req)).jobID
        await eventually(lambda: c.dc.imports.jobs[job_id].state in FINISHED, 120)
    job = c.dc.imports.jobs[job_id]
    assert job.state == IS.ImportCompleted, job.reason
    stored = data_coord_pb2.ImportJob.FromString(await c.kv.get(keys.import_job_key(req.collectionID, job_id)))
    assert stored.state == IS.ImportCompleted and list(stored.segmentIDs) == list(job.segmentIDs)
    segs = [c.dc.meta.segments[s] for s in job.segmentIDs]
    assert sum(s.info.num_of_rows for s in segs) == ROWS
    for s in segs:
        for b in s.binlogs.values():
            assert await c.store.exists(b.log_path), f"{b.log_path} of a committed import deleted"


# ---------------------------------------------------------------------------- nothing left behind (item 9)


async def _drop_partition_p(c: Coords, coll: int, part: int) -> None:
    merr.check(await c.rc.DropPartition(milvus_pb2.DropPartitionRequest(collection_name="c", partition_name="p")))
    await _partition_drop_done(c, coll, part)


async def test_drop_partition_leaves_no_log_key_of_its_segments(coords):
    c = coords
    desc = await _with_partition_p(c)
    coll, ch = desc.collectionID, desc.virtual_channel_names[0]
    _, part = _coll_part(c.rc, partition="p")
    sid = await _data_in(c, coll, part, ch, 920)
    await _drop_partition_p(c, coll, part)
    assert await c.kv.get(keys.segment_key(coll, part, sid)) is None
    for prefix in (keys.binlog_prefix(coll, sid), keys.deltalog_prefix(coll, sid), keys.statslog_prefix(coll, sid)):
        assert not await c.kv.get_prefix(prefix), f"{prefix} left behind"


async def test_a_late_save_after_drop_collection_is_refused_and_its_files_collected(coords):
    """A DataNode whose flush was under way when its collection was dropped writes its files and
    calls SaveBinlogPaths after the drop: refused as a dropped collection (the DataNode then
    deletes its files), and whatever such a DataNode leaves (it died before deleting) the garbage
    collector finds — a file whose segment and collection no meta knows."""
    c = coords
    desc = await c.create_collection("c", shards=1)
    coll, ch = desc.collectionID, desc.virtual_channel_names[0]
    dn = await watched_by_a_datanode(c, [ch], 9)
    _, part = _coll_part(c.rc)
    sid = (await c.assign(coll, ch, 5)).segIDAssignments[0].segID
    version = dn.watches[ch]
    merr.check(await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c")))
    await eventually(lambda: not c.dc.meta.by_collection(coll), what="DataCoord's part of the drop")
    late = [paths.insert_log_key(coll, part, sid, 930), paths.ddl_key(coll, 931), paths.ddl_ts_key(coll, 932)]
    for key in late:
        await c.store.write(key, b"PAR1")
    save = internal_pb2.SaveBinlogPathsRequest(
        segmentID=sid,
        collectionID=coll,
        partitionID=part,
        channel=ch,
        nodeID=9,
        watch_version=version,
        flushed=True,
        binlogs=[_binlog(late[0], 930)],
    )
    save.ddl_binlog_metas.add(ddl_binlog_path=late[1], ts_binlog_path=late[2])
    refused = await c.dc.SaveBinlogPaths(save)
    assert refused.code == merr.COLLECTION_NOT_FOUND[0], refused
    await c.dc.gc.collect()
    for key in late:
        assert not await c.store.exists(key), f"{key} of a dropped collection left behind"
    await dn.session.stop()


async def _import_held_at_commit(c: Coords, tmp_path: Path):
    """An import into partition `p` of a new collection, its files written and its commit held:
    (collection, partition, request, job ID, the event that lets the commit go on)."""
    await _with_partition_p(c)
    coll, part = _coll_part(c.rc, partition="p")
    req = await _import_request(c.rc, "c", _parquet(tmp_path / "in.parquet"), partition="p")
    reached, resume = _pause_commit(c.dc)
    job_id = (await c.dc.Import(req)).jobID
    await eventually(reached.is_set, 120, "the import written, its commit held")
    return coll, part, req, job_id, resume


async def test_drop_partition_fails_the_imports_into_it(coords, tmp_path):
    """An import into a partition is about to commit when the partition is dropped: the drop
    fails the job (its files removed) instead of letting it register segments in a partition
    that is gone; a later import into the dropped partition is refused."""
    c = coords
    coll, part, req, job_id, resume = await _import_held_at_commit(c, tmp_path)
    try:
        await _drop_partition_p(c, coll, part)
        stored = data_coord_pb2.ImportJob.FromString(await c.kv.get(keys.import_job_key(coll, job_id)))
        assert stored.state == IS.ImportFailed and "dropped" in stored.reason, stored
    finally:
        resume.set()
    await eventually(lambda: job_id not in c.dc.imports.tasks, what="the import's monitor to end")
    assert not await c.kv.get_prefix(keys.partition_segment_prefix(coll, part))
    assert not await c.store.list(paths.partition_prefix(coll, part))
    again = await c.dc.Import(req)
    assert again.status.code == merr.PARTITION_NOT_FOUND[0], again.status


async def test_an_import_commit_into_a_dropped_partition_is_refused_by_etcd(coords, tmp_path, monkeypatch):
    """A job that escaped DropPartition's cancellation (created in a race with it) must still
    not register segments in the dropped partition: its commit compares the partition's drop
    record in the same transaction."""
    c = coords

    async def escaped(coll_id: int, part_id: int) -> None:
        return None

    monkeypatch.setattr(c.dc.jobs, "cancel_partition", escaped, raising=False)
    coll, part, _, job_id, resume = await _import_held_at_commit(c, tmp_path)
    try:
        await _drop_partition_p(c, coll, part)
    finally:
        resume.set()
    await eventually(lambda: c.dc.imports.jobs[job_id].state in FINISHED, 60)
    assert c.dc.imports.jobs[job_id].state == IS.ImportFailed
    assert not await c.kv.get_prefix(keys.partition_segment_prefix(coll, part))
    assert not await c.store.list(paths.partition_prefix(coll, part))


# ------------------------------------------------- channel watches racing DropCollection (chaos)


async def _drop_done(c: Coords, coll: int) -> None:
    async def finished() -> bool:
        return await c.kv.get(keys.drop_task_key(coll)) is None

    await eventually(finished, what="the drop to finish")


async def test_a_channel_watch_arriving_after_drop_collection_registers_nothing(coords):
    """Found by chaos: a WatchChannels sent before DropCollection (RootCoord's start-up re-watch
    of the collections it knew, a create's watch) that DataCoord handles after the drop wrote
    the channels' watch keys again and handed them to a DataNode; a restarted DataCoord loaded
    and assigned them again. The watch record is committed only while the collection exists."""
    c = coords
    desc = await c.create_collection("c", shards=2)
    coll, vchans = desc.collectionID, list(desc.virtual_channel_names)
    dn = await watched_by_a_datanode(c, vchans, 9)
    info = internal_pb2.CollectionInfo()
    info.CopyFrom(c.rc.collections[coll])  # as the re-watch holds it
    merr.check(await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c")))
    await _drop_done(c, coll)
    assert not any(ch in dn.watches for ch in vchans)  # unwatched by the drop
    late = await c.dc.WatchChannels(
        data_coord_pb2.WatchChannelsRequest(
            collectionID=coll,
            channelNames=vchans,
            schema=info.schema.SerializeToString(),
            partitionID=info.partitions[0].partitionID,
        )
    )
    assert late.code == merr.COLLECTION_NOT_FOUND[0], late
    await c.dc.channels.rebalance()
    assert not any(ch in dn.watches for ch in vchans), "a dropped collection's channel was watched again"
    assert await _owned(c, coll, vchans) == []
    assert not any(ch in c.dc.channels.infos for ch in vchans)
    await dn.session.stop()


async def test_channel_reassignment_after_the_collection_is_dropped_assigns_nothing(coords):
    """Found by chaos: DataCoord kept retrying a channel's watch (its DataNode gone) while the
    collection was dropped; before DataCoord's part of the drop ran, the retry handed the channel
    to another DataNode and wrote its watch key. A reassignment is committed only while the
    collection exists, and the drop then leaves nothing."""
    c = coords
    desc = await c.create_collection("c", shards=2)
    coll, vchans = desc.collectionID, list(desc.virtual_channel_names)
    dn = await watched_by_a_datanode(c, vchans, 9)
    with failpoint.activate("rootcoord.drop.broadcast=raise"):  # DataCoord's part waits
        first = await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c"))
        assert first.code != 0
        assert await c.kv.get(keys.collection_key(coll)) is None  # RootCoord's meta: dropped
        await dn.session.stop()  # the channels' DataNode is gone: they are orphans
        await eventually(lambda: 9 not in c.dc.channels.nodes, what="DataCoord to see the DataNode gone")
        other = await watched_by_a_datanode(c, [], 10)
        await eventually(lambda: 10 in c.dc.channels.nodes, what="DataCoord to see the new DataNode")
        await c.dc.channels.rebalance()
        assert not any(ch in other.watches for ch in vchans), "a dropped collection's channel was reassigned"
    merr.check(await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c")))
    await _drop_done(c, coll)
    assert await _owned(c, coll, vchans) == []
    assert not any(ch in other.watches for ch in vchans)
    await other.session.stop()


async def test_a_datanode_refuses_to_watch_a_channel_of_a_dropped_collection(coords):
    """The DataNode side of the same race: a watch of a dropped collection's channel (sent by a
    DataCoord that did not know yet) starts no flowgraph."""
    from kmilvus.datanode.data_node import DataNode
    from kmilvus.proto import data_node_pb2

    c = coords
    desc = await c.create_collection("c", shards=1)
    coll, ch = desc.collectionID, desc.virtual_channel_names[0]
    watch = c.dc.channels._watch_info(ch)
    merr.check(await c.rc.DropCollection(milvus_pb2.DropCollectionRequest(collection_name="c")))
    await _drop_done(c, coll)
    dn = DataNode(c.cfg, c.stream, c.store, c.registry, 11)
    resp = await dn.WatchDmChannels(data_node_pb2.WatchDmChannelsRequest(channels=[watch]))
    assert resp.code == merr.COLLECTION_NOT_FOUND[0], resp
    assert ch not in dn.flowgraphs
