"""bench/ops_check.py reads a live cluster's committed rows (the chaos run's final check) while
automatic compaction still runs: a source segment compacted between the listing and the read of
its binlog is listed again; a committed binlog whose segment is still live but whose file is
gone is a loss, and raised."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.storage import ObjectStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import ops_check

COLL, PART = 11, 12
LIVE_SEG, RACED_SEG = 21, 22


async def _seed(kv: EtcdKV, store: ObjectStore) -> None:
    schema = schema_pb2.CollectionSchema(name="c")
    schema.fields.add(fieldID=100, name="id", data_type=schema_pb2.DataType.Int64, is_primary_key=True)
    schema.fields.add(fieldID=101, name="val", data_type=schema_pb2.DataType.Int64)
    info = internal_pb2.CollectionInfo(ID=COLL, schema=schema)
    info.partitions.add(partitionID=PART, partitionName="_default")
    await kv.put(keys.collection_key(COLL), info.SerializeToString())
    for seg, base in ((LIVE_SEG, 0), (RACED_SEG, 100)):
        state = internal_pb2.SegmentInfo(
            ID=seg, collectionID=COLL, partitionID=PART, state=common_pb2.SegmentState.Flushed
        )
        await kv.put(keys.segment_key(COLL, PART, seg), state.SerializeToString())
        path = f"insert_log/{COLL}/{PART}/{seg}/1"
        await kv.put(keys.binlog_key(COLL, seg, 1), internal_pb2.Binlog(log_path=path).SerializeToString())
        if seg == LIVE_SEG:  # the raced segment's file is gone (its compaction's collector removed it)
            keys_ = np.arange(base, base + 3, dtype=np.int64)
            table = pa.table({"100": keys_, "1": np.ones(3, np.int64), "101": keys_ * 10})
            local = Path(store.path(path))
            local.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, local)


@pytest.fixture
async def seeded(etcd_endpoint, tmp_path):
    cluster = f"check-{uuid.uuid4().hex[:8]}"
    kv = await EtcdKV.connect([etcd_endpoint], f"{cluster}/meta")
    store = ObjectStore.from_uri(tmp_path.as_uri())
    await _seed(kv, store)
    yield kv, cluster, tmp_path.as_uri()
    await kv.close()


async def test_a_segment_compacted_while_it_is_read_is_listed_again(seeded, etcd_endpoint, monkeypatch):
    kv, cluster, uri = seeded
    read = ops_check._read

    async def compacted_meanwhile() -> None:
        dropped = internal_pb2.SegmentInfo(
            ID=RACED_SEG, collectionID=COLL, partitionID=PART, state=common_pb2.SegmentState.Dropped
        )
        await kv.put(keys.segment_key(COLL, PART, RACED_SEG), dropped.SerializeToString())

    raced: list[str] = []

    def racing_read(store, path, columns):
        if f"/{RACED_SEG}/" in path and not raced:
            raced.append(path)
            raise FileNotFoundError(path)  # the compaction commits right after the listing
        return read(store, path, columns)

    monkeypatch.setattr(ops_check, "_read", racing_read)
    await compacted_meanwhile()  # as the collector sees it by the second look
    # First listing: taken before the commit, so the raced segment still looks Flushed to it.
    flushed = internal_pb2.SegmentInfo(
        ID=RACED_SEG, collectionID=COLL, partitionID=PART, state=common_pb2.SegmentState.Flushed
    )
    listing = kv.get_prefix

    async def stale_first_listing(prefix, **kw):
        out = await listing(prefix, **kw)
        if prefix == keys.segment_prefix(COLL) and not raced:
            out = [(k, flushed.SerializeToString() if k.endswith(f"/{RACED_SEG}") else v) for k, v in out]
        return out

    monkeypatch.setattr(ops_check, "_kv", _returning(kv, stale_first_listing))
    stored = await ops_check.stored_rows_async(etcd_endpoint, cluster, uri, COLL)
    assert raced, "the race was not exercised"
    assert sorted(stored.pks.tolist()) == [0, 1, 2]
    assert stored.segments == {"Flushed": 1, "Dropped": 1}


async def test_a_live_segments_missing_binlog_is_a_loss(seeded, etcd_endpoint, monkeypatch):
    kv, cluster, uri = seeded
    monkeypatch.setattr(ops_check, "_kv", _returning(kv, kv.get_prefix))
    with pytest.raises(FileNotFoundError):
        await ops_check.stored_rows_async(etcd_endpoint, cluster, uri, COLL)


def _returning(kv: EtcdKV, get_prefix):
    """ops_check._kv handing out the fixture's connection (kept open: the fixture closes it)."""

    class Kept:
        def __getattr__(self, name):
            return get_prefix if name == "get_prefix" else getattr(kv, name)

        async def close(self) -> None:
            return None

    async def connect(etcd: str, cluster: str):
        return Kept()

    return connect
