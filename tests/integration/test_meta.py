"""etcd building blocks against a real etcd: KV transactions, watches, TSO, IDs, sessions."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from kmilvus.meta import Cmp, EtcdKV, Op
from kmilvus.sessionutil import Session, list_sessions, watch_sessions
from kmilvus.tso import GlobalTSOAllocator
from kmilvus.tso.allocator import now_ms
from kmilvus.util.tsoutil import physical_ms
from tests.util import eventually


@pytest.fixture
async def kv(etcd_endpoint, root):
    kv = await EtcdKV.connect([etcd_endpoint], root)
    yield kv
    await kv.delete_prefix("")
    await kv.close()


async def test_txn_applies_all_or_nothing(kv):
    await kv.put("a/1", b"x")
    ok = await kv.txn([Op.put("a/2", b"y"), Op.delete("a/1")], [Cmp.value_eq("a/1", b"x")])
    assert ok
    assert await kv.get("a/1") is None and await kv.get("a/2") == b"y"
    # A failed compare writes nothing.
    ok = await kv.txn([Op.put("a/3", b"z"), Op.delete("a/2")], [Cmp.missing("a/2")])
    assert not ok
    assert await kv.get("a/3") is None and await kv.get("a/2") == b"y"


async def test_delete_prefix_in_txn_and_isolation(kv, etcd_endpoint):
    await kv.multi_save_and_remove({"c/1/a": b"1", "c/1/b": b"2", "c/10/a": b"3"})
    assert await kv.txn([Op.delete_prefix("c/1/")])
    assert [k for k, _ in await kv.get_prefix("c/")] == ["c/10/a"]
    other = await EtcdKV.connect([etcd_endpoint], kv.root + "x")
    try:
        assert await other.get_prefix("") == []
    finally:
        await other.close()


async def test_watch_sees_puts_and_deletes(kv):
    rev = await kv.revision()
    events = []

    async def watch():
        async for ev in kv.watch_prefix("w/", start_revision=rev + 1):
            events.append((ev.kind, ev.key, ev.value))
            if len(events) == 2:
                return

    task = asyncio.create_task(watch())
    await kv.put("w/k", b"v")
    await kv.delete("w/k")
    await asyncio.wait_for(task, 5)
    assert events == [("put", "w/k", b"v"), ("delete", "w/k", b"")]


async def test_tso_strictly_increasing_across_restart(kv):
    tso = GlobalTSOAllocator(kv, "tso", save_window_ms=50)
    await tso.initialize()
    seen = [await tso.alloc() for _ in range(200)]
    first_batch = await tso.alloc(1000)
    assert seen == sorted(set(seen)) and first_batch > seen[-1]
    assert abs(physical_ms(seen[0]) - now_ms()) < 5000
    # A restart (new allocator on the same key) never goes back, even within the saved window.
    tso2 = GlobalTSOAllocator(kv, "tso", save_window_ms=50)
    await tso2.initialize()
    assert await tso2.alloc() > first_batch + 999


async def test_tso_concurrent_allocs_unique(kv):
    tso = GlobalTSOAllocator(kv, "tso2")
    await tso.initialize()
    got = await asyncio.gather(*(tso.alloc(3) for _ in range(100)))
    ranges = sorted(got)
    assert all(b - a >= 3 for a, b in itertools.pairwise(ranges))


async def test_sessions_come_and_go(kv):
    s1 = Session(kv, "datanode", "127.0.0.1:1", ttl=2)
    await s1.register()
    seen = []

    async def watch():
        async for kind, sid, _info in watch_sessions(kv, "datanode"):
            seen.append((kind, sid))
            if kind == "del":
                return

    task = asyncio.create_task(watch())
    s2 = Session(kv, "datanode", "127.0.0.1:2", ttl=2)
    await s2.register()
    assert s1.server_id != s2.server_id
    assert set(await list_sessions(kv, "datanode")) == {s1.server_id, s2.server_id}
    await s2.stop()
    await asyncio.wait_for(task, 5)
    assert ("add", s1.server_id) in seen and ("del", s2.server_id) in seen
    await s1.stop()
    assert await list_sessions(kv, "datanode") == {}


async def test_session_expires_when_keepalive_stops(kv):
    s = Session(kv, "proxy", "127.0.0.1:3", ttl=1)
    await s.register()
    s._keeper.stop()  # the process "dies": nobody refreshes the lease

    async def expired() -> bool:
        return await list_sessions(kv, "proxy") == {}

    await eventually(expired, 6, "the session to expire with its lease")


async def test_leader_lock_is_held_by_one_process_at_a_time(kv):
    from kmilvus.sessionutil.leader import LeaderLock

    a, b = LeaderLock(kv, "coordinators", ttl=1), LeaderLock(kv, "coordinators", ttl=1)
    await a.acquire()
    waiter = asyncio.create_task(b.acquire(poll=0.05))
    await asyncio.sleep(0.5)  # ten of b's polls: none may take the lock a holds
    assert not waiter.done()  # b waits while a holds it
    await a.release()
    await asyncio.wait_for(waiter, 5)  # then b gets it
    # A holder that dies (no more keepalives) loses the lock when its lease expires.
    b._keeper.stop()
    c = LeaderLock(kv, "coordinators", ttl=1)
    await asyncio.wait_for(c.acquire(poll=0.05), 10)
    await c.release()


async def test_a_paused_leader_steps_down_and_its_fenced_writes_fail(kv):
    """A leader paused past its lease (no keepalives, as under SIGSTOP) is
    refused every write once it resumes, and steps down."""
    from kmilvus.meta import FencedError
    from kmilvus.sessionutil.leader import LeaderLock

    a = LeaderLock(kv, "rootcoord", "datacoord", ttl=1)
    await a.acquire()
    fenced_a = a.fenced(kv)
    await fenced_a.put("k", b"from-a")  # the leader writes while it holds the lock
    assert await kv.get("k") == b"from-a"
    a._keeper.stop()  # "SIGSTOP": no keepalive any more
    b = LeaderLock(kv, "rootcoord", "datacoord", ttl=1)
    await asyncio.wait_for(b.acquire(poll=0.05), 10)  # the lease expired: a standby takes over
    assert not a.valid()
    for write in (
        fenced_a.put("k", b"stale"),
        fenced_a.delete("k"),
        fenced_a.delete_prefix(""),
        fenced_a.txn([Op.put("k", b"stale")]),
    ):
        with pytest.raises(FencedError):
            await write
    assert await kv.get("k") == b"from-a"
    await b.fenced(kv).put("k", b"from-b")
    assert await kv.get("k") == b"from-b"
    await b.release()


async def test_fenced_writes_are_refused_by_etcd_when_another_process_holds_the_key(kv):
    """Even when the local deadline has not passed yet (clock skew, a long GC pause right after a
    renewal), etcd itself refuses the write: the transaction compares the leader key."""
    from kmilvus.meta import FencedError
    from kmilvus.sessionutil.leader import LeaderLock

    a = LeaderLock(kv, "datacoord", ttl=5)
    await a.acquire()
    await kv.revoke(a.lease)  # the lease is gone on the server side
    b = LeaderLock(kv, "datacoord", ttl=5)
    await asyncio.wait_for(b.acquire(poll=0.05), 10)
    assert a.valid()  # a does not know yet
    with pytest.raises(FencedError):
        await a.fenced(kv).txn([Op.put("x", b"1")], [Cmp.missing("x")])
    assert await kv.get("x") is None
    # A compare of the caller's own that fails is still an ordinary `False`, not a fencing error.
    fb = b.fenced(kv)
    await fb.put("x", b"1")
    assert await fb.txn([Op.put("x", b"2")], [Cmp.missing("x")]) is False
    await b.release()


async def test_a_leader_whose_lease_expired_sets_lost(kv):
    from kmilvus.sessionutil.leader import LeaderLock

    a = LeaderLock(kv, "querycoord", ttl=1)
    await a.acquire()
    await kv.revoke(a.lease)
    await asyncio.wait_for(a.lost.wait(), 10)
    assert not a.valid()
    await a.release()


async def test_session_whose_lease_expired_is_lost_not_silently_reregistered(kv):
    """A component whose session expired must not come back under the same
    ID on its own; its owner decides (a DataNode drops its channels and gets a new ID)."""
    s = Session(kv, "datanode", "127.0.0.1:4", ttl=1)
    await s.register()
    await kv.revoke(s.lease)
    await asyncio.wait_for(s.lost.wait(), 10)
    await asyncio.sleep(1.0)  # a session that re-registered by itself would be listed by now
    assert await list_sessions(kv, "datanode") == {}
    await s.stop()


async def test_a_busy_event_loop_keeps_its_session_and_its_leader_lock(kv):
    """Found by chaos: a DataNode replaying a multi-million-row backlog kept its event loop busy
    past the session TTL and lost its session with no fault injected, so every replay started
    over. Only a process that is gone or paused may lose its lease: renewals run on their own
    thread, as Milvus renews from a goroutine."""
    import time

    from kmilvus.sessionutil.leader import LeaderLock

    s = Session(kv, "datanode", "127.0.0.1:5", ttl=1)
    await s.register()
    lock = LeaderLock(kv, "indexcoord", ttl=1)
    await lock.acquire()
    time.sleep(3.0)  # noqa: ASYNC251 - the event loop does CPU work for three TTLs without yielding
    await asyncio.sleep(0.5)  # the loop runs again: a loss noticed meanwhile would be set now
    assert not s.lost.is_set() and s.valid()
    assert s.server_id in await list_sessions(kv, "datanode")
    assert not lock.lost.is_set() and lock.valid()
    assert await kv.get("leader/indexcoord") == lock.identity
    await lock.release()
    await s.stop()


async def test_an_internal_call_to_a_peer_that_never_answers_ends_at_its_deadline(kv):
    """A chaos run hung for good in an admin call through a Proxy during a coordinator failover:
    internal calls had no deadline, so a peer that accepts the connection and never answers (a
    stuck process, a reused port) held the caller — and its client — forever."""
    import socket

    import grpc
    from pymilvus.grpc_gen import milvus_pb2

    from kmilvus.components import RemoteClient
    from kmilvus.proto import root_coord_pb2_grpc

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen()  # accepts TCP, never speaks HTTP/2
    s = Session(kv, "rootcoord", f"127.0.0.1:{mute.getsockname()[1]}", ttl=5)
    await s.register()
    client = RemoteClient(kv, "rootcoord", root_coord_pb2_grpc.RootCoordStub, retries=1, deadline=1.0)
    try:
        async with asyncio.timeout(20):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.HasCollection(milvus_pb2.HasCollectionRequest(collection_name="c"))
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        await client.close()
        await s.stop()
        mute.close()
