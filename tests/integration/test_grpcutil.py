"""kmilvus' internal gRPC client (RemoteClient): a peer that answers UNAVAILABLE makes the client
re-resolve and reconnect. Calls still running on the old channel must not be cut off by that."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from kmilvus.components import RemoteClient


class _Servicer(milvus_pb2_grpc.MilvusServiceServicer):
    def __init__(self) -> None:
        self.in_flight = asyncio.Event()
        self.answer = asyncio.Event()

    async def GetVersion(self, request, context):
        self.in_flight.set()
        await self.answer.wait()  # a call in flight while another one fails
        return milvus_pb2.GetVersionResponse(version="slow")

    async def CheckHealth(self, request, context):
        await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")


async def test_a_peer_unavailable_for_one_call_does_not_cancel_the_calls_in_flight():
    """Found under bench/chaos.py: closing the channel on UNAVAILABLE cancelled every other call
    on it, and a cancelled call surfaces as asyncio.CancelledError, which the DataNode's commit
    retry loop (`except Exception`) does not catch: a binlog was written, never committed and its
    rows lost."""
    server = grpc.aio.server()
    servicer = _Servicer()
    milvus_pb2_grpc.add_MilvusServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = RemoteClient(None, "test", milvus_pb2_grpc.MilvusServiceStub, address=f"127.0.0.1:{port}", retries=2)
    try:
        slow = asyncio.create_task(client.GetVersion(milvus_pb2.GetVersionRequest()))
        await asyncio.wait_for(servicer.in_flight.wait(), 10)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.CheckHealth(milvus_pb2.CheckHealthRequest())
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        servicer.answer.set()
        assert (await slow).version == "slow"
        assert (await client.GetVersion(milvus_pb2.GetVersionRequest())).version == "slow"  # reconnected
    finally:
        await client.close()
        await server.stop(None)
