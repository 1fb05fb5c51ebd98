"""Small jobs without Spark: `InProcessRunner`'s states, cancellation and restart semantics,
`RoutingRunner`'s choice, and a bulk import through pymilvus that never starts a JVM.
(Both routes producing the same segments and problems: tests/system/test_spark_jobs.py.)"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus import CollectionSchema, DataType, FieldSchema, MilvusClient, connections, utility
from pymilvus.client.types import BulkInsertState
from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.spark import application
from kmilvus.spark.files import inspect, resolve
from kmilvus.spark.inprocess import InProcessRunner, RoutingRunner, job_module
from kmilvus.spark.runner import JobRunner, JobState, JobStatus
from kmilvus.storage import ObjectStore, read_segment
from kmilvus.util import typeutil
from tests.util import wait_until

DIM = 4


def _schema() -> schema_pb2.CollectionSchema:
    DT = schema_pb2.DataType
    s = schema_pb2.CollectionSchema(name="t")
    s.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    s.fields.add(
        fieldID=101, name="vec", data_type=DT.FloatVector, type_params=[common_pb2.KeyValuePair(key="dim", value="4")]
    )
    return s


def _parquet(path: Path, n: int, bad_row: int | None = None) -> Path:
    vec = np.ones((n, DIM), np.float32)
    if bad_row is not None:
        vec[bad_row, 2] = np.nan
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.arange(n, dtype=np.int64)),
                "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), DIM),
            }
        ),
        path,
        row_group_size=1000,
    )
    return path


def _inspected(path: Path, store: str) -> dict:
    """The file as DataCoord hands it to a job: resolved and inspected (size, rows)."""
    f = resolve(str(path), store)
    inspect(f, _schema())
    return f.to_dict()


def _app(tmp_path: Path, files: list[Path], job_id: int = 1) -> dict:
    store = (tmp_path / "store").as_uri()
    spec = {
        "kind": "import",
        "job_id": job_id,
        "collection_id": 10,
        "partition_id": 11,
        "schema": base64.b64encode(_schema().SerializeToString()).decode(),
        "storage_uri": store,
        "files": [_inspected(f, store) for f in files],
        "options": {},
        "timestamp": 777,
        "row_id_start": 5000,
        "row_id_count": 100_000,
        "log_id_start": 9000,
        "log_id_count": 100_000,
        "segment_id_start": 50,
        "segment_count": 10,
        "segment_max_rows": 2000,
        "manifest_key": "m.json",
    }
    return application.build_application("import", spec, name=application.app_name("import", 10, job_id))


async def _until_done(runner: JobRunner, handle: dict) -> tuple[JobStatus, list[JobState]]:
    seen = []
    while True:
        st = await runner.state(handle)
        seen.append(st.state)
        if st.state.terminal:
            return st, seen
        await runner.wait(handle, 1.0)


async def test_inprocess_runner_completes_with_manifest_and_progress(tmp_path):
    runner = InProcessRunner()
    app = _app(tmp_path, [_parquet(tmp_path / "a.parquet", 5000)])
    handle = await runner.submit(app)
    assert handle["runner"] == "inprocess" and handle["name"] == app["metadata"]["name"]
    st, _ = await _until_done(runner, handle)
    assert st.state == JobState.COMPLETED, st.message
    assert st.progress == {"phase": "completed", "rows": 5000}
    assert not runner.outlives_coordinator(handle)
    store = ObjectStore.from_uri((tmp_path / "store").as_uri())
    manifest = json.loads(store.read_sync("m.json"))
    assert manifest["status"] == "completed" and [s["rows"] for s in manifest["segments"]] == [1667, 1667, 1666]
    back = pa.concat_tables(read_segment(store, 10, 11, s["segment_id"]) for s in manifest["segments"])
    assert sorted(back.column("100").to_pylist()) == list(range(5000))
    assert back.schema.equals(typeutil.arrow_schema(_schema()), check_metadata=False)
    # A restarted coordinator has a fresh runner: a run that left its completed manifest is
    # COMPLETED (DataCoord commits it); without one it ended with the old process.
    assert (await InProcessRunner().state(handle)).state == JobState.COMPLETED
    store.delete_sync("m.json")
    st = await InProcessRunner().state(handle)
    assert st.state == JobState.FAILED and "ended with the coordinator" in st.message
    await runner.release(handle)
    assert (await runner.state(handle)).state == JobState.FAILED


async def test_inprocess_runner_reports_the_bad_row_and_leaves_no_binlog(tmp_path):
    runner = InProcessRunner()
    f = _parquet(tmp_path / "a.parquet", 3000, bad_row=2345)
    handle = await runner.submit(_app(tmp_path, [f]))
    st, _ = await _until_done(runner, handle)
    assert st.state == JobState.FAILED and f"file {f}, row 2345" in st.message, st.message
    assert "NaN or Inf" in st.message
    store = tmp_path / "store"
    manifest = json.loads((store / "m.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"]["row"] == 2345
    assert not [p for p in store.rglob("*") if p.is_file() and p.name != "m.json"]


def test_run_local_cancelled_between_batches_leaves_nothing(tmp_path):
    importer = job_module("importer")
    spec = application.job_spec_of(_app(tmp_path, [_parquet(tmp_path / "a.parquet", 5000)]))
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 2  # after two record batches were written

    with pytest.raises(importer.Cancelled):
        importer.run_local(spec, cancelled)
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file()]


class _FakeSpark(JobRunner):
    def __init__(self) -> None:
        self.submitted: list[str] = []

    async def submit(self, app: dict) -> dict:
        self.submitted.append(app["metadata"]["name"])
        return {"runner": "fake", "name": app["metadata"]["name"]}

    async def state(self, handle: dict) -> JobStatus:
        return JobStatus(JobState.RUNNING)

    async def cancel(self, handle: dict) -> None:
        pass


async def test_routing_runner_sends_small_parquet_jobs_in_process_and_the_rest_to_spark(tmp_path):
    spark = _FakeSpark()
    small = _parquet(tmp_path / "s.parquet", 100)
    router = RoutingRunner(spark, max_bytes=small.stat().st_size)
    h = await router.submit(_app(tmp_path, [small], job_id=1))
    assert h["runner"] == "inprocess" and spark.submitted == []
    assert (await _until_done(router, h))[0].state == JobState.COMPLETED
    big = _parquet(tmp_path / "b.parquet", 2000)  # more bytes than the limit
    h = await router.submit(_app(tmp_path, [big], job_id=2))
    assert h["runner"] == "fake" and (await router.state(h)).state == JobState.RUNNING
    (tmp_path / "r.json").write_text(json.dumps({"rows": [{"id": 1, "vec": [1, 2, 3, 4]}]}))
    h = await router.submit(_app(tmp_path, [tmp_path / "r.json"], job_id=3))  # JSON is parsed by Spark SQL
    assert h["runner"] == "fake" and len(spark.submitted) == 2
    assert router.outlives_coordinator(h) and not router.outlives_coordinator({"runner": "inprocess", "name": "x"})


@pytest.mark.timeout(120)
def test_bulk_import_through_pymilvus_runs_in_process(node, tmp_path):
    """`do_bulk_insert` of a small Parquet file: Completed without any spark-submit."""
    f = _parquet(tmp_path / "rows.parquet", 10_000)
    client = MilvusClient(uri=node.uri)
    alias = "i" + uuid.uuid4().hex[:8]
    connections.connect(alias, uri=node.uri)
    try:
        client.create_collection(
            "fast",
            schema=CollectionSchema(
                [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM)]
            ),
        )
        task = utility.do_bulk_insert("fast", files=[str(f)], using=alias)
        ended = (BulkInsertState.ImportCompleted, BulkInsertState.ImportFailed)
        st = wait_until(
            lambda: (st := utility.get_bulk_insert_state(task, using=alias)).state in ended and st,
            60,
            0.05,
            lambda: f"the import to end: {utility.get_bulk_insert_state(task, using=alias).infos}",
        )
        assert st.state == BulkInsertState.ImportCompleted, st.infos
        assert st.row_count == 10_000 and client.get_collection_stats("fast")["row_count"] == 10_000
        job = node.component("datacoord").jobs.imports.jobs[task]
        assert json.loads(job.handle)["runner"] == "inprocess"
    finally:
        connections.disconnect(alias)
        client.close()


def test_event_loop_free_while_a_job_runs(tmp_path):
    """The job runs in a thread: the loop keeps ticking meanwhile."""

    async def main() -> int:
        runner = InProcessRunner()
        handle = await runner.submit(_app(tmp_path, [_parquet(tmp_path / "a.parquet", 20_000)]))
        ticks = 0
        while not (await runner.state(handle)).state.terminal:
            await asyncio.sleep(0.001)  # a tick of the loop: counted while the job runs
            ticks += 1
        return ticks

    assert asyncio.run(main()) > 0


def test_prefetched_keeps_order_raises_the_readers_error_and_stops_its_thread():
    common = job_module("common")
    assert list(common.prefetched(iter(range(100)))) == list(range(100))

    def broken():
        yield 1
        raise ValueError("unreadable row group")

    with pytest.raises(ValueError, match="unreadable"):
        list(common.prefetched(broken()))
    endless = common.prefetched(iter(int, 1))  # never ends: the consumer stops early
    assert next(endless) == 0
    endless.close()  # joins the producer thread (the test would hang otherwise)


@pytest.mark.timeout(120)
def test_an_import_is_reported_completed_only_once_its_segments_are_registered(node, tmp_path, monkeypatch):
    """GetImportJob answers from memory: a job must not read Completed while the commit's etcd
    transaction is still in flight (an in-process import is fast enough for a client to see it,
    with `get_collection_stats` still 0)."""
    dc = node.component("datacoord")
    kv = dc.imports.port.kv
    seen = []
    real_txn = kv.txn

    async def txn(*args, **kw):
        seen.extend(j.jobID for j in dc.imports.jobs.values() if j.state == common_pb2.ImportState.ImportCompleted)
        return await real_txn(*args, **kw)

    monkeypatch.setattr(kv, "txn", txn)
    f = _parquet(tmp_path / "rows.parquet", 1000)
    client = MilvusClient(uri=node.uri)
    alias = "i" + uuid.uuid4().hex[:8]
    connections.connect(alias, uri=node.uri)
    try:
        client.create_collection(
            "seen",
            schema=CollectionSchema(
                [FieldSchema("id", DataType.INT64, is_primary=True), FieldSchema("vec", DataType.FLOAT_VECTOR, dim=DIM)]
            ),
        )
        task = utility.do_bulk_insert("seen", files=[str(f)], using=alias)
        wait_until(
            lambda: utility.get_bulk_insert_state(task, using=alias).state == BulkInsertState.ImportCompleted,
            60,
            0.05,
            "the import completed",
        )
        assert client.get_collection_stats("seen")["row_count"] == 1000
        assert task not in seen
    finally:
        connections.disconnect(alias)
        client.close()
