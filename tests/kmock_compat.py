"""KMock 0.8's Kubernetes emulator, made good enough for kopf and our client (test-side only).

Adds what kopf relies on and KMock 0.8 lacks (see shared/TOOLING.md):
- metadata.resourceVersion (one global counter), uid, creationTimestamp, generation (bumped when
  spec changes), and names from generateName (kopf's Events use it);
- watches that resume from ?resourceVersion= (a replayable per-resource history) instead of
  replaying every object as ADDED, with no gap between the snapshot and the live stream; lists
  report the current resourceVersion;
- 201 for creates; 422 when a JSON-patch `test` fails (kopf's optimistic finalizer patch);
- a deletionTimestamp set on an object with finalizers gets a new resourceVersion;
- the status subresource as the API server has it: for a resource declaring it, a create and a
  patch of the main resource drop `status`, a patch of `/status` changes only `status`;
- request matching that does not slow down with every request served (see `_handle`); all
  requests are kept in `.log`.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import uuid
import warnings
from pathlib import Path

import attrs
import jsonpatch
import kmock
import yaml
from kmock._internal import aiobus, dicts, enums

CRD_DIR = Path(__file__).resolve().parent.parent / "crds"


class _HistoryBus(aiobus.Bus):
    """A bus that remembers (resourceVersion, event) and stamps DELETED events with a new one."""

    def __init__(self, owner: KMockCompat):
        super().__init__()
        self.owner = owner
        self.history: list[tuple[int, dict]] = []

    async def put(self, *items) -> None:
        stamped = []
        for ev in items:
            if isinstance(ev, dict) and "object" in ev:
                if ev.get("type") == "DELETED":
                    ev = {"type": "DELETED", "object": copy.deepcopy(ev["object"])}
                    ev["object"].setdefault("metadata", {})["resourceVersion"] = str(self.owner.next_rv())
                rv = int(ev["object"].get("metadata", {}).get("resourceVersion") or 0)
                self.history.append((rv, ev))
            stamped.append(ev)
        await super().put(*stamped)


@attrs.define(kw_only=True)
class KMockCompat(kmock.KubernetesEmulator):
    _rv: int = attrs.field(default=0, init=False)
    _mutex: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    _inflight: set = attrs.field(factory=set, init=False)
    log: list = attrs.field(factory=list, init=False)  # every request served (KMock's own list is trimmed)

    def __attrs_post_init__(self) -> None:
        self._buses = collections.defaultdict(lambda: _HistoryBus(self))
        super().__attrs_post_init__()

    def next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _find(self, request):
        key = (request.resource, request.namespace, request.name)
        obj = self._objects[key] if key in self._objects else None  # noqa: SIM401 - kmock's ObjectsArray has no .get()
        return None if obj is None or obj.deleted else obj

    async def _handle(self, request):
        # KMock matches a request against its reactions by scanning every request it ever served
        # (quadratic: seconds per request after a few thousand). Keep only the in-flight ones there.
        self.log.append(request)
        self._inflight.add(id(request))
        self._requests[:] = [r for r in self._requests if id(r) in self._inflight]
        try:
            return await self._handle_k8s(request)
        finally:
            self._inflight.discard(id(request))

    async def _handle_k8s(self, request):
        act = request.action
        if request.resource is None or act not in (enums.action.CREATE, enums.action.UPDATE, enums.action.DELETE):
            return await super()._handle(request)
        async with self._mutex:  # one mutation at a time: the previews below stay true
            if act in (enums.action.CREATE, enums.action.UPDATE) and self._has_status(request.resource):
                _split_status(request, act)
            if act == enums.action.CREATE and isinstance(request.data, dict):
                meta = request.data.setdefault("metadata", {})
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:6]
                if request.namespace and not meta.get("namespace"):
                    meta["namespace"] = request.namespace
                meta.update(
                    uid=str(uuid.uuid4()), resourceVersion=str(self.next_rv()), generation=1, creationTimestamp=_now()
                )
            elif act == enums.action.UPDATE and request.name is not None:
                obj = self._find(request)
                if obj is not None:
                    self._stamp_patch(request, obj)
            elif act == enums.action.DELETE and request.name is not None:
                obj = self._find(request)
                meta = obj.get("metadata", {}) if obj is not None else {}
                if obj is not None and meta.get("finalizers") and not meta.get("deletionTimestamp"):
                    async with self._lock:
                        obj.patch({"metadata": {"deletionTimestamp": _now(), "resourceVersion": str(self.next_rv())}})
                        await self._buses[request.resource].put({"type": "MODIFIED", "object": obj.raw})
            rsp = await super()._handle(request)
        if act == enums.action.CREATE and rsp.status == 200 and not rsp.prepared:
            rsp.set_status(201)
        return rsp

    def _has_status(self, resource) -> bool:
        try:
            return "status" in self._resources[resource].subresources
        except (KeyError, LookupError, TypeError):
            return False

    def _stamp_patch(self, request, obj) -> None:
        before = copy.deepcopy(obj.raw)
        try:
            after = dicts.patch_dict(copy.deepcopy(before), request.data)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, ValueError, TypeError) as exc:
            raise kmock.KubernetesError(status=422, reason="Invalid", message=str(exc)) from None
        rv = str(self.next_rv())
        stamp = {"resourceVersion": rv}
        if request.subresource is None and after.get("spec") != before.get("spec"):
            stamp["generation"] = int(before.get("metadata", {}).get("generation") or 1) + 1
        if isinstance(request.data, dict):
            request.data.setdefault("metadata", {}).update(stamp)
        else:
            request.data.extend({"op": "add", "path": f"/metadata/{k}", "value": v} for k, v in stamp.items())

    async def _serve_list(self, request):
        async with self._lock:
            items = [
                o.raw
                for (res, ns, _), o in self._objects.items()
                if res == request.resource and not o.deleted and (request.namespace is None or ns == request.namespace)
            ]
            return {"metadata": {"resourceVersion": str(self._rv)}, "items": items}

    async def _serve_watch(self, request):
        yield b""
        bus: _HistoryBus = self._buses[request.resource]
        since = (request.params or {}).get("resourceVersion")
        async with self._lock:
            marker = await bus.mark()
            if since and since.isdigit():
                events = [ev for rv, ev in bus.history if rv > int(since)]
            else:
                events = [
                    {"type": "ADDED", "object": o.raw}
                    for (res, _, _), o in self._objects.items()
                    if res == request.resource and not o.deleted
                ]
        try:
            for ev in events:
                if _matches(request, ev):
                    yield ev
            async for ev in bus.stream(since=marker):
                if _matches(request, ev):
                    yield ev
        finally:
            await bus.unmark(marker)


def _split_status(request, act) -> None:
    """Keep only what this endpoint may change: `status` through /status, the rest elsewhere."""
    on_status = act == enums.action.UPDATE and request.subresource == "status"
    data = request.data
    if isinstance(data, dict):
        if on_status:
            for key in [k for k in data if k not in ("status", "metadata")]:
                del data[key]
            meta = data.get("metadata")
            if isinstance(meta, dict):  # resourceVersion preconditions stay; nothing else changes
                data["metadata"] = {k: v for k, v in meta.items() if k == "resourceVersion"}
        else:
            data.pop("status", None)
    elif isinstance(data, list):
        data[:] = [
            op
            for op in data
            if (str(op.get("path", "")).startswith("/status") == on_status) or (on_status and op.get("op") == "test")
        ]


def _matches(request, ev) -> bool:
    meta = ev.get("object", {}).get("metadata", {})
    return (request.namespace is None or meta.get("namespace") == request.namespace) and (
        request.name is None or meta.get("name") == request.name
    )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def declare_crds(km, crd_dir: Path = CRD_DIR) -> None:
    """Declare our CRDs' resources (and the built-ins, kopf's peering) in a KMock server."""
    with warnings.catch_warnings():  # KMock 0.8 uses importlib.resources.read_binary
        warnings.simplefilter("ignore", DeprecationWarning)
        km.resources.load_bundled()
    for path in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        s = crd["spec"]
        for v in s["versions"]:
            km.resources[f"{s['group']}/{v['name']}/{s['names']['plural']}"] = kmock.ResourceInfo(
                kind=s["names"]["kind"],
                singular=s["names"]["singular"],
                namespaced=s["scope"] == "Namespaced",
                shortnames=s["names"].get("shortNames", []),
                categories=s["names"].get("categories", []),
                verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
                subresources={"status"} if "status" in (v.get("subresources") or {}) else set(),
            )
    for plural, kind, namespaced in (
        ("clusterkopfpeerings", "ClusterKopfPeering", False),
        ("kopfpeerings", "KopfPeering", True),
    ):
        km.resources[f"kopf.dev/v1/{plural}"] = kmock.ResourceInfo(
            kind=kind, namespaced=namespaced, verbs={"get", "list", "watch", "create", "patch", "delete"}
        )
