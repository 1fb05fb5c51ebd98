"""A QueryNode SIGKILLed while loaded: QueryCoord moves its channels (and their segments) to the
other QueryNode once its session expires; reads fail for a bounded time, then answer with every
row exactly once."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient, MilvusException

from kmilvus.querynode import query_node
from kmilvus.util import failpoint
from tests.harness import ProcessNode
from tests.util import wait_until

DIM = 8
COORDS = ("rootcoord", "datacoord", "querycoord", "datanode", "indexnode", "proxy")


def _rows(start: int, n: int) -> list[dict]:
    vecs = np.random.default_rng(start).random((n, DIM), dtype=np.float32)
    return [{"id": start + i, "vec": vecs[i]} for i in range(n)]


def _create(c: MilvusClient, num_shards: int) -> None:
    """Collection "k": an int64 key and a FLAT-indexed vector, Strong by default."""
    schema = MilvusClient.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    index = c.prepare_index_params()
    index.add_index("vec", index_type="FLAT", metric_type="L2")
    c.create_collection("k", schema=schema, num_shards=num_shards, index_params=index, consistency_level="Strong")


def _strong_ids(c: MilvusClient) -> list[int] | None:
    try:
        return [r["id"] for r in c.query("k", filter="id >= 0", consistency_level="Strong", timeout=5)]
    except Exception:  # noqa: BLE001 - failing reads are expected while the channels move
        return None


def test_querynode_sigkill_moves_its_channels(node_factory, tmp_path):
    node = node_factory(roles=COORDS)
    qns = [
        ProcessNode(node.cfg, ("querynode",), tmp_path / f"qn{i}.log").start(wait_for="component started")
        for i in range(2)
    ]
    try:
        c = MilvusClient(uri=node.uri)
        _create(c, num_shards=2)
        c.insert("k", _rows(0, 800))
        c.flush("k")
        c.insert("k", _rows(800, 200))
        c.load_collection("k")
        assert sorted(_strong_ids(c) or []) == list(range(1000))
        qc = node.component("querycoord")
        coll_id = c.describe_collection("k")["collection_id"]
        owners = set(qc.loads.loads[coll_id].channel_nodes.values())
        assert len(owners) == 2  # one channel on each QueryNode

        qns[0].kill()
        c.insert("k", _rows(1000, 100))  # acknowledged while a node is down
        got = wait_until(
            lambda: (got := _strong_ids(c)) is not None and len(got) >= 1100 and got, 60, 0.5, "reads to recover"
        )
        assert sorted(got) == list(range(1100))  # nothing missing, nothing twice
        assert len(set(qc.loads.loads[coll_id].channel_nodes.values())) == 1  # both on the survivor
        hits = c.search("k", data=[_rows(0, 800)[5]["vec"]], limit=50)[0]
        ids = [h["id"] for h in hits]
        assert ids[0] == 5 and len(ids) == len(set(ids)) == 50
    finally:
        for p in qns:
            p.stop()


@pytest.mark.parametrize("kind", ["query", "search"])
def test_read_waiting_on_a_released_node_fails_not_partial(node_factory, tmp_path, monkeypatch, kind):
    """A QueryNode paused past its session TTL while a Strong read waited on it releases
    everything when it resumes (its channels are elsewhere now); the read it had taken before
    must fail, never answer from the emptied collection: its sealed and growing rows are gone."""
    node = node_factory()
    c = MilvusClient(uri=node.uri)
    _create(c, num_shards=1)
    c.insert("k", _rows(0, 300))
    c.flush("k")  # sealed
    c.insert("k", _rows(300, 100))  # growing
    c.load_collection("k")
    assert sorted(_strong_ids(c) or []) == list(range(400))

    reached = threading.Event()  # the read passed its serviceable wait and is about to take segments
    go = tmp_path / "go"
    real = query_node.afailpoint

    async def noted(name: str) -> None:
        if name == "querynode.read.before_segments":
            reached.set()
        await real(name)

    monkeypatch.setattr(query_node, "afailpoint", noted)
    outcome: dict[str, object] = {}

    def read() -> None:
        try:
            if kind == "query":
                rows = c.query("k", filter="id >= 0", consistency_level="Strong", timeout=30)
            else:
                rows = c.search("k", data=[_rows(0, 1)[0]["vec"]], limit=400, consistency_level="Strong", timeout=30)[0]
            outcome["ids"] = [r["id"] for r in rows]
        except MilvusException as e:
            outcome["error"] = e

    with failpoint.activate(f"querynode.read.before_segments=wait({go})"):
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        wait_until(reached.is_set, timeout=30, what="the read past its serviceable wait")
        node.call(node.component("querynode").drop_all())  # what a lost session does on resume
        go.touch()
        reader.join(60)
    assert not reader.is_alive()
    assert "ids" not in outcome, f"answered {len(outcome['ids'])} of 400 rows from a released collection"
    assert isinstance(outcome.get("error"), MilvusException)
