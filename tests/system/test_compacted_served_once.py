"""A compaction's sources and its target are never both served, and count(*) counts each live
key once: through a load that resumes the channel from a checkpoint older than the sources'
rows (a growing segment of another partition holds it back), the stream brings the sources'
inserts again — the QueryNode must skip them as the DataNode does (they are Dropped)."""

from __future__ import annotations

import uuid

from pymilvus import Collection, connections
from pymilvus.grpc_gen import common_pb2

from tests.system.test_delete import _count, _indexed_and_loaded, _rows, _schema, _segments
from tests.util import wait_until

NAME = "once"
SEAL_ROWS = 119  # segment_max_size_mb=1 at 88 bytes a row, × segment_seal_proportion 0.01
TIMEOUT = 240


def test_compacted_sources_are_not_replayed_from_an_older_checkpoint(node_factory):
    from pymilvus import MilvusClient

    node = node_factory(segment_max_size_mb=1, segment_seal_proportion=0.01, dml_channel_num=1)
    client = MilvusClient(uri=node.uri)
    alias = "c" + uuid.uuid4().hex[:8]
    connections.connect(alias, uri=node.uri)
    try:
        client.create_collection(NAME, schema=_schema(), num_shards=1)
        client.create_partition(NAME, "held")
        _indexed_and_loaded(client, NAME)
        coll_id = client.describe_collection(NAME)["collection_id"]

        # A growing segment that stays growing: the channel checkpoint stays before its rows.
        client.insert(NAME, _rows(range(10)), partition_name="held")
        # Two full segments of another partition, sealed and flushed by size alone.
        client.insert(NAME, _rows(range(100, 100 + 2 * SEAL_ROWS)))
        wait_until(lambda: len(_segments(node, coll_id)) == 2, timeout=TIMEOUT, what="the two full segments flushed")
        live = 10 + 2 * SEAL_ROWS
        assert _count(client, NAME) == live

        coll = Collection(NAME, using=alias)
        coll.compact()
        assert coll.wait_for_compaction_completed(timeout=TIMEOUT)
        flushed = _segments(node, coll_id)
        assert len(flushed) == 1 and len(flushed[0].info.compaction_from) == 2
        assert _count(client, NAME) == live

        client.release_collection(NAME)
        client.load_collection(NAME)
        growing = _segments(node, coll_id, (common_pb2.Growing,))
        assert [s.info.num_of_rows or s.info.assigned_rows for s in growing] == [10], "still growing"
        assert _count(client, NAME) == live, "count(*) after a load that replays the compacted rows"
        got = client.query(NAME, filter="id >= 0", output_fields=["id"], consistency_level="Strong")
        assert sorted(r["id"] for r in got) == [*range(10), *range(100, 100 + 2 * SEAL_ROWS)]
    finally:
        client.close()
        connections.disconnect(alias)
