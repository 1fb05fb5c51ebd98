"""DataCoord's index meta (Milvus 2.3's datacoord/index_meta.go): FieldIndex and SegmentIndex.

An in-memory view over etcd, written only in transactions through the coordinator KV (fenced
like every DataCoord write). A SegmentIndex is committed with a compare that its segment and its
FieldIndex still exist, so a build finishing after a drop (of the segment, the index or the
collection) records nothing; its files are then garbage.
"""

from __future__ import annotations

from collections.abc import Iterable

from pymilvus.grpc_gen import common_pb2

from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2
from kmilvus.util import merr

IndexState = common_pb2.IndexState
FieldIndex = data_coord_pb2.FieldIndex
SegmentIndex = data_coord_pb2.SegmentIndex


def params_of(kvs: Iterable[common_pb2.KeyValuePair]) -> dict[str, str]:
    return {kv.key: kv.value for kv in kvs}


def field_index_key(ix: FieldIndex) -> str:
    return keys.field_index_key(ix.collectionID, ix.indexID)


def segment_index_key(si: SegmentIndex) -> str:
    return keys.segment_index_key(si.collectionID, si.partitionID, si.segmentID, si.indexID)


class IndexMeta:
    def __init__(self, kv: EtcdKV):
        self.kv = kv
        self.indexes: dict[int, FieldIndex] = {}  # indexID → FieldIndex
        self.segment_indexes: dict[tuple[int, int], SegmentIndex] = {}  # (segmentID, indexID) → build

    async def load(self) -> None:
        self.indexes.clear()
        self.segment_indexes.clear()
        for _, raw in await self.kv.get_prefix(keys.field_index_prefix()):
            ix = FieldIndex.FromString(raw)
            self.indexes[ix.indexID] = ix
        for _, raw in await self.kv.get_prefix(keys.segment_index_prefix()):
            si = SegmentIndex.FromString(raw)
            self.segment_indexes[(si.segmentID, si.indexID)] = si

    # Reads --------------------------------------------------------------------------------
    def of_collection(self, coll_id: int, *, include_deleted: bool = False) -> list[FieldIndex]:
        return sorted(
            (ix for ix in self.indexes.values() if ix.collectionID == coll_id and (include_deleted or not ix.deleted)),
            key=lambda ix: ix.indexID,
        )

    def by_name(self, coll_id: int, name: str) -> list[FieldIndex]:
        return [ix for ix in self.of_collection(coll_id) if not name or ix.index_name == name]

    def builds_of(self, index_id: int) -> list[SegmentIndex]:
        return [si for (_, iid), si in self.segment_indexes.items() if iid == index_id]

    def build_of(self, segment_id: int, index_id: int) -> SegmentIndex | None:
        return self.segment_indexes.get((segment_id, index_id))

    # Writes -------------------------------------------------------------------------------
    async def add_index(self, ix: FieldIndex) -> bool:
        """Create the FieldIndex unless its key exists (a retried CreateIndex is a no-op)."""
        key = field_index_key(ix)
        if not await self.kv.txn([Op.put(key, ix.SerializeToString())], [Cmp.missing(key)]):
            return False
        self.indexes[ix.indexID] = ix
        return True

    async def mark_deleted(self, indexes: list[FieldIndex]) -> None:
        """DropIndex's first step, one transaction: builders stop, DescribeIndex stops showing them."""
        marked = []
        for ix in indexes:
            m = FieldIndex()
            m.CopyFrom(ix)
            m.deleted = True
            marked.append(m)
        if marked:
            await self.kv.txn([Op.put(field_index_key(m), m.SerializeToString()) for m in marked])
        for m in marked:
            self.indexes[m.indexID] = m

    async def set_properties(self, indexes: list[FieldIndex], put: dict[str, str], delete: Iterable[str]) -> None:
        """AlterIndex: properties live beside the user's params (what DescribeIndex shows), never in
        the build params, so a retried CreateIndex still matches; one transaction for all."""
        changed = []
        for ix in indexes:
            m = FieldIndex()
            m.CopyFrom(ix)
            props = {kv.key: kv.value for kv in m.user_index_params}
            props.update(put)
            for k in delete:
                props.pop(k, None)
            del m.user_index_params[:]
            m.user_index_params.extend(common_pb2.KeyValuePair(key=k, value=v) for k, v in props.items())
            changed.append(m)
        if changed:
            key = field_index_key
            ok = await self.kv.txn(
                [Op.put(key(m), m.SerializeToString()) for m in changed], [Cmp.exists(key(m)) for m in changed]
            )
            if not ok:
                raise merr.MilvusError(merr.INDEX_NOT_FOUND, "index not found: dropped while being altered")
        for m in changed:
            self.indexes[m.indexID] = m

    async def save_build(self, si: SegmentIndex, segment_key: str) -> bool:
        """Record a build (InProgress or its result) — only while its segment and index exist.
        Memory keeps a copy: what the caller changes next is not recorded until saved."""
        ix_key = keys.field_index_key(si.collectionID, si.indexID)
        ok = await self.kv.txn(
            [Op.put(segment_index_key(si), si.SerializeToString())], [Cmp.exists(segment_key), Cmp.exists(ix_key)]
        )
        if ok:
            saved = SegmentIndex()
            saved.CopyFrom(si)
            self.segment_indexes[(si.segmentID, si.indexID)] = saved
        return ok

    async def remove_builds(self, builds: list[SegmentIndex], indexes: Iterable[FieldIndex] = ()) -> None:
        """Forget builds (their files already deleted) and fully dropped indexes, in one transaction."""
        indexes = list(indexes)
        ops = [Op.delete(segment_index_key(si)) for si in builds]
        ops += [Op.delete(field_index_key(ix)) for ix in indexes]
        if ops:
            await self.kv.txn(ops)
        for si in builds:
            self.segment_indexes.pop((si.segmentID, si.indexID), None)
        for ix in indexes:
            self.indexes.pop(ix.indexID, None)

    def forget_collection(self, coll_id: int) -> None:
        """In memory, after the collection's keys went in DataCoord's drop transaction."""
        self.indexes = {k: v for k, v in self.indexes.items() if v.collectionID != coll_id}
        self.segment_indexes = {k: v for k, v in self.segment_indexes.items() if v.collectionID != coll_id}
