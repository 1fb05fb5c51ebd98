"""gRPC plumbing shared by every component.

A component object is its own servicer: its RPC methods are `async def Name(self, request,
context=None)`. In one process a caller holds the object itself; across processes it holds a
`RemoteClient`, whose methods have the same shape. Callers never know which.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any, Callable

import grpc

from kmilvus import metrics
from kmilvus.log import get_logger
from kmilvus.meta import EtcdKV
from kmilvus.sessionutil import list_sessions

log = get_logger(__name__)

MAX_MESSAGE = 512 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.so_reuseport", 0),
]


async def start_server(host: str, port: int, registrations: list[tuple[Callable, Any]]) -> tuple[grpc.aio.Server, int]:
    """Serve `servicer`s (each with its generated add_*_to_server) on host:port (0 = free port)."""
    server = grpc.aio.server(options=CHANNEL_OPTIONS, interceptors=[AnswerUnimplemented()])
    for add, servicer in registrations:
        add(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    return server, bound


class AnswerUnimplemented(grpc.aio.ServerInterceptor):
    """UNIMPLEMENTED is a normal answer for an RPC kmilvus does not have: one debug line and a
    metric, not the error-level traceback grpc logs for the generated stub's NotImplementedError.

    Implemented methods are `async def` (merr.rpc); the generated base class' placeholders are
    plain functions, so only those are wrapped (once per method)."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is not None and handler.unary_unary is not None \
                and not inspect.iscoroutinefunction(handler.unary_unary):
            handler = grpc.unary_unary_rpc_method_handler(
                _answer_unimplemented(handler.unary_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler is not None:
            self._handlers[method] = handler
        return handler


def _answer_unimplemented(placeholder: Callable, method: str):
    async def call(request, context):
        try:
            return placeholder(request, context)
        except NotImplementedError:
            log.debug("unimplemented rpc called", method=method)
            metrics.RPC_UNIMPLEMENTED.labels(method).inc()
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")

    return call


class RemoteClient:
    """A gRPC stub for a component found by its session; re-resolves when the peer moves.

    `server_id` pins one instance (a given DataNode or Proxy); without it, the newest session of
    the role is used (coordinators run one active instance).
    """

    def __init__(self, kv: EtcdKV, role: str, stub_cls: type, *, server_id: int | None = None,
                 address: str | None = None, retries: int = 30):
        self.kv = kv
        self.role = role
        self.stub_cls = stub_cls
        self.server_id = server_id
        self.address = address
        self.retries = retries
        self._channel: grpc.aio.Channel | None = None
        self._stub = None
        self._lock = asyncio.Lock()

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

    async def _get_stub(self):
        async with self._lock:
            if self._stub is None:
                addr = self.address or await self._resolve()
                self._channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
                self._stub = self.stub_cls(self._channel)
            return self._stub

    async def _reset(self) -> None:
        async with self._lock:
            if self._channel is not None:
                await self._channel.close()
            self._channel, self._stub = None, None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        async def call(request, context=None, timeout: float | None = None):
            for attempt in range(self.retries):
                stub = await self._get_stub()
                try:
                    return await getattr(stub, name)(request, timeout=timeout)
                except grpc.aio.AioRpcError as err:
                    if err.code() not in (grpc.StatusCode.UNAVAILABLE,) or attempt == self.retries - 1:
                        raise
                    log.info("peer unavailable; re-resolving", role=self.role, rpc=name)
                    await self._reset()
                    await asyncio.sleep(min(0.05 * (attempt + 1), 1.0))
            raise AssertionError("unreachable")

        return call

    async def stream(self, name: str, request) -> AsyncIterator[Any]:
        """A server-streaming RPC's messages. Not retried: a broken stream raises, and the caller
        resubscribes (the next call re-resolves an unavailable peer)."""
        stub = await self._get_stub()
        try:
            async for msg in getattr(stub, name)(request):
                yield msg
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:
                await self._reset()
            raise

    async def close(self) -> None:
        await self._reset()
