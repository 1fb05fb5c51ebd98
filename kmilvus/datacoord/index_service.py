"""DataCoord's index RPCs (Milvus 2.3 merged IndexCoord into DataCoord): CreateIndex,
DescribeIndex, DropIndex, GetIndexInfos — a mixin of DataCoord, with the builder that assigns
each segment's build to an IndexNode (kmilvus.datacoord.index_builder).

The Proxy has already checked the params against the schema (kmilvus.index.params); here the
rules that need the meta: one index per vector field, a name reused only with the same params,
no DropIndex while the collection is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kmilvus.datacoord.index_builder import IndexBuilder
from kmilvus.datacoord.index_meta import FieldIndex, IndexMeta, IndexState, SegmentIndex, params_of
from kmilvus.datacoord.meta import SegmentState
from kmilvus.meta import Snapshot
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2
from kmilvus.storage import paths
from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.datacoord.host import DataCoordHost
else:
    DataCoordHost = object


class DataCoordIndexRPCs(DataCoordHost):
    """Index RPCs and the builder's lifecycle (a base class of DataCoord)."""

    def _init_indexes(self) -> None:
        self.index_meta = IndexMeta(self.kv)
        self.index_builder = IndexBuilder(
            self.meta,
            self.index_meta,
            self.registry,
            self.ids.alloc,
            cluster=self.cfg.cluster,
            dropping=self._dropping.__contains__,
            remove_files=self._remove_build_files,
            current_schema=self.channels.current_schema,
        )
        self.gc.index_meta = self.index_meta

    async def _remove_build_files(self, builds: list[SegmentIndex]) -> list[SegmentIndex]:
        """The files of each build whose segment or index etcd no longer has (or has deleted),
        read fenced; returns those builds (the others are live in etcd: memory was stale)."""
        owner = {
            paths.index_build_prefix(si.collectionID, si.partitionID, si.segmentID, si.buildID): si for si in builds
        }
        colls = sorted({si.collectionID for si in builds})

        def stale(snap: Snapshot, targets: list[str]) -> list[str]:
            out = []
            for t in targets:
                si = owner[t]
                ix = snap.get(keys.field_index_key(si.collectionID, si.indexID))
                seg = snap.get(keys.segment_key(si.collectionID, si.partitionID, si.segmentID))
                if seg is None or ix is None or FieldIndex.FromString(ix).deleted:
                    out.append(t)
            return out

        removed = await self.remover.remove(
            owner,
            prefixes=[p for c in colls for p in (keys.segment_prefix(c), keys.field_index_prefix(c))],
            decide=stale,
            why="index builds",
        )
        return [owner[t] for t in removed]

    async def _start_indexes(self) -> None:
        await self.index_meta.load()
        self.index_builder.start()
        self.index_builder.wake()  # InProgress builds of a previous run: followed again, or assigned again

    async def _stop_indexes(self) -> None:
        await self.index_builder.stop()

    async def _drop_collection_indexes(self, coll: int) -> None:
        """Before a drop: no build of the collection may still be writing files."""
        await self.index_builder.cancel_indexes(
            {ix.indexID for ix in self.index_meta.of_collection(coll, include_deleted=True)}
        )

    # RPCs ---------------------------------------------------------------------------------
    @merr.rpc()
    async def CreateIndex(self, req: data_coord_pb2.CreateIndexRequest, context=None):
        if req.collectionID in self._dropping:
            raise merr.collection_not_found(req.collectionID)
        params = params_of(req.index_params)
        for ix in self.index_meta.of_collection(req.collectionID):
            same_params = ix.fieldID == req.fieldID and params_of(ix.index_params) == params
            if ix.index_name == req.index_name:
                if same_params:
                    return merr.success()  # a retried CreateIndex
                raise merr.MilvusError(
                    merr.UNEXPECTED, "CreateIndex failed: index already exist, but parameters are inconsistent"
                )
            if ix.fieldID == req.fieldID:
                raise merr.MilvusError(
                    merr.UNEXPECTED, "CreateIndex failed: creating multiple indexes on same field is not supported"
                )
        ix = FieldIndex(
            collectionID=req.collectionID,
            fieldID=req.fieldID,
            index_name=req.index_name,
            indexID=await self.ids.alloc(),
            index_params=req.index_params,
            user_index_params=req.user_index_params,
            create_time=req.timestamp,
        )
        await self.index_meta.add_index(ix)
        self.index_builder.wake()
        return merr.success()

    def _index_info(self, ix: FieldIndex) -> data_coord_pb2.IndexInfo:
        """Progress as Milvus 2.3 answers it: rows of flushed segments, indexed or pending."""
        info = data_coord_pb2.IndexInfo(index=ix, state=IndexState.Finished)
        for seg in self.meta.by_collection(ix.collectionID, (SegmentState.Flushed,)):
            rows = seg.info.num_of_rows
            if rows <= 0:
                continue
            info.total_rows += rows
            si = self.index_meta.build_of(seg.id, ix.indexID)
            if si is not None and si.state == IndexState.Finished:
                info.indexed_rows += rows
            elif si is not None and si.state == IndexState.Failed:
                info.state, info.fail_reason = IndexState.Failed, si.fail_reason
            elif info.state != IndexState.Failed:
                info.state = IndexState.InProgress
        info.pending_index_rows = info.total_rows - info.indexed_rows
        return info

    @merr.rpc(data_coord_pb2.DescribeIndexResponse)
    async def DescribeIndex(self, req: data_coord_pb2.DescribeIndexRequest, context=None):
        indexes = self.index_meta.by_name(req.collectionID, req.index_name)
        if not indexes:
            raise merr.MilvusError(merr.INDEX_NOT_FOUND, f"index not found[indexName={req.index_name}]")
        if req.without_progress:
            return data_coord_pb2.DescribeIndexResponse(infos=[data_coord_pb2.IndexInfo(index=ix) for ix in indexes])
        return data_coord_pb2.DescribeIndexResponse(infos=[self._index_info(ix) for ix in indexes])

    @merr.rpc()
    async def DropIndex(self, req: data_coord_pb2.DropIndexRequest, context=None):
        """Mark deleted (one transaction), stop its builds, then remove its files and keys."""
        if await self.kv.get(keys.loaded_collection_key(req.collectionID)) is not None:
            raise merr.MilvusError(
                merr.UNEXPECTED, "index cannot be dropped, collection is loaded, please release it first"
            )
        fields = set(req.fieldIDs)
        indexes = [
            ix for ix in self.index_meta.by_name(req.collectionID, req.index_name) if not fields or ix.fieldID in fields
        ]
        if not indexes:
            return merr.success()  # as Milvus: nothing to drop is not an error
        await self.index_meta.mark_deleted(indexes)
        await self.index_builder.cancel_indexes({ix.indexID for ix in indexes})
        await self.index_builder.reconcile()
        return merr.success()

    @merr.rpc()
    async def AlterIndex(self, req: data_coord_pb2.AlterIndexRequest, context=None):
        indexes = self.index_meta.by_name(req.collectionID, req.index_name)
        if not indexes:
            raise merr.MilvusError(merr.INDEX_NOT_FOUND, f"index not found[indexName={req.index_name}]")
        await self.index_meta.set_properties(indexes, params_of(req.params), req.delete_keys)
        return merr.success()

    @merr.rpc(data_coord_pb2.GetIndexInfosResponse)
    async def GetIndexInfos(self, req: data_coord_pb2.GetIndexInfosRequest, context=None):
        """The finished builds a QueryNode loads with a segment (and the indexes' params)."""
        wanted = set(req.segmentIDs)
        indexes = self.index_meta.of_collection(req.collectionID)
        live = {ix.indexID for ix in indexes}
        builds = sorted(
            (
                si
                for si in self.index_meta.segment_indexes.values()
                if si.collectionID == req.collectionID
                and si.indexID in live
                and si.state == IndexState.Finished
                and (not wanted or si.segmentID in wanted)
            ),
            key=lambda si: (si.segmentID, si.indexID),
        )
        return data_coord_pb2.GetIndexInfosResponse(segment_indexes=builds, indexes=indexes)
