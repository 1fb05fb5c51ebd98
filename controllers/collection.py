"""Collection: a Milvus collection declared as a custom resource.

- reconcile (create / resume / spec update): validate the spec (no etcd touched when it is
  invalid), then create the collection through RootCoord, or adopt an existing one with the same
  name and schema (SchemaConflict otherwise); a changed schema is refused (SchemaSynced=False,
  reason SchemaImmutable, and a Warning event) because Milvus cannot alter one.
- delete (finalizer): deletionPolicy Delete runs RootCoord's DropCollection and waits until its
  resumable tail has finished (RootCoord's GetDropState); Retain keeps the data.
  Either way the Segment resources go.
- monitor (daemon): mirrors DataCoord's segments as Segment resources and keeps rows / segment
  counts in the status; notices a collection dropped behind the resource's back (an SDK-mirrored
  resource is then deleted, an operator-managed one is created again).

Every path is level-triggered: it compares the resource with what the coordinators hold now,
asked through `kmilvus.coordinator.CoordinatorClient` (never their state or etcd keys).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import kopf
from pymilvus.grpc_gen import common_pb2, milvus_pb2

from controllers import conditions, metrics
from controllers import resources as R
from controllers.runtime import Runtime
from controllers.schema import (
    CONSISTENCY,
    DEFAULT_CONSISTENCY,
    DeclaredIndex,
    SpecError,
    Target,
    declared_indexes,
    index_name,
    same_schema,
    schema_diff,
    target,
    to_schema,
)
from controllers.segments import SegmentMirror, delete_segments
from kmilvus.coordinator import CoordinatorClient
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB, DEFAULT_PARTITION

log = logging.getLogger("kmilvus.operator.collection")
DROP_WAIT = 30.0
RETRY_REASONS = ("SchemaConflict", "NameConflict")  # may clear up without a spec change


@dataclass
class Outcome:
    status: dict = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    delete_resource: bool = False


def _meta(body) -> tuple[str, str, str, int | None]:
    m = body["metadata"]
    return m["name"], m.get("namespace"), m.get("uid", ""), m.get("generation")


def _spec(body):
    """The spec as a dict to read (a copy); anything else as it is, for check_spec to report."""
    spec = body.get("spec")
    if spec is None:
        return {}
    return dict(spec) if isinstance(spec, dict) else spec


def _is_sdk(body) -> bool:
    return (body["metadata"].get("annotations") or {}).get(R.ANN_CREATED_BY) == "sdk"


def _deleting(body) -> bool:
    return bool(body["metadata"].get("deletionTimestamp"))


def _prop(desc: milvus_pb2.DescribeCollectionResponse, key: str) -> str | None:
    for kv in desc.properties:
        if kv.key == key:
            return str(kv.value)
    return None


async def describe(co: CoordinatorClient, t: Target | None = None, *, collection_id: int = 0):
    """DescribeCollection (by name, or by ID), or None when there is no such collection."""
    try:
        if collection_id:
            return await co.describe_collection(collection_id=collection_id)
        assert t is not None, "describe by name needs the target"
        return await co.describe_collection(t.database, t.name)
    except merr.MilvusError as exc:
        what = collection_id or (t.name if t is not None else "")
        raise kopf.TemporaryError(f"DescribeCollection {what}: {exc.message}", delay=1) from None


async def converge(rt: Runtime, body) -> Outcome:
    """Compare the resource with RootCoord and converge; returns the status to write."""
    return await Convergence(rt, body).run()


class Convergence:
    """One pass over a Collection resource, in named steps, each idempotent (a pass that stops
    anywhere — an error, a restart — is simply run again): check the spec, check the identity,
    then keep, adopt or create the collection, then its partitions, indexes, load state and
    status. A step that decides the pass is over returns False; `out` then holds the result."""

    def __init__(self, rt: Runtime, body):
        self.rt, self.body = rt, body
        self.name, self.ns, self.uid, self.gen = _meta(body)
        self.spec = _spec(body)
        self.old = dict(body.get("status") or {})
        self.conds = list(self.old.get("conditions") or [])
        self.out = Outcome()
        self.live = bool(self.old.get("collectionID")) and self.old.get("phase") == "Ready"
        self.created_by = self.old.get("createdBy")
        self.declared: list[DeclaredIndex] | None = None
        self.index_error: SpecError | None = None

    async def run(self) -> Outcome:
        if not self.check_spec():
            return self.out
        self.co = await self.rt.coordinators()
        if not await self.check_identity():
            return self.out
        desc = await describe(self.co, self.t)
        known_id = self.old.get("collectionID")
        if desc is not None and desc.collectionID == known_id:
            self.keep(desc)
        elif desc is not None:
            if not await self.adopt(desc):
                return self.out
        else:
            desc = await self.create(known_id)
            if desc is None:
                return self.out
        await self.sync(desc)
        return self.out

    # ---------------------------------------------------------------------------- outcomes
    def cond(self, ctype: str, ok: bool, reason: str, msg: str) -> bool:
        self.conds, transitioned = conditions.set_condition(self.conds, ctype, ok, reason, msg, self.gen)
        return transitioned

    def warn(self, ctype: str, reason: str, msg: str, event_reason: str | None = None, event: str = "") -> None:
        """A False condition, and a Warning event (`event`, else the condition's message) when it is new."""
        if self.cond(ctype, False, reason, msg):
            self.out.events.append(("Warning", event_reason or reason, event or msg))

    def fail(self, reason: str, msg: str) -> bool:
        """Ready=False, phase Failed: nothing (more) is done for this spec."""
        self.warn("Ready", reason, msg)
        self.out.status = {"phase": "Failed", "conditions": self.conds, "observedGeneration": self.gen}
        return False

    def refuse(self, reason: str, msg: str, event_reason: str | None = None, event: str = "") -> bool:
        """SchemaSynced=False: an edit is refused, the collection keeps serving as it is."""
        self.warn("SchemaSynced", reason, msg, event_reason, event)
        self.out.status = {"conditions": self.conds, "observedGeneration": self.gen}
        return False

    # ---------------------------------------------------------------------------- steps
    def check_spec(self) -> bool:
        """The spec alone: an invalid one never reaches etcd. A bad index stops a new collection;
        for a live one it is reported (IndexesSynced) and everything else goes on."""
        try:
            self.schema = to_schema(self.spec, self.name)
        except SpecError as exc:
            msg = f"invalid Collection spec: {exc}"
            if self.live:
                return self.refuse(exc.reason, msg + "; the collection keeps its schema", event=msg)
            return self.fail(exc.reason, msg)
        try:
            self.declared = declared_indexes(self.spec, self.schema)
        except SpecError as exc:
            self.index_error = exc
            msg = f"invalid spec.indexes: {exc}"
            if not self.live:  # nothing is created from a spec with a bad index
                return self.fail(exc.reason, msg)
            self.warn("IndexesSynced", exc.reason, msg + "; no index was created or dropped", event=msg)
        self.t = target(self.spec, self.name)
        self.shards = self.spec.get("shardsNum", 1)
        return True

    async def check_identity(self) -> bool:
        """spec.name / spec.database are immutable too: never a second collection for a rename."""
        known_id = self.old.get("collectionID")
        if not known_id:
            return True
        mine = await describe(self.co, collection_id=known_id)
        if mine is None or (mine.db_name or "default", mine.collection_name) == self.t.key:
            return True
        msg = (
            f"this resource manages collection {mine.collection_name} (ID {known_id}) in database "
            f"{mine.db_name or 'default'}; spec.name and spec.database cannot change (now {self.t.name} in "
            f"{self.t.database}). Revert the change, or create a new Collection."
        )
        return self.refuse("NameImmutable", msg, "NameChangeRefused")

    def _differs(self, desc) -> bool:
        return not same_schema(self.schema, desc.schema) or desc.shards_num != self.shards

    def keep(self, desc) -> None:
        """Ours already: the schema is immutable (a change is refused, the collection serves on)."""
        if self._differs(desc):
            diff = schema_diff(self.schema, desc.schema)
            if desc.shards_num != self.shards:
                shards = f"shardsNum {desc.shards_num} -> {self.shards}"
                diff = shards if diff == "no field differs" else f"{diff}; {shards}"
            msg = (
                f"the schema of collection {self.t.name} cannot change ({diff}): Milvus does not support "
                "altering a collection schema, so it keeps the schema it was created with. Revert the "
                "change, or create a new Collection."
            )
            self.warn("SchemaSynced", "SchemaImmutable", msg, "SchemaChangeRefused")
        elif not conditions.is_true(self.conds, "SchemaSynced"):
            was_refused = conditions.get(self.conds, "SchemaSynced") is not None
            self.cond("SchemaSynced", True, "InSync", "the spec matches the collection's schema")
            if was_refused:
                msg = f"the spec matches collection {self.t.name}'s schema again"
                self.out.events.append(("Normal", "SchemaInSync", msg))
        if not conditions.is_true(self.conds, "Ready"):
            self.cond("Ready", True, "Ready", f"collection {self.t.name} (ID {desc.collectionID}) exists")

    async def adopt(self, desc) -> bool:
        """It exists but is not ours yet: adopt it when it is the same collection."""
        t = self.t
        owner = _prop(desc, R.PROP_OWNER)
        if owner and not owner.endswith("/" + self.uid) and await _owner_exists(self.rt, owner):
            return self.fail(
                "NameConflict",
                f"collection {t.name} in database {t.database} belongs to Collection {owner.rsplit('/', 1)[0]}; "
                "two resources cannot manage one collection",
            )
        if self._differs(desc):
            diff = schema_diff(self.schema, desc.schema)
            if desc.shards_num != self.shards:
                diff += f"; shardsNum {desc.shards_num} in Milvus, {self.shards} in the spec"
            return self.fail(
                "SchemaConflict",
                f"a collection named {t.name} already exists in database {t.database} with a different "
                f"schema ({diff}); it was not adopted",
            )
        sdk = _is_sdk(self.body) or _prop(desc, R.PROP_MANAGED_BY) != "operator"
        self.created_by = "sdk" if sdk else "operator"
        msg = f"adopted existing collection {t.name} (ID {desc.collectionID})"
        self.cond("Ready", True, "Adopted", msg)
        self.cond("SchemaSynced", True, "InSync", "the spec matches the collection's schema")
        self.out.events.append(("Normal", "Adopted", msg))
        self.rt.stats.inc("adopted")
        return True

    async def create(self, known_id):
        """Missing: created through RootCoord (again, if it was lost), or — an SDK mirror whose
        collection was dropped through the Milvus API — the resource follows it. Returns the new
        collection's description, or None when the pass is over."""
        t, out = self.t, self.out
        if _is_sdk(self.body):
            out.delete_resource = True  # dropped through the SDK: the mirror follows
            msg = f"collection {t.name} (ID {known_id}) was dropped through the Milvus API"
            out.events.append(("Normal", "DroppedBySDK", msg))
            return None
        if known_id:
            msg = f"collection {t.name} (ID {known_id}) no longer exists in Milvus; creating it again"
            out.events.append(("Warning", "CollectionLost", msg))
        if t.database != DEFAULT_DB:
            try:
                await self.co.ensure_database(t.database)  # spec.database is declarative too
            except merr.MilvusError as exc:
                raise kopf.TemporaryError(f"CreateDatabase {t.database}: {exc.message}", delay=1) from None
        st = await self.co.create_collection(self._create_request())
        if not merr.ok(st):
            refused = (merr.PARAMETER_INVALID[0], merr.COLLECTION_ILLEGAL_SCHEMA[0])
            if st.error_code == common_pb2.IllegalArgument or st.code in refused:
                self.fail("CreateFailed", f"Milvus refused the collection: {st.reason}")
                return None
            raise kopf.TemporaryError(f"CreateCollection {t.name}: {st.reason}", delay=1)
        desc = await describe(self.co, t)
        if desc is None:
            raise kopf.TemporaryError(f"collection {t.name} vanished right after its creation", delay=1)
        self.created_by = "operator"
        msg = (
            f"created collection {t.name} (ID {desc.collectionID}) with {desc.shards_num} shard(s): "
            f"{', '.join(desc.virtual_channel_names)}"
        )
        self.cond("Ready", True, "Created", msg)
        self.cond("SchemaSynced", True, "InSync", "the spec matches the collection's schema")
        out.events.append(("Normal", "Created", msg))
        self.rt.stats.inc("created")
        return desc

    def _create_request(self) -> milvus_pb2.CreateCollectionRequest:
        return milvus_pb2.CreateCollectionRequest(
            db_name=self.t.database,
            collection_name=self.t.name,
            schema=self.schema.SerializeToString(),
            shards_num=self.shards,
            num_partitions=self.spec.get("numPartitions", 0),
            consistency_level=CONSISTENCY[self.spec.get("consistencyLevel", DEFAULT_CONSISTENCY)],
            properties=[
                common_pb2.KeyValuePair(key=R.PROP_MANAGED_BY, value="operator"),
                common_pb2.KeyValuePair(key=R.PROP_OWNER, value=f"{self.ns}/{self.name}/{self.uid}"),
            ],
        )

    async def sync(self, desc) -> None:
        """The collection exists and is ours: partitions, indexes and load state as the spec
        declares them, and the status."""
        status = self.out.status = {
            "phase": "Ready",
            "collectionID": desc.collectionID,
            "database": self.t.database,
            "name": self.t.name,
            "vchannels": list(desc.virtual_channel_names),
            "createdBy": self.created_by or ("sdk" if _is_sdk(self.body) else "operator"),
            "observedGeneration": self.gen,
            "conditions": self.conds,
        }
        status["partitions"] = await sync_partitions(self.co, self.t, self.spec, desc.collectionID, self.out.events)
        if "rows" not in self.old:
            status["rows"] = 0
        if "segments" not in self.old:
            status["segments"] = {"growing": 0, "sealed": 0, "flushing": 0, "flushed": 0, "total": 0}
        want_load = self.spec.get("load")
        if want_load is True:  # LoadCollection needs the declared indexes first
            status["indexes"] = await sync_indexes(self.co, desc, self.declared, self.cond, self.out.events)
        if want_load is not None:
            status["load"] = await converge_load(self.co, desc, bool(want_load), self.out.events)
        if want_load is not True:  # after a release, so that undeclared indexes can be dropped
            status["indexes"] = await sync_indexes(self.co, desc, self.declared, self.cond, self.out.events)
        declared_none = self.declared is None and self.index_error is None
        if declared_none and conditions.get(self.conds, "IndexesSynced") is not None:
            self.cond(
                "IndexesSynced", True, "NotDeclared", "spec.indexes is not set: indexes are left to the Milvus API"
            )
        status["conditions"] = self.conds


def _index_desc(params: dict) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in ("index_type", "metric_type", "dim"))
    return f"{params.get('index_type')}/{params.get('metric_type')}" + (f" ({extra})" if extra else "")


async def sync_indexes(co: CoordinatorClient, desc, declared: list[DeclaredIndex] | None, cond, events) -> list[dict]:
    """`spec.indexes` is declarative: a declared index that is missing is created (checked as the
    Proxy checks CreateIndex); with spec.indexes set, an index it does not list — created through
    the Milvus API too — is dropped once the collection is released. An index whose params differ
    from the declared ones is not touched (Milvus cannot change one in place): IndexesSynced=False
    says what to do. Without spec.indexes nothing is changed. Returns status.indexes."""
    cid = desc.collectionID
    try:
        have = {ix.name: ix for ix in await co.describe_indexes(cid)}
        if declared is not None:
            problems = await _drop_undeclared(co, desc, declared, have, events)
            created, conflicts = await _create_declared(co, desc, declared, have, events)
            problems += conflicts
            if created:
                have = {ix.name: ix for ix in await co.describe_indexes(cid)}
            if problems:
                msg = "; ".join(m for _, m in problems)
                if cond("IndexesSynced", False, problems[0][0], msg):
                    events.append(("Warning", problems[0][0], msg))
            elif cond("IndexesSynced", True, "InSync", "every declared index exists with its declared params"):
                events.append(("Normal", "IndexesInSync", f"the indexes of {desc.collection_name} match spec.indexes"))
    except merr.MilvusError as exc:
        raise kopf.TemporaryError(f"indexes of {desc.collection_name}: {exc.message}", delay=2) from None
    return _index_status(desc, have)


async def _drop_undeclared(co: CoordinatorClient, desc, declared, have: dict, events) -> list[tuple[str, str]]:
    """Drop the indexes spec.indexes does not list (Milvus drops one only while the collection is
    released: a loaded one is a problem to report). `have` loses the dropped ones."""
    wanted = {d.name for d in declared}
    undeclared = [n for n in have if n not in wanted]
    if not undeclared:
        return []
    if (await co.load_state(desc.collectionID))[0] != "NotLoad":
        msg = (
            f"index(es) {', '.join(undeclared)} are not in spec.indexes, but Milvus drops an index only while "
            "the collection is released: set spec.load to false to drop them"
        )
        return [("ReleaseRequired", msg)]
    for n in undeclared:
        await co.drop_index(desc.collectionID, n)
        events.append(("Normal", "IndexDropped", f"dropped index {n} of collection {desc.collection_name}"))
        del have[n]
    return []


async def _create_declared(co: CoordinatorClient, desc, declared, have: dict, events) -> tuple[bool, list]:
    """Create the declared indexes that are missing; (whether one was created, the problems:
    a field indexed under another name, an index whose params differ)."""
    field_ids = {f.name: f.fieldID for f in desc.schema.fields}
    created, problems = False, []
    for d in declared:
        cur = have.get(d.name)
        other = next((h for h in have.values() if h.field_id == field_ids[d.field]), None)
        if cur is None and other is not None:
            msg = (
                f"field {d.field} already has index {other.name}; Milvus builds one index per field, so index "
                f"{d.name} waits until {other.name} is dropped"
            )
            problems.append(("IndexConflict", msg))
        elif cur is None:
            await co.create_index(desc, d.field, d.params, d.name)
            created = True
            msg = f"created index {d.name} on field {d.field} ({_index_desc(d.params)})"
            events.append(("Normal", "IndexCreated", msg))
        elif cur.field_id != field_ids[d.field] or cur.params != d.params:
            msg = (
                f"index {d.name} exists as {_index_desc(cur.params)}, spec.indexes declares "
                f"{_index_desc(d.params)}: Milvus cannot change an index in place. To rebuild it, release the "
                "collection (spec.load: false), remove the index from spec.indexes (it is dropped), then "
                "declare it again"
            )
            problems.append(("IndexParamsImmutable", msg))
    return created, problems


def _index_status(desc, have: dict) -> list[dict]:
    """status.indexes: each index with its build progress (DataCoord's DescribeIndex)."""
    names = {f.fieldID: f.name for f in desc.schema.fields}
    out = []
    for ix in sorted(have.values(), key=lambda i: i.name):
        entry = {
            "name": ix.name,
            "fieldName": names.get(ix.field_id, ""),
            "indexType": ix.index_type,
            "metricType": ix.metric_type,
            "state": ix.state,
            "indexedRows": ix.indexed_rows,
            "totalRows": ix.total_rows,
            "pendingRows": ix.pending_rows,
        }
        if ix.fail_reason:
            entry["message"] = ix.fail_reason[:4096]
        out.append(entry)
    return out


async def sync_partitions(co: CoordinatorClient, t: Target, spec: dict, cid: int, events: list) -> list[str]:
    """`spec.partitions` is declarative: a listed partition that is missing is created; with
    deletionPolicy Delete, a partition not listed (except `_default`) is dropped. Without
    `spec.partitions` the operator leaves partitions alone (the SDK manages them). Returns the
    collection's partitions afterwards."""
    try:
        have = await co.list_partitions(cid)
        wanted = spec.get("partitions")
        if wanted is None:
            return list(have)
        for p in wanted:
            if p not in have:
                await co.create_partition(t.database, t.name, p)
                events.append(("Normal", "PartitionCreated", f"created partition {p} of collection {t.name}"))
        if spec.get("deletionPolicy", "Delete") == "Delete":
            for p in have:
                if p != DEFAULT_PARTITION and p not in wanted:
                    await co.drop_partition(t.database, t.name, p)
                    events.append(("Normal", "PartitionDropped", f"dropped partition {p} of collection {t.name}"))
        return list(await co.list_partitions(cid))
    except merr.MilvusError as exc:
        raise kopf.TemporaryError(f"partitions of {t.name}: {exc.message}", delay=2) from None


async def converge_load(co: CoordinatorClient, desc, want: bool, events: list) -> dict:
    """spec.load: load (true) or release (false) through QueryCoord; returns status.load."""
    try:
        state, progress = await co.load_state(desc.collectionID)
        if want and state == "NotLoad":
            await co.load_collection(desc)
            events.append(("Normal", "Loading", f"loading collection {desc.collection_name}"))
            state, progress = await co.load_state(desc.collectionID)
        elif not want and state != "NotLoad":
            await co.release_collection(desc.collectionID)
            events.append(("Normal", "Released", f"released collection {desc.collection_name}"))
            state, progress = "NotLoad", 0
    except merr.MilvusError as exc:
        return {"state": "NotLoad", "progress": 0, "replicas": 0, "message": exc.message}
    return {"state": state, "progress": progress, "replicas": 0 if state == "NotLoad" else 1, "message": ""}


def index_builds_pending(body) -> bool:
    """status.indexes is behind: a build is running, or flushed rows are not counted yet (a
    Failed build stays as it is until the index is dropped)."""
    status = body.get("status") or {}
    rows = status.get("rows")
    return any(
        ix.get("state") != "Failed"
        and (
            ix.get("state") in ("Unissued", "InProgress")
            or ix.get("indexedRows") != ix.get("totalRows")
            or (rows is not None and ix.get("totalRows") != rows)
        )
        for ix in status.get("indexes") or []
    )


def indexes_unsynced(body) -> bool:
    """The collection's indexes differ from spec.indexes by name: a declared one is missing, or
    one no longer declared is still there (waiting for a release, perhaps done through pymilvus)."""
    declared = (body.get("spec") or {}).get("indexes")
    if not isinstance(declared, list):
        return False
    have = (body.get("status") or {}).get("indexes") or []
    return {index_name(d) for d in declared if isinstance(d, dict)} != {ix.get("name") for ix in have}


def load_pending(body) -> bool:
    """spec.load asks for a state the status does not show yet (monitor converges again)."""
    want = (body.get("spec") or {}).get("load")
    if want is None:
        return False
    load = (body.get("status") or {}).get("load") or {}
    return load.get("state") != ("Loaded" if want else "NotLoad")


async def _owner_exists(rt: Runtime, owner: str) -> bool:
    ns, name, uid = [*owner.split("/"), "", "", ""][:3]
    try:
        obj = await rt.kube.get(R.COLLECTION, ns, name)
    except Exception:  # noqa: BLE001 - gone, or unreadable: treat as gone
        return False
    return obj.get("metadata", {}).get("uid") == uid and not obj.get("metadata", {}).get("deletionTimestamp")


def post_events(body, events) -> None:
    for etype, reason, msg in events:
        kopf.event(body, type=etype, reason=reason, message=msg)


def _status_delta(old: dict, new: dict) -> dict:
    return {k: v for k, v in new.items() if old.get(k) != v}


# Handlers --------------------------------------------------------------------------------------
async def reconcile(body, memo, patch, logger, **_):
    rt: Runtime = memo.runtime
    name, ns, uid, _gen = _meta(body)
    async with rt.lock(uid):
        try:
            out = await converge(rt, body)
        except kopf.TemporaryError:
            metrics.RECONCILES.labels("Collection", "retry").inc()
            raise
    rt.stats.inc("collection_reconciles")
    metrics.RECONCILES.labels("Collection", out.status.get("phase", "deleted")).inc()
    post_events(body, out.events)
    if out.delete_resource:
        await rt.kube.delete(R.COLLECTION, ns, name)
        return
    if "conditions" in out.status:
        out.status["conditions"] = conditions.with_kstatus(out.status["conditions"], _gen)
    delta = _status_delta(dict(body.get("status") or {}), out.status)
    if delta:
        patch.status.update(delta)


async def delete(body, memo, patch, logger, **_):
    rt: Runtime = memo.runtime
    name, ns, uid, _gen = _meta(body)
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    status = dict(body.get("status") or {})
    cid = status.get("collectionID")
    policy = spec.get("deletionPolicy", "Delete")
    started = time.monotonic()
    async with rt.lock(uid):
        if policy == "Retain":
            if cid:
                kopf.event(
                    body,
                    type="Normal",
                    reason="Retained",
                    message=f"collection {status.get('name')} (ID {cid}) kept: deletionPolicy is Retain",
                )
        elif cid:
            co = await rt.coordinators()
            # The collection the status recorded (the spec may have been edited, even broken, since).
            t = Target(status.get("database") or DEFAULT_DB, status.get("name") or "")
            if not t.name:
                t = target(spec, name)
            if not (isinstance(t.database, str) and isinstance(t.name, str)):
                t = Target(DEFAULT_DB, "")
            desc = await describe(co, t) if t.name else None
            dropping = (await co.drop_state(cid)).dropping
            if desc is not None and desc.collectionID == cid:
                try:
                    await co.drop_collection(t.database, t.name)
                except merr.MilvusError as exc:
                    raise kopf.TemporaryError(f"DropCollection {t.name}: {exc.message}", delay=1) from None
                dropping = True
            if dropping:
                if not await wait_dropped(co, cid, DROP_WAIT):
                    if (status.get("phase")) != "Deleting":
                        patch.status["phase"] = "Deleting"
                        kopf.event(
                            body,
                            type="Normal",
                            reason="Dropping",
                            message=f"dropping collection {t.name} (ID {cid}) and all its data",
                        )
                    raise kopf.TemporaryError(f"the drop of collection {cid} is still running", delay=1)
                kopf.event(
                    body,
                    type="Normal",
                    reason="Dropped",
                    message=f"collection {t.name} (ID {cid}): schema, segments, binlogs and stream data removed",
                )
                metrics.DROP_SECONDS.observe(time.monotonic() - started)
                rt.stats.inc("dropped")
        if cid:
            await delete_segments(rt, ns, cid)
            rt.forget_segments(cid)
    rt.forget(uid)


async def wait_dropped(co: CoordinatorClient, collection_id: int, timeout: float) -> bool:
    """True once RootCoord's drop has finished (its resumable tail included) and the collection
    is gone; False when `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while (state := await co.drop_state(collection_id)).dropping:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return not state.exists


async def monitor(stopped, body, memo, logger, **_):
    """Segments -> Segment resources, rows and segment counts -> status; notices lost collections
    and retries conflicts that may have gone away (level-triggered, not only on spec changes)."""
    rt: Runtime = memo.runtime
    mirror = SegmentMirror(rt, body)
    last_retry = time.monotonic()
    while not stopped and not _deleting(body):
        status = body.get("status") or {}
        cid = status.get("collectionID")
        try:
            if rt.active:
                co = await rt.coordinators()
                if cid and status.get("phase") == "Ready" and await describe(co, collection_id=cid) is None:
                    await _reconverge(rt, body)
                elif cid:
                    await mirror.sync(cid)
                    if status.get("phase") == "Ready" and (
                        load_pending(body)
                        or index_builds_pending(body)
                        or (indexes_unsynced(body) and time.monotonic() - last_retry >= rt.opts.retry_interval)
                    ):
                        last_retry = time.monotonic()
                        await _reconverge(rt, body)
                elif (
                    status.get("phase") == "Failed"
                    and (conditions.get(status.get("conditions"), "Ready") or {}).get("reason") in RETRY_REASONS
                    and time.monotonic() - last_retry >= rt.opts.retry_interval
                ):
                    last_retry = time.monotonic()
                    await _reconverge(rt, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - keep mirroring; the next pass retries
            logger.warning(f"monitor pass failed: {exc}")
            await stopped.wait(1)
        if cid:
            await rt.wait_segments(cid, min(rt.opts.segment_rows_interval, 2.0), stopped)
        else:
            await stopped.wait(1.0)


async def _reconverge(rt: Runtime, body) -> None:
    """Converge outside a kopf handler (the collection disappeared, or a conflict may be gone):
    recreate, adopt, or follow an SDK drop by deleting the resource."""
    name, ns, uid, _gen = _meta(body)
    async with rt.lock(uid):
        if _deleting(body):
            return
        co = await rt.coordinators()
        cid = (body.get("status") or {}).get("collectionID")
        # A drop through RootCoord is done in two steps; only act once it has finished.
        if cid and (await co.drop_state(cid)).dropping:
            return
        out = await converge(rt, body)
        post_events(body, out.events)
        if out.delete_resource:
            if cid:
                await delete_segments(rt, ns, cid)
            await rt.kube.delete(R.COLLECTION, ns, name)
            return
        if "conditions" in out.status:
            out.status["conditions"] = conditions.with_kstatus(out.status["conditions"], _gen)
        delta = _status_delta(dict(body.get("status") or {}), out.status)
        if delta:
            await rt.kube.patch(R.COLLECTION, ns, name, {"status": delta}, status=True)


def index(namespace, name, uid, spec, **_):
    """Collections by (database, name); a spec without string names is not indexed (an index key
    must be hashable, and kopf does not start handling until every object is indexed)."""
    if not isinstance(spec, dict):
        return None
    key = target(spec, name).key
    if not all(isinstance(k, str) for k in key):
        return None
    return {key: {"namespace": namespace, "name": name, "uid": uid}}


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.index(*R.COLLECTIONS, id="collection_names", registry=registry)(index)
    handler = kopf.on.resume(*R.COLLECTIONS, id="reconcile", backoff=2.0, registry=registry)(reconcile)
    kopf.on.create(*R.COLLECTIONS, id="reconcile", backoff=2.0, registry=registry)(handler)
    kopf.on.update(*R.COLLECTIONS, id="reconcile", field="spec", backoff=2.0, registry=registry)(handler)
    kopf.on.delete(*R.COLLECTIONS, id="drop", backoff=2.0, registry=registry)(delete)
    kopf.daemon(
        *R.COLLECTIONS, id="monitor", cancellation_backoff=1.0, cancellation_timeout=5.0, backoff=2.0, registry=registry
    )(monitor)
