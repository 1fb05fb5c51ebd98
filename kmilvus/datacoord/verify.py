"""What a collection holds, read the way a reader must: through DataCoord's meta in etcd.

Only binlogs that the meta refers to are stored rows; a file no meta refers to (a write killed
before SaveBinlogPaths) is garbage the collector removes. Fault tests and the chaos and load
benchmarks check their invariants (nothing lost, nothing twice) with this.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.storage import ObjectStore


async def committed_binlog_paths(kv: EtcdKV, coll_id: int) -> list[str]:
    return [internal_pb2.Binlog.FromString(raw).log_path for _, raw in await kv.get_prefix(keys.binlog_prefix(coll_id))]


async def committed_delete_paths(kv: EtcdKV, coll_id: int) -> list[str]:
    """Every committed delta log of the collection: its segments' (compaction carries them over)
    and its channels' L0 delta logs (which name the partition they apply to, -1: all)."""
    seg = [
        internal_pb2.Binlog.FromString(raw).log_path for _, raw in await kv.get_prefix(keys.deltalog_prefix(coll_id))
    ]
    l0 = await kv.get_prefix(keys.l0_deltalog_prefix(coll_id))
    return seg + [internal_pb2.L0Deltalog.FromString(raw).binlog.log_path for _, raw in l0]


async def committed_primary_keys(kv: EtcdKV, store: ObjectStore, coll_id: int, pk_field: int = 100) -> np.ndarray:
    """Primary keys of every committed binlog of the collection, duplicates included."""
    cols = [
        pq.read_table(store.path(p), columns=[str(pk_field)], filesystem=store.filesystem)
        .column(str(pk_field))
        .to_numpy()
        for p in await committed_binlog_paths(kv, coll_id)
    ]
    return np.concatenate(cols) if cols else np.array([], dtype=np.int64)


async def committed_keys_at(etcd_endpoint: str, cluster: str, storage_uri: str, coll_id: int) -> np.ndarray:
    """`committed_primary_keys` from outside the cluster's processes (tests, benchmarks)."""
    kv = await EtcdKV.connect([etcd_endpoint], f"{cluster}/meta")
    try:
        return await committed_primary_keys(kv, ObjectStore.from_uri(storage_uri), coll_id)
    finally:
        await kv.close()
