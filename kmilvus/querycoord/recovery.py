"""What a QueryNode needs to serve one DML channel (Milvus' DataCoord GetRecoveryInfo): the
channel's flushed segments with their binlog paths, its unflushed segments (rows written under
buffer pressure are read from binlogs, the rest from the stream), and where to resume the stream.

Segments come from DataCoord's public RPC; binlog paths and the channel checkpoint are read from
the keys DataCoord commits them under (read only — DataCoord alone writes them)."""

from __future__ import annotations

from pymilvus.grpc_gen import common_pb2

from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2, query_node_pb2
from kmilvus.util import merr

SegmentState = common_pb2.SegmentState
LIVE = (SegmentState.Growing, SegmentState.Sealed, SegmentState.Flushing, SegmentState.Flushed)


async def binlog_paths(kv: EtcdKV, coll_id: int, seg_id: int) -> list[str]:
    logs = [internal_pb2.Binlog.FromString(raw) for _, raw in await kv.get_prefix(keys.binlog_prefix(coll_id, seg_id))]
    return [b.log_path for b in sorted(logs, key=lambda b: b.logID) if b.log_path]


async def load_info(kv: EtcdKV, s: internal_pb2.SegmentInfo) -> query_node_pb2.SegmentLoadInfo:
    return query_node_pb2.SegmentLoadInfo(
        segmentID=s.ID,
        partitionID=s.partitionID,
        insert_channel=s.insert_channel,
        num_of_rows=s.num_of_rows,
        binlog_paths=await binlog_paths(kv, s.collectionID, s.ID),
        compaction_from=list(s.compaction_from),
        dml_position=s.dml_position,
    )


async def segments_of(datacoord, coll_id: int) -> list[internal_pb2.SegmentInfo]:
    rsp = await datacoord.GetSegmentsByCollection(
        data_coord_pb2.GetSegmentsByCollectionRequest(collectionID=coll_id, states=list(LIVE))
    )
    merr.check(rsp.status)
    return list(rsp.infos)


async def watch_request(
    kv: EtcdKV, datacoord, coll_id: int, schema: bytes, vchannel: str, partitions: list[int]
) -> query_node_pb2.WatchDmChannelsRequest:
    raw = await kv.get(keys.channel_checkpoint_key(vchannel))
    cp = internal_pb2.MsgPosition.FromString(raw) if raw else internal_pb2.MsgPosition(channel_name=vchannel)
    req = query_node_pb2.WatchDmChannelsRequest(collectionID=coll_id, schema=schema, vchannel=vchannel)
    seek = cp.seq
    for s in await segments_of(datacoord, coll_id):
        if s.insert_channel != vchannel:
            continue
        if partitions and s.partitionID not in partitions:
            req.flushed_segmentIDs.append(s.ID)  # not loaded: never served
            continue
        if s.state == SegmentState.Flushed:
            req.flushed_segmentIDs.append(s.ID)
            req.sealed_segments.append(await load_info(kv, s))
        else:
            info = await load_info(kv, s)
            req.unflushed_segments.append(info)
            if info.binlog_paths and s.dml_position.seq:
                seek = min(seek, s.dml_position.seq)
    req.seek_position.CopyFrom(internal_pb2.MsgPosition(channel_name=vchannel, seq=seek, timestamp=cp.timestamp))
    return req
