"""A BM25 search takes its channels' segments on the QueryNode's event loop, as every other
search does, and only computes in the worker thread: a flush or a load changes the node's
segment maps on the loop meanwhile, and iterating them from a worker raced with it ("dictionary
changed size during iteration")."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pyarrow as pa
import pytest

from kmilvus.index import params as P
from kmilvus.proto import query_node_pb2
from kmilvus.querynode import query_node as qn


class _Coll:
    """The parts of a LoadedCollection a search reads; records the thread taking segments."""

    schema = None
    pk_field = 100

    def __init__(self) -> None:
        self.taken_in: list[str] = []

    def expire_before(self, ts: int) -> int:
        return ts

    async def refresh_versions(self) -> None:
        return None

    def channel_segments(self, vchannel: str) -> list:
        self.taken_in.append(threading.current_thread().name)
        return []


async def test_bm25_segments_are_taken_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    coll = _Coll()
    node = qn.QueryNode.__new__(qn.QueryNode)

    async def serviceable(*args, **kwargs):
        return coll, []

    async def schema_at(*args, **kwargs):
        return None

    monkeypatch.setattr(node, "_serviceable", serviceable, raising=False)
    monkeypatch.setattr(node, "_schema_at", schema_at, raising=False)
    monkeypatch.setattr(node, "_still_serving", lambda *a: None, raising=False)
    monkeypatch.setattr(qn, "plan_from_request", lambda req, schema, pk: SimpleNamespace(metric=P.BM25))
    computed_in: list[str] = []

    def search_channels(channels, req, plan) -> pa.Table:
        computed_in.append(threading.current_thread().name)
        return pa.table({"nq": pa.array([], pa.int64())})

    monkeypatch.setattr(qn.bm25, "search_channels", search_channels)
    req = query_node_pb2.SearchRequest(collectionID=1, vchannels=["c0", "c1"])
    loop_thread = threading.current_thread().name
    table = await node._search(req, lambda t: t)
    assert table.num_rows == 0
    assert coll.taken_in == [loop_thread, loop_thread]
    assert computed_in and computed_in[0] != loop_thread
