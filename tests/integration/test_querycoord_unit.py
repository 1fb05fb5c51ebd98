"""QueryCoord's decisions, in-process on real etcd and NATS, with the QueryNode played by the
test (it answers what it holds and records what it is told)."""

from __future__ import annotations

import pytest

from kmilvus import components as roles
from kmilvus.proto import query_coord_pb2, query_node_pb2
from kmilvus.util import merr
from tests.coordutil import Coords
from tests.harness import make_config

NODE = 21


@pytest.fixture
async def coords(etcd_endpoint, nats_url, root, tmp_path):
    c = await Coords.start(make_config(root, etcd_endpoint, nats_url, tmp_path / "storage"))
    yield c
    await c.stop()


class _PlayedQueryNode:
    def __init__(self, coll: int, vchannel: str, held: list[int]):
        self.coll, self.vchannel, self.held = coll, vchannel, held
        self.released: list[list[int]] = []

    async def GetDataDistribution(self, req, context=None):
        resp = query_node_pb2.GetDataDistributionResponse(nodeID=NODE)
        for sid in self.held:
            resp.segments.add(collectionID=self.coll, segmentID=sid, vchannel=self.vchannel)
        return resp

    async def ReleaseSegments(self, req, context=None):
        self.released.append(list(req.segmentIDs))
        return merr.success()


async def test_a_deposed_querycoord_releases_no_segment_from_stale_memory(coords):
    """A QueryNode retires a released segment for good (it never loads it again, and its
    delegator skips its rows in the stream). A QueryCoord paused past its lease may resume with
    a co-located DataCoord whose memory lacks a segment its successor flushed and had loaded:
    released on that memory, the segment's rows would vanish from reads. A release is decided,
    then confirmed as the leader's before it is sent."""
    c = coords
    desc = await c.create_collection("c", shards=1)
    coll, ch = desc.collectionID, desc.virtual_channel_names[0]
    qn = _PlayedQueryNode(coll, ch, held=[777])  # flushed and loaded under the successor
    c.registry.add_local(roles.QUERYNODE, NODE, qn)
    info = query_coord_pb2.LoadInfo(collectionID=coll, vchannels=[ch])
    info.channel_nodes[ch] = NODE
    c.qc.loads.loads[coll] = info

    async def lost() -> bool:
        return False

    async def leads() -> bool:
        return True

    c.qc.leader_check = lost
    with pytest.raises(merr.MilvusError) as refused:
        await c.qc.loads._sync_channel(coll, ch)
    assert refused.value.code == merr.SERVICE_NOT_READY[0]
    assert qn.released == []
    c.qc.leader_check = leads  # the leader does release a segment DataCoord no longer holds Flushed
    await c.qc.loads._sync_channel(coll, ch)
    assert qn.released == [[777]]
