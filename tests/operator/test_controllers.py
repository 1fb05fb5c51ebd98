"""The kopf controllers against the session's real Kubernetes API server (tests/controlplane.py)
with REAL etcd, JetStream, storage and coordinators: the operator runs on its own event loop in a
thread (as in a pod: kopf and the coordinators share one loop), watching the test's own namespace;
pymilvus talks to a proxy+datanode node that finds the operator's coordinators through sessions.
What the API server refuses by itself (the CRDs' schemas and CEL rules) the controllers' own
checks refuse too: those are tested by calling the handler (`converge`) directly."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
from concurrent.futures import Future

import numpy as np
import pytest
from pymilvus import DataType, MilvusClient

import controllers.app
import controllers.collection
from controllers import conditions
from controllers import resources as R
from controllers.kube import ApiError
from controllers.runtime import Options, Runtime
from kmilvus.meta import EtcdKV, catalog
from tests.harness import make_config
from tests.unit.test_crds import check_instance
from tests.util import eventually

pytestmark = [pytest.mark.timeout(90)]


class OperatorThread:
    """`kmilvus-operator` minus the CLI: controllers.app.run on its own loop and thread."""

    def __init__(self, cfg, login, **opts):
        opts.setdefault("peering", None)
        self.opts = Options(login=login, sdk_poll_interval=0.3, flush_poll_ms=200, retry_interval=0.5, **opts)
        self.cfg = cfg
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.stop_flag = threading.Event()
        self.runtime: Runtime | None = None
        self.task: asyncio.Task | None = None
        self.done: Future | None = None

    def start(self) -> OperatorThread:
        self.thread.start()
        ready: Future = Future()

        async def main():
            self.runtime = Runtime(self.cfg, self.opts)
            self.task = asyncio.current_task()
            ready.set_result(True)
            await controllers.app.run(self.cfg, self.opts, stop_flag=self.stop_flag, runtime=self.runtime)

        self.done = asyncio.run_coroutine_threadsafe(main(), self.loop)
        ready.result(10)
        return self

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def component(self, role: str):
        return self.runtime.node.components[role]

    def kill(self) -> None:
        """Cancel the operator task at once (no graceful stop-flag), as a crash would."""
        self.loop.call_soon_threadsafe(self.task.cancel)
        self._join()

    def stop(self) -> None:
        self.stop_flag.set()
        self._join()

    def _join(self) -> None:
        with contextlib.suppress(BaseException):  # cancelled on purpose
            self.done.result(30)
        self.stop_flag.set()  # kopf waits for a threading.Event in an executor thread: release it
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def cond(o: dict | None, ctype: str) -> dict:
    for c in ((o or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return {}


def collection(name: str, dim: int = 8, **spec) -> dict:
    fields = spec.pop("fields", None) or [
        {"name": "id", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "vec", "dataType": "FloatVector", "dim": dim},
        {"name": "tag", "dataType": "VarChar", "maxLength": 32},
    ]
    return {"metadata": {"name": name}, "spec": {"fields": fields, **spec}}


@pytest.fixture
def cfg(root, etcd_endpoint, nats_url, tmp_path):
    return make_config(root, etcd_endpoint, nats_url, tmp_path / "storage")


@pytest.fixture
async def operators(kns, cfg):
    """Start operators watching the test's namespace (as the cluster admin, unless `login`)."""
    started: list[OperatorThread] = []

    def start(**opts) -> OperatorThread:
        opts.setdefault("namespaces", (kns.name,))
        op = OperatorThread(cfg, opts.pop("login", None) or kns.cp.login(), **opts).start()
        started.append(op)
        return op

    yield start
    for op in started:
        if op.thread.is_alive():
            await asyncio.to_thread(op.stop)


async def start_operator(operators, **opts) -> OperatorThread:
    op = await asyncio.to_thread(operators, **opts)
    await eventually(lambda: op.runtime.active, 20, "the coordinators to start")
    return op


def insert_rows(uri: str, name: str, n: int, dim: int = 8) -> None:
    c = MilvusClient(uri=uri)
    try:
        rng = np.random.default_rng(0)
        rows = [{"id": i, "vec": rng.random(dim, dtype=np.float32).tolist(), "tag": f"t{i % 7}"} for i in range(n)]
        c.insert(name, rows)
    finally:
        c.close()


def compact(uri: str, name: str) -> int:
    c = MilvusClient(uri=uri)
    try:
        return c.compact(name)
    finally:
        c.close()


async def ready(kns, name: str, timeout: float = 20) -> dict:
    return await eventually(
        lambda: (o := kns.obj(R.COLLECTION, name)) and cond(o, "Ready").get("status") == "True" and o,
        timeout,
        f"Collection {name} Ready",
    )


async def refused(call, *messages: str) -> str:
    """The API server refuses the write (422 Invalid) with each of `messages`."""
    with pytest.raises(ApiError) as exc:
        await call
    assert exc.value.status == 422, exc.value
    text = str(exc.value.body.get("message") if isinstance(exc.value.body, dict) else exc.value.body)
    for m in messages:
        assert m in text, text
    return text


# ----------------------------------------------------------------------------------------------
async def test_collection_flush_segments_schema_edit_and_drop(kns, operators, node_factory):
    op = await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "proxy"))
    rc = op.component("rootcoord")

    await kns.create(R.COLLECTION, collection("docs", dim=8, shardsNum=2))
    o = await ready(kns, "docs")
    cid = o["status"]["collectionID"]
    assert cid in rc.collections and rc.collections[cid].schema.name == "docs"
    assert o["status"]["phase"] == "Ready" and o["status"]["createdBy"] == "operator"
    assert len(o["status"]["vchannels"]) == 2 and o["status"]["observedGeneration"] == 1
    assert cond(o, "Ready")["reason"] == "Created" and cond(o, "Ready")["lastTransitionTime"]
    # kstatus: current (Flux / Argo CD / `kubectl wait --for=condition=Ready`).
    assert cond(o, "Reconciling")["status"] == "False" and cond(o, "Stalled")["status"] == "False"
    assert {c["observedGeneration"] for c in o["status"]["conditions"]} == {1}
    await eventually(lambda: kns.events("Created", "docs"), 5, "a Created event")
    o = await eventually(
        lambda: (x := kns.obj(R.COLLECTION, "docs")) and "imports" in x["status"] and x, 10, "status.imports"
    )
    assert o["status"]["imports"] == {"running": 0, "total": 0, "rowsImported": 0}
    assert o["status"]["compactions"] == {"running": 0, "total": 0}
    uid = o["metadata"]["uid"]

    await asyncio.to_thread(insert_rows, data.uri, "docs", 1000)
    await eventually(lambda: kns.items(R.SEGMENT), 10, "a Growing Segment resource")

    await kns.create(R.FLUSHREQUEST, {"metadata": {"name": "f1"}, "spec": {"collectionNames": ["docs"]}})
    f = await eventually(
        lambda: (x := kns.obj(R.FLUSHREQUEST, "f1")) and x.get("status", {}).get("phase") == "Completed" and x,
        20,
        "FlushRequest Completed",
    )
    st = f["status"]
    assert st["total"] >= 1 and st["flushed"] == st["total"] and st["flushTs"] > 0 and st["completionTime"]
    assert st["collections"][0]["collectionID"] == cid and st["collections"][0]["sealedSegments"]
    assert cond(f, "Complete")["status"] == "True"
    await eventually(lambda: kns.events("FlushCompleted", "f1"), 5, "a FlushCompleted event")

    def flushed_segments():
        segs = kns.items(R.SEGMENT)
        return segs if segs and all(s.get("status", {}).get("state") == "Flushed" for s in segs) else None

    segs = await eventually(flushed_segments, 10, "Segments mirrored as Flushed")
    assert sum(s["status"]["rows"] for s in segs) == 1000
    # DataCoord pushed each segment's creation, seal and flush through the change feed.
    assert op.runtime.stats.counts["segment_events"] >= 3 * len(segs)
    for s in segs:
        ref = s["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Collection", "docs", uid)
        assert s["metadata"]["labels"][R.LABEL_COLLECTION_ID] == str(cid)
        assert s["spec"]["collection"] == "docs" and s["status"]["binlogs"] >= 1
    await eventually(lambda: kns.obj(R.COLLECTION, "docs")["status"].get("rows") == 1000, 15, "status.rows")
    assert kns.obj(R.COLLECTION, "docs")["status"]["segments"]["flushed"] == len(segs)
    # Segments' observed state went through their status subresource: the API server's field
    # managers say which request wrote each field (a status in a create or a patch of the main
    # resource would be dropped).
    for s in segs:
        writers = {
            (m["manager"], m.get("subresource", ""))
            for m in s["metadata"]["managedFields"]
            if "f:status" in m["fieldsV1"]
        }
        assert writers and {sub for _, sub in writers} == {"status"}, writers
    # Compaction progress from DataCoord's GetCompactionJobs: one segment per channel, nothing
    # to merge, so the compaction completes at once with no plan.
    comp_id = await asyncio.to_thread(compact, data.uri, "docs")
    o = await eventually(
        lambda: (x := kns.obj(R.COLLECTION, "docs")) and x["status"]["compactions"]["total"] == 1 and x,
        15,
        "status.compactions",
    )
    assert o["status"]["compactions"] == {
        "running": 0,
        "total": 1,
        "last": {"compactionID": comp_id, "state": "Completed", "plans": 0},
    }
    # Everything the operator wrote is valid for the CRDs and survives a real API server's pruning.
    for written in [kns.obj(R.COLLECTION, "docs"), kns.obj(R.FLUSHREQUEST, "f1"), *segs]:
        assert check_instance(written) == [], written["metadata"]["name"]

    # A schema edit, a rename, an invalid field: the API server refuses each (the CRD's CEL rules).
    fields = o["spec"]["fields"] + [{"name": "extra", "dataType": "Int32"}]
    await refused(
        kns.patch(R.COLLECTION, "docs", {"spec": {"fields": fields}}), "the schema (spec.fields) is immutable"
    )
    await refused(kns.patch(R.COLLECTION, "docs", {"spec": {"name": "docs2"}}), "spec.name is immutable")
    bad = [dict(f) for f in o["spec"]["fields"]]
    bad[1]["dim"] = 0
    await refused(kns.patch(R.COLLECTION, "docs", {"spec": {"fields": bad}}), "spec.fields[1].dim")
    assert kns.obj(R.COLLECTION, "docs")["metadata"]["generation"] == 1
    # The controller refuses them by itself too (a CRD without those rules): the handler, given
    # each edited resource, reports SchemaSynced=False and Stalled with a Warning, and the
    # collection keeps its schema and stays Ready.
    live = kns.obj(R.COLLECTION, "docs")
    for edit, reason, event, text in (
        ({"fields": fields}, "SchemaImmutable", "SchemaChangeRefused", "added extra"),
        ({"name": "docs2"}, "NameImmutable", "NameChangeRefused", "spec.name and spec.database cannot change"),
        ({"fields": bad}, "InvalidSpec", "InvalidSpec", "dim must be in [1, 32768]"),
    ):
        body = copy.deepcopy(live)
        body["spec"].update(edit)
        body["metadata"]["generation"] = 2
        out = op.call(controllers.collection.converge(op.runtime, body))
        synced = cond({"status": out.status}, "SchemaSynced")
        assert synced["status"] == "False" and synced["reason"] == reason and text in synced["message"], synced
        assert (
            out.status["observedGeneration"] == 2
            and cond({"status": out.status}, "Ready").get("status", "True") == "True"
        )
        assert [(t, r) for t, r, _ in out.events] == [("Warning", event)]
        stalled = cond({"status": {"conditions": conditions.with_kstatus(out.status["conditions"], 2)}}, "Stalled")
        assert stalled["status"] == "True" and stalled["reason"] == reason, stalled
    assert [f.name for f in rc.collections[cid].schema.fields] == ["id", "vec", "tag"]
    assert {c.schema.name for c in rc.collections.values()} == {"docs"}

    # Delete: dropped through RootCoord, nothing left in etcd, Segments gone.
    await kns.delete(R.COLLECTION, "docs")
    await eventually(lambda: kns.obj(R.COLLECTION, "docs") is None, 20, "the Collection to go")
    assert cid not in rc.collections
    kv = op.runtime.node.kv
    for prefix in catalog.collection_owned_prefixes(cid, o["status"]["vchannels"]):
        assert not op.call(kv.get_prefix(prefix)), prefix
    await eventually(lambda: not kns.items(R.SEGMENT), 20, "its Segments to go")
    await eventually(lambda: kns.events("Dropped", "docs"), 5, "a Dropped event")


async def test_delete_collection_while_flush_runs(kns, operators, node_factory):
    op = await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "proxy"))
    await kns.create(R.COLLECTION, collection("busy"))
    cid = (await ready(kns, "busy"))["status"]["collectionID"]
    await asyncio.to_thread(insert_rows, data.uri, "busy", 200)
    dc = op.component("datacoord")

    async def never_flush(*_a, **_k):  # the sealed segments never get flushed
        return None

    dc._check_flushable = never_flush
    await kns.create(R.FLUSHREQUEST, {"metadata": {"name": "f2"}, "spec": {"collectionNames": ["busy"]}})
    await eventually(
        lambda: (x := kns.obj(R.FLUSHREQUEST, "f2")) and x.get("status", {}).get("phase") == "Flushing", 10, "Flushing"
    )
    await kns.delete(R.COLLECTION, "busy")
    f = await eventually(
        lambda: (x := kns.obj(R.FLUSHREQUEST, "f2")) and x.get("status", {}).get("phase") == "Failed" and x,
        20,
        "FlushRequest Failed",
    )
    assert cond(f, "Failed")["reason"] == "CollectionDropped" and cond(f, "Complete")["status"] == "False"
    await eventually(lambda: kns.obj(R.COLLECTION, "busy") is None, 20, "the Collection to go")
    assert cid not in op.component("rootcoord").collections and not dc.meta.by_collection(cid)
    # ttlSecondsAfterFinished: a finished FlushRequest goes away by itself.
    await kns.patch(R.FLUSHREQUEST, "f2", {"spec": {"ttlSecondsAfterFinished": 0}})
    await kns.create(
        R.FLUSHREQUEST,
        {"metadata": {"name": "f3"}, "spec": {"collectionNames": ["nope"], "ttlSecondsAfterFinished": 0}},
    )
    await eventually(lambda: kns.obj(R.FLUSHREQUEST, "f3") is None, 10, "f3 deleted after its TTL")
    await eventually(lambda: kns.events("CollectionNotFound", "f3"), 5, "a CollectionNotFound event")


async def test_retain_keeps_the_collection(kns, operators):
    op = await start_operator(operators)
    await kns.create(R.COLLECTION, collection("kept", deletionPolicy="Retain"))
    cid = (await ready(kns, "kept"))["status"]["collectionID"]
    await kns.delete(R.COLLECTION, "kept")
    await eventually(lambda: kns.obj(R.COLLECTION, "kept") is None, 10, "the Collection to go")
    await eventually(lambda: kns.events("Retained", "kept"), 5, "a Retained event")
    rc = op.component("rootcoord")
    assert cid in rc.collections
    await asyncio.sleep(1.0)  # several SDK-mirror passes: an operator-made collection is not mirrored back
    assert not kns.items(R.COLLECTION)
    # Declaring it again adopts the kept collection (same schema), data and ID included.
    await kns.create(R.COLLECTION, collection("kept"))
    o = await ready(kns, "kept")
    assert o["status"]["collectionID"] == cid and cond(o, "Ready")["reason"] == "Adopted"
    assert o["status"]["createdBy"] == "operator"


@pytest.mark.parametrize("case", ["dim0", "two_pks", "bad_name"])
async def test_invalid_collection_reported_without_touching_etcd(kns, operators, case):
    op = await start_operator(operators)
    rc = op.component("rootcoord")
    calls = []
    for method in ("CreateCollection", "DescribeCollection", "DropCollection"):
        real = getattr(rc, method)

        async def spy(req, context=None, _real=real, _m=method):
            calls.append(_m)
            return await _real(req, context)

        setattr(rc, method, spy)
    body = collection("bad")
    if case == "dim0":
        body["spec"]["fields"][1]["dim"] = 0
    elif case == "two_pks":
        body["spec"]["fields"][2] = {"name": "tag", "dataType": "Int64", "isPrimaryKey": True}
    else:  # a valid resource name whose Milvus name (from metadata.name) is not: the API server admits it
        body["metadata"]["name"] = "9-bad"
    name = body["metadata"]["name"]
    message = {
        "dim0": "dim must be in [1, 32768]",
        "two_pks": "exactly one field must be the primary key",
        "bad_name": "is not a valid Milvus name",
    }[case]
    before = op.call(op.runtime.node.kv.get_prefix("root-coord/"))
    # The handler alone, given the resource: Failed with the reason, nothing sent to RootCoord.
    out = op.call(
        controllers.collection.converge(
            op.runtime, {**body, "metadata": {**body["metadata"], "uid": "u", "generation": 1}}
        )
    )
    c = cond({"status": out.status}, "Ready")
    assert out.status["phase"] == "Failed" and c["status"] == "False" and c["reason"] == "InvalidSpec"
    assert message in c["message"] and [(t, r) for t, r, _ in out.events] == [("Warning", "InvalidSpec")]
    assert calls == []
    if case != "bad_name":  # the API server refuses it first (the CRD's schema and CEL rules)
        await refused(kns.create(R.COLLECTION, body), {"dim0": "spec.fields[1].dim", "two_pks": message}[case])
        assert kns.obj(R.COLLECTION, name) is None
    else:
        await kns.create(R.COLLECTION, body)
        o = await eventually(
            lambda: (x := kns.obj(R.COLLECTION, name)) and x.get("status", {}).get("phase") == "Failed" and x,
            10,
            "phase Failed",
        )
        c = cond(o, "Ready")
        assert c["status"] == "False" and c["reason"] == "InvalidSpec" and message in c["message"]
        assert cond(o, "Stalled")["status"] == "True" and cond(o, "Stalled")["reason"] == "InvalidSpec"
        ev = await eventually(lambda: kns.events("InvalidSpec", name), 5, "an InvalidSpec event")
        assert ev[0]["type"] == "Warning"
        await kns.delete(R.COLLECTION, name)
        await eventually(lambda: kns.obj(R.COLLECTION, name) is None, 10, "the invalid Collection to go")
    assert calls == [] and not rc.collections
    assert op.call(op.runtime.node.kv.get_prefix("root-coord/")) == before


async def test_sdk_created_collections_and_adoption(kns, operators, node_factory):
    op = await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "proxy"))
    rc = op.component("rootcoord")

    def sdk_create(name: str, dim: int):
        c = MilvusClient(uri=data.uri)
        schema = MilvusClient.create_schema()
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=dim)
        c.create_collection(name, schema=schema)
        c.close()

    await asyncio.to_thread(sdk_create, "From_SDK", 4)
    mirrored = await eventually(
        lambda: [
            o
            for o in kns.items(R.COLLECTION)
            if o["spec"].get("name") == "From_SDK" and cond(o, "Ready").get("status") == "True"
        ],
        15,
        "the SDK collection mirrored and Ready",
    )
    m = mirrored[0]
    assert m["metadata"]["annotations"][R.ANN_CREATED_BY] == "sdk" and m["status"]["createdBy"] == "sdk"
    assert cond(m, "Ready")["reason"] == "Adopted" and m["spec"]["fields"][1] == {
        "name": "vec",
        "dataType": "FloatVector",
        "dim": 4,
    }
    cid = m["status"]["collectionID"]

    # A resource for an existing collection with another schema: SchemaConflict, nothing adopted.
    await kns.create(
        R.COLLECTION,
        {
            "metadata": {"name": "mine"},
            "spec": {"name": "From_SDK", "fields": collection("x", dim=16)["spec"]["fields"]},
        },
    )
    o = await eventually(
        lambda: (x := kns.obj(R.COLLECTION, "mine")) and cond(x, "Ready").get("status") == "False" and x,
        10,
        "SchemaConflict",
    )
    assert (
        cond(o, "Ready")["reason"] == "SchemaConflict"
        and "changed vec (FloatVector,dim=4) -> (FloatVector,dim=16)" in cond(o, "Ready")["message"]
    )
    await eventually(lambda: kns.events("SchemaConflict", "mine"), 5, "a SchemaConflict event")
    assert cid in rc.collections and rc.collections[cid].schema.fields[1].type_params[0].value == "4"

    # Deleting the mirrored resource drops the collection ...
    await kns.delete(R.COLLECTION, m["metadata"]["name"])
    await eventually(
        lambda: cid not in rc.collections and kns.obj(R.COLLECTION, m["metadata"]["name"]) is None,
        15,
        "the SDK collection dropped",
    )
    c = MilvusClient(uri=data.uri)
    assert not await asyncio.to_thread(c.has_collection, "From_SDK")
    # ... and the conflict is gone: the waiting resource converges by itself (no spec change).
    o = await ready(kns, "mine")
    assert cond(o, "Ready")["reason"] == "Created" and o["status"]["collectionID"] != cid
    await kns.delete(R.COLLECTION, "mine")
    await eventually(lambda: kns.obj(R.COLLECTION, "mine") is None and not rc.collections, 10, "mine dropped")
    # And a collection dropped through the SDK takes its mirrored resource with it.
    await asyncio.to_thread(sdk_create, "gone", 4)
    await eventually(lambda: cond(kns.obj(R.COLLECTION, "gone"), "Ready").get("status") == "True", 15, "gone mirrored")
    await asyncio.to_thread(c.drop_collection, "gone")
    await eventually(lambda: kns.obj(R.COLLECTION, "gone") is None, 15, "the mirror of a dropped collection to go")
    c.close()


async def test_operator_killed_mid_drop_finishes_after_restart(kns, operators, node_factory):
    op = await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "proxy"))
    await kns.create(R.COLLECTION, collection("doomed"))
    o = await ready(kns, "doomed")
    cid, vchannels = o["status"]["collectionID"], o["status"]["vchannels"]
    await asyncio.to_thread(insert_rows, data.uri, "doomed", 300)
    await kns.create(R.FLUSHREQUEST, {"metadata": {"name": "fd"}, "spec": {"collectionNames": ["doomed"]}})
    await eventually(
        lambda: (x := kns.obj(R.FLUSHREQUEST, "fd")) and x.get("status", {}).get("phase") == "Completed", 20, "flushed"
    )
    await eventually(lambda: kns.items(R.SEGMENT), 10, "Segments")
    rc = op.component("rootcoord")
    killed = threading.Event()

    async def crash_after_meta_txn(info):
        killed.set()
        op.task.cancel()  # the operator dies right after RootCoord's one meta transaction
        await asyncio.Event().wait()

    rc._broadcast_drop = crash_after_meta_txn
    await kns.delete(R.COLLECTION, "doomed")
    await eventually(killed.is_set, 10, "the drop to start")
    await asyncio.to_thread(op._join)
    kv = await EtcdKV.connect(op.cfg.etcd_endpoints, f"{op.cfg.cluster}/meta")
    try:  # killed right after the meta transaction: meta gone, the drop's task record left
        assert await kv.get(catalog.drop_task_key(cid)) is not None
        assert await kv.get(catalog.collection_key(cid)) is None
        assert await kv.get_prefix(catalog.segment_prefix(cid))
    finally:
        await kv.close()
    assert kns.obj(R.COLLECTION, "doomed") is not None  # the finalizer holds it: the drop is half done

    op2 = await start_operator(operators)
    await eventually(lambda: kns.obj(R.COLLECTION, "doomed") is None, 30, "the drop to finish after the restart")
    assert cid not in op2.component("rootcoord").collections
    for prefix in catalog.collection_owned_prefixes(cid, vchannels):
        assert not op2.call(op2.runtime.node.kv.get_prefix(prefix)), prefix
    await eventually(lambda: not kns.items(R.SEGMENT), 20, "its Segments to go")


async def test_two_replicas_never_both_act(kns, operators, cfg):
    """Two replicas started together: kopf peering lets one act, and the coordinators (the part
    that must never run twice) are never registered by both at once — checked on etcd's session
    keys, watched from before either starts."""
    from kmilvus.sessionutil import watch_sessions

    kv = await EtcdKV.connect(cfg.etcd_endpoints, f"{cfg.cluster}/meta")
    live: set[int] = set()
    most = 0

    async def watch():
        nonlocal most
        async for kind, sid, _ in watch_sessions(kv, "rootcoord"):
            (live.add if kind == "add" else live.discard)(sid)
            most = max(most, len(live))

    watcher = asyncio.create_task(watch())
    try:
        a, b = await asyncio.gather(
            asyncio.to_thread(operators, peering="kmilvus", priority=200),
            asyncio.to_thread(operators, peering="kmilvus", priority=100),
        )
        await eventually(lambda: a.runtime.active and not b.runtime.active, 20, "A to lead, B to stand by")
        await kns.create(R.COLLECTION, collection("one"))
        await ready(kns, "one")
        await asyncio.sleep(1.0)  # a standby that wrongly acted would have by now
        assert a.runtime.stats.counts["created"] == 1 and b.runtime.node is None
        assert not b.runtime.stats.counts["collection_reconciles"]
        peers = kns.obj(R.PEERING, "kmilvus")["status"]
        assert len(peers) == 2 and sorted(p["priority"] for p in peers.values()) == [100, 200]

        await asyncio.to_thread(a.stop)  # A leaves; B takes over
        await eventually(lambda: b.runtime.active, 30, "B to take over")
        await kns.create(R.COLLECTION, collection("two"))
        await ready(kns, "two")
        assert b.runtime.stats.counts["created"] == 1
        assert {c.schema.name for c in b.component("rootcoord").collections.values()} == {"one", "two"}
        assert most == 1, f"{most} RootCoord sessions were registered at the same time"
        assert len(live) == 1
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await kv.close()


async def test_kmilvus_operator_cli(kns, cfg, tmp_path):
    """The real entry point: `kmilvus-operator` as a process, flags and env fallbacks, peering on
    (it creates its peering object), /healthz and Prometheus metrics, SIGTERM."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import urllib.request
    from pathlib import Path

    from kmilvus.util.embedded import free_port

    kubeconfig = kns.cp.kubeconfig_for(tmp_path / "kubeconfig")
    health, metrics = free_port(), free_port()
    env = dict(
        os.environ,
        KUBECONFIG=str(kubeconfig),
        KMILVUS_ETCD_ENDPOINT=cfg.etcd_endpoints[0],
        KMILVUS_NATS_URL=cfg.nats_url,
        KMILVUS_STORAGE_URI=cfg.storage_uri,
        KMILVUS_SESSION_TTL="3",
    )
    argv = [
        str(Path(sys.executable).with_name("kmilvus-operator")),
        "--cluster",
        cfg.cluster,
        "--namespace",
        kns.name,
        "--health-port",
        str(health),
        "--metrics-port",
        str(metrics),
    ]
    with open(tmp_path / "operator.log", "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def get(port: int, path: str) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
                return r.read().decode()
        except OSError:
            return ""

    async def active() -> bool:  # kopf caches probe results for 10 s: the gauge is live
        return "kmilvus_operator_active 1.0" in await asyncio.to_thread(get, metrics, "/metrics")

    try:

        async def up() -> bool:
            assert proc.poll() is None, (tmp_path / "operator.log").read_text()[-3000:]
            return await active()

        await eventually(up, 30, lambda: "the operator active:\n" + (tmp_path / "operator.log").read_text()[-3000:])
        assert kns.obj(R.PEERING, "kmilvus") is not None  # created when missing
        await kns.create(R.COLLECTION, collection("cli"))
        await ready(kns, "cli")
        text = await asyncio.to_thread(get, metrics, "/metrics")
        assert 'kmilvus_operator_reconciles_total{kind="Collection",result="Ready"} 1.0' in text
        assert "kmilvus_operator_kube_requests_total" in text
        probe = json.loads(await asyncio.to_thread(get, health, "/healthz"))  # liveness / readiness
        assert probe["coordinators"]["cluster"] == cfg.cluster
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)


async def test_database_and_partitions_from_the_spec(kns, operators, node_factory):
    """spec.database is created when missing; spec.partitions is declarative (a partition removed
    from the list is dropped, deletionPolicy Delete); Segments name their partition."""
    op = await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "proxy"))
    rc = op.component("rootcoord")
    await kns.create(R.COLLECTION, collection("shop-items", database="shop", partitions=["p1", "p2"]))
    o = await eventually(
        lambda: (x := kns.obj(R.COLLECTION, "shop-items")) and (x.get("status") or {}).get("partitions") and x,
        20,
        "partitions",
    )
    cid = o["status"]["collectionID"]
    assert "shop" in rc.databases and rc.collections[cid].db_name == "shop"
    assert o["status"]["partitions"] == ["_default", "p1", "p2"] and o["status"]["database"] == "shop"
    await eventually(lambda: kns.events("PartitionCreated", "shop-items"), 5, "a PartitionCreated event")

    def insert_and_flush():
        c = MilvusClient(uri=data.uri, db_name="shop")
        try:
            rows = [{"id": i, "vec": [0.5] * 8, "tag": "t"} for i in range(20)]
            c.insert("shop_items", rows, partition_name="p1")
            c.flush("shop_items")
            return c.get_partition_stats("shop_items", "p1")["row_count"]
        finally:
            c.close()

    assert await asyncio.to_thread(insert_and_flush) == 20

    def p1_segments():
        segs = [s for s in kns.items(R.SEGMENT) if s["spec"]["collectionID"] == cid]
        return segs if segs and all(s.get("status", {}).get("state") == "Flushed" for s in segs) else None

    segs = await eventually(p1_segments, 10, "the p1 Segment mirrored")
    assert {s["spec"]["partition"] for s in segs} == {"p1"}

    await kns.patch(R.COLLECTION, "shop-items", {"spec": {"partitions": ["p1"]}})
    await eventually(
        lambda: [p.partitionName for p in rc.collections[cid].partitions] == ["_default", "p1"], 10, "p2 dropped"
    )
    o = await eventually(
        lambda: (x := kns.obj(R.COLLECTION, "shop-items")) and x["status"]["partitions"] == ["_default", "p1"] and x,
        10,
        "status.partitions without p2",
    )
    await eventually(lambda: kns.events("PartitionDropped", "shop-items"), 5, "a PartitionDropped event")


async def test_spec_load_loads_and_releases(kns, operators, node_factory):
    """spec.load true: loaded through QueryCoord once the vector field has an index (until then
    status.load says why not); false: released. status.load shows state and progress."""
    op = await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "querynode", "proxy"))
    await kns.create(R.COLLECTION, collection("ld", load=True))
    cid = (await ready(kns, "ld"))["status"]["collectionID"]

    def load_status() -> dict:
        return ((kns.obj(R.COLLECTION, "ld") or {}).get("status") or {}).get("load") or {}

    refused = await eventually(lambda: load_status().get("message") and load_status(), 20, "load refused")
    assert refused["state"] == "NotLoad" and "there is no vector index on field: [vec]" in refused["message"]
    await asyncio.to_thread(insert_rows, data.uri, "ld", 100)

    def create_index() -> None:
        c = MilvusClient(uri=data.uri)
        idx = c.prepare_index_params()
        idx.add_index("vec", index_type="FLAT", metric_type="L2")
        c.create_index("ld", idx)
        c.close()

    await asyncio.to_thread(create_index)
    loaded = await eventually(lambda: load_status().get("state") == "Loaded" and load_status(), 30, "loaded")
    assert loaded["progress"] == 100 and loaded["replicas"] == 1 and not loaded["message"]
    qc = op.component("querycoord")
    assert cid in qc.loads.loads

    def count() -> int:
        c = MilvusClient(uri=data.uri)
        try:
            return c.query("ld", filter="", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]
        finally:
            c.close()

    assert await asyncio.to_thread(count) == 100
    await kns.patch(R.COLLECTION, "ld", {"spec": {"load": False}})
    await eventually(lambda: load_status().get("state") == "NotLoad", 20, "released")
    assert cid not in qc.loads.loads


async def test_spec_indexes_built_loaded_dropped(kns, operators, node_factory):
    """spec.indexes: a declared index is built (pymilvus' describe_index shows it, status.indexes
    Finished) before spec.load loads the collection (searchable); a re-reconcile changes nothing;
    changed params are refused in a condition (not flapping); removed from the spec after a
    release, the index is dropped."""
    op = await start_operator(operators)
    data = await asyncio.to_thread(node_factory, roles=("datanode", "indexnode", "querynode", "proxy"))
    hnsw = {"fieldName": "vec", "indexType": "HNSW", "metricType": "L2", "params": {"M": 16, "efConstruction": 64}}
    await kns.create(R.COLLECTION, collection("ix", load=True, indexes=[hnsw]))
    cid = (await ready(kns, "ix"))["status"]["collectionID"]

    def status() -> dict:
        return (kns.obj(R.COLLECTION, "ix") or {}).get("status") or {}

    await eventually(lambda: (status().get("load") or {}).get("state") == "Loaded", 30, "loaded")
    load = status()["load"]
    assert load["progress"] == 100 and load["replicas"] == 1 and not load["message"]
    await asyncio.to_thread(insert_rows, data.uri, "ix", 100)

    def pymilvus(fn):
        c = MilvusClient(uri=data.uri)
        try:
            return fn(c)
        finally:
            c.close()

    await asyncio.to_thread(pymilvus, lambda c: c.flush("ix"))
    built = await eventually(
        lambda: (
            (ixs := status().get("indexes"))
            and ixs[0].get("state") == "Finished"
            and ixs[0].get("indexedRows") == 100
            and ixs
        ),
        30,
        "status.indexes Finished with 100 rows",
    )
    assert built == [
        {
            "name": "vec",
            "fieldName": "vec",
            "indexType": "HNSW",
            "metricType": "L2",
            "state": "Finished",
            "indexedRows": 100,
            "totalRows": 100,
            "pendingRows": 0,
        }
    ]
    seen = await asyncio.to_thread(pymilvus, lambda c: c.describe_index("ix", "vec"))
    assert seen["index_type"] == "HNSW" and seen["metric_type"] == "L2" and seen["field_name"] == "vec"
    hits = await asyncio.to_thread(
        pymilvus,
        lambda c: c.search("ix", data=[[0.5] * 8], limit=3, consistency_level="Strong", search_params={"ef": 16}),
    )
    assert len(hits[0]) == 3
    o = kns.obj(R.COLLECTION, "ix")
    assert cond(o, "IndexesSynced")["status"] == "True" and cond(o, "Stalled")["status"] == "False"
    await eventually(lambda: kns.events("IndexCreated", "ix"), 5, "an IndexCreated event")
    assert len(kns.events("IndexCreated", "ix")) == 1
    assert check_instance({"apiVersion": "kmilvus.io/v1alpha1", "kind": "Collection", **o}) == []

    # Idempotent: converging again creates nothing and says nothing.
    dc = op.component("datacoord")
    ids = sorted(dc.index_meta.indexes)
    again = op.call(controllers.collection.converge(op.runtime, kns.obj(R.COLLECTION, "ix")))
    assert again.events == [] and sorted(dc.index_meta.indexes) == ids
    assert again.status["indexes"] == status()["indexes"] and again.status["load"] == status()["load"]

    # Other params: refused with a clear reason (Milvus cannot change an index in place), once.
    await kns.patch(R.COLLECTION, "ix", {"spec": {"indexes": [{**hnsw, "params": {"M": 8, "efConstruction": 64}}]}})
    refused = await eventually(
        lambda: (
            cond(kns.obj(R.COLLECTION, "ix"), "IndexesSynced").get("status") == "False" and kns.obj(R.COLLECTION, "ix")
        ),
        20,
        "IndexesSynced False",
    )
    c = cond(refused, "IndexesSynced")
    assert c["reason"] == "IndexParamsImmutable" and "cannot change an index in place" in c["message"]
    assert cond(refused, "Stalled")["status"] == "True"
    await asyncio.sleep(2)  # the monitor passes again: no new event, no flap
    assert len(kns.events("IndexParamsImmutable", "ix")) == 1
    assert cond(kns.obj(R.COLLECTION, "ix"), "IndexesSynced")["lastTransitionTime"] == c["lastTransitionTime"]
    assert sorted(dc.index_meta.indexes) == ids

    # Removed from the spec while loaded: waits for a release (ReleaseRequired); released: dropped.
    await kns.patch(R.COLLECTION, "ix", {"spec": {"indexes": []}})
    await eventually(
        lambda: cond(kns.obj(R.COLLECTION, "ix"), "IndexesSynced").get("reason") == "ReleaseRequired",
        20,
        "ReleaseRequired",
    )
    assert [i.index_name for i in dc.index_meta.of_collection(cid)] == ["vec"]
    await kns.patch(R.COLLECTION, "ix", {"spec": {"load": False}})
    await eventually(lambda: not dc.index_meta.of_collection(cid), 20, "the index dropped")
    o = await eventually(
        lambda: (x := kns.obj(R.COLLECTION, "ix")) and x["status"].get("indexes") == [] and x,
        20,
        "status.indexes empty",
    )
    assert o["status"]["load"]["state"] == "NotLoad" and cond(o, "IndexesSynced")["status"] == "True"
    assert await asyncio.to_thread(pymilvus, lambda c: c.list_indexes("ix")) == []
    await eventually(lambda: kns.events("IndexDropped", "ix"), 5, "an IndexDropped event")


async def test_spec_indexes_bad_params_create_nothing(kns, operators):
    """An index Milvus would refuse (params out of range, a scalar field): Ready=False / Stalled
    with Milvus' message and an event, and neither the collection nor an index is created."""
    op = await start_operator(operators)
    bad = {"fieldName": "vec", "indexType": "IVF_FLAT", "params": {"nlist": 0}}
    await kns.create(R.COLLECTION, collection("badix", indexes=[bad]))
    o = await eventually(
        lambda: (x := kns.obj(R.COLLECTION, "badix")) and cond(x, "Ready").get("status") == "False" and x, 20, "refused"
    )
    c = cond(o, "Ready")
    assert c["reason"] == "InvalidIndex" and "nlist out of range: [1, 65536]" in c["message"]
    assert cond(o, "Stalled")["status"] == "True" and o["status"]["phase"] == "Failed"
    await eventually(lambda: kns.events("InvalidIndex", "badix"), 5, "an InvalidIndex event")
    rc = op.component("rootcoord")
    assert not [x for x in rc.collections.values() if x.schema.name == "badix"]
    # Fixed: created, with its index.
    await kns.patch(R.COLLECTION, "badix", {"spec": {"indexes": [{**bad, "params": {"nlist": 4}}]}})
    cid = (await ready(kns, "badix"))["status"]["collectionID"]
    dc = op.component("datacoord")
    await eventually(lambda: [i.index_name for i in dc.index_meta.of_collection(cid)] == ["vec"], 20, "index built")
    # A live collection: a bad index edit is IndexesSynced=False; nothing dropped or created.
    await kns.patch(R.COLLECTION, "badix", {"spec": {"indexes": [{"fieldName": "tag", "indexType": "FLAT"}]}})
    o = await eventually(
        lambda: (
            (x := kns.obj(R.COLLECTION, "badix")) and cond(x, "IndexesSynced").get("reason") == "InvalidIndex" and x
        ),
        20,
        "IndexesSynced InvalidIndex",
    )
    assert "can't build flat in not vector type." in cond(o, "IndexesSynced")["message"]
    assert cond(o, "Ready")["status"] == "True" and cond(o, "Stalled")["status"] == "True"
    assert [i.index_name for i in dc.index_meta.of_collection(cid)] == ["vec"]
