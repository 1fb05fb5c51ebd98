"""Compaction: merge each plan's source segments (flushed, small) into its target segments.

Spec (JSON, built by DataCoord's CompactionManager):

    kind "compact", job_id (the compaction ID), collection_id, schema (base64), storage_uri,
    manifest_key, log_id_start, log_id_count,
    plans: [{plan_id, partition_id, channel, target_ids: [...],
             sources: [{segment_id, binlogs: [{key, rows}, ...], deltalogs: [{key, rows}, ...]}, ...],
             l0_deltalogs: [{key, rows}, ...]}, ...]

`expire_before` (a hybrid timestamp, 0: no TTL): rows inserted before it have expired and are
dropped like deleted ones (counted in `deleted`).

Delta logs (pk, ts) are applied per plan — its sources' own and its channel's L0 delta logs of
its partition (and of every partition): a row is dropped when a delete of its primary key has a
timestamp greater than the row's (Milvus' rule); each plan's manifest entry counts the rows it
dropped (`deleted`). Deletes committed after the job was planned are not in it: DataCoord
carries a source's new delta logs over to the targets, and a channel's new L0 delta logs apply
to the targets as to every segment of the channel.

Rows keep their row IDs and timestamps; each plan's rows (sources in the given order, binlogs in
the given order) are cut into len(target_ids) targets of equal size, so every row lands in
exactly one target. A row's dense index in the job (`__g`) comes from its binlog's offset plus
`_metadata.row_index`; a written file's log ID is `log_id_start + __g` of its first row.
The job writes binlogs and a manifest; it changes no meta: DataCoord swaps sources for targets
in one etcd transaction after reading the manifest.

How: Spark schedules tasks of source binlogs; each task reads its binlogs with pyarrow
(`kmilvus.storage.binlog`'s decoding), drops deleted rows (`drop_deleted`) and expired ones
(`drop_expired`) batch by batch and feeds a `BinlogWriter` (`write_binlogs`): no row passes
through the JVM. `run_local(spec)` is the in-process route for small compactions (no Spark, no
JVM): the SAME `write_binlogs` over every source binlog in one thread.
"""

from __future__ import annotations

import math
import re
import time

from kmilvus_jobs.common import JobFailure, prefetched, progress
from kmilvus_jobs.sources import _tasks
from kmilvus_jobs.writer import RESULT_SPARK_SCHEMA, BinlogWriter, decode_schema, segment_entry, writing_task

KEY_TAIL = r"insert_log/\d+/\d+/(\d+/\d+)$"


def _layout(spec: dict):
    """Offsets of every binlog, per-plan row ranges and target indexes."""
    files, plans, acc, target_base = [], [], 0, 0
    for p_idx, plan in enumerate(spec["plans"]):
        start = acc
        for src in plan["sources"]:
            for b in src["binlogs"]:
                m = re.search(KEY_TAIL, b["key"])
                if not m:
                    raise JobFailure(
                        [{"file": b["key"], "row": None, "field": None, "reason": "not an insert binlog key"}]
                    )
                files.append(
                    {"key": b["key"], "tail": m.group(1), "offset": acc, "plan": p_idx, "rows": int(b["rows"])}
                )
                acc += int(b["rows"])
        rows = acc - start
        n_t = len(plan["target_ids"])
        if n_t < 1:
            raise JobFailure(
                [{"file": None, "row": None, "field": None, "reason": f"plan {plan['plan_id']} has no target segment"}]
            )
        plans.append(
            {"start": start, "rows": rows, "targets": n_t, "base": target_base, "per": max(1, math.ceil(rows / n_t))}
        )
        target_base += n_t
    return files, plans, acc


def binlog_batches(storage_uri: str, files: list[dict], plans: list[dict], columns: list[str], indexes, schema=None):
    """Source binlogs `indexes` (into `files`) read by pyarrow, decoded, with `__g` and `__seg`:
    (plan index, record batch) pairs. A binlog written before a field was added reads it as
    the collection's `schema` says (its default, else null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kmilvus.storage import ObjectStore, binlog
    from kmilvus.util import typeutil

    store = ObjectStore.from_uri(storage_uri)
    for t in indexes:
        f = files[t]
        p = plans[f["plan"]]
        with store.filesystem.open_input_file(store.path(f["key"])) as src:
            pf = pq.ParquetFile(src)
            have = set(pf.schema_arrow.names)
            table = pf.read(columns=[c for c in columns if c in have])
        table = binlog.from_storage(table)
        if schema is not None:
            table = typeutil.conform(table, schema)
        table = table.combine_chunks()
        n = table.num_rows
        g = np.arange(f["offset"], f["offset"] + n, dtype=np.int64)
        seg = p["base"] + np.minimum(p["targets"] - 1, (g - p["start"]) // p["per"])
        table = table.append_column("__g", pa.array(g)).append_column("__seg", pa.array(seg.astype(np.int32)))
        for batch in table.to_batches():
            yield f["plan"], batch


def _deletes(store, plan: dict):
    """Every delete applying to one plan's rows (its sources' delta logs and its channel's L0
    delta logs), the newest per primary key (a pyarrow table), or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = [d["key"] for src in plan["sources"] for d in src.get("deltalogs", [])]
    keys += [d["key"] for d in plan.get("l0_deltalogs", [])]
    if not keys:
        return None
    table = pa.concat_tables([pq.read_table(store.path(k), filesystem=store.filesystem) for k in keys])
    if not table.num_rows:
        return None
    return table.group_by("pk").aggregate([("ts", "max")]).rename_columns(["__dpk", "__dts"])


def drop_deleted(batch, deletes, pk_column: str):
    """Milvus' delete rule on one record batch: the rows kept (in order) and how many a delete of
    their key with a later timestamp removed."""
    import pyarrow.compute as pc

    idx = pc.index_in(batch.column(pk_column), value_set=deletes.column("__dpk"))
    dts = deletes.column("__dts").take(idx)
    gone = pc.fill_null(pc.greater(dts, batch.column("1")), False)
    n = pc.sum(gone).as_py() or 0
    return (batch.filter(pc.invert(gone)) if n else batch), n


def drop_expired(batch, expire_before: int):
    """The TTL rule on one record batch: rows inserted before `expire_before` go."""
    import pyarrow as pa
    import pyarrow.compute as pc

    gone = pc.less(batch.column("1"), pa.scalar(expire_before, batch.schema.field("1").type))
    n = pc.sum(gone).as_py() or 0
    return (batch.filter(pc.invert(gone)) if n else batch), n


class _Job:
    """A checked compaction spec: binlog layout, target segments and the sources' deletes."""

    def __init__(self, spec: dict):
        from kmilvus.storage import ObjectStore
        from kmilvus.util import typeutil

        self.spec = spec
        self.schema = decode_schema(spec["schema"])
        self.storage_uri = spec["storage_uri"]
        self.store = ObjectStore.from_uri(self.storage_uri)
        self.coll = int(spec["collection_id"])
        self.files, self.plans, self.total = _layout(spec)
        if self.total > int(spec["log_id_count"]):
            raise JobFailure(
                [
                    {
                        "file": None,
                        "row": None,
                        "field": None,
                        "reason": f"{self.total} rows but log IDs reserved for {spec['log_id_count']}",
                    }
                ]
            )
        self.segments = [
            [self.coll, int(plan["partition_id"]), int(t)] for plan in spec["plans"] for t in plan["target_ids"]
        ]
        progress(
            "planned",
            plans=len(self.plans),
            sources=sum(len(p["sources"]) for p in spec["plans"]),
            binlogs=len(self.files),
            rows=self.total,
        )
        self.arrow_schema = typeutil.arrow_schema(self.schema)
        self.columns = [f.name for f in self.arrow_schema]
        self.pk_column = str(next(f for f in self.schema.fields if f.is_primary_key).fieldID)
        self.deletes = [_deletes(self.store, plan) for plan in spec["plans"]]
        self.expire_before = int(spec.get("expire_before") or 0)

    @property
    def empty(self) -> bool:
        return not self.files or not self.total

    def task_ctx(self) -> dict:
        """What `write_binlogs` needs (plain data, shipped to Spark tasks)."""
        return {
            "writer": self.writer_ctx(),
            "storage_uri": self.storage_uri,
            "files": self.files,
            "plans": self.plans,
            "columns": self.columns,
            "deletes": self.deletes,
            "pk_column": self.pk_column,
            "expire_before": self.expire_before,
        }

    def writer_ctx(self) -> dict:
        return {
            "mode": "compact",
            "schema": self.spec["schema"],
            "storage_uri": self.storage_uri,
            "segments": self.segments,
            "log_id_start": int(self.spec["log_id_start"]),
        }

    def cleanup(self) -> None:
        from kmilvus.storage import paths
        from kmilvus_jobs.importer import cleanup

        cleanup(self.storage_uri, [], [paths.segment_prefix(*s) for s in self.segments])

    def check(self, results: list[dict], deleted: int) -> None:
        """Fail on a problem the writers report, or on rows lost or made."""
        written = sum(r["rows"] for r in results if r["kind"] == "binlog")
        problems = [
            {"file": None, "row": r["row"], "field": r["field"], "reason": r["reason"]}
            for r in results
            if r["kind"] == "error"
        ]
        if not problems and written + deleted != self.total:
            problems = [
                {
                    "file": None,
                    "row": None,
                    "field": None,
                    "reason": f"wrote {written} rows and dropped {deleted} deleted ones, "
                    f"but the sources hold {self.total}",
                }
            ]
        if problems:
            raise JobFailure(problems)

    def manifest(self, results: list[dict], deleted: int, started: float) -> dict:
        spec = self.spec
        binlogs = [r for r in results if r["kind"] == "binlog"]
        written = sum(r["rows"] for r in binlogs)
        out_plans = []
        for p_idx, plan in enumerate(spec["plans"]):
            lay = self.plans[p_idx]
            targets = []
            for k, tid in enumerate(plan["target_ids"]):
                i = lay["base"] + k
                logs = sorted((r for r in binlogs if r["seg"] == i), key=lambda r: r["log_id"])
                targets.append(
                    {"segment_id": int(tid), "partition_id": int(plan["partition_id"]), **segment_entry(logs)}
                )
            out_plans.append(
                {
                    "plan_id": plan["plan_id"],
                    "rows": lay["rows"],
                    "deleted": lay["rows"] - sum(t["rows"] for t in targets),
                    "sources": [int(s["segment_id"]) for s in plan["sources"]],
                    "targets": targets,
                }
            )
        progress("written", rows=written, targets=len(self.segments))
        return {
            "kind": "compact",
            "status": "completed",
            "job_id": spec.get("job_id"),
            "collection_id": self.coll,
            "rows": written,
            "deleted": deleted,
            "plans": out_plans,
            "segments": [t for p in out_plans for t in p["targets"]],
            "input_bytes": sum(
                int(b.get("size", 0)) for plan in spec["plans"] for s in plan["sources"] for b in s["binlogs"]
            ),
            "spark_seconds": round(time.time() - started, 3),
        }


def write_binlogs(ctx: dict, writer: BinlogWriter, indexes, cancelled=lambda: False) -> int:
    """Source binlogs `indexes` → `writer`, without deleted and expired rows; how many rows
    were dropped. Every route runs this (Spark tasks, the in-process thread)."""
    from kmilvus_jobs.importer import Cancelled

    deleted = 0
    schema = decode_schema(ctx["writer"]["schema"])
    batches = binlog_batches(ctx["storage_uri"], ctx["files"], ctx["plans"], ctx["columns"], indexes, schema)
    for plan, batch in prefetched(batches):
        if cancelled():
            raise Cancelled("cancelled")
        deletes = ctx["deletes"][plan]
        if deletes is not None:
            batch, n = drop_deleted(batch, deletes, ctx["pk_column"])
            deleted += n
        if ctx["expire_before"]:
            batch, n = drop_expired(batch, ctx["expire_before"])
            deleted += n
        writer.add(batch)
        if writer.failed:
            break
    return deleted


def binlog_writer_task(ctx: dict):
    """For `_tasks(spark, files).mapInArrow(..., RESULT_SPARK_SCHEMA)`: a task writes its source
    binlogs and reports, beside its files, the rows it dropped (a "deleted" record)."""

    def feed(writer: BinlogWriter, batches) -> list[dict]:
        deleted = 0
        for b in batches:
            if not writer.failed:
                deleted += write_binlogs(ctx, writer, b.column("__task").to_pylist())
        return [{"kind": "deleted", "rows": deleted}]

    return writing_task(ctx["writer"], feed)


def run(spark, spec: dict) -> dict:
    started = time.time()
    job = _Job(spec)
    deleted = 0
    try:
        results = []
        if not job.empty:
            n_tasks = max(1, min(spark.sparkContext.defaultParallelism, len(job.segments)))
            tasks = _tasks(spark, job.files, n_tasks).mapInArrow(
                binlog_writer_task(job.task_ctx()), RESULT_SPARK_SCHEMA
            )
            rows = [r.asDict() for r in tasks.collect()]
            deleted = sum(r["rows"] for r in rows if r["kind"] == "deleted")
            results = [r for r in rows if r["kind"] != "deleted"]
        job.check(results, deleted)
    except BaseException:
        job.cleanup()
        raise
    return job.manifest(results, deleted, started)


def run_local(spec: dict, cancelled=lambda: False) -> dict:
    """The compaction without Spark: the same reader, delete rule and writer, in this process."""
    started = time.time()
    job = _Job(spec)
    deleted = 0
    writer = None
    try:
        results = []
        if not job.empty:
            writer = BinlogWriter(job.writer_ctx())
            deleted = write_binlogs(job.task_ctx(), writer, range(len(job.files)), cancelled)
            results = writer.finish().to_pylist()
        job.check(results, deleted)
    except BaseException:
        if writer is not None:
            writer.abort()
        job.cleanup()
        raise
    return job.manifest(results, deleted, started)
