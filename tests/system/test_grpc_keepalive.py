"""Clients keep their connections alive with pings (pymilvus every 10 s, kmilvus' own channels
too). A server that refuses such pings answers GOAWAY "too_many_pings" and drops the connection:
the RPCs in flight on it fail, and pymilvus retries them by itself — an Insert whose first attempt
was already published is then stored twice (seen under bench/chaos.py). Milvus' servers permit
pings every 5 s, with or without calls in flight; so do kmilvus'."""

from __future__ import annotations

import time

import grpc
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc


def test_an_idle_client_pinging_often_keeps_its_connection(node):
    options = [
        ("grpc.keepalive_time_ms", 1_200),  # more often than pymilvus: a refusal shows in seconds
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    with grpc.insecure_channel(node.uri.removeprefix("http://"), options=options) as ch:
        stub = milvus_pb2_grpc.MilvusServiceStub(ch)
        assert stub.GetVersion(milvus_pb2.GetVersionRequest()).status.code == 0
        time.sleep(6)  # idle, pinging: a refusing server sends GOAWAY after its third ping
        assert ch._channel.check_connectivity_state(False) == grpc.ChannelConnectivity.READY.value[0]
