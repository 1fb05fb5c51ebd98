"""The coordinators' facade for the operator: typed calls over their public RPCs only.

The operator (`controllers/`) reads and changes collections and segments through this class and
nothing else — never a coordinator's in-memory maps or etcd keys — so it works the same whether
RootCoord and DataCoord live in its process or elsewhere: `from_registry` hands it the component
objects when they are local and gRPC clients (found through sessions) otherwise; both answer the
same `await x.Method(request)` calls. The segment change feed is `DataCoord.WatchSegments`: an
async generator in-process, a server-streaming RPC remotely.

Failures other than "not found" raise `merr.MilvusError` (from the response's status).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import components as roles
from kmilvus.components import RemoteClient
from kmilvus.index import params as index_params
from kmilvus.proto import data_coord_pb2, internal_pb2, query_coord_pb2, root_coord_pb2
from kmilvus.types import DataCoordClient, QueryCoordClient, RootCoordClient
from kmilvus.util import merr

NOT_FOUND = merr.COLLECTION_NOT_FOUND[0]
DB_NOT_FOUND = merr.DATABASE_NOT_FOUND[0]
INDEX_NOT_FOUND = merr.INDEX_NOT_FOUND[0]


@dataclass(frozen=True)
class DropState:
    exists: bool  # the collection's meta is live
    dropping: bool  # a drop has begun and its resumable tail has not finished


@dataclass(frozen=True)
class IndexStatus:
    """One index of a collection and its build progress (DataCoord's DescribeIndex)."""

    name: str
    index_id: int
    field_id: int
    params: dict[str, str]  # as stored: index_type, metric_type, dim, nlist / M / efConstruction ...
    state: str  # Milvus' IndexState: Finished, InProgress, Failed, Unissued
    indexed_rows: int
    total_rows: int
    pending_rows: int
    fail_reason: str

    @property
    def index_type(self) -> str:
        return self.params.get(index_params.INDEX_TYPE, "")

    @property
    def metric_type(self) -> str:
        return self.params.get(index_params.METRIC_TYPE, "")


class CoordinatorClient:
    def __init__(self, rootcoord: RootCoordClient, datacoord: DataCoordClient, querycoord: QueryCoordClient):
        self._rootcoord = rootcoord
        self._datacoord = datacoord
        self._querycoord = querycoord

    @classmethod
    def from_registry(cls, registry: roles.Registry) -> CoordinatorClient:
        """In-process components when the registry holds them, gRPC clients otherwise."""
        return cls(
            registry.client(roles.ROOTCOORD), registry.client(roles.DATACOORD), registry.client(roles.QUERYCOORD)
        )

    # Load state (QueryCoord) ----------------------------------------------------------------
    async def load_state(self, collection_id: int) -> tuple[str, int]:
        """(`NotLoad` | `Loading` | `Loaded`, progress in percent)."""
        rsp = await self._querycoord.GetLoadState(query_coord_pb2.GetLoadStateRequest(collectionID=collection_id))
        merr.check(rsp.status)
        return common_pb2.LoadState.Name(rsp.state).removeprefix("LoadState"), int(rsp.progress)

    async def load_collection(self, desc: milvus_pb2.DescribeCollectionResponse) -> None:
        """Load a described collection (every vector field needs an index, as in Milvus)."""
        req = query_coord_pb2.LoadCollectionRequest(
            collectionID=desc.collectionID,
            schema=desc.schema.SerializeToString(),
            vchannels=list(desc.virtual_channel_names),
            replica_number=1,
            collection_name=desc.collection_name,
        )
        merr.check(await self._querycoord.LoadCollection(req))

    async def release_collection(self, collection_id: int) -> None:
        merr.check(
            await self._querycoord.ReleaseCollection(internal_pb2.ReleaseCollectionRequest(collectionID=collection_id))
        )

    # Collections (RootCoord) ---------------------------------------------------------------
    async def describe_collection(
        self, db: str = "", name: str = "", *, collection_id: int = 0
    ) -> milvus_pb2.DescribeCollectionResponse | None:
        """By ID when given, else by (database, name); None when there is no such collection."""
        req = (
            milvus_pb2.DescribeCollectionRequest(collectionID=collection_id)
            if collection_id
            else milvus_pb2.DescribeCollectionRequest(db_name=db, collection_name=name)
        )
        rsp = await self._rootcoord.DescribeCollection(req)
        if rsp.status.code in (NOT_FOUND, DB_NOT_FOUND):
            return None
        merr.check(rsp.status)
        return rsp

    async def list_collections(self) -> list[milvus_pb2.DescribeCollectionResponse]:
        """Every collection of every database, with its properties."""
        rsp = await self._rootcoord.ListCollections(root_coord_pb2.ListCollectionsRequest())
        merr.check(rsp.status)
        return list(rsp.collections)

    async def create_collection(self, req: milvus_pb2.CreateCollectionRequest) -> common_pb2.Status:
        """The status as RootCoord answered it (the caller tells bad input from a retry)."""
        return await self._rootcoord.CreateCollection(req)

    async def drop_collection(self, db: str, name: str) -> None:
        merr.check(
            await self._rootcoord.DropCollection(milvus_pb2.DropCollectionRequest(db_name=db, collection_name=name))
        )

    async def ensure_database(self, db: str) -> None:
        """Create database `db` unless it exists (a Collection's spec.database names it)."""
        rsp = await self._rootcoord.ListDatabases(milvus_pb2.ListDatabasesRequest())
        merr.check(rsp.status)
        if db in rsp.db_names:
            return
        st = await self._rootcoord.CreateDatabase(milvus_pb2.CreateDatabaseRequest(db_name=db))
        if not merr.ok(st) and "already exist" not in st.reason:
            merr.check(st)

    async def list_partitions(self, collection_id: int) -> dict[str, int]:
        """The collection's partitions, name → ID, in creation order."""
        rsp = await self._rootcoord.ShowPartitions(milvus_pb2.ShowPartitionsRequest(collectionID=collection_id))
        merr.check(rsp.status)
        return dict(zip(rsp.partition_names, rsp.partitionIDs, strict=True))

    async def create_partition(self, db: str, collection: str, partition: str) -> None:
        merr.check(
            await self._rootcoord.CreatePartition(
                milvus_pb2.CreatePartitionRequest(db_name=db, collection_name=collection, partition_name=partition)
            )
        )

    async def drop_partition(self, db: str, collection: str, partition: str) -> None:
        merr.check(
            await self._rootcoord.DropPartition(
                milvus_pb2.DropPartitionRequest(db_name=db, collection_name=collection, partition_name=partition)
            )
        )

    async def drop_state(self, collection_id: int) -> DropState:
        rsp = await self._rootcoord.GetDropState(root_coord_pb2.GetDropStateRequest(collectionID=collection_id))
        merr.check(rsp.status)
        return DropState(exists=rsp.exists, dropping=rsp.dropping)

    # Indexes (DataCoord) ---------------------------------------------------------------------
    async def create_index(
        self,
        desc: milvus_pb2.DescribeCollectionResponse,
        field_name: str,
        params: Mapping[str, object],
        index_name: str = "",
    ) -> None:
        """CreateIndex on a described collection, checked first as the Proxy checks it; a nameless
        index is named after its field. Creating the same index again is a no-op; another index
        on the field, or the same name with other params, raises Milvus' error."""
        field, checked = index_params.check_field_index(desc.schema, field_name, params)
        ts = await self._rootcoord.AllocTimestamp(internal_pb2.AllocTimestampRequest(count=1))
        merr.check(ts.status)
        kvs = [common_pb2.KeyValuePair(key=k, value=v) for k, v in checked.items()]
        user = [common_pb2.KeyValuePair(key=k, value=v) for k, v in index_params.user_params(checked).items()]
        merr.check(
            await self._datacoord.CreateIndex(
                data_coord_pb2.CreateIndexRequest(
                    collectionID=desc.collectionID,
                    fieldID=field.fieldID,
                    index_name=index_name or field.name,
                    index_params=kvs,
                    user_index_params=user,
                    timestamp=ts.timestamp,
                )
            )
        )

    async def describe_indexes(self, collection_id: int, index_name: str = "") -> list[IndexStatus]:
        """The collection's indexes (the one named, when given) with build progress; [] when none."""
        rsp = await self._datacoord.DescribeIndex(
            data_coord_pb2.DescribeIndexRequest(collectionID=collection_id, index_name=index_name)
        )
        if rsp.status.code == INDEX_NOT_FOUND:
            return []
        merr.check(rsp.status)
        return [
            IndexStatus(
                name=i.index.index_name,
                index_id=i.index.indexID,
                field_id=i.index.fieldID,
                params={kv.key: kv.value for kv in i.index.index_params},
                state=common_pb2.IndexState.Name(i.state),
                indexed_rows=int(i.indexed_rows),
                total_rows=int(i.total_rows),
                pending_rows=int(i.pending_index_rows),
                fail_reason=i.fail_reason,
            )
            for i in rsp.infos
        ]

    async def drop_index(self, collection_id: int, index_name: str) -> None:
        """DropIndex (Milvus refuses it while the collection is loaded: release first)."""
        merr.check(
            await self._datacoord.DropIndex(
                data_coord_pb2.DropIndexRequest(collectionID=collection_id, index_name=index_name)
            )
        )

    # Segments and flush (DataCoord) --------------------------------------------------------
    async def flush(self, collection_id: int) -> data_coord_pb2.FlushResponse:
        """Seal every Growing segment: the sealed segment IDs and the flush timestamp."""
        rsp = await self._datacoord.Flush(data_coord_pb2.FlushRequest(collectionID=collection_id))
        merr.check(rsp.status)
        return rsp

    async def flush_state(
        self, collection_id: int, segment_ids: Sequence[int], flush_ts: int, wait_ms: int = 0
    ) -> bool:
        rsp = await self._datacoord.GetFlushState(
            data_coord_pb2.GetFlushStateRequest(
                segmentIDs=segment_ids, flush_ts=flush_ts, collectionID=collection_id, wait_ms=wait_ms
            )
        )
        merr.check(rsp.status)
        return bool(rsp.flushed)

    async def segment_infos(self, segment_ids: Sequence[int]) -> list[internal_pb2.SegmentInfo]:
        """The segments that still exist among `segment_ids`."""
        rsp = await self._datacoord.GetSegmentInfo(
            data_coord_pb2.GetSegmentInfoRequest(segmentIDs=segment_ids, includeUnHealthy=True)
        )
        merr.check(rsp.status)
        return list(rsp.infos)

    async def list_segments(self, collection_id: int, states: Iterable[int] = ()) -> list[internal_pb2.SegmentInfo]:
        """The collection's segments (in `states` when given), by ID."""
        rsp = await self._datacoord.GetSegmentsByCollection(
            data_coord_pb2.GetSegmentsByCollectionRequest(collectionID=collection_id, states=list(states))
        )
        merr.check(rsp.status)
        return list(rsp.infos)

    async def import_jobs(self, collection_id: int) -> list[data_coord_pb2.ImportJob]:
        """The collection's bulk-import jobs (running and finished)."""
        rsp = await self._datacoord.ListImportJobs(data_coord_pb2.ListImportJobsRequest(collectionID=collection_id))
        merr.check(rsp.status)
        return list(rsp.jobs)

    async def compaction_jobs(self, collection_id: int) -> list[data_coord_pb2.CompactionJob]:
        """The collection's compaction jobs (running and finished)."""
        rsp = await self._datacoord.GetCompactionJobs(
            data_coord_pb2.GetCompactionJobsRequest(collectionID=collection_id)
        )
        merr.check(rsp.status)
        return list(rsp.jobs)

    def watch_segments(self, collection_ids: Iterable[int] = ()) -> AsyncIterator[data_coord_pb2.SegmentEvent]:
        """Every segment meta change from now on (of `collection_ids` when given). The stream
        ends with an error when the subscriber fell behind or DataCoord went away: resubscribe,
        then re-read with `list_segments()`."""
        req = data_coord_pb2.WatchSegmentsRequest(collectionIDs=list(collection_ids))
        if isinstance(self._datacoord, RemoteClient):
            return self._datacoord.stream("WatchSegments", req)
        return self._datacoord.WatchSegments(req)
