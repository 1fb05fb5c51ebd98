"""DataCoord's garbage collector: files no meta refers to (Milvus' GC lists storage and checks
the meta, the same way).

A DataNode that dies between writing a binlog and committing it, a write refused because its
segment, partition or collection was dropped meanwhile, a job that died before cleaning up, an
index build that finished after its segment went: each leaves files nothing points at. The
collector lists the log roots and proposes each file its memory does not reference, once it has
stayed so for `tolerance` seconds (a flush in progress commits long before); etcd decides
(`FencedRemover`: one fenced snapshot of the collection's meta, by the leader only):

- an insert, delta or stats log that no binlog meta references, unless its segment is reserved
  by an unfinished import or compaction (their outputs are registered at the end, or removed by
  the job itself); a channel's L0 delta log that no L0 delta log meta references;
- index files whose build no SegmentIndex records, or written by an attempt older than its
  build's current one (an IndexNode job assigned again elsewhere);
- DDL binlogs of a collection that no longer exists, that no DDL binlog meta references.

So a file of an unknown or dropped segment, partition or collection is found too, and a
DataCoord that lost its lock (or etcd) deletes nothing.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from kmilvus.datacoord.compaction import PLAN_DONE
from kmilvus.datacoord.import_manager import TERMINAL
from kmilvus.datacoord.index_meta import IndexMeta
from kmilvus.datacoord.meta import SegmentMeta
from kmilvus.datacoord.remover import Decide, FencedRemover
from kmilvus.log import get_logger
from kmilvus.meta import FencedError, Snapshot
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.storage import paths

log = get_logger(__name__)
LOG_ROOTS = (paths.INSERT_LOG, paths.DELTA_LOG, paths.STATS_LOG)


def builds_of(segment_indexes: Iterable[data_coord_pb2.SegmentIndex]) -> dict[int, int]:
    """buildID → the version of its current attempt."""
    return {si.buildID: si.index_version for si in segment_indexes}


def stale_index_file(key: str, builds: dict[int, int]) -> bool:
    """An index file no build records, or written by an attempt older than its build's current
    one (an IndexNode's job assigned again elsewhere that still finished)."""
    parsed = paths.parse_index_file_key(key)
    if parsed is None:
        return False
    build, version = parsed
    return build not in builds or version < builds[build]


class CollectionView:
    """What etcd says of one collection's files at one revision."""

    def __init__(self, coll: int, snap: Snapshot):
        self.live = snap.get(keys.collection_key(coll)) is not None
        self.logs: set[str] = set()
        for prefix in (keys.binlog_prefix(coll), keys.deltalog_prefix(coll), keys.statslog_prefix(coll)):
            self.logs.update(internal_pb2.Binlog.FromString(raw).log_path for _, raw in snap.under(prefix))
        self.logs.update(
            internal_pb2.L0Deltalog.FromString(raw).binlog.log_path
            for _, raw in snap.under(keys.l0_deltalog_prefix(coll))
        )
        for _, raw in snap.under(keys.ddl_binlog_prefix(coll)):
            d = internal_pb2.DDLBinlogMeta.FromString(raw)
            self.logs.update((d.ddl_binlog_path, d.ts_binlog_path))
        self.builds = builds_of(
            data_coord_pb2.SegmentIndex.FromString(raw) for _, raw in snap.under(keys.segment_index_prefix(coll))
        )
        self.reserved: set[int] = set()  # segments unfinished jobs may still be writing
        for _, raw in snap.under(keys.import_job_prefix(coll)):
            job = data_coord_pb2.ImportJob.FromString(raw)
            if job.state not in TERMINAL and job.spec:
                spec = json.loads(job.spec)
                start = int(spec["segment_id_start"])
                self.reserved.update(range(start, start + int(spec["segment_count"])))
        for _, raw in snap.under(keys.compaction_job_prefix(coll)):
            for plan in data_coord_pb2.CompactionJob.FromString(raw).plans:
                if plan.state not in PLAN_DONE:
                    self.reserved.update(plan.targets)

    @staticmethod
    def reads(coll: int) -> tuple[list[str], list[str]]:
        """The keys and prefixes a view of `coll` is built from."""
        return [keys.collection_key(coll)], [
            keys.binlog_prefix(coll),
            keys.deltalog_prefix(coll),
            keys.statslog_prefix(coll),
            keys.l0_deltalog_prefix(coll),
            keys.ddl_binlog_prefix(coll),
            keys.segment_index_prefix(coll),
            keys.import_job_prefix(coll),
            keys.compaction_job_prefix(coll),
        ]

    @classmethod
    def decider(cls, coll: int) -> Decide:
        def decide(snap: Snapshot, targets: list[str]) -> list[str]:
            view = cls(coll, snap)
            return [t for t in targets if view.garbage(t)]

        return decide

    def garbage(self, key: str) -> bool:
        if key.startswith(paths.DDL_LOG + "/"):
            return not self.live and key not in self.logs
        if paths.parse_l0_delta_log_key(key) is not None:
            return key not in self.logs
        parsed = paths.parse_segment_file_key(key)
        if parsed is None:
            return False
        root, _, _, seg = parsed
        if root == paths.INDEX_FILES:
            return stale_index_file(key, self.builds)
        return key not in self.logs and seg not in self.reserved


class GarbageCollector:
    def __init__(self, meta: SegmentMeta, remover: FencedRemover, tolerance: float, live: Callable[[], set[int]] = set):
        """`live`: the collections this DataCoord serves (their DDL binlogs are not proposed)."""
        self.live = live
        self.meta = meta
        self.remover = remover
        self.store = remover.store
        self.tolerance = tolerance
        self._unreferenced_since: dict[str, float] = {}
        self.index_meta: IndexMeta | None = None  # DataCoord's, when indexes are served

    def _referenced_in_memory(self) -> tuple[set[str], dict[int, int]]:
        """Log paths and build IDs the memory knows (a delta log may be recorded on another
        segment: deletes redirected to a compaction target)."""
        segs = list(self.meta.segments.values())
        logs = {b.log_path for s in segs for group in (s.binlogs, s.deltalogs, s.statslogs) for b in group.values()}
        logs.update(p for s in segs for d in s.ddl_binlogs.values() for p in (d.ddl_binlog_path, d.ts_binlog_path))
        logs.update(d.binlog.log_path for l0 in list(self.meta.l0.values()) for d in l0.values())
        builds = builds_of(self.index_meta.segment_indexes.values()) if self.index_meta else {}
        return logs, builds

    async def _listed(self) -> list[tuple[int, str]]:
        """(collection, key) of every file a pass may have to look at, listing each root once
        (not each segment's directories: 6,000 listings a minute at 1,000 idle collections)."""
        out = []
        live = self.live()
        for root in (*LOG_ROOTS, paths.DDL_LOG, *([paths.INDEX_FILES] if self.index_meta is not None else [])):
            for key, _ in await self.store.list(root + "/"):
                parts = key.split("/")
                if root == paths.DDL_LOG:
                    if len(parts) >= 4 and parts[1].isdigit() and int(parts[1]) not in live:
                        out.append((int(parts[1]), key))
                elif (parsed := paths.parse_segment_file_key(key)) is not None:
                    out.append((parsed[1], key))
                elif (l0 := paths.parse_l0_delta_log_key(key)) is not None:
                    out.append((l0[0], key))
        return out

    def _proposed(self, key: str, logs: set[str], builds: dict[int, int]) -> bool:
        """Whether the memory does not refer to `key` (etcd decides whether it is garbage)."""
        if key.startswith(paths.INDEX_FILES + "/"):
            return stale_index_file(key, builds)
        return key not in logs

    async def collect(self) -> list[str]:
        """One pass; returns the keys it deleted."""
        now = time.monotonic()
        logs, builds = self._referenced_in_memory()
        seen: set[str] = set()
        due: dict[int, list[str]] = defaultdict(list)
        for coll, key in await self._listed():
            if not self._proposed(key, logs, builds):
                continue
            seen.add(key)
            if now - self._unreferenced_since.setdefault(key, now) >= self.tolerance:
                due[coll].append(key)
        deleted: list[str] = []
        try:
            for coll, files in sorted(due.items()):
                reads, prefixes = CollectionView.reads(coll)
                deleted += await self.remover.remove(
                    files,
                    keys=reads,
                    prefixes=prefixes,
                    decide=CollectionView.decider(coll),
                    why="orphan files",
                )
        except FencedError as exc:
            log.warning("garbage collection stopped: not the leader", error=exc.message)
        seen.difference_update(deleted)
        self._unreferenced_since = {k: t for k, t in self._unreferenced_since.items() if k in seen}
        if deleted:
            log.info("orphan files deleted", files=len(deleted))
        return deleted
