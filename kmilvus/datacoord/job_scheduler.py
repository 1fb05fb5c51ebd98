"""What DataCoord's Spark jobs of every kind share: the runner their applications go to, the
concurrency slots, and the per-collection locks.

The runner is the one plugged in (`DataCoord.set_job_runner()`: the operator's SparkApplication
runner), else the one the config names, made on first use: `WarmSparkRunner` (one long-lived
local driver), or `LocalSparkRunner` (spark-submit per job) with `spark_warm` off. A runner set
here routes a job whose input is at most `inprocess_job_max_mb` to this process instead
(`RoutingRunner`: no JVM to start).
"""

from __future__ import annotations

import asyncio
import os
import tempfile

from kmilvus.config import Config
from kmilvus.log import get_logger
from kmilvus.spark.inprocess import RoutingRunner
from kmilvus.spark.runner import JobRunner, LocalSparkRunner
from kmilvus.spark.warm import WarmSparkRunner

log = get_logger(__name__)


def make_runner(cfg: Config) -> JobRunner:
    """The runner `cfg.spark_runner` names ("local": the warm driver, or one spark-submit per job
    with `spark_warm` off; others are plugged in by the operator)."""
    if cfg.spark_runner != "local":
        log.warning(
            "no JobRunner plugged in for spark_runner; running Spark jobs locally", spark_runner=cfg.spark_runner
        )
    work = cfg.spark_work_dir or os.path.join(tempfile.gettempdir(), "kmilvus-spark", cfg.cluster)
    if cfg.spark_warm:
        return WarmSparkRunner(
            master=cfg.spark_master,
            work_dir=work,
            spark_submit=cfg.spark_submit,
            idle_timeout=cfg.spark_warm_idle_timeout,
        )
    return LocalSparkRunner(master=cfg.spark_master, work_dir=work, spark_submit=cfg.spark_submit)


class JobScheduler:
    """The runner, slots and locks of one DataCoord's imports and compactions."""

    def __init__(self, cfg: Config, runner: JobRunner | None = None):
        self.cfg = cfg
        self._runner = runner
        self.slots = asyncio.Semaphore(max(1, cfg.spark_max_concurrent_jobs))
        self._locks: dict[int, asyncio.Lock] = {}

    @property
    def runner(self) -> JobRunner:
        """The runner plugged in, else the one the config names (made on first use); small jobs
        are routed in-process unless `inprocess_job_max_mb` is 0."""
        if self._runner is None:
            self.runner = make_runner(self.cfg)
        assert self._runner is not None
        return self._runner

    @runner.setter
    def runner(self, runner: JobRunner) -> None:
        limit = self.cfg.inprocess_job_max_mb
        self._runner = RoutingRunner(runner, limit * 1024 * 1024) if limit > 0 else runner

    def collection_lock(self, coll: int) -> asyncio.Lock:
        """Held while a job commits to a collection's meta, and while its jobs are cancelled."""
        return self._locks.setdefault(coll, asyncio.Lock())

    def forget(self, coll: int) -> None:
        """The collection is gone: its lock with it."""
        self._locks.pop(coll, None)

    async def close(self) -> None:
        """Close the runner if one was made (the warm Spark driver, if one runs)."""
        if self._runner is not None:
            await self._runner.close()
