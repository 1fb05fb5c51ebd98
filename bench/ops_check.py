"""What a deployment holds, read two ways, and what dropped things left behind.

- `stored_rows`: the live rows of a collection as the committed files say, read from etcd and
  the Parquet files alone, not through kmilvus' read path: every segment DataCoord's meta lists
  and has not Dropped (compaction sources stay listed, Dropped, until collected), its insert
  binlogs (pk, timestamp, val) minus its own delta logs and its channel's L0 delta logs (a row is
  deleted by a delete of its key with a greater timestamp: an upsert's delete and insert share
  one, Milvus' rule), one row per key: the newest version, as reads return it.
- `queried_rows`: the same through a Strong query of the lineage's key range, in windows.
- `leftovers`: etcd keys, files and JetStream consumers of dropped collections, of partitions a
  live collection no longer has, and per-segment log meta whose segment is gone.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq
from pymilvus.grpc_gen import common_pb2

from kmilvus.meta import EtcdKV
from kmilvus.meta import catalog as keys
from kmilvus.proto import internal_pb2
from kmilvus.storage import ObjectStore

IGNORED_KEYS = ("tso/", "id/", "session/", "leader/")
QUERY_WINDOW = 10_000  # keys per Strong query


@dataclass
class Stored:
    pks: np.ndarray
    vals: np.ndarray
    binlog_rows: int = 0  # rows in the live segments' insert binlogs, deleted ones included
    deleted_rows: int = 0
    segments: dict[str, int] = field(default_factory=dict)  # state name → count
    partitions: list[int] = field(default_factory=list)


async def _kv(etcd: str, cluster: str) -> EtcdKV:
    return await EtcdKV.connect([etcd], f"{cluster}/meta")


async def _binlogs(kv: EtcdKV, prefix: str) -> list:
    return [internal_pb2.Binlog.FromString(raw) for _, raw in await kv.get_prefix(prefix)]


def _read(store: ObjectStore, path: str, columns: list[str]):
    return pq.read_table(store.path(path), columns=columns, filesystem=store.filesystem)


def live_after_deletes(pks: np.ndarray, ts: np.ndarray, del_pks: np.ndarray, del_ts: np.ndarray) -> np.ndarray:
    """A bool per row: no delete of its key with a greater timestamp."""
    if not len(del_pks) or not len(pks):
        return np.ones(len(pks), dtype=bool)
    order = np.lexsort((del_ts, del_pks))
    dk, dt = del_pks[order], del_ts[order]
    last = np.ones(len(dk), dtype=bool)
    last[:-1] = dk[1:] != dk[:-1]
    dk, dt = dk[last], dt[last]  # the newest delete per key
    idx = np.minimum(np.searchsorted(dk, pks), len(dk) - 1)
    return ~((dk[idx] == pks) & (dt[idx] > ts))


def newest_live(
    pks: np.ndarray, ts: np.ndarray, part: np.ndarray, deletes: list[tuple[np.ndarray, np.ndarray, int]]
) -> np.ndarray:
    """A bool per row: the row is its key's newest version (one row per key: Milvus reads return
    a key once, and an older version is hidden even where the newest is deleted) and no delete
    that applies to its partition (-1: every partition) has a greater timestamp."""
    keep = np.zeros(len(pks), dtype=bool)
    if not len(pks):
        return keep
    order = np.lexsort((-ts, pks))  # per key, newest first
    first = np.ones(len(order), dtype=bool)
    first[1:] = pks[order][1:] != pks[order][:-1]
    keep[order[first]] = True
    for d_pk, d_ts, d_part in deletes:
        applies = keep if d_part == -1 else keep & (part == d_part)
        rows = np.nonzero(applies)[0]
        keep[rows] &= live_after_deletes(pks[rows], ts[rows], d_pk, d_ts)
    return keep


def _columns(tables: list) -> tuple[np.ndarray, np.ndarray]:
    """(pk, ts) of delta-log tables."""
    if not tables:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return (
        np.concatenate([t.column("pk").to_numpy() for t in tables]).astype(np.int64),
        np.concatenate([t.column("ts").to_numpy() for t in tables]).astype(np.int64),
    )


class _MovedAway(Exception):
    """A file listed in etcd was gone when read, and so was its segment (or L0 delta log) on a
    second look: compacted (or dropped) between the listing and the read — the cluster still
    runs automatic compaction while it is checked. The listing is taken again."""


async def _read_or_moved(
    kv: EtcdKV, store: ObjectStore, key: str, logs: list, columns: list[str], *, segment: bool = True
) -> list:
    """The tables of `logs`; a missing file whose owner (`key`: a segment's meta, or with
    `segment=False` an L0 delta log's) is still there, and not a Dropped segment, is a committed
    file lost — raised as it is."""
    try:
        return [_read(store, b.log_path, columns) for b in logs]
    except FileNotFoundError:
        raw = await kv.get(key)
        if raw is not None and (
            not segment or internal_pb2.SegmentInfo.FromString(raw).state != common_pb2.SegmentState.Dropped
        ):
            raise
        raise _MovedAway(key) from None


async def stored_rows_async(etcd: str, cluster: str, storage_uri: str, coll_id: int, attempts: int = 5) -> Stored:
    kv = await _kv(etcd, cluster)
    store = ObjectStore.from_uri(storage_uri)
    try:
        for _ in range(attempts - 1):
            try:
                return await _stored_rows(kv, store, coll_id)
            except _MovedAway:
                continue
        return await _stored_rows(kv, store, coll_id)
    finally:
        await kv.close()


async def _stored_rows(kv: EtcdKV, store: ObjectStore, coll_id: int) -> Stored:
    raw = await kv.get(keys.collection_key(coll_id))
    if raw is None:
        raise LookupError(f"collection {coll_id} is not in RootCoord's meta")
    info = internal_pb2.CollectionInfo.FromString(raw)
    fields = {f.name: f.fieldID for f in info.schema.fields}
    pk_col, val_col = str(fields["id"]), str(fields["val"])
    out = Stored(np.zeros(0, np.int64), np.zeros(0, np.int64), partitions=[p.partitionID for p in info.partitions])
    pks, tss, vals, parts = [], [], [], []
    deletes: list[tuple[np.ndarray, np.ndarray, int]] = []
    for _, raw_seg in await kv.get_prefix(keys.segment_prefix(coll_id)):
        seg = internal_pb2.SegmentInfo.FromString(raw_seg)
        seg_key = keys.segment_key(coll_id, seg.partitionID, seg.ID)
        state = common_pb2.SegmentState.Name(seg.state)
        out.segments[state] = out.segments.get(state, 0) + 1
        if seg.state == common_pb2.SegmentState.Dropped:
            continue
        binlogs = await _binlogs(kv, keys.binlog_prefix(coll_id, seg.ID))
        tables = await _read_or_moved(kv, store, seg_key, binlogs, [pk_col, "1", val_col])
        if not tables:
            continue
        s_pk = np.concatenate([t.column(pk_col).to_numpy() for t in tables]).astype(np.int64)
        s_ts = np.concatenate([t.column("1").to_numpy() for t in tables]).astype(np.int64)
        # A segment's own delta logs apply to its rows only: drop those rows here.
        own = await _binlogs(kv, keys.deltalog_prefix(coll_id, seg.ID))
        s_keep = live_after_deletes(s_pk, s_ts, *_columns(await _read_or_moved(kv, store, seg_key, own, ["pk", "ts"])))
        out.binlog_rows += len(s_pk)
        out.deleted_rows += int((~s_keep).sum())
        pks.append(s_pk[s_keep])
        tss.append(s_ts[s_keep])
        vals.append(np.concatenate([t.column(val_col).to_numpy() for t in tables]).astype(np.int64)[s_keep])
        parts.append(np.full(int(s_keep.sum()), seg.partitionID, np.int64))
    # The channel's L0 delta logs apply to every segment of their partition (-1: all); a key
    # always hashes to one channel, so the channel needs no check.
    for l0_key, raw_l0 in await kv.get_prefix(keys.l0_deltalog_prefix(coll_id)):  # keys relative, as get takes them
        l0 = internal_pb2.L0Deltalog.FromString(raw_l0)
        found = await _read_or_moved(kv, store, l0_key, [l0.binlog], ["pk", "ts"], segment=False)
        deletes.append((*_columns(found), l0.partitionID))
    if pks:
        all_pk, all_ts = np.concatenate(pks), np.concatenate(tss)
        keep = newest_live(all_pk, all_ts, np.concatenate(parts), deletes)
        out.deleted_rows += int((~keep).sum())
        out.pks, out.vals = all_pk[keep], np.concatenate(vals)[keep]
    return out


def stored_rows(etcd: str, cluster: str, storage_uri: str, coll_id: int) -> Stored:
    return asyncio.run(stored_rows_async(etcd, cluster, storage_uri, coll_id))


def queried_rows(coll, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row a Strong query returns for keys in [lo, hi), in windows of QUERY_WINDOW keys."""
    pks: list[int] = []
    vals: list[int] = []
    for a in range(lo, hi, QUERY_WINDOW):
        b = min(hi, a + QUERY_WINDOW)
        expr = f"id >= {a} and id < {b}"
        rows = coll.query(expr, output_fields=["id", "val"], consistency_level="Strong", timeout=120)
        pks += [int(r["id"]) for r in rows]
        vals += [int(r["val"]) for r in rows]
    return np.asarray(pks, np.int64), np.asarray(vals, np.int64)


# -------------------------------------------------------------------- leftovers
_VCHANNEL_ID = re.compile(r"_(\d+)v\d+")
# Per-segment log meta that must go with its segment. DDL binlog meta stays on purpose when a
# partition is dropped (DDL belongs to the collection: DataCoord's drop_partition_meta).
_SEG_LOG_PREFIXES = ("datacoord-meta/binlog/", "datacoord-meta/deltalog/", "datacoord-meta/statslog/")
_PARTITIONED_KEYS = ("datacoord-meta/s/", "datacoord-meta/segment-index/")
_PARTITIONED_FILES = ("insert_log", "delta_log", "stats_log", "index_files")


def ids_in(text: str) -> set[int]:
    """Every collection ID a key, path or subject can name: path tokens and vchannel names."""
    out = {int(t) for t in re.split(r"[/.]", text) if t.isdigit()}
    out |= {int(m) for m in _VCHANNEL_ID.findall(text)}
    return out


@dataclass
class Leftovers:
    keys: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)
    stream_messages: dict[str, int] = field(default_factory=dict)  # informational

    @property
    def empty(self) -> bool:
        return not (self.keys or self.files or self.consumers)


async def leftovers_async(
    etcd: str, cluster: str, storage_uri: str, nats_url: str, live: set[int], dropped: set[int]
) -> Leftovers:
    from kmilvus.msgstream import MsgStream

    out = Leftovers()
    kv = await _kv(etcd, cluster)
    try:
        parts: dict[int, set[int]] = {}
        for cid in live:
            raw = await kv.get(keys.collection_key(cid))
            if raw is not None:
                parts[cid] = {p.partitionID for p in internal_pb2.CollectionInfo.FromString(raw).partitions}
        all_keys = [k for k, _ in await kv.get_prefix("", keys_only=True) if not k.startswith(IGNORED_KEYS)]
    finally:
        await kv.close()
    segments: set[tuple[int, int]] = set()
    for k in all_keys:
        if k.startswith("datacoord-meta/s/"):
            c, _, s = k.removeprefix("datacoord-meta/s/").split("/")[:3]
            segments.add((int(c), int(s)))
    for k in all_keys:
        if ids_in(k) & dropped:
            out.keys.append(k)
            continue
        for pre in _PARTITIONED_KEYS:
            if k.startswith(pre):
                c, p = (int(x) for x in k.removeprefix(pre).split("/")[:2])
                if c in parts and p not in parts[c]:
                    out.keys.append(k)
        for pre in _SEG_LOG_PREFIXES:
            if k.startswith(pre):
                c, s = (int(x) for x in k.removeprefix(pre).split("/")[:2])
                if c in parts and (c, s) not in segments:
                    out.keys.append(k)
    store = ObjectStore.from_uri(storage_uri)
    for f in store.walk_sync():
        tokens = f.strip("/").split("/")
        if ids_in(f) & dropped:
            out.files.append(f)
        elif len(tokens) > 2 and tokens[0] in _PARTITIONED_FILES and tokens[1].isdigit() and tokens[2].isdigit():
            c, p = int(tokens[1]), int(tokens[2])
            if c in parts and p not in parts[c]:
                out.files.append(f)
    ms = await MsgStream.connect(nats_url, cluster)
    try:
        for stream in await ms.cluster_streams():  # one per pchannel
            offset = 0
            while True:
                page = await ms.js.consumers_info(stream, offset=offset)
                out.consumers += [
                    f"{ci.name} ({ci.config.filter_subject})"
                    for ci in page
                    if ids_in(ci.config.filter_subject or "") & dropped
                ]
                offset += len(page)
                if not page or len(page) < 256:
                    break
            with_subjects = await ms.js.stream_info(stream, subjects_filter=">")
            for subject, n in (with_subjects.state.subjects or {}).items():
                if ids_in(subject) & dropped:
                    out.stream_messages[subject] = n
    finally:
        await ms.close()
    return out


def leftovers(etcd: str, cluster: str, storage_uri: str, nats_url: str, live: set[int], dropped: set[int]) -> Leftovers:
    return asyncio.run(leftovers_async(etcd, cluster, storage_uri, nats_url, live, dropped))


# -------------------------------------------------------------------- tracing
async def key_history_async(etcd: str, cluster: str, storage_uri: str, coll_id: int, key: int) -> list[str]:
    """Every row and delete of `key` in the collection's segments (Dropped ones too), with the
    segment's partition, state and the file: what a reader of the files would find, and why."""
    kv = await _kv(etcd, cluster)
    store = ObjectStore.from_uri(storage_uri)
    out = []
    try:
        info = internal_pb2.CollectionInfo.FromString(await kv.get(keys.collection_key(coll_id)))
        fields = {f.name: str(f.fieldID) for f in info.schema.fields}
        for _, raw_seg in await kv.get_prefix(keys.segment_prefix(coll_id)):
            seg = internal_pb2.SegmentInfo.FromString(raw_seg)
            where = (
                f"segment {seg.ID} (partition {seg.partitionID}, {common_pb2.SegmentState.Name(seg.state)}, "
                f"{seg.insert_channel}, compacted from {list(seg.compaction_from)})"
            )
            for b in await _binlogs(kv, keys.binlog_prefix(coll_id, seg.ID)):
                t = _read(store, b.log_path, [fields["id"], "1", fields["val"]]).to_pydict()
                for pk, ts, val in zip(t[fields["id"]], t["1"], t[fields["val"]], strict=True):
                    if pk == key:
                        out.append(f"row ts {ts} val {val} in {where}, binlog {b.log_path}")
            for d in await _binlogs(kv, keys.deltalog_prefix(coll_id, seg.ID)):
                t = _read(store, d.log_path, ["pk", "ts"]).to_pydict()
                for pk, ts in zip(t["pk"], t["ts"], strict=True):
                    if pk == key:
                        out.append(f"delete ts {ts} in {where}, delta log {d.log_path}")
        for _, raw_l0 in await kv.get_prefix(keys.l0_deltalog_prefix(coll_id)):
            l0 = internal_pb2.L0Deltalog.FromString(raw_l0)
            t = _read(store, l0.binlog.log_path, ["pk", "ts"]).to_pydict()
            for pk, ts in zip(t["pk"], t["ts"], strict=True):
                if pk == key:
                    where = f"L0 of {l0.channel} (partition {l0.partitionID})"
                    out.append(f"delete ts {ts} in {where}, {l0.binlog.log_path}")
        return out
    finally:
        await kv.close()


def key_history(etcd: str, cluster: str, storage_uri: str, coll_id: int, key: int) -> list[str]:
    return asyncio.run(key_history_async(etcd, cluster, storage_uri, coll_id, key))
