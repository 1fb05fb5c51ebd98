"""RootCoord, DataCoord (and QueryCoord) in the test's own event loop, on the real etcd and NATS of the session:
for tests of the coordinators' decisions without a Proxy, DataNode or client in between."""

from __future__ import annotations

from dataclasses import dataclass

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus.config import Config
from kmilvus.datacoord import DataCoord
from kmilvus.meta import EtcdKV
from kmilvus.msgstream import MsgStream
from kmilvus.proto import data_coord_pb2
from kmilvus.querycoord import QueryCoord
from kmilvus.rootcoord import RootCoord
from kmilvus.storage import ObjectStore
from kmilvus.util import merr

DIM = 128


@dataclass
class Coords:
    cfg: Config
    kv: EtcdKV
    stream: MsgStream
    store: ObjectStore
    registry: roles.Registry
    rc: RootCoord
    dc: DataCoord
    qc: QueryCoord

    @classmethod
    async def start(cls, cfg: Config, *, kv: EtcdKV | None = None, stream: MsgStream | None = None) -> Coords:
        kv = kv or await EtcdKV.connect(cfg.etcd_endpoints, f"{cfg.cluster}/meta")
        stream = stream or await MsgStream.connect(cfg.nats_url, cfg.cluster, max_message_bytes=cfg.max_message_bytes)
        store = ObjectStore.from_uri(cfg.storage_uri)
        registry = roles.Registry(kv)
        rc = RootCoord(cfg, kv, stream, registry, 1)
        registry.add_local(roles.ROOTCOORD, 1, rc)  # DataCoord finds its allocators there
        dc = DataCoord(cfg, kv, stream, store, registry, 2)
        registry.add_local(roles.DATACOORD, 2, dc)
        qc = QueryCoord(kv, registry, 3)  # a drop releases the collection there
        registry.add_local(roles.QUERYCOORD, 3, qc)
        await rc.start()
        await dc.start()
        await qc.start()
        return cls(cfg, kv, stream, store, registry, rc, dc, qc)

    async def stop(self, *, close: bool = True) -> None:
        """Stop both coordinators (a restart: the connections stay unless `close`)."""
        await self.qc.stop()
        await self.dc.stop()
        await self.rc.stop()
        await self.registry.close()
        if close:
            await self.stream.close()
            await self.kv.delete_prefix("")
            await self.kv.close()

    async def create_collection(self, name: str = "c", shards: int = 2) -> milvus_pb2.DescribeCollectionResponse:
        DT = schema_pb2.DataType
        vec = schema_pb2.FieldSchema(name="vec", data_type=DT.FloatVector)
        vec.type_params.add(key="dim", value=str(DIM))
        schema = schema_pb2.CollectionSchema(
            name=name, fields=[schema_pb2.FieldSchema(name="id", data_type=DT.Int64, is_primary_key=True), vec]
        )
        merr.check(
            await self.rc.CreateCollection(
                milvus_pb2.CreateCollectionRequest(
                    collection_name=name, schema=schema.SerializeToString(), shards_num=shards
                )
            )
        )
        desc = await self.rc.DescribeCollection(milvus_pb2.DescribeCollectionRequest(collection_name=name))
        merr.check(desc.status)
        return desc

    async def assign(
        self, coll: int, channel: str, count: int, ts: int | None = None, partition: int | None = None
    ) -> data_coord_pb2.AssignSegmentIDResponse:
        """Row quota for `count` rows on `channel`, as a Proxy asks before an insert."""
        ts = ts or await self.dc.tso.alloc()
        return await self.dc.AssignSegmentID(
            data_coord_pb2.AssignSegmentIDRequest(
                segmentIDRequests=[
                    data_coord_pb2.SegmentIDRequest(
                        count=count,
                        channel_name=channel,
                        collectionID=coll,
                        partitionID=self.rc.collections[coll].partitions[0].partitionID
                        if partition is None
                        else partition,
                        timestamp=ts,
                    )
                ]
            )
        )


class WatchingDataNode:
    """The test plays a DataNode that accepts DataCoord's channel watches (and nothing more:
    it consumes no stream, so only the test's own messages reach DataCoord)."""

    def __init__(self) -> None:
        self.watches: dict[str, int] = {}  # vchannel → watch version
        self.infos: dict[str, object] = {}  # vchannel → the ChannelWatchInfo it was given
        self.session = None  # its etcd session (stop it: the node is gone)

    async def WatchDmChannels(self, req, context=None):
        for info in req.channels:
            self.watches[info.vchannel] = info.watch_version
            self.infos[info.vchannel] = info
        return merr.success()

    async def UnwatchDmChannels(self, req, context=None):
        for ch in req.vchannels:
            self.watches.pop(ch, None)
        return merr.success()

    async def FlushSegments(self, req, context=None):
        return merr.success()


async def watched_by_a_datanode(c: Coords, channels: list[str], node_id: int = 9) -> WatchingDataNode:
    """Register a DataNode session (served in-process by `WatchingDataNode`) and wait until
    DataCoord has assigned `channels` to it; messages then carry (node_id, its watch version)."""
    from kmilvus.sessionutil import Session
    from tests.util import eventually

    dn = WatchingDataNode()
    c.registry.add_local(roles.DATANODE, node_id, dn)
    session = Session(c.kv, roles.DATANODE, "127.0.0.1:1", ttl=c.cfg.session_ttl, server_id=node_id)
    await session.register()
    dn.session = session
    await eventually(lambda: all(ch in dn.watches for ch in channels), 10, f"DataCoord to assign {channels}")
    return dn
