"""Every file DataCoord deletes is deleted here, and fenced (docs/architecture/fencing.md).

DataCoord decides most things from its memory, and its memory can be stale: a DataCoord paused
past its lease, or cut off from etcd, runs on what it knew while a successor commits binlogs,
imports and compaction results. Its etcd writes are refused (they compare the leader key), but a
file deletion is not an etcd write: decided from that memory, it removes what the successor's
meta references. So memory only proposes what to delete. The decision is taken on what etcd
says now: the keys that justify it are read in ONE fenced transaction (answered only while this
process holds the leader lock, at one revision), the caller's rule is applied to that snapshot,
and each file goes only while the leader check still holds — a lease that still exists proves no
successor could have committed anything since the snapshot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV, FencedError, Snapshot
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.storage import ObjectStore, paths

log = get_logger(__name__)
# Given etcd's snapshot and the targets, the targets that are garbage.
Decide = Callable[[Snapshot, list[str]], list[str]]


class FencedRemover:
    def __init__(self, kv: EtcdKV, store: ObjectStore, leader_check: Callable[[], Awaitable[bool]]):
        self.kv = kv  # the coordinator's fenced KV: its snapshots are the leader's
        self.store = store
        self.leader_check = leader_check

    async def remove(
        self,
        targets: Iterable[str],
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        decide: Decide,
        why: str,
    ) -> list[str]:
        """Delete each of `targets` (an object key, or every object under it when it ends with
        '/') that `decide` finds garbage in one fenced snapshot of `keys` and `prefixes`.
        Returns what was deleted; FencedError when this process is not (or no longer) the leader."""
        wanted = list(dict.fromkeys(targets))
        if not wanted:
            return []
        snap = await self.kv.snapshot(keys, prefixes)
        doomed = decide(snap, wanted)
        for target in doomed:
            if not await self.leader_check():
                raise FencedError(f"datacoord lost its leader lock: {why} stopped, nothing more is deleted")
            if target.endswith("/"):
                await self.store.delete_prefix(target)
            else:
                await self.store.delete(target)
        if doomed:
            log.info(
                "files removed", why=why, targets=len(doomed), kept=len(wanted) - len(doomed), revision=snap.revision
            )
        return doomed

    async def remove_segments(self, segments: Iterable[tuple[int, int, int]], why: str) -> list[tuple[int, int, int]]:
        """Every file of the segments (collection, partition, segment) that etcd does not know:
        the outputs of a job that failed or was cancelled. A segment etcd holds was committed
        (an answer lost, a successor's commit) and keeps its files."""
        segs = list(dict.fromkeys(segments))
        owner = {prefix: seg for seg in segs for prefix in paths.segment_file_prefixes(*seg)}

        def unknown(snap: Snapshot, targets: list[str]) -> list[str]:
            return [t for t in targets if snap.get(keys.segment_key(*owner[t])) is None]

        removed = await self.remove(
            owner,
            prefixes=sorted({keys.partition_segment_prefix(c, p) for c, p, _ in segs}),
            decide=unknown,
            why=why,
        )
        return list(dict.fromkeys(owner[t] for t in removed))

    async def is_dropped(self, coll: int, part: int | None = None) -> bool:
        """Whether RootCoord's meta no longer has the collection (or the partition), read fenced."""
        key = keys.collection_key(coll)
        return _gone((await self.kv.snapshot([key])).get(key), part)

    async def remove_dropped(self, targets: Iterable[str], coll: int, part: int | None = None) -> list[str]:
        """The files of a collection (or a partition) RootCoord dropped — none while etcd still
        has it: IDs are never reused, so what a dropped one left is garbage, whoever asks."""
        key = keys.collection_key(coll)

        def dropped(snap: Snapshot, found: list[str]) -> list[str]:
            return found if _gone(snap.get(key), part) else []

        return await self.remove(
            targets, keys=[key], decide=dropped, why="drop partition" if part else "drop collection"
        )


def _gone(collection: bytes | None, part: int | None) -> bool:
    if collection is None:
        return True
    return part is not None and all(
        p.partitionID != part for p in internal_pb2.CollectionInfo.FromString(collection).partitions
    )
