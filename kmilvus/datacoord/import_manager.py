"""Bulk import (Milvus' `do_bulk_insert`) through a Spark job.

    Import RPC → ImportJob (Pending) in etcd → files inspected, IDs reserved, SparkApplication
    submitted (Started) → the job writes binlogs + a manifest → DataCoord registers every
    segment (Flushed), its binlog meta and the job's Completed state in ONE etcd transaction.

A job that fails (bad row, bad file, Spark error, timeout) or is cancelled registers nothing;
its state says why (the file, the row and the reason), and its files (every reserved segment
directory etcd does not know) and manifest are removed. A commit whose answer is lost is read
back from etcd, never taken for a failure. Job state lives under
`catalog.import_job_key(coll, job)`, so DropCollection removes it with the collection; a
restarted DataCoord picks unfinished jobs up where they were (following the same Spark
application when it has a handle). The lifecycle itself is `job_lifecycle.JobLifecycle`'s.
"""

from __future__ import annotations

import asyncio
import json
import math
import time

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.datacoord.job_lifecycle import JobLifecycle, b64, manifest_binlogs
from kmilvus.datacoord.meta import Segment, SegmentState
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.spark import application
from kmilvus.spark import files as infiles
from kmilvus.spark.runner import JobStatus
from kmilvus.storage import paths
from kmilvus.util import merr, typeutil
from kmilvus.util.constants import DEFAULT_PARTITION

log = get_logger(__name__)
IS = common_pb2.ImportState
TERMINAL = (IS.ImportCompleted, IS.ImportFailed, IS.ImportFailedAndCleaned)


class ImportManager(JobLifecycle[data_coord_pb2.ImportJob]):
    kind = "import"
    message = data_coord_pb2.ImportJob
    id_field = "jobID"
    key_of = staticmethod(keys.import_job_key)
    prefix_of = staticmethod(keys.import_job_prefix)

    def finished(self, job: data_coord_pb2.ImportJob) -> bool:
        return job.state in TERMINAL

    def on_submitted(self, job: data_coord_pb2.ImportJob) -> None:
        job.state = IS.ImportStarted

    def on_progress(self, job: data_coord_pb2.ImportJob, st: JobStatus) -> None:
        if st.progress.get("rows"):
            job.row_count = int(st.progress["rows"])

    # ------------------------------------------------------------------------ create
    async def create(self, req: data_coord_pb2.ImportJobRequest) -> data_coord_pb2.ImportJob:
        port = self.port
        coll = req.collectionID
        if port.dropping(coll) or not port.channels_of(coll):
            raise merr.collection_not_found(req.collection_name or coll)
        if port.partition_dropped(coll, req.partitionID):
            raise merr.MilvusError(
                merr.PARTITION_NOT_FOUND, f"partition not found[partition={req.partition_name or req.partitionID}]"
            )
        if not req.files:
            raise merr.invalid("import requires at least one file")
        if bad := infiles.unimportable_fields(schema_pb2.CollectionSchema.FromString(req.schema)):
            f = bad[0]
            raise merr.MilvusError(
                merr.IMPORT_FAILED,
                f"bulk import of {typeutil.type_name(f.data_type)} fields is not supported (field {f.name})",
            )
        options = {kv.key: kv.value for kv in req.options}
        try:
            for f in req.files:
                infiles.format_of(f, options)
        except infiles.ImportError_ as exc:
            raise merr.MilvusError(merr.IMPORT_FAILED, str(exc)) from None
        job_id = await port.alloc_ids(1)
        job = data_coord_pb2.ImportJob(
            jobID=job_id,
            collectionID=coll,
            partitionID=req.partitionID,
            collection_name=req.collection_name,
            partition_name=req.partition_name or DEFAULT_PARTITION,
            files=list(req.files),
            options=list(req.options),
            state=IS.ImportPending,
            create_ts=int(time.time()),
            schema=req.schema,
            vchannels=list(req.vchannels),
        )
        log.info("import job created", job=job_id, collection=coll, files=len(req.files))
        return await self.submit(job)

    # ------------------------------------------------------------------------ prepare
    async def prepare(self, job: data_coord_pb2.ImportJob) -> dict:
        """Inspect the files, reserve IDs and a timestamp, and write the job spec."""
        port, coll = self.port, job.collectionID
        schema = schema_pb2.CollectionSchema.FromString(job.schema)
        options = {kv.key: kv.value for kv in job.options}
        inputs = [infiles.resolve(f, self.cfg.storage_uri, options) for f in job.files]

        def inspect_all():
            problems = []
            for f in inputs:
                problems += infiles.inspect(f, schema, options)
            return problems

        problems = await asyncio.to_thread(inspect_all)
        if problems:
            raise infiles.ImportError_(problems)
        bound = sum(infiles.row_bound(f, schema) for f in inputs)
        seg_rows = port.rows_per_segment(coll, schema)
        # Rows go to the shard their key hashes to: a segment per shard of each bucket.
        shards = max(1, len(job.vchannels) or len(port.channels_of(coll)))
        n_seg = max(1, math.ceil(bound / (seg_rows * shards))) * shards
        reserve = max(1, bound)
        spec = {
            "kind": "import",
            "version": 1,
            "job_id": job.jobID,
            "collection_id": coll,
            "partition_id": job.partitionID,
            "collection_name": job.collection_name,
            "schema": b64(job.schema),
            "storage_uri": self.storage_uri(),
            "files": [f.to_dict() for f in inputs],
            "options": options,
            "timestamp": await port.alloc_ts(),
            "row_id_start": await port.alloc_ids(reserve),
            "row_id_count": reserve,
            "log_id_start": await port.alloc_ids(reserve),
            "log_id_count": reserve,
            "segment_id_start": await port.alloc_ids(n_seg),
            "segment_count": n_seg,
            "segment_max_rows": seg_rows,
            "shards": shards,
            "manifest_key": self.manifest_key(job),
        }
        job.spec = json.dumps(spec, sort_keys=True)
        job.app_name = application.app_name("import", coll, job.jobID)
        job.expected_rows = sum(f.rows for f in inputs) if all(f.rows >= 0 for f in inputs) else 0
        job.input_bytes = sum(f.size for f in inputs)
        await self.save(job)
        log.info(
            "import prepared",
            job=job.jobID,
            files=len(inputs),
            bytes=job.input_bytes,
            expected_rows=job.expected_rows,
            segments_reserved=n_seg,
        )
        return spec

    # ------------------------------------------------------------------------ outcomes
    async def commit(self, job: data_coord_pb2.ImportJob, manifest: dict) -> None:
        """Every segment, its binlog meta and the job's Completed state in ONE transaction."""
        port, coll = self.port, job.collectionID
        spec = json.loads(job.spec)
        start, count = int(spec["segment_id_start"]), int(spec["segment_count"])
        part = int(spec["partition_id"])
        vchans = list(job.vchannels) or port.channels_of(coll)
        seg_rows = int(spec["segment_max_rows"])
        ops: list[Op] = []
        # The partition must not have been dropped meanwhile: its drop record is compared in
        # the same transaction (DropPartition writes it before it cancels the partition's jobs).
        compares = [
            Cmp.exists(keys.import_job_key(coll, job.jobID)),
            Cmp.missing(keys.dropped_partition_key(coll, part)),
        ]
        segs: list[Segment] = []
        total = 0
        for k, m in enumerate(manifest["segments"]):
            sid = int(m["segment_id"])
            if not start <= sid < start + count or int(m["partition_id"]) != part:
                raise merr.MilvusError(merr.IMPORT_FAILED, f"the manifest names segment {sid}, not reserved")
            binlogs = manifest_binlogs(m["binlogs"], paths.segment_prefix(coll, part, sid), merr.IMPORT_FAILED)
            info = internal_pb2.SegmentInfo(
                ID=sid,
                collectionID=coll,
                partitionID=part,
                insert_channel=_channel_of(m, k, vchans),
                num_of_rows=sum(b.entries_num for b in binlogs.values()),
                state=SegmentState.Flushed,
                max_row_num=seg_rows,
                binlog_count=len(binlogs),
                binlog_size=sum(b.log_size for b in binlogs.values()),
                created_timestamp=int(manifest["timestamp"]),
                flushed_timestamp=int(manifest["timestamp"]),
                last_expire_time=int(manifest["timestamp"]),
                seal_timestamp=int(manifest["timestamp"]),
            )
            total += info.num_of_rows
            seg_key = keys.segment_key(coll, part, sid)
            ops.append(Op.put(seg_key, info.SerializeToString()))
            compares.append(Cmp.missing(seg_key))
            ops += [Op.put(keys.binlog_key(coll, sid, lid), b.SerializeToString()) for lid, b in binlogs.items()]
            segs.append(Segment(info, binlogs=binlogs, created=time.monotonic()))
        if total != int(manifest["rows"]):
            raise merr.MilvusError(
                merr.IMPORT_FAILED, f"the manifest's segments hold {total} rows, it says {manifest['rows']}"
            )
        # The Completed record goes to etcd first and into memory (where GetImportJob reads it)
        # only with the segments: a client seeing Completed must find the rows.
        done = data_coord_pb2.ImportJob()
        done.CopyFrom(job)
        done.state = IS.ImportCompleted
        done.row_count = total
        done.segmentIDs[:] = [s.id for s in segs]
        done.complete_ts = int(time.time())
        done.reason = ""
        done.progress = json.dumps({"phase": "completed", "rows": total})
        pk = typeutil.primary_field(schema_pb2.CollectionSchema.FromString(job.schema))
        if pk.autoID:  # each bucket's row IDs once (its segments, one per shard, share them)
            ranges = sorted({(int(m["row_id_from"]), int(m["row_id_to"]) + 1) for m in manifest["segments"]})
            done.id_ranges[:] = [x for r in ranges for x in r]
        ops.append(Op.put(keys.import_job_key(coll, job.jobID), done.SerializeToString()))
        if len(ops) > self.cfg.etcd_max_txn_ops:
            raise merr.MilvusError(
                merr.IMPORT_FAILED,
                f"the import made {len(ops) - 1} segment and binlog entries, more than one "
                f"etcd transaction takes ({self.cfg.etcd_max_txn_ops} operations): split the files "
                f"into several imports",
            )
        job_key = keys.import_job_key(coll, job.jobID)
        async with self.scheduler.collection_lock(coll):
            if port.dropping(coll) or not await port.kv.commit(
                ops, compares, proof=job_key, name="datacoord.import.commit"
            ):
                raise merr.MilvusError(
                    merr.IMPORT_FAILED,
                    "the collection or partition was dropped, or its segments changed, while the import ran",
                )
            for s in segs:
                port.meta.segments[s.id] = s
            job.CopyFrom(done)
            await port.meta.notify(*segs)
        log.info(
            "import completed",
            job=job.jobID,
            collection=coll,
            rows=total,
            segments=len(segs),
            spark_seconds=manifest.get("spark_seconds"),
            job_seconds=manifest.get("seconds"),
        )

    def record_failure(self, job: data_coord_pb2.ImportJob, reason: str) -> None:
        job.state = IS.ImportFailed
        job.reason = reason
        job.segmentIDs[:] = []
        job.row_count = 0

    def outputs(self, job: data_coord_pb2.ImportJob) -> list[tuple[int, int, int]]:
        """Every reserved segment (the manifest goes with the lifecycle)."""
        if not job.spec:
            return []
        spec = json.loads(job.spec)
        coll, part, start = int(spec["collection_id"]), int(spec["partition_id"]), int(spec["segment_id_start"])
        return [(coll, part, start + k) for k in range(int(spec["segment_count"]))]

    def writes_into(self, job: data_coord_pb2.ImportJob, part: int) -> bool:
        return job.partitionID == part


def _channel_of(m: dict, k: int, vchans: list[str]) -> str:
    """The vchannel of the manifest's k-th segment: the shard its rows' keys hash to (a job
    planned before imports were sharded: round robin)."""
    if not vchans:
        return ""
    if "shard" in m:
        shard = int(m["shard"])
        if not 0 <= shard < len(vchans):
            raise merr.MilvusError(merr.IMPORT_FAILED, f"the manifest names shard {shard} of {len(vchans)}")
        return vchans[shard]
    return vchans[k % len(vchans)]
