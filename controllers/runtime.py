"""The operator's process-wide state: the coordinators (a kmilvus Node with RootCoord, DataCoord
and QueryCoord), the Kubernetes client, and the background loops that run while this replica is
the active one.

Only one replica may run the coordinators: two RootCoords would hand out the same timestamps.
kopf's peering decides which replica is active (the others are paused); `acquire()` /
`release()` follow it (see `controllers.leader`), and before starting, a new leader waits until
the previous leader's coordinator sessions have left etcd. Handlers reach the coordinators with
`await runtime.coordinators()`, which waits a bounded time and otherwise asks kopf to retry, and
returns their facade (`kmilvus.coordinator.CoordinatorClient`): the controllers use its public
calls and its segment change feed, never a coordinator's state or etcd keys.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import kopf

from controllers import metrics, sdk
from controllers.kube import KubeClient
from kmilvus.config import Config
from kmilvus.coordinator import CoordinatorClient
from kmilvus.meta import EtcdKV
from kmilvus.server import COORDINATORS, Node
from kmilvus.sessionutil.leader import LeaderLock

log = logging.getLogger("kmilvus.operator")


@dataclass
class Options:
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide
    peering: str | None = "kmilvus"  # None: standalone (no peering, always active)
    priority: int | None = None  # peering priority; None: start time (newest wins)
    sdk_namespace: str | None = None  # where SDK-created collections appear
    mirror_sdk: bool = True
    sdk_poll_interval: float = 1.0
    feed_retry_interval: float = 1.0  # resubscribe to the segment change feed after this
    segment_rows_interval: float = 10.0  # row-count-only changes are written at most this often
    flush_poll_ms: int = 500
    retry_interval: float = 10.0  # Failed with a conflict: converge again this often
    coordinator_wait: float = 30.0  # a handler waits this long for the coordinators
    login: Callable[[], Awaitable[Any]] | None = None  # credentials override (tests: a client certificate)

    @property
    def home_namespace(self) -> str:
        return self.sdk_namespace or (self.namespaces[0] if self.namespaces else "default")


@dataclass
class Stats:
    """What this replica did (tests assert on it; the bench reports it)."""

    counts: collections.Counter = field(default_factory=collections.Counter)

    def inc(self, what: str, n: int = 1) -> None:
        self.counts[what] += n


class Runtime:
    _leader: tuple[LeaderLock, EtcdKV] | None = None  # the coordinators' lock while this replica holds it

    def __init__(self, cfg: Config, opts: Options | None = None, settings: kopf.OperatorSettings | None = None):
        self.cfg = cfg
        self.opts = opts or Options()
        self.settings = settings
        self.node: Node | None = None
        self.kube = KubeClient(self.login)
        self.stats = Stats()
        self.collection_index = None  # kopf index (db, name) -> CRs, set at startup
        self._holders = 0
        self._gate = asyncio.Lock()
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self._seg_events: dict[int, asyncio.Event] = collections.defaultdict(asyncio.Event)
        self.started_at: float | None = None

    # Credentials ------------------------------------------------------------------------------
    async def login(self):
        if self.opts.login is not None:
            return await self.opts.login()
        settings = self.settings or kopf.OperatorSettings()
        logger = logging.getLogger("kmilvus.operator.login")
        return kopf.login_with_service_account(settings=settings, logger=logger) or kopf.login_with_kubeconfig(
            settings=settings, logger=logger
        )

    # Leadership -------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._ready.is_set()

    async def acquire(self, why: str) -> None:
        async with self._gate:
            self._holders += 1
            if self._holders == 1:
                try:
                    await self._start(why)
                except BaseException:
                    self._holders -= 1
                    raise

    async def release(self, why: str) -> None:
        async with self._gate:
            self._holders = max(0, self._holders - 1)
            if self._holders == 0:
                await self._stop(why)

    def _job_runner(self):
        """In Kubernetes Spark jobs are SparkApplication resources (`KMILVUS_SPARK_RUNNER=
        sparkapplication`); otherwise DataCoord runs them with local spark-submit."""
        if self.cfg.spark_runner != "sparkapplication":
            return None
        from controllers.spark_runner import SparkApplicationRunner

        # Each application goes to its Collection's namespace (one of the served ones).
        return SparkApplicationRunner(self.kube, self.opts.namespaces or None)

    async def _start(self, why: str) -> None:
        await self._wait_for_handover()
        node = Node(self.cfg, COORDINATORS, job_runner=self._job_runner())
        try:
            await node.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await node.stop()
            await self._release_leadership()
            raise
        self.node = node
        self.started_at = time.monotonic()
        self.stats.inc("activations")
        self._ready.set()
        metrics.ACTIVE.set(1)
        log.info("coordinators started (%s)", why)
        self._tasks = [asyncio.create_task(self._follow_segments(), name="kmilvus-segment-feed")]
        if self.opts.mirror_sdk:
            self._tasks.append(asyncio.create_task(sdk.mirror_loop(self), name="kmilvus-sdk-mirror"))

    async def _stop(self, why: str) -> None:
        self._ready.clear()
        metrics.ACTIVE.set(0)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        node, self.node = self.node, None
        if node is not None:
            await node.stop()
            log.info("coordinators stopped (%s)", why)
        await self._release_leadership()

    async def _wait_for_handover(self) -> None:
        """Start only when no other process runs the coordinators of this cluster: hold the
        cluster's leader lock in etcd (lease-bound: a leader that died loses it after its TTL)."""
        kv = await EtcdKV.connect(self.cfg.etcd_endpoints, f"{self.cfg.cluster}/meta", **self.cfg.etcd_options())
        lock = LeaderLock(kv, "coordinators", ttl=self.cfg.session_ttl)
        try:
            await lock.acquire()
        except BaseException:
            await lock.release()
            await kv.close()
            raise
        self._leader = (lock, kv)

    async def _release_leadership(self) -> None:
        held, self._leader = self._leader, None
        if held is not None:
            lock, kv = held
            await lock.release()
            await kv.close()

    async def shutdown(self) -> None:
        async with self._gate:
            self._holders = 0
            await self._stop("operator exiting")
        await self.kube.close()

    async def coordinators(self) -> CoordinatorClient:
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), self.opts.coordinator_wait)
            except TimeoutError:
                raise kopf.TemporaryError("the coordinators are not running in this replica", delay=2) from None
        node = self.node
        if node is None or node.registry is None:
            raise kopf.TemporaryError("the coordinators stopped", delay=2)
        return CoordinatorClient.from_registry(node.registry)

    def lock(self, key: str) -> asyncio.Lock:
        """Serialises the reconcile / delete / monitor paths of one Collection resource."""
        return self._locks[key]

    def forget(self, key: str) -> None:
        self._locks.pop(key, None)

    # Segment change detection -----------------------------------------------------------------
    async def _follow_segments(self) -> None:
        """One subscription to DataCoord's segment change feed wakes the monitors of the
        collections whose segments changed (rather than every monitor polling DataCoord). After a
        broken feed every monitor is woken once, so changes missed meanwhile are re-read."""
        while True:
            try:
                co = await self.coordinators()
                async for ev in co.watch_segments():
                    self.stats.inc("segment_events")
                    self._seg_events[ev.collectionID].set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - resubscribed below; monitors re-read
                log.warning("segment change feed broke: %s", exc)
            for wake in self._seg_events.values():
                wake.set()
            await asyncio.sleep(self.opts.feed_retry_interval)

    async def wait_segments(self, collection_id: int, timeout: float, stopped=None) -> bool:
        """Wait until the collection's segments change (True), `timeout` passes or the daemon's
        `stopped` flag is set (False)."""
        ev = self._seg_events[collection_id]
        waits = [asyncio.ensure_future(ev.wait())]
        if stopped is not None:
            waits.append(asyncio.ensure_future(stopped.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            return ev.is_set()
        finally:
            for w in waits:
                w.cancel()
            ev.clear()

    def forget_segments(self, collection_id: int) -> None:
        self._seg_events.pop(collection_id, None)
