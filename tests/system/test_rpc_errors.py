"""How an RPC fails: a defect is logged with its traceback, a Milvus error is just an answer, and
an RPC kmilvus does not implement answers UNIMPLEMENTED with a debug line and a metric."""

from __future__ import annotations

import logging

import grpc
import pytest
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from kmilvus import metrics
from kmilvus.util import merr
from kmilvus.util.grpcutil import start_server


class _Component(milvus_pb2_grpc.MilvusServiceServicer):
    role = "proxy"

    @merr.rpc(milvus_pb2.GetVersionResponse)
    async def GetVersion(self, req, context=None):
        return milvus_pb2.GetVersionResponse(version="v-test")

    @merr.rpc()
    async def DropCollection(self, req, context=None):
        if req.collection_name == "defect":
            raise RuntimeError("boom: a defect")
        raise merr.collection_not_found(req.collection_name)


def _errors(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_unexpected_exception_is_logged_with_its_traceback(caplog):
    caplog.set_level(logging.DEBUG)
    status = await _Component().DropCollection(milvus_pb2.DropCollectionRequest(collection_name="defect"))
    assert status.code == merr.SERVICE_INTERNAL[0] and "RuntimeError: boom: a defect" in status.reason
    [record] = _errors(caplog)
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert record.kv == {"role": "proxy", "rpc": "DropCollection"}


async def test_milvus_error_is_an_answer_and_not_logged(caplog):
    caplog.set_level(logging.DEBUG)
    status = await _Component().DropCollection(milvus_pb2.DropCollectionRequest(collection_name="x"))
    assert status.code == merr.COLLECTION_NOT_FOUND[0]
    assert _errors(caplog) == []


@pytest.fixture
async def server():
    srv, port = await start_server(
        "127.0.0.1", 0, [(milvus_pb2_grpc.add_MilvusServiceServicer_to_server, _Component())]
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield milvus_pb2_grpc.MilvusServiceStub(channel)
    await channel.close()
    await srv.stop(grace=0)


async def test_unimplemented_rpc_is_a_quiet_answer_with_a_metric(server, caplog):
    caplog.set_level(logging.DEBUG)
    before = metrics.RPC_UNIMPLEMENTED.labels("proxy", "Search")._value.get()
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await server.Search(milvus_pb2.SearchRequest(collection_name="c"))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert metrics.RPC_UNIMPLEMENTED.labels("proxy", "Search")._value.get() == before + 2
    assert _errors(caplog) == []
    debug = [r for r in caplog.records if r.getMessage() == "unimplemented rpc"]
    assert len(debug) == 2 and all(r.levelno == logging.DEBUG for r in debug)
    # Implemented RPCs on the same server are untouched.
    assert (await server.GetVersion(milvus_pb2.GetVersionRequest())).version == "v-test"


def test_compaction_target_size_out_of_range_is_a_parameter_error(node):
    """Found by the API fuzzer: ManualCompaction's `target_size` (MB, int64) times 1 MiB overflowed
    the internal request's int64 and answered an internal error with a traceback logged."""
    from pymilvus import MilvusClient

    c = MilvusClient(uri=node.uri)
    try:
        c.create_collection("compact_me", dimension=4)
        stub = c._get_connection()._stub
        resp = stub.ManualCompaction(
            milvus_pb2.ManualCompactionRequest(collection_name="compact_me", target_size=2**62), timeout=30
        )
        assert resp.status.code == 1100, resp.status
        assert "target_size" in resp.status.reason
    finally:
        c.close()
