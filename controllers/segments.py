"""Segment resources: DataCoord's segments mirrored, owned by their Collection.

A Segment is written when it appears, when its state changes, and — for row / binlog counts
alone — at most every `segment_rows_interval` seconds; it is deleted when DataCoord no longer has
the segment (dropped, compacted away, or its collection dropped). The Collection's status gets the
row count and the segment counts by state on the same schedule.

Segments carry their identity in `spec` and what DataCoord reports in the `status` subresource
(Kubernetes' convention for observed state): the API server drops `status` from a POST and from
patches of the main resource, so a Segment is created, then its status is written through
`/status`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time

from pymilvus.grpc_gen import common_pb2

from controllers import conditions, metrics
from controllers import resources as R
from controllers.kube import Conflict, NotFound
from controllers.schema import is_type, label_value
from kmilvus.proto import data_coord_pb2
from kmilvus.spark import inprocess
from kmilvus.util.merr import MilvusError

log = logging.getLogger("kmilvus.operator.segments")
STATE = common_pb2.SegmentState
IMPORT = common_pb2.ImportState
COMPACTION = common_pb2.CompactionState
MIRRORED = {
    STATE.Growing: "Growing",
    STATE.Sealed: "Sealed",
    STATE.Flushing: "Flushing",
    STATE.Flushed: "Flushed",
    STATE.Importing: "Importing",
}


def segment_name(collection_resource: str, segment_id: int) -> str:
    return f"{collection_resource[:230].rstrip('-.')}-{segment_id}"


def _position(p) -> dict | None:
    if not p.channel_name and not p.seq:
        return None
    return {"channel": p.channel_name, "seq": p.seq, "timestamp": p.timestamp}


def segment_status(info) -> dict:
    st = {
        "state": MIRRORED.get(info.state, STATE.Name(info.state)),
        "rows": info.num_of_rows,
        "binlogs": info.binlog_count,
        "binlogSize": info.binlog_size,
    }
    if info.state == STATE.Growing:
        st["assignedRows"] = info.assigned_rows
    for key, pos in (("startPosition", info.start_position), ("dmlPosition", info.dml_position)):
        if (p := _position(pos)) is not None:
            st[key] = p
    return st


class SegmentMirror:
    def __init__(self, rt, collection_body):
        self.rt = rt
        self.body = collection_body  # kopf's live view: status follows the resource
        m = collection_body["metadata"]
        self.name, self.ns, self.uid = m["name"], m.get("namespace"), m.get("uid")
        self.written: dict[int, tuple[dict, float]] = {}  # segment ID -> (status written, when)
        self.loaded_for: int | None = None
        self.coll_written: tuple[dict, float] | None = None
        self.partition_names: dict[int, str] = {}  # partition ID -> name (ShowPartitions)

    def _labels(self, cid: int) -> dict:
        return {
            R.LABEL_COLLECTION: label_value(self.name),
            R.LABEL_COLLECTION_ID: str(cid),
            R.LABEL_MANAGED_BY: R.MANAGED_BY,
        }

    async def _load(self, cid: int, segments: list) -> None:
        """Learn which Segment resources exist (after a restart) — only when there can be any."""
        self.written = {}
        status = self.body.get("status") or {}
        if segments or (status.get("segments") or {}).get("total"):
            for item in await self.rt.kube.list(R.SEGMENT, self.ns, labels={R.LABEL_COLLECTION_ID: str(cid)}):
                spec, status = item.get("spec"), item.get("status")
                sid = spec.get("segmentID") if isinstance(spec, dict) else None
                # Only what this mirror would have written counts (anyone can label a Segment).
                if is_type(sid, int) and sid >= 0 and item["metadata"]["name"] == segment_name(self.name, sid):
                    self.written[sid] = (status if isinstance(status, dict) else {}, 0.0)
        self.loaded_for = cid

    async def sync(self, cid: int) -> None:
        co = await self.rt.coordinators()
        infos = [i for i in await co.list_segments(cid) if i.state in MIRRORED]
        if self.loaded_for != cid:
            await self._load(cid, infos)
        now = time.monotonic()
        every = self.rt.opts.segment_rows_interval
        current = {i.ID: i for i in infos}
        for sid, info in current.items():
            new = segment_status(info)
            if sid not in self.written:
                await self._create(cid, info, new)
            else:
                old, when = self.written[sid]
                if old.get("state") != new["state"] or (old != new and now - when >= every):
                    await self._patch(sid, new)
        for sid in [s for s in self.written if s not in current]:
            await self.rt.kube.delete(R.SEGMENT, self.ns, segment_name(self.name, sid))
            metrics.SEGMENT_WRITES.labels("delete").inc()
            self.written.pop(sid, None)
        await self._collection_status(cid, infos, now)

    async def _partition_name(self, cid: int, part_id: int) -> str:
        """The segment's partition by name ('' once the partition was dropped)."""
        if part_id not in self.partition_names:
            co = await self.rt.coordinators()
            self.partition_names = {pid: name for name, pid in (await co.list_partitions(cid)).items()}
        return self.partition_names.get(part_id, "")

    async def _create(self, cid: int, info, status: dict) -> None:
        body = {
            "metadata": {
                "name": segment_name(self.name, info.ID),
                "namespace": self.ns,
                "labels": self._labels(cid),
                "ownerReferences": [
                    {
                        "apiVersion": R.API_VERSION,
                        "kind": "Collection",
                        "name": self.name,
                        "uid": self.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "segmentID": info.ID,
                "collection": (self.body.get("status") or {}).get("name", ""),
                "collectionID": cid,
                "partitionID": info.partitionID,
                "partition": await self._partition_name(cid, info.partitionID),
                "channel": info.insert_channel,
            },
        }
        try:
            await self.rt.kube.create(R.SEGMENT, self.ns, body)
            metrics.SEGMENT_WRITES.labels("create").inc()
        except Conflict:  # left from before a restart: its status is brought up to date below
            pass
        await self.rt.kube.patch(
            R.SEGMENT,
            self.ns,
            body["metadata"]["name"],
            {"status": {**status, "lastUpdateTime": conditions.now_iso()}},
            status=True,
        )
        metrics.SEGMENT_WRITES.labels("patch").inc()
        self.written[info.ID] = (status, time.monotonic())

    async def _patch(self, sid: int, status: dict) -> None:
        try:
            await self.rt.kube.patch(
                R.SEGMENT,
                self.ns,
                segment_name(self.name, sid),
                {"status": {**status, "lastUpdateTime": conditions.now_iso()}},
                status=True,
            )
            metrics.SEGMENT_WRITES.labels("patch").inc()
            self.written[sid] = (status, time.monotonic())
        except NotFound:
            self.written.pop(sid, None)  # deleted by someone: created again on the next pass

    async def _collection_status(self, cid: int, infos: list, now: float) -> None:
        counts = {"growing": 0, "sealed": 0, "flushing": 0, "flushed": 0, "total": len(infos)}
        for i in infos:
            key = MIRRORED[i.state].lower()
            if key in counts:
                counts[key] += 1
        rows = sum(i.num_of_rows for i in infos if i.state == STATE.Flushed)
        new = {"rows": rows, "segments": counts, **await job_status(self.rt, cid)}
        status = self.body.get("status") or {}
        seen = {k: status.get(k) for k in new}
        if seen == new:
            return
        # What we wrote last counts until kopf's view of the resource catches up with it.
        basis, last = self.coll_written if self.coll_written else (seen, 0.0)
        if basis == new and now - last < 5.0:
            return
        if {k: v for k, v in basis.items() if k != "rows"} == {
            k: v for k, v in new.items() if k != "rows"
        } and now - last < self.rt.opts.segment_rows_interval:
            return  # rows alone: bounded rate
        await self.rt.kube.patch(R.COLLECTION, self.ns, self.name, {"status": new}, status=True)
        self.coll_written = (new, now)


async def job_status(rt, cid: int) -> dict:
    """`imports` / `compactions` of the Collection status, from DataCoord's public job RPCs
    (ListImportJobs, GetCompactionJobs); {} for a kind DataCoord cannot answer for now."""
    co = await rt.coordinators()
    out: dict = {}
    with contextlib.suppress(MilvusError):  # DataCoord cannot answer now: the status keeps its last value
        jobs = sorted(await co.import_jobs(cid), key=lambda j: (j.create_ts, j.jobID))
        done = (IMPORT.ImportCompleted, IMPORT.ImportFailed, IMPORT.ImportFailedAndCleaned)
        out["imports"] = {
            "running": sum(j.state not in done for j in jobs),
            "total": len(jobs),
            "rowsImported": sum(j.row_count for j in jobs if j.state == IMPORT.ImportCompleted),
        }
        if jobs:
            j = jobs[-1]
            out["imports"]["last"] = _drop_empty(
                {
                    "jobID": j.jobID,
                    "state": IMPORT.Name(j.state),
                    "rows": j.row_count,
                    "sparkApplication": spark_application(j),
                    "reason": j.reason[:4096],
                }
            )
    with contextlib.suppress(MilvusError):
        jobs = sorted(await co.compaction_jobs(cid), key=lambda j: j.compactionID)
        out["compactions"] = {"running": sum(j.state == COMPACTION.Executing for j in jobs), "total": len(jobs)}
        if jobs:
            j = jobs[-1]
            out["compactions"]["last"] = _drop_empty(
                {
                    "compactionID": j.compactionID,
                    "state": COMPACTION.Name(j.state),
                    "plans": len(j.plans),
                    "sparkApplication": spark_application(j),
                    "reason": j.reason[:4096],
                }
            )
    return out


def spark_application(job: data_coord_pb2.ImportJob | data_coord_pb2.CompactionJob) -> str:
    """The SparkApplication a job ran as, or '' when it ran in DataCoord's process (below
    spark.inProcessMaxMB: its name was never a Kubernetes object) or was not submitted yet."""
    try:
        handle = json.loads(job.handle) if job.handle else None
    except ValueError:
        handle = None
    if not isinstance(handle, dict) or handle.get("runner") == inprocess.RUNNER:
        return ""
    return job.app_name


def _drop_empty(d: dict) -> dict:
    return {k: v for k, v in d.items() if v not in ("", None)}


async def delete_segments(rt, namespace: str, collection_id: int) -> int:
    """Delete every Segment resource of a collection (ownerReferences would too, eventually)."""
    n = 0
    for item in await rt.kube.list(R.SEGMENT, namespace, labels={R.LABEL_COLLECTION_ID: str(collection_id)}):
        await rt.kube.delete(R.SEGMENT, namespace, item["metadata"]["name"])
        metrics.SEGMENT_WRITES.labels("delete").inc()
        n += 1
    return n
