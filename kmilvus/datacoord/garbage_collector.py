"""DataCoord's garbage collector: binlog, delta log and stats log files nothing points at.

A DataNode that dies between writing a binlog and committing it with SaveBinlogPaths leaves a
file no meta refers to. The collector lists the log roots and deletes the files in known
segments' directories, and the L0 delta logs of known collections, that have stayed
unreferenced for `tolerance` seconds (a flush in progress commits long before).
Directories of segments unknown to the meta (an import being written) are not its business.
Index files (`index_files/...`) whose build ID no SegmentIndex records (a build that crashed
before its InProgress record, or finished after its segment or index was dropped) go the same way.
"""

from __future__ import annotations

import time

from kmilvus.datacoord.meta import SegmentMeta
from kmilvus.log import get_logger
from kmilvus.storage import paths

log = get_logger(__name__)


class GarbageCollector:
    def __init__(self, meta: SegmentMeta, store, tolerance: float):
        self.meta = meta
        self.store = store
        self.tolerance = tolerance
        self._unreferenced_since: dict[str, float] = {}
        self.index_meta = None  # DataCoord's IndexMeta, when indexes are served

    def _of_known_segment(self, key: str) -> bool:
        """Whether `key` ({root}/{coll}/{part}/{seg}/...) lies in a segment the meta knows, or is
        an L0 delta log of a collection it knows."""
        l0 = paths.parse_l0_delta_log_key(key)
        if l0 is not None:
            return l0[0] in self.meta.l0 or l0[0] in self.meta.segments.of_collection
        parts = key.split("/")
        if len(parts) < 5 or not (parts[1].isdigit() and parts[2].isdigit() and parts[3].isdigit()):
            return False
        seg = self.meta.segments.get(int(parts[3]))
        return seg is not None and seg.info.collectionID == int(parts[1]) and seg.info.partitionID == int(parts[2])

    def _orphan_index_files(self, listed: list[tuple[str, int]]) -> list[str]:
        builds = {si.buildID for si in self.index_meta.segment_indexes.values()} if self.index_meta else set()
        orphans = []
        for key, _ in listed:
            parts = key.split("/")  # index_files/{coll}/{part}/{seg}/{buildID}/{name}
            if len(parts) >= 6 and parts[4].isdigit() and int(parts[4]) not in builds:
                orphans.append(key)
        return orphans

    async def collect(self) -> list[str]:
        """One pass; returns the keys it deleted."""
        now = time.monotonic()
        seen: set[str] = set()
        deleted: list[str] = []
        segs = list(self.meta.segments.values())
        # A delta log may be recorded on another segment (deletes redirected to a compaction target).
        referenced = {b.log_path for s in segs for logs in (s.binlogs, s.deltalogs, s.statslogs) for b in logs.values()}
        referenced |= {d.binlog.log_path for logs in list(self.meta.l0.values()) for d in logs.values()}
        # Each log root listed once, not each segment's three directories: a pass used to make
        # three listings per segment (6,000 at 1,000 idle collections, a burst every minute).
        for root in (paths.INSERT_LOG, paths.DELTA_LOG, paths.STATS_LOG):
            for key, _ in await self.store.list(root + "/"):
                if key in referenced or not self._of_known_segment(key):
                    continue
                seen.add(key)
                first = self._unreferenced_since.setdefault(key, now)
                if now - first >= self.tolerance and self._of_known_segment(key):
                    await self.store.delete(key)
                    deleted.append(key)
                    seen.discard(key)
        if self.index_meta is not None:
            for key in self._orphan_index_files(await self.store.list(paths.INDEX_FILES + "/")):
                seen.add(key)
                if now - self._unreferenced_since.setdefault(key, now) >= self.tolerance:
                    await self.store.delete(key)
                    deleted.append(key)
                    seen.discard(key)
        self._unreferenced_since = {k: t for k, t in self._unreferenced_since.items() if k in seen}
        if deleted:
            log.info("orphan binlogs deleted", files=len(deleted))
        return deleted
