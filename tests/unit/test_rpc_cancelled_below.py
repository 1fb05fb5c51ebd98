"""`merr.rpc` answers a CancelledError that comes from below a handler (an awaited future that
was cancelled, as nats-py does to its pending acks when a connection closes) as a failed status,
as gRPC's server did; only the caller's own cancellation goes on up. A coordinator called
in-process (`Registry.late`) must not end its caller's task — the Proxy's serial DDL worker —
with an error that was the callee's."""

from __future__ import annotations

import asyncio

import pytest
from pymilvus.grpc_gen import milvus_pb2

from kmilvus.util import merr


class Handler:
    role = "rootcoord"

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    @merr.rpc(milvus_pb2.DescribeCollectionResponse)
    async def DescribeCollection(self, req, context=None):
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.cancel()
        await fut  # raises CancelledError: the failure is the callee's, not a stop of the caller
        return milvus_pb2.DescribeCollectionResponse()

    @merr.rpc()
    async def Flush(self, req, context=None):
        self.entered.set()
        await self.release.wait()
        return merr.success()


async def test_a_cancelled_future_below_answers_a_failed_status() -> None:
    resp = await Handler().DescribeCollection(milvus_pb2.DescribeCollectionRequest())
    assert resp.status.code == merr.SERVICE_INTERNAL[0]


async def test_the_callers_own_cancellation_goes_on_up() -> None:
    h = Handler()
    task = asyncio.create_task(h.Flush(milvus_pb2.FlushRequest()))
    await h.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
