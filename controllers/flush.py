"""FlushRequest: a Flush (docs/architecture/flush.md), declared as a resource.

A daemon per FlushRequest drives it: Pending -> Flushing (DataCoord `Flush` per collection: the
sealed segment IDs and the flush timestamp go into the status) -> Completed once `GetFlushState`
is true for every collection (every sealed segment Flushed or gone, every channel checkpoint past
the flush timestamp), or Failed (a collection missing, or dropped while flushing). Progress
(flushed / total) is written as it changes. With `ttlSecondsAfterFinished`, the finished resource
is deleted that long after `completionTime`. Restarted daemons pick up from the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time

import kopf

from controllers import conditions, crd, metrics
from controllers import resources as R
from controllers.collection import describe
from controllers.kube import NotFound
from controllers.schema import DEFAULT_DB, Target, is_type
from controllers.v1alpha1 import FlushRequestSpec
from kmilvus.util import merr
from kmilvus.util.constants import LIVE_SEGMENT_STATES

log = logging.getLogger("kmilvus.operator.flush")
TERMINAL = ("Completed", "Failed")
LIVE = LIVE_SEGMENT_STATES
TTL_MAX = 10 * 365 * 86400  # a larger ttlSecondsAfterFinished means never (and stays a finite time)


class FlushRun:
    def __init__(self, rt, body):
        self.rt = rt
        self.body = body
        m = body["metadata"]
        self.name, self.ns, self.gen = m["name"], m.get("namespace"), m.get("generation")
        self.status = dict(body.get("status") or {})
        self.started = time.monotonic()

    async def write(self, delta: dict) -> None:
        self.status.update(delta)
        with contextlib.suppress(NotFound):
            await self.rt.kube.patch(R.FLUSHREQUEST, self.ns, self.name, {"status": delta}, status=True)

    def _conds(self, complete: bool | str, reason: str, msg: str, failed: bool = False) -> list[dict]:
        conds, _ = conditions.set_condition(self.status.get("conditions"), "Complete", complete, reason, msg, self.gen)
        if failed or conditions.get(conds, "Failed"):
            conds, _ = conditions.set_condition(
                conds, "Failed", failed, reason if failed else "NotFailed", msg if failed else "", self.gen
            )
        return conds

    async def fail(self, reason: str, msg: str) -> None:
        await self.write(
            {
                "phase": "Failed",
                "completionTime": conditions.now_iso(),
                "conditions": self._conds(False, reason, msg, failed=True),
                "observedGeneration": self.gen,
            }
        )
        kopf.event(self.body, type="Warning", reason=reason, message=msg)
        metrics.FLUSHES.labels("Failed").inc()

    async def start(self) -> None:
        problems, db, names = check_flush_spec(self.body.get("spec"))
        if problems:
            await self.fail("InvalidSpec", "invalid FlushRequest spec: " + "; ".join(problems))
            return
        co = await self.rt.coordinators()
        descs = []
        for n in names:
            d = await describe(co, Target(db, n))
            if d is None:
                await self.fail("CollectionNotFound", f"collection {n} does not exist in database {db}")
                return
            descs.append(d)
        entries = []
        for d in descs:
            try:
                rsp = await co.flush(d.collectionID)
            except merr.MilvusError as exc:
                raise kopf.TemporaryError(f"Flush {d.collection_name}: {exc.message}", delay=1) from None
            entries.append(
                {
                    "name": d.collection_name,
                    "collectionID": d.collectionID,
                    "flushTs": rsp.flush_ts,
                    "sealedSegments": list(rsp.segmentIDs),
                    "flushed": 0,
                    "total": len(rsp.segmentIDs),
                    "done": False,
                }
            )
        total = sum(e["total"] for e in entries)
        msg = (
            f"flushing {len(entries)} collection(s): {total} segment(s) sealed "
            f"({', '.join(e['name'] + ': ' + str(e['total']) for e in entries)})"
        )
        await self.write(
            {
                "phase": "Flushing",
                "startTime": conditions.now_iso(),
                "flushTs": max(e["flushTs"] for e in entries),
                "collections": entries,
                "flushed": 0,
                "total": total,
                "observedGeneration": self.gen,
                "conditions": self._conds(False, "Flushing", msg),
            }
        )
        kopf.event(self.body, type="Normal", reason="FlushStarted", message=msg)

    async def progress(self) -> None:
        co = await self.rt.coordinators()
        entries = [dict(e) for e in self.status.get("collections") or []]
        pending = [e for e in entries if not e.get("done")]
        wait_ms = max(50, self.rt.opts.flush_poll_ms)

        async def check(e):
            try:
                done = await co.flush_state(e["collectionID"], e["sealedSegments"], e["flushTs"], wait_ms)
                infos = await co.segment_infos(e["sealedSegments"])
                exists = await co.describe_collection(collection_id=e["collectionID"]) is not None
            except merr.MilvusError as exc:
                raise kopf.TemporaryError(f"GetFlushState {e['name']}: {exc.message}", delay=1) from None
            live = {i.ID for i in infos if i.state in LIVE}
            return done, len([s for s in e["sealedSegments"] if s not in live]), exists

        results = await asyncio.gather(*(check(e) for e in pending))
        for e, (done, flushed, exists) in zip(pending, results, strict=True):
            if not exists:
                await self.fail(
                    "CollectionDropped", f"collection {e['name']} (ID {e['collectionID']}) was dropped while flushing"
                )
                return
            e["flushed"], e["done"] = flushed, bool(done)
        delta: dict = {}
        if entries != self.status.get("collections"):
            delta["collections"] = entries
            delta["flushed"] = sum(e["flushed"] for e in entries)
        if all(e["done"] for e in entries):
            secs = time.monotonic() - self.started
            msg = f"{sum(e['total'] for e in entries)} sealed segment(s) flushed in {len(entries)} collection(s)"
            delta.update(
                {
                    "phase": "Completed",
                    "completionTime": conditions.now_iso(),
                    "conditions": self._conds(True, "Flushed", msg),
                }
            )
            await self.write(delta)
            kopf.event(self.body, type="Normal", reason="FlushCompleted", message=f"{msg} ({secs:.1f}s here)")
            metrics.FLUSHES.labels("Completed").inc()
            self.rt.stats.inc("flushes_completed")
        elif delta:
            await self.write(delta)


def check_flush_spec(spec) -> tuple[list[str], str, list[str]]:
    """(problems, database, collection names) of a FlushRequest spec, checked against the CRD's
    model (`controllers.v1alpha1.FlushRequestSpec`: no API server validation is assumed)."""
    checked = crd.validate(FlushRequestSpec, {} if spec is None else spec)
    if checked.model is None:
        db = spec.get("database") if isinstance(spec, dict) else None
        return checked.problems, db if isinstance(db, str) else DEFAULT_DB, []
    return [], checked.model.database, list(checked.model.collection_names)


def ttl_seconds(spec) -> int | None:
    """spec.ttlSecondsAfterFinished when it is a valid one (an int64 >= 0, as the CRD's integer),
    else None."""
    ttl = spec.get("ttlSecondsAfterFinished") if isinstance(spec, dict) else None
    return ttl if is_type(ttl, int) and 0 <= ttl < 2**63 else None


def _finished_at(status: dict) -> float | None:
    raw = status.get("completionTime")
    if not raw:
        return None
    try:
        return datetime.datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


async def run(stopped, body, memo, logger, **_):
    rt = memo.runtime
    fr = FlushRun(rt, body)
    while not stopped and not body["metadata"].get("deletionTimestamp"):
        phase = fr.status.get("phase")
        if phase in TERMINAL:
            break
        try:
            if phase in (None, "", "Pending"):
                await fr.start()
            else:
                await fr.progress()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - level-triggered: the next pass retries
            delay = exc.delay if isinstance(exc, kopf.TemporaryError) and exc.delay else 1.0
            logger.warning(f"flush pass failed: {exc}")
            await stopped.wait(delay)
    ttl = ttl_seconds(body.get("spec"))
    if fr.status.get("phase") in TERMINAL and ttl is not None:
        at = (_finished_at(fr.status) or time.time()) + min(ttl, TTL_MAX)
        while not stopped and time.time() < at:
            await stopped.wait(min(at - time.time(), 60))
        if not stopped:
            await rt.kube.delete(R.FLUSHREQUEST, fr.ns, fr.name)
            logger.info(f"deleted {ttl}s after it finished (ttlSecondsAfterFinished)")


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.daemon(
        *R.FLUSHREQUESTS, id="flush", cancellation_backoff=1.0, cancellation_timeout=5.0, backoff=2.0, registry=registry
    )(run)
