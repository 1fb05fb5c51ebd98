"""The IndexNode's job table (kmilvus.indexnode): CreateJob is idempotent per attempt, a newer
attempt of a build replaces an older one, a job it does not hold answers IndexStateNone, jobs past
its slots wait, and a file of an older attempt is garbage once a newer one is recorded."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pyarrow as pa
import pytest
from pymilvus.grpc_gen import common_pb2

from kmilvus import index as kindex
from kmilvus.config import Config
from kmilvus.datacoord.garbage_collector import stale_index_file
from kmilvus.indexnode.index_node import IndexNode
from kmilvus.proto import index_node_pb2
from kmilvus.storage import ObjectStore, binlog, paths
from kmilvus.util import merr

IndexState = common_pb2.IndexState
COLL, PART, SEG, FIELD = 11, 12, 13, 101


def _store(tmp_path) -> ObjectStore:
    return ObjectStore.from_uri((tmp_path / "storage").as_uri())


def _write_segment(store: ObjectStore, rows: int, dim: int = 8) -> list[str]:
    vectors = np.random.default_rng(0).random((rows, dim), dtype=np.float32)
    table = pa.table(
        {
            binlog.TIMESTAMP_COLUMN: pa.array(np.arange(rows, dtype=np.int64)),
            str(FIELD): pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
        }
    )
    key = paths.insert_log_key(COLL, PART, SEG, 1)
    binlog.write_insert_binlog(store, key, table)
    return [key]


def _job(build_id: int, version: int, logs: list[str], index_type: str = "FLAT") -> index_node_pb2.CreateJobRequest:
    params = {"index_type": index_type, "metric_type": "L2", "dim": "8", "data_type": "FloatVector"}
    return index_node_pb2.CreateJobRequest(
        clusterID="c1",
        buildID=build_id,
        index_version=version,
        collectionID=COLL,
        partitionID=PART,
        segmentID=SEG,
        fieldID=FIELD,
        index_name="vec",
        data_paths=logs,
        index_params=[common_pb2.KeyValuePair(key=k, value=v) for k, v in params.items()],
        index_file_key=paths.index_file_key(COLL, PART, SEG, build_id, version),
    )


async def _until_done(node: IndexNode, build_id: int) -> index_node_pb2.IndexTaskInfo:
    query = index_node_pb2.QueryJobsRequest(clusterID="c1", buildIDs=[build_id])
    async with asyncio.timeout(30):
        while True:
            (info,) = (await node.QueryJobs(query)).index_infos
            if info.state in (IndexState.Finished, IndexState.Failed, IndexState.Retry):
                return info
            await asyncio.sleep(0.01)


def _node(tmp_path, slots: int = 1) -> IndexNode:
    return IndexNode(Config(cluster="c1", index_build_slots=slots), _store(tmp_path), None, 7)  # type: ignore[arg-type]


async def test_job_builds_the_file_it_is_given(tmp_path):
    node = _node(tmp_path)
    logs = _write_segment(node.store, 300)
    merr.check(await node.CreateJob(_job(5, 1, logs)))
    info = await _until_done(node, 5)
    assert (info.state, info.index_version, info.num_rows) == (IndexState.Finished, 1, 300)
    assert list(info.index_file_keys) == [paths.index_file_key(COLL, PART, SEG, 5, 1)]
    built = kindex.load(await node.store.read(info.index_file_keys[0]))
    assert built.num_rows == 300
    merr.check(await node.DropJobs(index_node_pb2.DropJobsRequest(clusterID="c1", buildIDs=[5])))
    (gone,) = (await node.QueryJobs(index_node_pb2.QueryJobsRequest(clusterID="c1", buildIDs=[5]))).index_infos
    assert gone.state == IndexState.IndexStateNone


async def test_create_job_again_is_a_no_op_and_a_newer_attempt_replaces_it(tmp_path):
    node = _node(tmp_path)
    logs = _write_segment(node.store, 100)
    blocker = asyncio.Event()
    real_build = node._run

    async def held(job):  # the first attempt stays queued behind this
        await blocker.wait()
        await real_build(job)

    node._run = held  # type: ignore[method-assign]
    await node.CreateJob(_job(5, 1, logs))
    first = node.jobs[5].runner
    await node.CreateJob(_job(5, 1, logs))  # a retried CreateJob: the same attempt
    assert node.jobs[5].runner is first
    node._run = real_build  # type: ignore[method-assign]
    await node.CreateJob(_job(5, 2, logs))  # assigned again: the older attempt is cancelled
    assert first is not None
    await asyncio.gather(first, return_exceptions=True)
    assert first.cancelled()
    await node.CreateJob(_job(5, 1, logs))  # a late retry of the older attempt changes nothing
    info = await _until_done(node, 5)
    assert (info.state, info.index_version) == (IndexState.Finished, 2)
    files = [k for k, _ in await node.store.list(paths.index_files_prefix(COLL))]
    assert files == [paths.index_file_key(COLL, PART, SEG, 5, 2)]


async def test_jobs_past_the_slots_wait_and_stats_count_them(tmp_path):
    node = _node(tmp_path, slots=1)
    logs = _write_segment(node.store, 50)
    await node._slots.acquire()  # the only slot is busy
    for build_id in (1, 2):
        await node.CreateJob(_job(build_id, 1, logs))
    await asyncio.sleep(0.05)
    stats = await node.GetJobStats(index_node_pb2.GetJobStatsRequest())
    assert (stats.task_slots, stats.in_progress_job_num, stats.enqueue_job_num, stats.total_job_num) == (1, 0, 2, 2)
    node._slots.release()
    assert [(await _until_done(node, b)).state for b in (1, 2)] == [IndexState.Finished] * 2
    stats = await node.GetJobStats(index_node_pb2.GetJobStatsRequest())
    assert (stats.in_progress_job_num, stats.enqueue_job_num, stats.total_job_num) == (0, 0, 2)


async def test_a_failed_build_reports_why_and_whether_to_retry(tmp_path):
    node = _node(tmp_path)
    await node.CreateJob(_job(9, 1, [paths.insert_log_key(COLL, PART, SEG, 404)]))  # storage: try again
    info = await _until_done(node, 9)
    assert info.state == IndexState.Retry and "FileNotFoundError" in info.fail_reason
    logs = _write_segment(node.store, 20)
    bad = _job(10, 1, logs)
    bad.index_params.add(key="dim", value="9")  # the build's params contradict the data: for good
    del bad.index_params[2]
    await node.CreateJob(bad)
    info = await _until_done(node, 10)
    assert info.state == IndexState.Failed and info.fail_reason
    assert not [k for k, _ in await node.store.list(paths.index_files_prefix(COLL))]


async def test_a_job_dropped_while_its_thread_builds_writes_nothing_and_keeps_its_slot(tmp_path, monkeypatch):
    from kmilvus.indexnode import task

    node = _node(tmp_path)
    logs = _write_segment(node.store, 100)
    started = asyncio.Event()
    real = task.read_column

    def slow_read(store, req):  # the thread's part of the build, held until released
        node_loop.call_soon_threadsafe(started.set)
        release_flag.wait(30)
        return real(store, req)

    release_flag = threading.Event()
    node_loop = asyncio.get_running_loop()
    monkeypatch.setattr(task, "read_column", slow_read)
    await node.CreateJob(_job(3, 1, logs))
    await asyncio.wait_for(started.wait(), 30)
    await node.DropJobs(index_node_pb2.DropJobsRequest(clusterID="c1", buildIDs=[3]))
    stats = await node.GetJobStats(index_node_pb2.GetJobStatsRequest())
    assert (stats.total_job_num, stats.in_progress_job_num) == (0, 1)  # forgotten, still on its core
    release_flag.set()
    async with asyncio.timeout(30):
        while node._building:
            await asyncio.sleep(0.01)
    assert not [k for k, _ in await node.store.list(paths.index_files_prefix(COLL))]


async def test_a_stopping_node_offers_no_slot_and_refuses_jobs(tmp_path):
    node = _node(tmp_path)
    await node.stop()
    stats = await node.GetJobStats(index_node_pb2.GetJobStatsRequest())
    assert stats.task_slots == 0
    status = await node.CreateJob(_job(1, 1, []))
    assert status.code != 0 and not node.jobs


async def test_another_clusters_job_is_refused(tmp_path):
    node = _node(tmp_path)
    req = _job(1, 1, [])
    req.clusterID = "other"
    status = await node.CreateJob(req)
    assert status.code != 0 and "other" in status.reason and not node.jobs


@pytest.mark.parametrize(
    ("key", "builds", "stale"),
    [
        (paths.index_file_key(1, 2, 3, 40, 2), {40: 2}, False),
        (paths.index_file_key(1, 2, 3, 40, 1), {40: 2}, True),  # an older attempt's late file
        (paths.index_file_key(1, 2, 3, 41, 1), {40: 2}, True),  # a build nothing records
        ("index_files/1/2/3/40/index", {40: 0}, False),  # written before attempts had versions
        ("index_files/1/2/3/40/index", {40: 1}, True),
        ("insert_log/1/2/3/40", {}, False),
    ],
)
def test_stale_index_files(key, builds, stale):
    assert stale_index_file(key, builds) is stale


async def test_a_node_whose_session_lapsed_writes_nothing(tmp_path):
    node = _node(tmp_path)
    logs = _write_segment(node.store, 50)

    async def lapsed() -> bool:  # paused past its session's TTL: DataCoord has moved on
        return False

    node.session_valid = lapsed
    await node.CreateJob(_job(4, 1, logs))
    info = await _until_done(node, 4)
    assert info.state == IndexState.Retry and "BuildCancelled" in info.fail_reason
    assert not [k for k, _ in await node.store.list(paths.index_files_prefix(COLL))]


async def test_a_job_dropped_while_its_file_is_written_takes_the_file_back(tmp_path, monkeypatch):
    node = _node(tmp_path)
    logs = _write_segment(node.store, 50)
    real_write = node.store.write

    async def write_then_dropped(key, data):
        await real_write(key, data)
        await node.DropJobs(index_node_pb2.DropJobsRequest(clusterID="c1", buildIDs=[6]))

    monkeypatch.setattr(node.store, "write", write_then_dropped)
    await node.CreateJob(_job(6, 1, logs))
    runner = node.jobs[6].runner
    await asyncio.gather(runner, return_exceptions=True)
    assert not [k for k, _ in await node.store.list(paths.index_files_prefix(COLL))]
