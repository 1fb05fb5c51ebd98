"""An import reported Completed is visible: a Strong read right after sees every imported row
(docs/operations/guarantees.md). DataCoord's job completes once its segments are registered; the
Proxy reports Completed only once the QueryNodes serving a loaded collection hold those rows —
in the imported segments, or in the segment a compaction moved them into.

Found by chaos: with a QueryNode just killed, QueryCoord's segment loads lagged, and a Strong
query right after `Completed` missed imported keys."""

from __future__ import annotations

import time

import httpx
from pymilvus import BulkInsertState, connections, utility

from kmilvus.proto import data_coord_pb2
from tests.system.test_delete import (
    SPARK_TIMEOUT,
    _coll_id,
    _compact,
    _count,
    _import,
    _indexed_and_loaded,
    _rows,
    _schema,
    _visible,
    _write_parquet,
)
from tests.util import segment_loads_failing, wait_until

# How long the reported state is watched while the segments cannot be loaded: QueryCoord hands
# a registered segment to its QueryNode within milliseconds; this only bounds the observation.
WATCH_SECONDS = 3.0


def _datacoord_state(node, job: int) -> int:
    dc = node.component("datacoord")
    resp = node.call(dc.GetImportJob(data_coord_pb2.GetImportJobRequest(jobID=job)))
    return resp.job.state


def _progress(node, job: int) -> dict:
    """The RESTful API's view of the job (GetImportProgress, Milvus 2.4's import v2)."""
    r = httpx.post(f"{node.rest_uri}/v2/vectordb/jobs/import/get_progress", json={"jobId": str(job)}, timeout=30)
    return r.json()["data"]


def test_an_import_is_completed_only_once_strong_reads_see_its_rows(node, client, tmp_path):
    client.create_collection("imp_vis", schema=_schema())
    coll = _coll_id(client, "imp_vis")
    _indexed_and_loaded(client, "imp_vis")
    client.insert("imp_vis", _rows(range(100)))
    client.flush("imp_vis")
    assert _count(client, "imp_vis") == 100
    qn = node.component("querynode")
    path = tmp_path / "rows.parquet"
    imported = range(1000, 1500)
    _write_parquet(path, imported)
    connections.connect("imp_vis", uri=node.uri)
    try:
        with segment_loads_failing():
            job = utility.do_bulk_insert("imp_vis", files=[str(path)], using="imp_vis")
            wait_until(
                lambda: _datacoord_state(node, job) == BulkInsertState.ImportCompleted,
                timeout=SPARK_TIMEOUT,
                what="DataCoord's job completed",
            )
            seen = set()
            deadline = time.monotonic() + WATCH_SECONDS
            while time.monotonic() < deadline:
                seen.add(utility.get_bulk_insert_state(job, using="imp_vis").state)
                seen.add(_progress(node, job)["state"])
            assert seen == {BulkInsertState.ImportPersisted, "Importing"}, (
                f"reported while its segments cannot be loaded: {seen}"
            )
            assert _count(client, "imp_vis") == 100
            # Compacted before it was ever loaded: the target holds the rows now.
            _compact(node.uri, "imp_vis")
            assert utility.get_bulk_insert_state(job, using="imp_vis").state == BulkInsertState.ImportPersisted
        wait_until(
            lambda: utility.get_bulk_insert_state(job, using="imp_vis").state == BulkInsertState.ImportCompleted,
            timeout=60,
            what="the import reported Completed once loaded",
        )
        # Completed means visible: no wait between the two.
        assert _count(client, "imp_vis") == 600
        assert _visible(client, "imp_vis", imported) == set(imported)
        assert _progress(node, job)["state"] == "Completed"
        assert set(qn.collections[coll].sealed), "served from sealed segments"
    finally:
        connections.disconnect("imp_vis")


def test_an_import_into_a_collection_not_loaded_completes_without_a_load(node, client, tmp_path):
    client.create_collection("imp_unloaded", schema=_schema())
    _import(node.uri, "imp_unloaded", tmp_path / "rows.parquet", range(50))  # asserts Completed
    _indexed_and_loaded(client, "imp_unloaded")
    assert _count(client, "imp_unloaded") == 50
