"""A DataNode that gives its channels up (its session was lost: `Node._on_session_lost`) while
one of its binlog writes is still on the way must not let that write commit a checkpoint taken
from the emptied flowgraph: the checkpoint would pass every row the flowgraph had buffered, and
the channel's next owner, resuming there, would never write them (docs/architecture/flush.md)."""

from __future__ import annotations

import asyncio
import time
import uuid

import numpy as np
from pymilvus import Collection, connections

from kmilvus.datacoord.verify import committed_keys_at
from kmilvus.util import failpoint
from tests.flushutil import batch, bench_schema
from tests.util import wait_until


def _committed(cfg, coll_id: int) -> set[int]:
    keys = asyncio.run(committed_keys_at(cfg.etcd_endpoints[0], cfg.cluster, cfg.storage_uri, coll_id))
    return set(np.asarray(keys).tolist())


def test_a_write_ending_after_its_channels_were_dropped_moves_no_checkpoint(node_factory, tmp_path):
    node = node_factory()
    alias = "d" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    go = tmp_path / "go"
    try:
        coll = Collection("dropped_channels", bench_schema(), shards_num=1, using=alias)
        coll_id = coll.describe()["collection_id"]
        dn = node.component("datanode")
        with failpoint.activate(f"datanode.save.pressure=wait({go})"):
            ids, vecs, tags = batch(0, 2000)
            coll.insert([ids, vecs, tags])  # acknowledged, buffered on the DataNode
            acked = set(ids)
            # A delete: the channel's L0 write starts on a tick once it is a second old (the
            # inserts that go on keep the channel ticking), and is held after writing its
            # files, before it takes the checkpoint it commits with.
            coll.delete("id in [0, 1, 2]")
            acked -= {0, 1, 2}
            start = 2000
            while not any(fg.inflight and not fg.l0 for fg in dn.flowgraphs.values()):
                ids, vecs, tags = batch(start, 10)
                coll.insert([ids, vecs, tags])
                acked |= set(ids)
                start += 10
                assert start < 20_000, "no L0 write started"
                time.sleep(0.1)  # paced: ticks come on their own
            (fg,) = [fg for fg in dn.flowgraphs.values() if fg.inflight]
            assert fg.buffers, "the inserted rows are buffered, not written"
            # The session is lost: the node gives every channel up (DataCoord, which has not seen
            # the session go yet, still counts the channel as this node's).
            node.call(dn.drop_all())
            go.touch()
            wait_until(lambda: not dn._writes, timeout=60, what="the held write ended")
        # DataCoord restarts from what it stored; a DataNode resumes the channel there.
        node.stop()
        connections.disconnect(alias)
        node = node_factory()
        connections.connect(alias, uri=node.uri)
        coll = Collection("dropped_channels", using=alias)
        coll.flush(timeout=120)
        lost = acked - _committed(node.cfg, coll_id)
        assert not lost, f"{len(lost)} acknowledged rows lost, e.g. {sorted(lost)[:5]}"
    finally:
        connections.disconnect(alias)
