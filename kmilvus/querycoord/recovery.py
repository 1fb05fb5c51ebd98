"""What a QueryNode needs to serve one DML channel (Milvus' DataCoord GetRecoveryInfo): the
channel's flushed segments with their binlog paths, its unflushed segments (rows written under
buffer pressure are read from binlogs, the rest from the stream), its dropped segments (compacted
away: their inserts in the stream are skipped), its L0 delta logs (the deletes before the
checkpoint), and where to resume the stream.

Segments come from DataCoord's public RPC; binlog paths and the channel checkpoint are read from
the keys DataCoord commits them under (read only — DataCoord alone writes them)."""

from __future__ import annotations

from collections.abc import Callable

from pymilvus.grpc_gen import common_pb2

from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import data_coord_pb2, internal_pb2, query_node_pb2
from kmilvus.util import merr

SegmentState = common_pb2.SegmentState
LIVE = (SegmentState.Growing, SegmentState.Sealed, SegmentState.Flushing, SegmentState.Flushed)


async def log_paths(kv: EtcdKV, prefix: str) -> list[str]:
    logs = [internal_pb2.Binlog.FromString(raw) for _, raw in await kv.get_prefix(prefix)]
    return [b.log_path for b in sorted(logs, key=lambda b: b.logID) if b.log_path]


async def index_files(
    datacoord, coll_id: int, seg_ids: list[int] | None = None
) -> dict[int, list[tuple[int, int, str]]]:
    """{segment: [(field, build, index file key)]} of finished index builds."""
    rsp = await datacoord.GetIndexInfos(
        data_coord_pb2.GetIndexInfosRequest(collectionID=coll_id, segmentIDs=seg_ids or [])
    )
    merr.check(rsp.status)
    out: dict[int, list[tuple[int, int, str]]] = {}
    for si in rsp.segment_indexes:
        if si.index_file_keys:
            out.setdefault(si.segmentID, []).append((si.fieldID, si.buildID, si.index_file_keys[0]))
    return out


async def load_info(kv: EtcdKV, datacoord, s: internal_pb2.SegmentInfo) -> query_node_pb2.SegmentLoadInfo:
    info = query_node_pb2.SegmentLoadInfo(
        segmentID=s.ID,
        partitionID=s.partitionID,
        insert_channel=s.insert_channel,
        num_of_rows=s.num_of_rows,
        binlog_paths=await log_paths(kv, keys.binlog_prefix(s.collectionID, s.ID)),
        delta_paths=await log_paths(kv, keys.deltalog_prefix(s.collectionID, s.ID)),
        compaction_from=list(s.compaction_from),
        dml_position=s.dml_position,
    )
    if s.state == SegmentState.Flushed:
        for fid, build, key in (await index_files(datacoord, s.collectionID, [s.ID])).get(s.ID, []):
            info.index_fieldIDs.append(fid)
            info.index_buildIDs.append(build)
            info.index_paths.append(key)
    return info


async def segments_of(datacoord, coll_id: int, states=LIVE) -> list[internal_pb2.SegmentInfo]:
    rsp = await datacoord.GetSegmentsByCollection(
        data_coord_pb2.GetSegmentsByCollectionRequest(collectionID=coll_id, states=list(states))
    )
    merr.check(rsp.status)
    return list(rsp.infos)


async def watch_request(
    kv: EtcdKV, datacoord, coll_id: int, schema: bytes, vchannel: str, loaded: Callable[[int], bool]
) -> query_node_pb2.WatchDmChannelsRequest:
    """`loaded(partition)`: whether its flushed segments are loaded. Growing rows are kept for
    every partition (Milvus: partitions are loaded and released without watching again; reads
    see the loaded ones)."""
    raw = await kv.get(keys.channel_checkpoint_key(vchannel))
    cp = internal_pb2.MsgPosition.FromString(raw) if raw else internal_pb2.MsgPosition(channel_name=vchannel)
    req = query_node_pb2.WatchDmChannelsRequest(collectionID=coll_id, schema=schema, vchannel=vchannel)
    # Read after the checkpoint: every Delete up to it is in one of these (DataCoord commits L0
    # logs with the checkpoint that passes them); the stream brings the rest. Every partition's:
    # a partition loaded later is served by the same delegator.
    for _, raw_l0 in await kv.get_prefix(keys.l0_deltalog_prefix(coll_id)):
        d = internal_pb2.L0Deltalog.FromString(raw_l0)
        if d.channel == vchannel:
            req.l0_deltalogs.append(d)
    for s in await segments_of(datacoord, coll_id, (*LIVE, SegmentState.Dropped)):
        if s.insert_channel != vchannel:
            continue
        if s.state == SegmentState.Dropped:
            # Compacted away, its rows in a target listed here; DataCoord collects a Dropped
            # segment only once the stored checkpoint (read above) is past its rows.
            req.dropped_segmentIDs.append(s.ID)
        elif s.state == SegmentState.Flushed:
            req.flushed_segmentIDs.append(s.ID)
            if loaded(s.partitionID):
                req.sealed_segments.append(await load_info(kv, datacoord, s))
        else:
            req.unflushed_segments.append(await load_info(kv, datacoord, s))
    # From the checkpoint: the stream keeps what follows it (datacoord.stream_trimmer), and the
    # rows of unflushed segments before it are in their binlogs (read above), later ones are
    # skipped by their dml_position.
    req.seek_position.CopyFrom(cp)
    return req
