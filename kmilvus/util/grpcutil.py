"""gRPC plumbing shared by every component: servers, channel options, mutual TLS.

A component object is its own servicer: its RPC methods are `async def Name(self, request,
context=None)`. In one process a caller holds the object itself; across processes it holds a
`RemoteClient` (kmilvus.components), whose methods have the same shape. Callers never know which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from kmilvus import metrics
from kmilvus.log import get_logger

log = get_logger(__name__)

MAX_MESSAGE = 512 * 1024 * 1024
# Every internal call ends: a peer that accepts the connection and never answers (a stuck process,
# a port some other server reuses) must not hold its caller, and the caller's own client, forever.
# Generous: loading a large segment or index is one call.
DEFAULT_DEADLINE = 300.0
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.so_reuseport", 0),
]
# Clients ping every 10 s (pymilvus, our own channels), also between calls. gRPC's server default
# allows one ping per 5 minutes and answers more with GOAWAY "too_many_pings", dropping the
# connection and failing its calls in flight (which pymilvus then retries: an Insert twice).
# Milvus' servers permit a ping every 5 s, with or without calls; ours one per second.
SERVER_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 1_000),
]


# A generated `add_<Service>Servicer_to_server(servicer, server)` (grpc_tools writes no types).
AddServicer = Callable[[Any, grpc.aio.Server], None]


async def start_server(
    host: str,
    port: int,
    registrations: list[tuple[AddServicer, Any]],
    *,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: list[grpc.aio.ServerInterceptor] | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Serve `servicer`s (each with its generated add_*_to_server) on host:port (0 = free port);
    TLS when `credentials` are given (then a plaintext client is refused)."""
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors or None)
    for add, servicer in registrations:
        answer_unimplemented_quietly(servicer)
        add(servicer, server)
    address = f"{host}:{port}"
    bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    return server, bound


def _generated_servicers(cls: type) -> list[type]:
    """The protoc-generated `*Servicer` base classes of a servicer class."""
    return [b for b in cls.__mro__ if b.__name__.endswith("Servicer") and b.__module__.endswith("_pb2_grpc")]


def implements(servicer: Any, name: str) -> bool:
    """Whether the servicer's class builds RPC `name` (a generated base method is not built)."""
    fn = getattr(type(servicer), name, None)
    if fn is None:
        return False
    return not any(vars(base).get(name) is fn for base in _generated_servicers(type(servicer)))


def answer_unimplemented_quietly(servicer: Any) -> None:
    """Answer every RPC the servicer does not implement with UNIMPLEMENTED, logged as one debug
    line and counted (`kmilvus_rpc_unimplemented_total`).

    The generated base methods raise NotImplementedError, which grpc.aio logs as an error with a
    traceback; an RPC kmilvus has not built is a normal answer, not a server fault. Instance
    attributes shadow the base methods, so the class itself is left alone.
    """

    role = getattr(servicer, "role", type(servicer).__name__)
    for base in _generated_servicers(type(servicer)):
        for name, fn in vars(base).items():
            if name.startswith("_") or not callable(fn) or getattr(type(servicer), name) is not fn:
                continue

            async def unimplemented(
                request: Any, context: grpc.aio.ServicerContext[Any, Any], _method: str = name
            ) -> None:
                metrics.RPC_UNIMPLEMENTED.labels(role, _method).inc()
                log.debug("unimplemented rpc", role=role, rpc=_method)
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"kmilvus does not implement {_method} yet")

            setattr(servicer, name, unimplemented)


class ChannelTLS:
    """Mutual TLS for internal gRPC: every component presents its certificate and accepts only
    peers whose certificate the CA signed. Internal addresses are pod IPs that change, so the
    certificate is checked against one `server_name` (a SAN of the components' certificate)."""

    def __init__(self, cert: str, key: str, ca: str, server_name: str = ""):
        with open(cert, "rb") as c, open(key, "rb") as k, open(ca, "rb") as a:
            self.cert, self.key, self.ca = c.read(), k.read(), a.read()
        self.server_name = server_name

    def channel(self, address: str) -> grpc.aio.Channel:
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )
        options: list[tuple[str, str | int]] = list(CHANNEL_OPTIONS)
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        return grpc.aio.secure_channel(address, creds, options=options)

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True)


def server_credentials(cert: str, key: str, ca: str = "") -> grpc.ServerCredentials | None:
    """TLS for a server from PEM files: one-way with cert+key, mutual (client certificate signed
    by `ca` required) when `ca` is set; None when no certificate is configured."""
    if not cert:
        return None

    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    return grpc.ssl_server_credentials(
        [(read(key), read(cert))], root_certificates=read(ca) if ca else None, require_client_auth=bool(ca)
    )
