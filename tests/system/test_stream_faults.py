"""The stream under faults, end to end: trimming never costs an acknowledged row or a
delete, whoever reads the pchannel, and a failed read never wedges it. Real servers; the
interleavings are forced with failpoints."""

from __future__ import annotations

import threading
import uuid

import nats.js.errors
import numpy as np
from pymilvus import Collection, DataType, MilvusClient, connections

from kmilvus.msgstream import MsgStream, pchannel_of
from kmilvus.msgstream.message import H_CHUNK, H_TYPE
from kmilvus.querycoord import recovery
from kmilvus.util import failpoint
from tests.flushutil import batch, bench_schema
from tests.harness import ProcessNode
from tests.system.test_faults import _check_exactly_once
from tests.system.test_recovery import COORDS_AND_PROXY
from tests.util import wait_until

DIM = 8
ALL_BUT_QUERYNODE = ("rootcoord", "datacoord", "querycoord", "datanode", "indexnode", "proxy")


def _log_has(path, needle: str) -> bool:
    return path.exists() and needle in path.read_text(errors="replace")


def _count_steps(node, dc) -> list[int]:
    """How many times DataCoord's background step stored the checkpoints from now on (and then
    trimmed the stream, in the same step: one more store means the trim before it is done)."""
    done = [0]
    store = dc._store_checkpoints

    async def counted() -> None:
        await store()
        done[0] += 1

    dc._store_checkpoints = counted
    return done


async def _stream_messages(cfg, vchannel: str) -> list[tuple[int, str]]:
    """(seq, 'tick' | 'part i/n' | 'msg') of every message of the vchannel's pchannel still stored."""
    ms = await MsgStream.connect(cfg.nats_url, cfg.cluster)
    try:
        first, last = await ms.stream_seqs(pchannel_of(vchannel))
        out = []
        for seq in range(first, last + 1):
            try:
                raw = await ms.js.get_msg(ms.stream_of(vchannel), seq=seq, direct=True)
            except nats.js.errors.NotFoundError:
                continue  # removed
            h = raw.headers or {}
            if raw.subject == ms.subject(pchannel_of(vchannel)):
                out.append((seq, "tick"))
            elif raw.subject == ms.subject(vchannel):
                out.append((seq, f"part {h[H_CHUNK]}" if H_CHUNK in h else f"msg {h.get(H_TYPE)}"))
        return out
    finally:
        await ms.close()


def test_a_split_insert_with_a_tick_between_its_parts_survives_a_trim_and_a_failover(node_factory, tmp_path):
    """A 10,000-row dim-128 insert is published in two parts, and a tick lands between them (it
    does not cover the insert). It must not become the vchannel's checkpoint: committed with
    the next SaveBinlogPaths (here a delete's delta log) and trimmed up to, it took the first
    part with it, and a DataNode taking the channel over resumed after it and skipped the rest
    of the insert."""
    node = node_factory(roles=COORDS_AND_PROXY, stream_retention_seconds=0.0, time_tick_idle_interval=0.1)
    # Every tick to every vchannel: the delete's delta log is written a second after the delete.
    ticks = {"KMILVUS_VCHANNEL_IDLE_TICK_INTERVAL": "0"}
    dn1 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn1.log").start(wait_for="component started", env=ticks)
    alias = "s" + uuid.uuid4().hex[:6]
    connections.connect(alias, uri=node.uri)
    dn2 = None
    try:
        coll = Collection("split", bench_schema(), shards_num=1, using=alias)
        coll_id = coll.describe()["collection_id"]
        vchannel = next(iter(node.component("rootcoord").collections.values())).virtual_channel_names[0]
        coll.insert(list(batch(0, 100)))
        coll.flush(timeout=60)
        acked = 100
        # The tick that does not cover the insert comes at the Proxy's next report, mostly while
        # the parts are held apart, at times before the first one: insert until it did.
        failpoint.enable("producer.split.after_first_part", "sleep(2)")
        try:
            for _ in range(5):
                coll.insert(list(batch(acked, 10_000)))
                acked += 10_000
                kinds = [k for _, k in node.call(_stream_messages(node.cfg, vchannel))]
                first = len(kinds) - 1 - kinds[::-1].index("part 0/2")
                if "tick" in kinds[first : kinds.index("part 1/2", first)]:
                    break
            else:
                raise AssertionError(f"no tick landed between the parts of 5 inserts: {kinds}")
        finally:
            failpoint.disable("producer.split.after_first_part")
        # A delete of a flushed row: the channel's L0 delta log is committed with the checkpoint.
        coll.delete("id in [0]")
        dc = node.component("datacoord")
        wait_until(lambda: dc.meta.l0.get(coll_id), timeout=60, what="the delete's delta log committed")
        steps = _count_steps(node, dc)
        wait_until(lambda: steps[0] >= 2, timeout=30, what="the checkpoint stored and the stream trimmed")
        dn1.kill()
        dn2 = ProcessNode(node.cfg, ("datanode",), tmp_path / "dn2.log").start(wait_for="component started", env=ticks)
        coll.flush(timeout=120)
        _check_exactly_once(node, coll, coll_id, list(range(acked)))
    finally:
        connections.disconnect(alias)
        dn1.kill()
        if dn2 is not None:
            dn2.stop()


def _strong_ids(c: MilvusClient) -> list[int] | None:
    try:
        return [r["id"] for r in c.query("k", filter="id >= 0", consistency_level="Strong", timeout=5)]
    except Exception:  # noqa: BLE001 - reads fail while the channel is reloaded
        return None


def test_a_delegator_that_starts_reading_after_its_deletes_were_trimmed_never_shows_them(
    node_factory, tmp_path, monkeypatch
):
    """A QueryNode is handed a channel with its delta logs as listed then, and starts reading
    the stream from the checkpoint a while later. Meanwhile 100 rows are deleted, flushed (delta
    logs committed, checkpoint moved) and the stream trimmed past the delete. Strong reads must
    never return those rows: the delegator finds the messages gone, stops serving, and the
    channel is watched again with the delta logs as they are now."""
    node = node_factory(roles=ALL_BUT_QUERYNODE, stream_retention_seconds=0.0)
    qn_log = tmp_path / "qn.log"
    qn = ProcessNode(node.cfg, ("querynode",), qn_log).start(
        wait_for="component started", failpoints="querynode.watch.before_consume=sleep(20)"
    )
    listed = threading.Event()  # QueryCoord listed the channel's segments and delta logs
    watch_request = recovery.watch_request

    async def listing(*args, **kwargs):
        req = await watch_request(*args, **kwargs)
        listed.set()
        return req

    monkeypatch.setattr(recovery, "watch_request", listing)
    c = MilvusClient(uri=node.uri)
    try:
        schema = MilvusClient.create_schema()
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
        index = c.prepare_index_params()
        index.add_index("vec", index_type="FLAT", metric_type="L2")
        c.create_collection("k", schema=schema, num_shards=1, consistency_level="Strong")
        vecs = np.random.default_rng(0).random((1000, DIM), dtype=np.float32)
        c.insert("k", [{"id": i, "vec": vecs[i]} for i in range(1000)])
        c.flush("k")
        c.create_index("k", index)
        loader = threading.Thread(target=lambda: c.load_collection("k", timeout=120), daemon=True)
        loader.start()
        wait_until(listed.is_set, timeout=60, what="the channel's logs listed for the QueryNode")
        c.delete("k", ids=list(range(100)))  # by key: needs no read of the loading collection
        vchannel = next(iter(node.component("rootcoord").collections.values())).virtual_channel_names[0]
        coll_id = c.describe_collection("k")["collection_id"]
        served = node.component("querycoord").loads.served
        deleted_at = node.call(_last_seq(node.cfg, vchannel))
        c.flush("k")
        wait_until(
            lambda: node.call(_purged_through(node.cfg, vchannel, deleted_at)), timeout=30, what="the delete trimmed"
        )
        assert vchannel not in served.get(coll_id, ()), "the QueryNode read before the trim: nothing reproduced"
        loader.join(120)
        assert not loader.is_alive()

        def settled() -> list[int] | None:
            got = _strong_ids(c)
            assert got is None or not any(i < 100 for i in got), "a Strong read returned deleted rows"
            return got if got is not None and len(got) == 900 else None

        got = wait_until(settled, 90, 0.5, lambda: f"reads to settle: {len(_strong_ids(c) or [])} rows")
        assert sorted(got) == list(range(100, 1000))
        qn.stop()  # its log written out
        assert _log_has(qn_log, "behind the stream's retention")
    finally:
        c.close()
        qn.stop()


async def _last_seq(cfg, vchannel: str) -> int:
    ms = await MsgStream.connect(cfg.nats_url, cfg.cluster)
    try:
        return await ms.last_seq(vchannel)
    finally:
        await ms.close()


async def _purged_through(cfg, vchannel: str, seq: int) -> bool:
    ms = await MsgStream.connect(cfg.nats_url, cfg.cluster)
    try:
        seqs = await ms.stream_seqs(pchannel_of(vchannel))
        return seqs is not None and seqs[0] > seq
    finally:
        await ms.close()


def _rows(start: int, n: int) -> list[dict]:
    ids, vecs, tags = batch(start, n)
    return [{"id": i, "vec": vecs[k], "tag": tags[k]} for k, i in enumerate(ids)]


def test_a_failed_catch_up_does_not_wedge_the_pchannel(node_factory):
    """A DataNode's catch-up that fails (NATS away) left its vchannel registered: every watch
    retry failed with "already consumed" and the vchannel's flushes hung. All collections here
    share one pchannel; the failure is forced once, and every flush still finishes."""
    node = node_factory(dml_channel_num=1)
    c = MilvusClient(uri=node.uri)
    try:
        c.create_collection("a", schema=bench_schema())
        rows = _rows(0, 500)
        c.insert("a", rows)
        c.flush("a")
        failpoint.enable("dispatcher.add.catch_up", "raise")
        try:
            c.create_collection("b", schema=bench_schema())  # its channel's watch fails
            dc = node.component("datacoord")
            wait_until(lambda: dc.channels._retrying, timeout=30, what="the failed watch")
        finally:
            failpoint.disable("dispatcher.add.catch_up")
        c.insert("b", rows)
        c.insert("a", _rows(500, 500))
        c.flush("b", timeout=60)
        c.flush("a", timeout=60)
        assert c.get_collection_stats("b")["row_count"] == 500
        assert c.get_collection_stats("a")["row_count"] == 1000
    finally:
        c.close()


def test_a_channel_read_that_fails_is_read_again(node_factory):
    """A flowgraph whose read raised ended for good (`FlowGraph._run`) while its vchannel stayed
    registered: its flushes hung, and its unread queue held the pchannel back. Now the message
    is read again from where the flowgraph was, and nothing is skipped."""
    node = node_factory(dml_channel_num=1)
    c = MilvusClient(uri=node.uri)
    try:
        c.create_collection("a", schema=bench_schema())
        rows = _rows(0, 500)
        failpoint.enable("reader.handle", "raise")
        try:
            c.insert("a", rows)
            wait_until(lambda: _reads_failed(node), timeout=30, what="a failed read")
        finally:
            failpoint.disable("reader.handle")
        c.flush("a", timeout=60)
        assert c.get_collection_stats("a")["row_count"] == 500
    finally:
        c.close()


def _reads_failed(node) -> bool:
    dn = node.component("datanode")
    return any(fg._consumer is not None and fg._consumer.failures for fg in dn.flowgraphs.values())
