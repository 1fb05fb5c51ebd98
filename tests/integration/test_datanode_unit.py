"""DataNode decisions that need no servers."""

from __future__ import annotations

import asyncio
import types

import pytest

from kmilvus.datanode.data_node import DataNode
from tests.util import eventually


class _Flowgraph:
    def __init__(self, owner: types.SimpleNamespace, other: str | None):
        self.owner, self.other, self.stopped = owner, other, False

    async def stop(self, drop: bool = False) -> None:
        # While this one stops, another task (a write told "channel watched elsewhere") drops
        # the other channel from the node.
        if self.other is not None:
            self.owner.flowgraphs.pop(self.other, None)
        self.stopped = drop


async def test_drop_all_survives_a_channel_dropped_meanwhile():
    """Found by bench/chaos.py: drop_all raised KeyError when a channel went away while it ran,
    the session-lost handler died, and the DataNode never came back under a new ID."""
    node = types.SimpleNamespace(flowgraphs={}, server_id=7)
    a = _Flowgraph(node, other="b")
    b = _Flowgraph(node, other=None)
    node.flowgraphs.update(a=a, b=b)
    await DataNode.drop_all(node)
    assert node.flowgraphs == {} and a.stopped


async def test_a_node_registers_again_through_an_etcd_outage(monkeypatch):
    """Found by bench/chaos.py: the new server ID was asked of etcd once; etcd restarting at that
    moment killed the session-lost handler and the DataNode never came back."""
    from kmilvus import components as roles
    from kmilvus import server

    calls = {"ids": 0}

    async def next_server_id(kv):
        calls["ids"] += 1
        if calls["ids"] < 3:
            raise ConnectionError("etcd restarting")
        return 99

    class FakeSession:
        def __init__(self, kv, role, address, *, ttl, server_id):
            self.server_id = server_id

        async def register(self):
            return None

    monkeypatch.setattr(server, "next_server_id", next_server_id)
    monkeypatch.setattr(server, "Session", FakeSession)
    registry = types.SimpleNamespace(remove_local=lambda *a: None, add_local=lambda *a: None)
    node = types.SimpleNamespace(kv=None, registry=registry, cfg=types.SimpleNamespace(session_ttl=3))
    comp = types.SimpleNamespace(server_id=7)
    old = types.SimpleNamespace(server_id=7, address="127.0.0.1:1")
    fresh = await server.Node._register_again(node, roles.DATANODE, old, comp)
    assert fresh.server_id == comp.server_id == 99 and calls["ids"] == 3


def _committing(monkeypatch, save):
    """A DataNode (its write step only) whose SaveBinlogPaths is `save`, and one final write."""
    from kmilvus.datanode import data_node as dn
    from kmilvus.proto import internal_pb2

    async def write_files(fg, w):
        return internal_pb2.SaveBinlogPathsRequest(segmentID=w.segment_id), []

    async def no_wait(self) -> None:
        await asyncio.sleep(0)

    fg = types.SimpleNamespace(vchannel="ch", checkpoint=lambda exclude: internal_pb2.MsgPosition(), abandoned=False)
    node = types.SimpleNamespace(flowgraphs={"ch": fg}, datacoord=types.SimpleNamespace(SaveBinlogPaths=save))
    node._owns = lambda f: DataNode._owns(node, f)
    node._write_files = write_files
    monkeypatch.setattr(dn.Backoff, "sleep", no_wait)
    return DataNode._write_locked(node, fg, types.SimpleNamespace(segment_id=5, buf=None, final=True, token=1))


async def test_a_commit_cancelled_from_below_is_retried_not_abandoned(monkeypatch):
    """Found by bench/chaos.py: a gRPC channel reset cancelled a SaveBinlogPaths in flight; the
    CancelledError ended the write task silently and its detached rows were never committed.
    Only a cancellation of the write task itself (shutdown) may end it."""
    from kmilvus.util import merr

    calls = []

    async def save(req):
        calls.append(req.segmentID)
        if len(calls) == 1:
            raise asyncio.CancelledError()  # what grpc.aio raises when its channel is closed
        return merr.success()

    await _committing(monkeypatch, save)
    assert calls == [5, 5]


async def test_a_write_task_cancelled_by_shutdown_still_ends(monkeypatch):
    started = asyncio.Event()

    async def save(req):
        started.set()
        await asyncio.sleep(3600)  # a save that never answers: only the cancellation ends it

    task = asyncio.create_task(_committing(monkeypatch, save))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_one_ticks_reports_go_to_datacoord_in_one_message(nats_url, root):
    """Many collections: a pchannel tick reaches every flowgraph of the pchannel at once; their
    DataNodeTtMsgs go in one NATS message, not one per vchannel."""
    from kmilvus.config import Config
    from kmilvus.msgstream import MsgStream, datanode_tt_subject
    from kmilvus.proto import data_coord_pb2, internal_pb2

    stream = await MsgStream.connect(nats_url, root)
    got: list[bytes] = []
    sub = await stream.subscribe_core(datanode_tt_subject(root), lambda data: _append(got, data))
    registry = types.SimpleNamespace(client=lambda role: None, late=lambda role: None)
    node = DataNode(Config(cluster=root), stream, None, registry, server_id=3)
    fgs = [
        types.SimpleNamespace(vchannel=f"{root}-dml_0_{i}v0", watch_version=1, l0_due=lambda force=False: False)
        for i in range(3)
    ]
    for i, fg in enumerate(fgs):
        await node.report_tt(fg, 100, internal_pb2.MsgPosition(channel_name=fg.vchannel, seq=10 + i))
    await stream.nc.flush()
    await eventually(lambda: got, 5, "the tick reports")
    await sub.unsubscribe()
    await stream.close()
    assert len(got) == 1
    msgs = data_coord_pb2.ReportDataNodeTtMsgsRequest.FromString(got[0]).msgs
    assert [(m.channel_name, m.timestamp, m.checkpoint.seq, m.nodeID) for m in msgs] == [
        (fg.vchannel, 100, 10 + i, 3) for i, fg in enumerate(fgs)
    ]


async def _append(out: list, data: bytes) -> None:
    out.append(data)


async def test_a_watch_older_than_the_running_one_is_ignored():
    """Watch versions only grow (DataCoord persists each before sending it). A DataCoord
    deposed between persisting a version and sending it may resume and send it after its
    successor handed the same channel to this node under a newer one: the node keeps the newer
    flowgraph (replacing it would drop its buffers and run the channel under a version the
    leader ignores, its flushes never ending)."""
    from kmilvus.proto import data_node_pb2, internal_pb2

    stopped: list[bool] = []
    running = types.SimpleNamespace(watch_version=2, stop=lambda drop=False: stopped.append(drop))
    checked: list[int] = []

    async def check_collection(coll_id: int) -> None:
        checked.append(coll_id)

    node = types.SimpleNamespace(flowgraphs={"ch": running}, _check_collection=check_collection)
    req = data_node_pb2.WatchDmChannelsRequest(
        channels=[internal_pb2.ChannelWatchInfo(vchannel="ch", collectionID=5, watch_version=1)]
    )
    status = await DataNode.WatchDmChannels(node, req)
    assert status.code == 0, status
    assert node.flowgraphs == {"ch": running} and stopped == [] and checked == []
