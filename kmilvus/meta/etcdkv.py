"""A small typed layer over aetcd, rooted at a prefix.

Every multi-key metadata change goes through `txn()` — one etcd transaction with compares — so
no reader ever sees half a change and a crash never leaves one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd
import aetcd.client
import aetcd.rtypes
import grpc
from aetcd import rpc as etcdrpc
from aetcd.client import _handle_errors as _aetcd_handle_errors
from aetcd.utils import prefix_range_end

from kmilvus.log import get_logger
from kmilvus.util import merr
from kmilvus.util.failpoint import failpoint
from kmilvus.util.retry import Backoff
from kmilvus.util.tasks import stopping

log = get_logger(__name__)
T = TypeVar("T")
_F = TypeVar("_F", bound=Callable[..., Any])
# aetcd's mapping of gRPC errors to its exceptions (aetcd has no types); it keeps the signature.
_handle_errors: Callable[[_F], _F] = _aetcd_handle_errors


@dataclass(frozen=True, slots=True)
class Op:
    """One write inside a transaction: put, delete, or delete everything under a prefix."""

    kind: str  # "put" | "delete" | "delete_prefix"
    key: str
    value: bytes = b""
    lease: int | None = None

    @staticmethod
    def put(key: str, value: bytes, lease: int | None = None) -> Op:
        return Op("put", key, value, lease)

    @staticmethod
    def delete(key: str) -> Op:
        return Op("delete", key)

    @staticmethod
    def delete_prefix(prefix: str) -> Op:
        return Op("delete_prefix", prefix)


@dataclass(frozen=True, slots=True)
class Cmp:
    """A transaction guard on one key."""

    kind: str  # "value" | "missing" | "exists" | "mod_rev"
    key: str
    value: bytes | int = b""

    @staticmethod
    def value_eq(key: str, value: bytes) -> Cmp:
        return Cmp("value", key, value)

    @staticmethod
    def missing(key: str) -> Cmp:
        return Cmp("missing", key)

    @staticmethod
    def exists(key: str) -> Cmp:
        return Cmp("exists", key)

    @staticmethod
    def mod_revision(key: str, rev: int) -> Cmp:
        return Cmp("mod_rev", key, rev)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Keys read together at one etcd revision (`EtcdKV.snapshot`)."""

    revision: int
    values: dict[str, bytes]  # relative key → value, for every key found

    def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def under(self, prefix: str) -> list[tuple[str, bytes]]:
        return sorted((k, v) for k, v in self.values.items() if k.startswith(prefix))


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: str  # "put" | "delete"
    key: str  # relative to the KV root
    value: bytes
    revision: int


class FencedError(merr.MilvusError):
    """A write refused because this process no longer holds the leader lock it is fenced on."""

    def __init__(self, message: str):
        super().__init__(merr.SERVICE_NOT_READY, message)


@dataclass(frozen=True, slots=True)
class _Fence:
    key: bytes  # absolute etcd key of the leader lock
    value: bytes  # this holder's identity


class _TLSClient(aetcd.Client):  # type: ignore[misc]  # aetcd has no types: its Client is Any
    """aetcd (1.x) opens only plaintext channels: this one opens a TLS channel to etcd (with a
    client certificate when given), and keeps aetcd's authentication and stubs as they are."""

    def __init__(self, tls: tuple[str, str, str], **kwargs: Any):
        super().__init__(**kwargs)
        cert, key, ca = (_read(p) if p else None for p in tls)
        self._credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        self.channel = grpc.aio.secure_channel(target, self._credentials, options=list(self._options.items()))
        if self._username is not None:
            auth = etcdrpc.AuthStub(self.channel)
            resp = await auth.Authenticate(
                etcdrpc.AuthenticateRequest(name=self._username, password=self._password), timeout=self._timeout
            )
            self.metadata = (("token", resp.token),)
        self.kvstub = etcdrpc.KVStub(self.channel)
        self.clusterstub = etcdrpc.ClusterStub(self.channel)
        self.leasestub = etcdrpc.LeaseStub(self.channel)
        self.maintenancestub = etcdrpc.MaintenanceStub(self.channel)
        self._watcher = aetcd.client.watcher.Watcher(
            etcdrpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
        )
        self._connected.set()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class EtcdKV:
    """Keys are relative to `root` (e.g. "kmilvus/meta"); values are bytes."""

    def __init__(self, client: aetcd.Client, root: str, fence: _Fence | None = None):
        self.client = client
        self.root = root.rstrip("/")
        self._prefix = self.root + "/"
        self._fence = fence

    @classmethod
    async def connect(
        cls,
        endpoints: list[str],
        root: str,
        *,
        timeout: float = 10.0,
        user: str = "",
        password: str = "",
        tls: tuple[str, str, str] | None = None,
    ) -> EtcdKV:
        """`user`/`password`: etcd authentication; `tls`: (client cert, key, CA) PEM paths for an
        etcd serving https (cert and key may be empty when etcd does not require client certs)."""
        host, _, port = endpoints[0].removeprefix("http://").removeprefix("https://").partition(":")
        kwargs: dict[str, Any] = {
            "host": host or "127.0.0.1",
            "port": int(port or 2379),
            "timeout": timeout,
            "options": {"grpc.max_receive_message_length": 64 * 1024 * 1024},
        }
        if user:
            kwargs.update(username=user, password=password)
        client = _TLSClient(tls, **kwargs) if tls else aetcd.Client(**kwargs)
        await client.connect()
        return cls(client, root)

    async def close(self) -> None:
        await self.client.close()

    def sub(self, root: str) -> EtcdKV:
        """The same connection rooted further down (and fenced the same way)."""
        return EtcdKV(self.client, f"{self._prefix}{root}", self._fence)

    def fenced(self, key: str, value: bytes) -> EtcdKV:
        """This KV, with every write applied only while `key` holds `value` (a leader lock);
        otherwise the write raises FencedError and changes nothing. etcd decides, in the same
        transaction as the write: no local clock is trusted."""
        return EtcdKV(self.client, self.root, _Fence(self._k(key), value))

    def _k(self, key: str) -> bytes:
        return (self._prefix + key).encode()

    def _rel(self, raw: bytes) -> str:
        return raw.decode()[len(self._prefix) :]

    async def get(self, key: str) -> bytes | None:
        r = await self.client.get(self._k(key))
        return None if r is None else r.value

    async def get_with_rev(self, key: str) -> tuple[bytes | None, int]:
        r = await self.client.get(self._k(key))
        return (None, 0) if r is None else (r.value, r.mod_revision)

    async def get_prefix(self, prefix: str, *, keys_only: bool = False) -> list[tuple[str, bytes]]:
        r = await self.client.get_prefix(self._k(prefix), sort_target="key", keys_only=keys_only)
        return [(self._rel(kv.key), kv.value) for kv in r]

    async def count_prefix(self, prefix: str) -> int:
        return len(await self.get_prefix(prefix, keys_only=True))

    async def put(self, key: str, value: bytes, lease: int | None = None) -> None:
        if self._fence is not None:
            await self.txn([Op.put(key, value, lease)])
            return
        await self.client.put(self._k(key), value, lease=lease)

    async def delete(self, key: str) -> None:
        if self._fence is not None:
            await self.txn([Op.delete(key)])
            return
        await self.client.delete(self._k(key))

    async def delete_prefix(self, prefix: str) -> None:
        if self._fence is not None:
            await self.txn([Op.delete_prefix(prefix)])
            return
        await self.client.delete_prefix(self._k(prefix))

    async def txn(self, ops: Iterable[Op], compares: Iterable[Cmp] = ()) -> bool:
        """Apply all `ops` atomically iff every compare holds; returns whether it applied.

        On a fenced KV the leader key is one more compare; when that one fails, FencedError."""
        req = self._fenced_request()
        for c in compares:
            cmp = req.compare.add()
            cmp.key = self._k(c.key)
            if c.kind == "value":
                cmp.target, cmp.result, cmp.value = etcdrpc.Compare.VALUE, etcdrpc.Compare.EQUAL, c.value
            elif c.kind == "missing":
                cmp.target, cmp.result, cmp.version = etcdrpc.Compare.VERSION, etcdrpc.Compare.EQUAL, 0
            elif c.kind == "exists":
                cmp.target, cmp.result, cmp.version = etcdrpc.Compare.VERSION, etcdrpc.Compare.GREATER, 0
            elif c.kind == "mod_rev":
                cmp.target, cmp.result, cmp.mod_revision = etcdrpc.Compare.MOD, etcdrpc.Compare.EQUAL, int(c.value)
            else:
                raise ValueError(c.kind)
        for op in ops:
            ro = req.success.add()
            if op.kind == "put":
                ro.request_put.key = self._k(op.key)
                ro.request_put.value = op.value
                if op.lease:
                    ro.request_put.lease = op.lease
            elif op.kind == "delete":
                ro.request_delete_range.key = self._k(op.key)
            elif op.kind == "delete_prefix":
                ro.request_delete_range.key = self._k(op.key)
                ro.request_delete_range.range_end = prefix_range_end(self._k(op.key))
            else:
                raise ValueError(op.kind)
        resp = await self._txn(req)
        self._check_fence(resp)
        return bool(resp.succeeded)

    async def commit(self, ops: Iterable[Op], compares: Iterable[Cmp] = (), *, proof: str, name: str) -> bool:
        """`txn` for a commit whose outcome must be known. When etcd's answer is lost (the
        connection dropped or timed out after the request went out) the transaction may or may
        not have applied, and acting on either guess loses data (cleaning up files it registered,
        or treating as done what is not). So the outcome is read back: `proof` is the key of one
        put in `ops` whose value nothing else writes; etcd holding that value means it applied.
        Otherwise the commit is sent again (its compares make a repeat safe), until etcd answers.
        FencedError and a refusal by the compares are answered as `txn` answers them."""
        ops, compares = list(ops), list(compares)
        expected = next(op.value for op in ops if op.kind == "put" and op.key == proof)
        backoff = Backoff(0.1, 2.0)
        uncertain = False
        while True:
            try:
                applied = await self.txn(ops, compares)
                failpoint(f"{name}.answer_lost")  # tests: it applied, and its answer is lost
            except FencedError:
                raise
            except (Exception, asyncio.CancelledError) as exc:
                if stopping(exc):
                    raise
                log.warning("commit outcome unknown: reading it back", commit=name, error=repr(exc))
                uncertain = True
                if await self._read_back(proof, backoff) == expected:
                    return True
                await backoff.sleep()
                continue
            if applied or not uncertain:
                return applied
            # Refused after a lost answer: the lost attempt may be what changed the compared keys.
            return await self._read_back(proof, backoff) == expected

    async def _read_back(self, key: str, backoff: Backoff) -> bytes | None:
        """`get`, retried until etcd answers."""
        while True:
            try:
                return await self.get(key)
            except Exception as exc:  # noqa: BLE001 - etcd away: the outcome is still unknown
                log.warning("reading a commit's outcome failed; retrying", key=key, error=repr(exc))
                await backoff.sleep()

    async def snapshot(self, keys: Iterable[str] = (), prefixes: Iterable[str] = ()) -> Snapshot:
        """`keys` and everything under `prefixes`, read at ONE revision (one transaction). On a
        fenced KV the read is fenced like a write: it answers only while this process holds the
        lock (else FencedError), so a decision taken from it is the leader's, on what etcd said
        at that revision — not on a memory that a successor may have made stale."""
        req = self._fenced_request()
        for key in keys:
            req.success.add().request_range.key = self._k(key)
        for prefix in prefixes:
            rng = req.success.add().request_range
            rng.key = self._k(prefix)
            rng.range_end = prefix_range_end(self._k(prefix))
        resp = await self._txn(req)
        self._check_fence(resp)
        values = {self._rel(kv.key): kv.value for r in resp.responses for kv in r.response_range.kvs}
        return Snapshot(int(resp.header.revision), values)

    def _fenced_request(self) -> etcdrpc.TxnRequest:
        """A transaction that applies only while the fence (if any) holds; when it does not,
        its failure branch reads the leader key, for `_check_fence`."""
        req = etcdrpc.TxnRequest()
        fence = self._fence
        if fence is not None:
            cmp = req.compare.add()
            cmp.key, cmp.target, cmp.result, cmp.value = (
                fence.key,
                etcdrpc.Compare.VALUE,
                etcdrpc.Compare.EQUAL,
                fence.value,
            )
            req.failure.add().request_range.key = fence.key
        return req

    def _check_fence(self, resp: etcdrpc.TxnResponse) -> None:
        fence = self._fence
        if not resp.succeeded and fence is not None:
            kvs = resp.responses[0].response_range.kvs
            if not kvs or kvs[0].value != fence.value:
                raise FencedError(f"not the leader any more ({fence.key.decode()})")

    @_handle_errors
    async def _txn(self, req: etcdrpc.TxnRequest) -> etcdrpc.TxnResponse:
        # aetcd's own transaction() rebuilds ops from its own types and cannot express a
        # prefix delete; the raw request can, with aetcd's connection and error mapping.
        c = self.client
        await c.connect()
        return await c.kvstub.Txn(req, timeout=c._timeout, metadata=c.metadata)

    async def multi_save_and_remove(
        self,
        saves: dict[str, bytes],
        removals: Iterable[str] = (),
        remove_prefixes: Iterable[str] = (),
        compares: Iterable[Cmp] = (),
    ) -> bool:
        ops = [Op.put(k, v) for k, v in saves.items()]
        ops += [Op.delete(k) for k in removals]
        ops += [Op.delete_prefix(p) for p in remove_prefixes]
        return await self.txn(ops, compares)

    async def watch_prefix(self, prefix: str, start_revision: int | None = None) -> AsyncIterator[WatchEvent]:
        """Events under `prefix`, from `start_revision` (inclusive) when given."""
        watch = await self.client.watch_prefix(self._k(prefix), start_revision=start_revision)
        try:
            async for ev in watch:
                kind = "delete" if ev.kind == aetcd.rtypes.EventKind.DELETE else "put"
                yield WatchEvent(kind, self._rel(ev.kv.key), ev.kv.value or b"", ev.kv.mod_revision)
        finally:
            await watch.cancel()

    async def revision(self) -> int:
        """The store's current revision (for watching from a consistent snapshot)."""
        r = await self.client.get_prefix(self._k(""), keys_only=True)
        return int(r.header.revision)

    # Leases -----------------------------------------------------------------------------
    async def grant(self, ttl: int) -> int:
        lease = await self.client.lease(ttl)
        return int(lease.id)

    async def keepalive(self, lease_id: int) -> int:
        """Refresh a lease; returns its remaining TTL (≤ 0: the lease is gone)."""
        reply = await self.client.refresh_lease(lease_id)
        return int(reply.TTL) if reply is not None else 0

    async def revoke(self, lease_id: int) -> None:
        await self.client.revoke_lease(lease_id)

    def blocking_lease(self) -> BlockingLease:
        """A blocking connection to the same etcd (address, TLS, credentials) for renewing leases
        from a thread of their own."""
        c = self.client
        return BlockingLease(
            f"{c._host}:{c._port}",
            getattr(c, "_credentials", None),
            c._username or "",
            c._password or "",
            c._timeout or 10.0,
        )


class BlockingLease:
    """Lease renewals over a blocking gRPC channel. The asyncio client lives on its event loop,
    so a loop kept busy past a lease's TTL (a DataNode draining a backlog) would let the lease
    expire although the process is alive; a thread renewing over this channel does not wait for
    the loop (gRPC releases the GIL while it waits on the network)."""

    def __init__(
        self, target: str, credentials: grpc.ChannelCredentials | None, user: str, password: str, timeout: float
    ):
        self._channel = grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
        self._stub = etcdrpc.LeaseStub(self._channel)
        self._auth = etcdrpc.AuthStub(self._channel) if user else None
        self._user, self._password, self._timeout = user, password, timeout
        self._metadata: tuple[tuple[str, str], ...] | None = None

    def refresh(self, lease_id: int) -> int:
        """Refresh a lease; returns its remaining TTL (≤ 0: the lease is gone)."""
        if self._auth is not None and self._metadata is None:
            req = etcdrpc.AuthenticateRequest(name=self._user, password=self._password)
            self._metadata = (("token", self._auth.Authenticate(req, timeout=self._timeout).token),)
        try:
            for reply in self._stub.LeaseKeepAlive(
                iter([etcdrpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self._timeout, metadata=self._metadata
            ):
                return int(reply.TTL)
            return 0
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT):
                self._metadata = None  # an expired auth token: authenticate again next time
            raise

    def close(self) -> None:
        self._channel.close()


async def retrying(
    fn: Callable[..., Awaitable[T]], *args: Any, attempts: int = 50, delay: float = 0.05, **kwargs: Any
) -> T:
    """Retry an idempotent etcd call through transient connection errors (the last one raises)."""
    for _ in range(attempts - 1):
        try:
            return await fn(*args, **kwargs)
        except (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError):
            await asyncio.sleep(delay)
    return await fn(*args, **kwargs)
