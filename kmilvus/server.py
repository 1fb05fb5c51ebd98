"""A kmilvus process: some set of components sharing one etcd connection, one JetStream
connection, one object store and one internal gRPC server.

`kmilvus standalone` runs all five; `kmilvus run ROLE` runs one; the operator runs the three
coordinators. Components register sessions so the others find them wherever they run.

Coordinators run only in the process that holds their leader lock (`leader/{role}` in etcd);
another process started with the same roles waits as a standby and takes over when the lease
of the active one expires. The active coordinators write etcd only through a KV fenced on that
lock, so a leader that was paused past its lease cannot change anything when it resumes: it
steps down (`Node.lost`) and the process exits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine
from typing import Any, cast

import grpc
from pymilvus.grpc_gen import milvus_pb2_grpc

from kmilvus import components as roles
from kmilvus import types
from kmilvus.config import Config
from kmilvus.datacoord import DataCoord
from kmilvus.datanode import DataNode
from kmilvus.indexnode.index_node import IndexNode
from kmilvus.log import enable_audit, get_logger
from kmilvus.meta import EtcdKV
from kmilvus.msgstream import MsgStream
from kmilvus.proxy import Proxy
from kmilvus.proxy.databases import DatabaseInterceptor
from kmilvus.proxy.httpserver import RestfulServer
from kmilvus.proxy.privilege import SecurityInterceptor
from kmilvus.querycoord import QueryCoord
from kmilvus.querynode import QueryNode
from kmilvus.rootcoord import RootCoord
from kmilvus.sessionutil import Session
from kmilvus.sessionutil.leader import LeaderLock
from kmilvus.sessionutil.session import next_server_id
from kmilvus.spark.runner import JobRunner
from kmilvus.storage import ObjectStore
from kmilvus.util.grpcutil import ChannelTLS, server_credentials, start_server
from kmilvus.util.retry import Backoff

log = get_logger(__name__)
ALL_ROLES = (
    roles.ROOTCOORD,
    roles.DATACOORD,
    roles.QUERYCOORD,
    roles.DATANODE,
    roles.INDEXNODE,
    roles.QUERYNODE,
    roles.PROXY,
)
COORDINATORS = (roles.ROOTCOORD, roles.DATACOORD, roles.QUERYCOORD)


class Node:
    def __init__(self, cfg: Config, role_names: tuple[str, ...], *, job_runner: JobRunner | None = None):
        """`job_runner`: how DataCoord runs Spark jobs (default: local spark-submit); the operator
        passes one that creates SparkApplication resources, before DataCoord resumes its jobs."""
        self.job_runner = job_runner
        unknown = set(role_names) - set(ALL_ROLES)
        if unknown:
            raise ValueError(f"unknown role(s): {', '.join(sorted(unknown))}")
        self.cfg = cfg
        self.role_names = [r for r in ALL_ROLES if r in role_names]  # start order
        self.kv: EtcdKV | None = None
        self.stream: MsgStream | None = None
        self.store: ObjectStore | None = None
        self.registry: roles.Registry | None = None
        self.components: dict[str, types.Component] = {}
        self.sessions: list[Session] = []
        self.internal_server: grpc.aio.Server | None = None
        self.api_server: grpc.aio.Server | None = None
        self.api_port = 0
        self.http_server: RestfulServer | None = None
        self.http_port = 0  # the RESTful API's (0 while it is not served)
        self.internal_port = 0
        self.leader: LeaderLock | None = None
        self.lost = asyncio.Event()  # set when the coordinators stepped down
        self._coord_kv: EtcdKV | None = None
        self._supervisors: set[asyncio.Task[None]] = set()

    @property
    def proxy(self) -> Proxy | None:
        return cast(Proxy | None, self.components.get(roles.PROXY))

    async def start(self) -> None:
        cfg = self.cfg
        cfg.check_security(runs_rootcoord=roles.ROOTCOORD in self.role_names)
        if cfg.auth or cfg.audit_log:
            enable_audit()
        t0 = time.monotonic()
        self.kv = await EtcdKV.connect(cfg.etcd_endpoints, f"{cfg.cluster}/meta", **cfg.etcd_options())
        self.stream = await MsgStream.connect(
            cfg.nats_url, cfg.cluster, max_message_bytes=cfg.max_message_bytes, **cfg.nats_options()
        )
        self.stream.idle_tick_interval = cfg.vchannel_idle_tick_interval
        self.store = ObjectStore.from_uri(cfg.storage_uri)
        internal_tls = None
        if cfg.internal_tls_ca:
            internal_tls = ChannelTLS(
                cfg.internal_tls_cert, cfg.internal_tls_key, cfg.internal_tls_ca, cfg.internal_tls_server_name
            )
        self.registry = roles.Registry(self.kv, internal_tls)
        coordinators = [r for r in self.role_names if r in COORDINATORS]
        if coordinators:
            self.leader = LeaderLock(self.kv, *coordinators, ttl=cfg.session_ttl)
            await self.leader.acquire()
            self._coord_kv = self.leader.fenced(self.kv)
            self._supervise(self._on_leader_lost(), "leader-watch")
        ids = {r: await next_server_id(self.kv) for r in self.role_names}
        # The internal server goes up first with every servicer; components answer once started.
        objs: dict[str, types.Component] = {}
        for r in self.role_names:
            objs[r] = self._make(r, ids[r])
        self.internal_server, self.internal_port = await start_server(
            cfg.internal_host,
            0,
            [(roles.STUBS[r][1], objs[r]) for r in self.role_names],
            credentials=internal_tls.server_credentials() if internal_tls else None,
        )
        address = f"{cfg.internal_host}:{self.internal_port}"
        for r in self.role_names:
            comp = objs[r]
            if isinstance(comp, RootCoord | DataCoord | QueryCoord) and self.leader is not None:
                comp.leader_check = self.leader.still_valid
            self.registry.add_local(r, ids[r], comp)
            await comp.start()
            session = Session(self.kv, r, address, ttl=cfg.session_ttl, server_id=ids[r])
            await session.register()
            self.sessions.append(session)
            if isinstance(comp, Proxy | IndexNode):
                comp.session_valid = session.still_valid
            self._supervise(self._on_session_lost(r, session), f"session-watch-{r}")
            self.components[r] = comp
            log.info("component started", role=r, server_id=ids[r])
        if (proxy := self.proxy) is not None:
            self.api_server, self.api_port = await start_server(
                cfg.proxy_host,
                cfg.proxy_port,
                [(milvus_pb2_grpc.add_MilvusServiceServicer_to_server, proxy)],
                credentials=server_credentials(cfg.tls_cert, cfg.tls_key, cfg.tls_ca),
                # The database first (from the `dbname` header), then the privilege check on it.
                interceptors=[DatabaseInterceptor(), SecurityInterceptor(proxy.security)],
            )
            if cfg.http_port >= 0:
                self.http_server = RestfulServer(proxy, cfg)
                self.http_port = await self.http_server.start(cfg.proxy_host, cfg.http_port)
        log.info("node ready", roles=",".join(self.role_names), seconds=round(time.monotonic() - t0, 3))

    def _supervise(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._supervisors.add(task)
        task.add_done_callback(self._supervisors.discard)

    async def _on_leader_lost(self) -> None:
        """Step down: stop the coordinators (their writes are refused anyway) and tell the
        process to exit."""
        assert self.leader is not None and self.registry is not None  # supervised once both are
        await self.leader.lost.wait()
        for r in reversed(COORDINATORS):
            comp = self.components.pop(r, None)
            if comp is not None:
                # Its writes are refused by now (fenced): stopping may fail, and is logged.
                await _best_effort(asyncio.wait_for(comp.stop(), 5), f"stop {r} after losing the lock")
                self.registry.remove_local(r, comp.server_id)
        self.lost.set()

    async def _on_session_lost(self, role: str, session: Session) -> None:
        """A lost session means the others think this component is gone. A DataNode gives up
        every channel (they were reassigned and are replayed from their checkpoints) and comes
        back under a new server ID; other components register again as they are."""
        await session.lost.wait()
        comp = self.components.get(role)
        if comp is None:
            return
        if isinstance(comp, DataNode | QueryNode | IndexNode):
            # Whatever goes wrong dropping, the node must come back under a new ID: a node that
            # stays away holds no channel, and with every DataNode away nothing is flushed. An
            # IndexNode's jobs were assigned again elsewhere meanwhile: it drops its own.
            await _best_effort(comp.drop_all(), f"drop the channels of {role} {comp.server_id}")
        fresh = await self._register_again(role, session, comp)
        if isinstance(comp, Proxy | IndexNode):
            comp.session_valid = fresh.still_valid
        self.sessions[self.sessions.index(session)] = fresh
        self._supervise(self._on_session_lost(role, fresh), f"session-watch-{role}")

    async def _register_again(self, role: str, session: Session, comp: types.Component) -> Session:
        """A new session (a DataNode, IndexNode or QueryNode: under a new ID), retried until etcd answers:
        a session lost during an etcd restart must not leave the component away for good."""
        # start() connected both before any session could be lost.
        kv, registry = cast(EtcdKV, self.kv), cast(roles.Registry, self.registry)
        backoff = Backoff(0.1, 2.0)
        while True:
            try:
                new_id = session.server_id
                if role in (roles.DATANODE, roles.INDEXNODE, roles.QUERYNODE):
                    new_id = await next_server_id(kv)
                    registry.remove_local(role, comp.server_id)
                    comp.server_id = new_id
                    registry.add_local(role, new_id, comp)
                fresh = Session(kv, role, session.address, ttl=self.cfg.session_ttl, server_id=new_id)
                await fresh.register()
                return fresh
            except Exception as exc:  # noqa: BLE001 - etcd away: try again
                log.warning("registering again failed; retrying", role=role, error=repr(exc))
                await backoff.sleep()

    def _make(self, role: str, sid: int) -> types.Component:
        cfg, stream, store, reg = self.cfg, self.stream, self.store, self.registry
        assert self.kv is not None and reg is not None  # start() connected first
        kv = self._coord_kv if role in COORDINATORS and self._coord_kv is not None else self.kv
        if role == roles.ROOTCOORD:
            return RootCoord(cfg, kv, stream, reg, sid)
        if role == roles.DATACOORD:
            dc = DataCoord(cfg, kv, stream, store, reg, sid)
            if self.job_runner is not None:
                dc.set_job_runner(self.job_runner)
            return dc
        if role == roles.QUERYCOORD:
            return QueryCoord(kv, reg, sid)
        if role == roles.DATANODE:
            return DataNode(cfg, stream, store, reg, sid)
        if role == roles.QUERYNODE:
            return QueryNode(cfg, stream, store, reg, sid)
        if role == roles.INDEXNODE:
            return IndexNode(cfg, store, reg, sid)
        return Proxy(cfg, reg, stream, sid)

    async def stop(self) -> None:
        """Stop serving, then components in reverse start order, then connections."""
        for t in list(self._supervisors):
            t.cancel()
        if self.http_server is not None:
            await _best_effort(self.http_server.stop(), "stop the RESTful API")
        if self.api_server is not None:
            await self.api_server.stop(grace=1)
        for r in reversed(list(self.components)):
            await _best_effort(asyncio.wait_for(self.components[r].stop(), 5), f"stop {r}")
        for s in self.sessions:
            await _best_effort(s.stop(), "stop session")
        if self.leader is not None:
            await self.leader.release()
        if self.internal_server is not None:
            await self.internal_server.stop(grace=0.5)
        if self.registry is not None:
            await self.registry.close()
        if self.stream is not None:
            await _best_effort(self.stream.close(), "close stream")
        if self.kv is not None:
            await _best_effort(self.kv.close(), "close etcd")


async def _best_effort(aw: Awaitable[object], what: str) -> None:
    """Shutdown goes on past a step that fails (the rest must still stop); the failure is logged."""
    try:
        await aw
    except Exception:  # logged; stopping continues
        log.warning("shutdown step failed", step=what, exc_info=True)


# Each component class serves its role's Protocol (kmilvus.types): mypy checks these assignments.
_ROOTCOORD: type[types.RootCoordClient] = RootCoord
_DATACOORD: type[types.DataCoordClient] = DataCoord
_QUERYCOORD: type[types.QueryCoordClient] = QueryCoord
_DATANODE: type[types.DataNodeClient] = DataNode
_QUERYNODE: type[types.QueryNodeClient] = QueryNode
_INDEXNODE: type[types.IndexNodeClient] = IndexNode
_PROXY: type[types.ProxyClient] = Proxy
