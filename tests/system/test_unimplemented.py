"""An RPC kmilvus has not built answers UNIMPLEMENTED as a normal answer: one debug line and a
counter, no error-level traceback in the server log."""

from __future__ import annotations

import logging

import grpc
import pytest
from prometheus_client import REGISTRY
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc


def _count(method: str) -> float:
    return REGISTRY.get_sample_value("kmilvus_rpc_unimplemented_total", {"role": "proxy", "method": method}) or 0.0


def test_unimplemented_is_one_debug_line_and_a_metric(node, caplog):
    caplog.set_level(logging.DEBUG, logger="kmilvus.util.grpcutil")
    before = _count("CalcDistance")
    with grpc.insecure_channel(node.uri.removeprefix("http://")) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as err:
                stub.CalcDistance(milvus_pb2.CalcDistanceRequest())
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # Implemented RPCs are untouched.
        assert stub.GetVersion(milvus_pb2.GetVersionRequest()).status.code == 0
    assert _count("CalcDistance") == before + 2
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not errors, [r.getMessage() for r in errors]
    lines = [r for r in caplog.records if r.getMessage() == "unimplemented rpc"]
    assert len(lines) == 2 and all(r.levelno == logging.DEBUG and r.exc_info is None for r in lines)
