"""How components reach each other.

Every component registers a session (role, server ID, gRPC address). A caller asks the
`Registry` for a role (and, for DataNodes and Proxies, a server ID): it gets the component object
itself when it lives in this process (no serialization on hot paths in `kmilvus standalone`),
otherwise a `RemoteClient` stub, which finds its peer by the peer's session. Both answer the same
`await x.Method(request)` calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final, Literal, overload

import grpc
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV
from kmilvus.proto import (
    data_coord_pb2_grpc,
    data_node_pb2_grpc,
    index_node_pb2_grpc,
    proxy_pb2_grpc,
    query_coord_pb2_grpc,
    query_node_pb2_grpc,
    root_coord_pb2_grpc,
    security_pb2_grpc,
)
from kmilvus.sessionutil import list_sessions
from kmilvus.types import (
    ComponentClient,
    DataCoordClient,
    DataNodeClient,
    IndexNodeClient,
    ProxyClient,
    QueryCoordClient,
    QueryNodeClient,
    RootCoordClient,
)
from kmilvus.util.grpcutil import CHANNEL_OPTIONS, DEFAULT_DEADLINE, AddServicer, ChannelTLS

log = get_logger(__name__)

# Literal types: `Registry.client(ROOTCOORD)` is a RootCoordClient.
ROOTCOORD: Final = "rootcoord"
DATACOORD: Final = "datacoord"
QUERYCOORD: Final = "querycoord"
DATANODE: Final = "datanode"
PROXY: Final = "proxy"
QUERYNODE: Final = "querynode"
INDEXNODE: Final = "indexnode"


def _with_service(
    stub: type[Any], add: AddServicer, extra_stub: type[Any], extra_add: AddServicer
) -> tuple[type[Any], AddServicer]:
    """A role that serves a second gRPC service (RootCoord's and the Proxy's security RPCs):
    one stub with both services' methods, one registration adding both."""

    def __init__(self: object, channel: grpc.aio.Channel) -> None:
        stub.__init__(self, channel)
        extra_stub.__init__(self, channel)

    combined = type("Combined", (stub, extra_stub), {"__init__": __init__})

    def add_both(servicer: Any, server: grpc.aio.Server) -> None:
        add(servicer, server)
        extra_add(servicer, server)

    return combined, add_both


STUBS: dict[str, tuple[type[Any], AddServicer]] = {
    ROOTCOORD: _with_service(
        root_coord_pb2_grpc.RootCoordStub,
        root_coord_pb2_grpc.add_RootCoordServicer_to_server,
        security_pb2_grpc.RootCoordSecurityStub,
        security_pb2_grpc.add_RootCoordSecurityServicer_to_server,
    ),
    DATACOORD: (data_coord_pb2_grpc.DataCoordStub, data_coord_pb2_grpc.add_DataCoordServicer_to_server),
    QUERYCOORD: (query_coord_pb2_grpc.QueryCoordStub, query_coord_pb2_grpc.add_QueryCoordServicer_to_server),
    DATANODE: (data_node_pb2_grpc.DataNodeStub, data_node_pb2_grpc.add_DataNodeServicer_to_server),
    PROXY: _with_service(
        proxy_pb2_grpc.ProxyStub,
        proxy_pb2_grpc.add_ProxyServicer_to_server,
        security_pb2_grpc.ProxySecurityStub,
        security_pb2_grpc.add_ProxySecurityServicer_to_server,
    ),
    QUERYNODE: (query_node_pb2_grpc.QueryNodeStub, query_node_pb2_grpc.add_QueryNodeServicer_to_server),
    INDEXNODE: (index_node_pb2_grpc.IndexNodeStub, index_node_pb2_grpc.add_IndexNodeServicer_to_server),
}


def healthy(server_id: int, role: str) -> milvus_pb2.ComponentStates:
    """A component's GetComponentStates answer once it has started."""
    st = milvus_pb2.ComponentStates()
    st.state.nodeID, st.state.role, st.state.state_code = server_id, role, common_pb2.Healthy
    return st


class RemoteClient:
    """A gRPC stub for a component found by its session; re-resolves when the peer moves.

    `server_id` pins one instance (a given DataNode or Proxy); without it, the newest session of
    the role is used (coordinators run one active instance).
    """

    def __init__(
        self,
        kv: EtcdKV,
        role: str,
        stub_cls: type,
        *,
        server_id: int | None = None,
        address: str | None = None,
        retries: int = 30,
        tls: ChannelTLS | None = None,
        deadline: float = DEFAULT_DEADLINE,
    ):
        self.kv = kv
        self.role = role
        self.stub_cls = stub_cls
        self.server_id = server_id
        self.address = address
        self.retries = retries
        self.tls = tls
        self.deadline = deadline
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None  # an instance of `stub_cls` (generated, untyped)
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()  # channels dropped, closing once their calls end

    async def _resolve(self) -> str:
        for _ in range(self.retries * 5):
            sessions = await list_sessions(self.kv, self.role)
            if self.server_id is not None:
                info = sessions.get(self.server_id)
            else:
                info = sessions[max(sessions)] if sessions else None
            if info:
                return info.address
            await asyncio.sleep(0.2)
        raise ConnectionError(f"no live {self.role} session")

    async def _get_stub(self) -> Any:
        async with self._lock:
            if self._stub is None:
                addr = self.address or await self._resolve()
                if self.tls is None:
                    self._channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
                else:
                    self._channel = self.tls.channel(addr)
                self._stub = self.stub_cls(self._channel)
            return self._stub

    async def _reset(self, failed: Any = None) -> None:
        """Drop the channel `failed` (a stub) ran on, so the next call re-resolves the peer.
        Calls still running on it finish first: closing a channel outright cancels its calls,
        and a cancelled call surfaces as asyncio.CancelledError in callers whose retry loops
        catch Exception (under chaos a DataNode lost a binlog commit that way)."""
        async with self._lock:
            if failed is not None and failed is not self._stub:
                return  # another caller replaced it already: keep the fresh channel
            old, self._channel, self._stub = self._channel, None, None
        if old is not None:
            task = asyncio.create_task(old.close(grace=self.deadline), name=f"close-{self.role}-channel")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        """RPC `name` of the stub, retried while the peer is unavailable. Its signature is the
        in-process method's (`context` is accepted and ignored), so a RemoteClient stands for the
        component wherever kmilvus.types' Protocols are expected."""
        if name.startswith("_"):
            raise AttributeError(name)

        async def call(request: Any, context: Any = None, timeout: float | None = None) -> Any:
            for attempt in range(self.retries):
                stub = await self._get_stub()
                try:
                    return await getattr(stub, name)(request, timeout=timeout or self.deadline)
                except grpc.aio.AioRpcError as err:
                    if err.code() not in (grpc.StatusCode.UNAVAILABLE,) or attempt == self.retries - 1:
                        raise
                    log.info("peer unavailable; re-resolving", role=self.role, rpc=name)
                    await self._reset(stub)
                    await asyncio.sleep(min(0.05 * (attempt + 1), 1.0))
            raise AssertionError("unreachable")

        return call

    async def stream(self, name: str, request: Any) -> AsyncIterator[Any]:
        """A server-streaming RPC's messages. Not retried: a broken stream raises, and the caller
        resubscribes (the next call re-resolves an unavailable peer)."""
        stub = await self._get_stub()
        try:
            async for msg in getattr(stub, name)(request):
                yield msg
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                await self._reset(stub)
            raise

    async def close(self) -> None:
        """Close now: calls still running are cancelled (the owner is shutting down)."""
        async with self._lock:
            old, self._channel, self._stub = self._channel, None, None
        for task in list(self._closing):
            task.cancel()
        if old is not None:
            await old.close()


class LateBound:
    """A coordinator's client looked up on every call (`Registry.client`): the coordinator
    object itself once it is registered in this process, its `RemoteClient` otherwise. The
    server builds every component before it registers any (kmilvus/server.py), so a client taken in a
    constructor would stay a gRPC round trip over loopback for good, even in `kmilvus standalone`
    (docs/architecture/index.md, "Typed contracts")."""

    def __init__(self, registry: Registry, role: str):
        self._registry = registry
        self._role = role

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._registry.client(self._role), name)


class Registry:
    def __init__(self, kv: EtcdKV, tls: ChannelTLS | None = None):
        self.kv = kv
        self.tls = tls  # internal gRPC over mutual TLS
        self._local: dict[str, dict[int, object]] = {}
        self._remote: dict[tuple[str, int | None], RemoteClient] = {}

    def add_local(self, role: str, server_id: int, component: object) -> None:
        self._local.setdefault(role, {})[server_id] = component

    def remove_local(self, role: str, server_id: int) -> None:
        self._local.get(role, {}).pop(server_id, None)

    @overload
    def client(self, role: Literal["rootcoord"], server_id: int | None = None) -> RootCoordClient: ...
    @overload
    def client(self, role: Literal["datacoord"], server_id: int | None = None) -> DataCoordClient: ...
    @overload
    def client(self, role: Literal["querycoord"], server_id: int | None = None) -> QueryCoordClient: ...
    @overload
    def client(self, role: Literal["datanode"], server_id: int | None = None) -> DataNodeClient: ...
    @overload
    def client(self, role: Literal["querynode"], server_id: int | None = None) -> QueryNodeClient: ...
    @overload
    def client(self, role: Literal["proxy"], server_id: int | None = None) -> ProxyClient: ...
    @overload
    def client(self, role: Literal["indexnode"], server_id: int | None = None) -> IndexNodeClient: ...
    @overload
    def client(self, role: str, server_id: int | None = None) -> ComponentClient: ...
    def client(self, role: str, server_id: int | None = None) -> Any:
        """The component of `role` (the one with `server_id` when given): the object itself when
        it lives in this process, a `RemoteClient` otherwise. Typed by role (kmilvus.types)."""
        local = self._local.get(role, {})
        if server_id is None and local:
            return next(iter(local.values()))
        if server_id is not None and server_id in local:
            return local[server_id]
        key = (role, server_id)
        if key not in self._remote:
            # A pinned node that stops answering is replaced by whoever watches its session, so
            # calls to it fail fast; coordinators are worth waiting for while they restart.
            retries = 3 if server_id is not None else 30
            self._remote[key] = RemoteClient(
                self.kv, role, STUBS[role][0], server_id=server_id, retries=retries, tls=self.tls
            )
        return self._remote[key]

    @overload
    def late(self, role: Literal["rootcoord"]) -> RootCoordClient: ...
    @overload
    def late(self, role: Literal["datacoord"]) -> DataCoordClient: ...
    @overload
    def late(self, role: Literal["querycoord"]) -> QueryCoordClient: ...
    def late(self, role: str) -> Any:
        """The coordinator of `role`, resolved at each call (`LateBound`): for a client kept
        by a component built before the coordinator registers."""
        return LateBound(self, role)

    async def address(self, role: str, server_id: int) -> str:
        """The host of a component's session ("" once it is gone)."""
        info = (await list_sessions(self.kv, role)).get(server_id)
        return info.address.rsplit(":", 1)[0] if info is not None else ""

    @overload
    async def clients(self, role: Literal["datanode"]) -> dict[int, DataNodeClient]: ...
    @overload
    async def clients(self, role: Literal["querynode"]) -> dict[int, QueryNodeClient]: ...
    @overload
    async def clients(self, role: Literal["proxy"]) -> dict[int, ProxyClient]: ...
    @overload
    async def clients(self, role: Literal["indexnode"]) -> dict[int, IndexNodeClient]: ...
    @overload
    async def clients(self, role: str) -> dict[int, ComponentClient]: ...
    async def clients(self, role: str) -> dict[int, Any]:
        """One client per live session of `role`."""
        return {sid: self.client(role, sid) for sid in await list_sessions(self.kv, role)}

    async def close(self) -> None:
        for c in self._remote.values():
            await c.close()
        self._remote.clear()
