"""Fuzzed custom resources through the real API server and the controllers (the API fuzz's
counterpart): malformed and hostile Collection, FlushRequest and Segment objects (tests/crfuzz.py)
applied to the session's control plane. The API server refuses what the CRDs' schemas and CEL
rules refuse — and the controllers' own checks must refuse all of that too (they are what stands
when a CRD is older or edited: the pure checks below run them on every spec, admitted or not).
Every admitted object must settle with a clear status condition (and a Warning event) or be
served; no handler may raise, no traceback may reach a status, nothing may reach RootCoord or etcd
for a rejected spec, and the operator must go on reconciling: a valid Collection applied
afterwards becomes Ready.

The same examples every run; KMILVUS_FUZZ_RANDOM=1 explores new ones."""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import os

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from controllers import resources as R
from controllers.collection import index
from controllers.flush import check_flush_spec, ttl_seconds
from controllers.kube import ApiError
from controllers.schema import SpecError, check_spec, declared_indexes, to_schema
from kmilvus.meta import catalog
from tests.crfuzz import collection_spec, flush_spec, segment_spec
from tests.harness import make_config
from tests.operator.test_controllers import (  # noqa: F401 - operators is a fixture
    cond,
    insert_rows,
    operators,
    ready,
    start_operator,
)
from tests.unit.test_crds import validate
from tests.util import eventually

# Sessions and the coordinators' lease as in production: this test drives dozens of resources at
# once, and on a busy machine the suite's 3 s lease can lapse; coordinators that lose it step down
# and exit, as they must, and nothing restarts an in-process operator.
PRODUCTION_TTL = 10


@pytest.fixture
def cfg(root, etcd_endpoint, nats_url, tmp_path):
    return make_config(root, etcd_endpoint, nats_url, tmp_path / "storage", session_ttl=PRODUCTION_TTL)


DERANDOMIZE = not os.environ.get("KMILVUS_FUZZ_RANDOM")
MAX_MESSAGE = 32768
TRACEBACK_MARKS = ("Traceback (most recent call last)", 'File "', "Error(", "Exception(")


def crd_rejects(kind: str, spec) -> bool:
    """The CRD's openAPIV3Schema (jsonschema; CEL rules not run) refuses this spec."""
    return bool(validate(kind, {"apiVersion": R.API_VERSION, "kind": kind, "metadata": {"name": "x"}, "spec": spec}))


def _valid_fields() -> list[dict]:
    return [
        {"name": "id", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "vec", "dataType": "FloatVector", "dim": 8},
        {"name": "tag", "dataType": "VarChar", "maxLength": 32},
    ]


def _collection(name: str, spec) -> dict:
    return {"metadata": {"name": name}, "spec": spec}


def controller_rejects(spec, name: str) -> bool:
    """The controllers' own checks refuse this Collection spec."""
    try:
        declared_indexes(copy.deepcopy(spec), to_schema(copy.deepcopy(spec), name))
    except SpecError:
        return True
    return bool(check_spec(spec, name))


async def admitted(kns, res, body: dict) -> bool:
    """Create `body`: True when the API server admits it, False when it refuses it as invalid."""
    try:
        await kns.create(res, body)
    except ApiError as exc:
        assert exc.status in (400, 422), exc  # Invalid / BadRequest, nothing else
        return False
    return True


# The pure part: the controllers' spec checks, many examples, shrunk on failure -----------------
FIELDS = [{"name": "id", "dataType": "Int64", "isPrimaryKey": True}, {"name": "v", "dataType": "FloatVector", "dim": 8}]


@settings(max_examples=300, deadline=None, derandomize=DERANDOMIZE, database=None)
@given(spec=collection_spec())
@example(spec={"name": "", "fields": FIELDS})  # empty is not unset
@example(spec={"database": "", "fields": FIELDS})
@example(spec={"partitions": [f"p{i}" for i in range(1100)], "fields": FIELDS})
@example(spec={"description": 5, "fields": FIELDS})
@example(spec={"description": "d" * 4097, "fields": FIELDS})
@example(spec={"fields": [*FIELDS, {"name": "n", "dataType": "Int8", "description": "d" * 4097}]})
@example(spec={"consistencyLevel": ["Strong"], "fields": FIELDS})
@example(spec={"fields": [*FIELDS, {"name": "n", "dataType": "Int8", "defaultValue": 300}]})
@example(spec={"fields": [*FIELDS, {"name": "n", "dataType": "Double", "defaultValue": 10**400}]})
@example(spec=["fields"])
@example(spec="fields")
def test_collection_spec_checks_never_raise(spec):
    try:
        schema = to_schema(copy.deepcopy(spec), "fz-1")
        declared_indexes(copy.deepcopy(spec), schema)
    except SpecError as exc:
        assert str(exc) and exc.reason in ("InvalidSpec", "InvalidIndex")
        assert len(str(exc)) < 64 * 1024  # 10k-character names are cut in messages
    else:  # accepted: the CRD's schema accepts it too (the controller is at least as strict)
        assert not crd_rejects("Collection", spec), check_spec(spec, "fz-1")
        assert schema.fields
    key = index("default", "fz-1", "uid", copy.deepcopy(spec))
    if key is not None:
        hash(next(iter(key)))


@settings(max_examples=200, deadline=None, derandomize=DERANDOMIZE, database=None)
@given(spec=flush_spec(known=["base"]))
@example(spec={"collectionNames": "base"})  # not split into one-letter names
@example(spec={"collectionNames": [["base"]]})
@example(spec={"collectionNames": 5})
@example(spec={"collectionNames": ["base"], "ttlSecondsAfterFinished": "abc"})
@example(spec={"collectionNames": ["base"], "database": ""})
@example(spec={"collectionNames": ["a" * 256]})
@example(spec={"collectionNames": ["base", "base"]})  # a set: the API server refuses it
@example(spec={"collectionNames": ["base"], "ttlSecondsAfterFinished": 10**30})  # not an int64
@example(spec=[])
def test_flush_spec_checks_never_raise(spec):
    problems, db, names = check_flush_spec(copy.deepcopy(spec))
    assert isinstance(db, str)
    if not problems:
        assert names and not crd_rejects("FlushRequest", spec)
    assert all(len(p) < 64 * 1024 for p in problems)


# Through the controllers ------------------------------------------------------------------------
class Failures(logging.Handler):
    """Log records of handler crashes (a traceback) and of failed daemon passes."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        msg = record.getMessage()
        if record.exc_info or "pass failed" in msg or "failed with an exception" in msg:
            self.records.append(record)


@pytest.fixture
def failures():
    h = Failures()
    logging.getLogger().addHandler(h)
    yield h
    logging.getLogger().removeHandler(h)


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def assert_clean_status(o: dict) -> None:
    status = o.get("status") or {}
    for s in strings({k: v for k, v in status.items() if k != "kopf"}):
        assert not any(m in s for m in TRACEBACK_MARKS), (o["metadata"]["name"], s[:300])
    for hid, rec in ((status.get("kopf") or {}).get("progress") or {}).items():
        assert not rec.get("failure") and not rec.get("message"), (o["metadata"]["name"], hid, rec)


def settled_collection(o) -> bool:
    return bool(o) and (o.get("status") or {}).get("phase") in ("Ready", "Failed") and bool(cond(o, "Ready"))


def settled_flush(o, spec) -> bool:
    if o is None:  # finished and deleted at once (ttlSecondsAfterFinished: 0): nothing else deletes it
        return ttl_seconds(spec) is not None
    return (o.get("status") or {}).get("phase") in ("Completed", "Failed")


async def core_collection_ids(op) -> tuple[set[int], set[int]]:
    """Collection IDs in RootCoord's memory and under its etcd prefix."""
    rc = op.component("rootcoord")
    keys = await asyncio.to_thread(op.call, op.runtime.node.kv.get_prefix(catalog.COLLECTION_PREFIX, keys_only=True))
    in_etcd = {int(k[len(catalog.COLLECTION_PREFIX) :].split("/")[0]) for k, _ in keys}
    return set(rc.collections), in_etcd


@pytest.mark.timeout(240)
async def test_fuzzed_resources_through_the_controllers(kns, operators, node_factory, failures):
    op = await start_operator(operators)
    # A DataNode: flushes of live collections complete.
    await asyncio.to_thread(node_factory, roles=("datanode",), session_ttl=PRODUCTION_TTL)
    await kns.create(R.COLLECTION, _collection("base", {"fields": _valid_fields()}))
    base = await ready(kns, "base")
    loop = asyncio.get_running_loop()
    counter = itertools.count()
    ready_ids = {base["status"]["collectionID"]}
    seen = {"collections": 0, "refused": 0, "failed": 0, "ready": 0, "flushes": 0, "segments": 0}

    async def apply(batch, flushes, segments):
        n = next(counter)
        names = []
        for i, spec in enumerate(batch):
            name = f"fz-{n}-c{i}"
            seen["collections"] += 1
            if await admitted(kns, R.COLLECTION, _collection(name, spec)):
                names.append((name, spec))
            else:  # what the API server refuses, the controller refuses too
                seen["refused"] += 1
                assert controller_rejects(spec, name), (name, spec)
        fnames = []
        for i, spec in enumerate(flushes):
            name = f"fz-{n}-f{i}"
            if await admitted(kns, R.FLUSHREQUEST, {"metadata": {"name": name}, "spec": spec}):
                fnames.append((name, spec))
            else:
                assert check_flush_spec(copy.deepcopy(spec))[0], (name, spec)
        for i, spec in enumerate(segments):  # the operator does not handle Segments: they are left alone
            await admitted(kns, R.SEGMENT, {"metadata": {"name": f"fz-{n}-s{i}"}, "spec": spec})
        try:
            (objs,) = await eventually(
                lambda: (
                    all(settled_collection(kns.obj(R.COLLECTION, x)) for x, _ in names)
                    and all(settled_flush(kns.obj(R.FLUSHREQUEST, x), spec) for x, spec in fnames)
                    and ([kns.obj(R.COLLECTION, x) for x, _ in names],)  # truthy when all were refused too
                ),
                30,
                f"batch {n} to settle",
            )
        except AssertionError:
            stuck = {x: kns.obj(R.COLLECTION, x) for x, _ in names if not settled_collection(kns.obj(R.COLLECTION, x))}
            stuck |= {
                x: kns.obj(R.FLUSHREQUEST, x)
                for x, spec in fnames
                if not settled_flush(kns.obj(R.FLUSHREQUEST, x), spec)
            }
            logged = [r.getMessage()[:500] for r in failures.records]
            raise AssertionError(f"not settled: {stuck}; logged: {logged}") from None
        for o, (name, spec) in zip(objs, names, strict=True):
            assert_clean_status(o)
            ready_c, stalled = cond(o, "Ready"), cond(o, "Stalled")
            if o["status"]["phase"] == "Ready":
                seen["ready"] += 1
                assert ready_c["status"] == "True", o["status"]
                assert not crd_rejects("Collection", spec), (name, spec)
                assert not check_spec(spec, name), (name, spec)
                ready_ids.add(o["status"]["collectionID"])
                continue
            seen["failed"] += 1
            assert ready_c["status"] == "False" and ready_c["reason"] and ready_c["message"], o["status"]
            assert len(ready_c["message"]) <= MAX_MESSAGE
            assert stalled["status"] == "True" and stalled["reason"] == ready_c["reason"], o["status"]
            assert "collectionID" not in o["status"]
            if check_spec(spec, name) or crd_rejects("Collection", spec):
                assert ready_c["reason"] in ("InvalidSpec", "InvalidIndex"), (name, spec, ready_c)
            await eventually(
                lambda name=name, reason=ready_c["reason"]: [
                    e for e in kns.events(reason, name) if e.get("type") == "Warning"
                ],
                5,
                f"a Warning event for {name}",
            )
        for name, spec in fnames:
            o = kns.obj(R.FLUSHREQUEST, name)
            seen["flushes"] += 1
            if o is None:  # deleted as it finished (its TTL): what it said is in its events
                await eventually(lambda name=name: kns.events(None, name), 5, f"an event for {name}")
                continue
            assert_clean_status(o)
            problems, _, _ = check_flush_spec(spec)
            if o["status"]["phase"] == "Failed":
                failed = cond(o, "Failed")
                assert failed["status"] == "True" and failed["reason"] and failed["message"], o["status"]
                assert cond(o, "Complete")["status"] == "False"
                if problems:
                    assert failed["reason"] == "InvalidSpec", (name, spec, failed)
                await eventually(lambda name=name: kns.events(None, name), 5, f"an event for {name}")
            else:
                assert not problems and not crd_rejects("FlushRequest", spec), (name, spec)
        seen["segments"] += len(segments)
        # Nothing in the core but the collections of Ready resources.
        in_memory, in_etcd = await core_collection_ids(op)
        assert in_memory == ready_ids and in_etcd == ready_ids, (in_memory, in_etcd, ready_ids)
        assert not failures.records, [r.getMessage()[:300] for r in failures.records]

    @settings(
        max_examples=10,
        deadline=None,
        derandomize=DERANDOMIZE,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # a failing batch is reported whole (no shrinking)
        suppress_health_check=list(HealthCheck),
    )
    @example(batch=EDGE_COLLECTIONS, flushes=EDGE_FLUSHES, segments=[])
    @given(
        batch=st.lists(collection_spec(), min_size=4, max_size=8),
        flushes=st.lists(flush_spec(known=["base", "fz_0_c0"]), min_size=1, max_size=4),
        segments=st.lists(segment_spec(), max_size=3),
    )
    def run(batch, flushes, segments):
        asyncio.run_coroutine_threadsafe(apply(batch, flushes, segments), loop).result(120)

    await asyncio.to_thread(run)
    assert seen["refused"] >= 10 and seen["failed"] >= 1 and seen["ready"] >= 1, seen

    # A live collection's spec edited into garbage: the API server refuses it; the collection serves.
    with pytest.raises(ApiError) as exc:
        await kns.patch(R.COLLECTION, "base", {"spec": {"fields": "id:Int64", "shardsNum": "2", "load": "yes"}})
    assert exc.value.status == 422
    assert cond(kns.obj(R.COLLECTION, "base"), "Ready")["status"] == "True"

    # Every rejected resource can be deleted (its finalizer goes), and nothing is dropped for it.
    failed = [
        (res, o["metadata"]["name"])
        for res in (R.COLLECTION, R.FLUSHREQUEST)
        for o in kns.items(res)
        if o["metadata"]["name"].startswith("fz-") and (o.get("status") or {}).get("phase") == "Failed"
    ]
    for res, name in failed:
        await kns.delete(res, name)
    await eventually(lambda: all(kns.obj(res, n) is None for res, n in failed), 20, "the rejected resources deleted")
    assert await core_collection_ids(op) == (ready_ids, ready_ids)

    # The operator goes on: a valid Collection applied after the fuzzed ones becomes Ready.
    await kns.create(R.COLLECTION, _collection("after", {"fields": _valid_fields()}))
    after = await ready(kns, "after")
    assert cond(after, "Ready")["reason"] == "Created"
    assert not failures.records, [r.getMessage()[:300] for r in failures.records]


def _with(*extra: dict, **spec) -> dict:
    return {"fields": [*_valid_fields(), *extra], **spec}


# Specs at the edges, some valid (Ready), most refused by the spec check or by RootCoord itself.
EDGE_COLLECTIONS = [
    _with({"name": "b", "dataType": "BinaryVector", "dim": 7}),
    _with({"name": "s", "dataType": "VarChar", "maxLength": 2, "defaultValue": "too long"}),
    _with({"name": "big", "dataType": "FloatVector", "dim": 32768}),
    _with(description="d" * 10_000),
    _with(*({"name": f"f{i}", "dataType": "Int8"} for i in range(61))),  # 64 fields: the limit
    _with(*({"name": f"f{i}", "dataType": "Int8"} for i in range(62))),  # 65
    _with(partitions=["_default", "p1"]),
    _with(name="x" * 255),
    _with(name="x" * 256),
    _with(name="名字"),
    _with(name="tab\there"),
    _with({"name": "id", "dataType": "Int64"}),  # a duplicated field name
    _with({"name": "id2", "dataType": "VarChar", "maxLength": 8, "isPrimaryKey": True}),  # two primary keys
    _with({"name": "n", "dataType": "Int64", "defaultValue": 2**63}),
    _with({"name": "n", "dataType": "Bool", "defaultValue": 1}),
    _with(shardsNum=0),
    _with(shardsNum=2**63),
    _with(consistencyLevel="Customized"),
    _with(load="true"),
    {"fields": None},
    None,
    [],
    "spec",
]
EDGE_FLUSHES = [
    {"collectionNames": "base"},
    {"collectionNames": ["base", "base"]},
    {"collectionNames": ["base"], "database": "nodb"},
    {"collectionNames": ["base"], "ttlSecondsAfterFinished": -1},
    {"collectionNames": ["base"], "ttlSecondsAfterFinished": 10**30},
    {"collectionNames": ["base"], "ttlSecondsAfterFinished": 0},  # deleted as soon as it completes
    {"collectionNames": ["x" * 10_000]},
    {"collectionNames": [None]},
    None,
]

HOSTILE_SEGMENTS = [
    {"segmentID": 1, "collectionID": 1, "channel": "c"},  # well-formed and made up: admitted
    {"segmentID": 2**62, "collectionID": 2**62, "partitionID": 0, "channel": "dml_0_1v0"},
    {"segmentID": "abc", "collectionID": 1, "channel": "c"},
    {"segmentID": [1, 2], "collectionID": 1, "channel": "c"},
    {"segmentID": -5, "collectionID": 1, "channel": "c"},
    {"segmentID": 10**30, "collectionID": 1, "channel": "c"},
    {"segmentID": 1.5, "collectionID": 1, "channel": "c"},
    {"segmentID": True, "collectionID": 1, "channel": "c"},
    {"segmentID": None},
    ["not", "an", "object"],
    "a string",
    None,
]


@pytest.mark.timeout(90)
async def test_hostile_segments_do_not_stop_the_mirror(kns, operators, node_factory, failures):
    """Anyone may write a Segment carrying a collection's ID label: the mirror of that collection
    ignores those it did not write and goes on mirroring the real segments. (The API server
    refuses the Segments its CRD's schema refuses; the others are written.)"""
    await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "proxy"))
    await kns.create(R.COLLECTION, _collection("docs", {"fields": _valid_fields()}))
    cid = (await ready(kns, "docs"))["status"]["collectionID"]
    hostile = []
    for i, spec in enumerate(HOSTILE_SEGMENTS):
        labels = {R.LABEL_COLLECTION_ID: str(cid), R.LABEL_COLLECTION: "docs"}
        if await admitted(kns, R.SEGMENT, {"metadata": {"name": f"docs-hostile-{i}", "labels": labels}, "spec": spec}):
            hostile.append(f"docs-hostile-{i}")
    assert hostile  # the schema cannot tell a real segment from a made-up one
    await asyncio.to_thread(insert_rows, data.uri, "docs", 100)
    await eventually(
        lambda: ((kns.obj(R.COLLECTION, "docs") or {}).get("status") or {}).get("segments", {}).get("total", 0) >= 1,
        20,
        "the collection's segments counted",
    )
    mirrored = await eventually(
        lambda: [o for o in kns.items(R.SEGMENT) if not o["metadata"]["name"].startswith("docs-hostile-")],
        20,
        "the real segment mirrored",
    )
    assert all(o["spec"]["collectionID"] == cid for o in mirrored)
    assert not failures.records, [r.getMessage()[:300] for r in failures.records]
    assert all(kns.obj(R.SEGMENT, name) for name in hostile)  # left alone
