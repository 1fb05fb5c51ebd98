"""`kmilvus standalone` with stage timestamps: where the time of one request goes, server side.

    .venv/bin/python bench/trace_standalone.py --out T.json -- --data-dir D --port P
    kill -USR2 <pid>     # writes every finished request's trace to T.json (and forgets them)

The standalone runs unchanged in this process; before it starts, this script wraps a list of
the product's functions (STAGES, by dotted name) with a timer and puts one gRPC interceptor in
front of the API server's own. For each Milvus API call the interceptor opens a trace at receipt
(before the request is parsed) and closes it when the answer is serialized; every wrapped function
that runs inside the call — on the event loop or in a worker thread it hands work to — appends
(stage, start, end) to that trace. Nothing of kmilvus is edited; the wrappers cost ~1 µs each.

`summarise(traces)` turns a dump into per-stage medians (start offset from receipt and duration),
the inclusive time of each stage and the time outside any wrapped stage, per RPC method
(bench/profile_paths.py prints them).
"""

from __future__ import annotations

import collections
import contextvars
import functools
import importlib
import inspect
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# module:qualname of every function timed. Names from Milvus where kmilvus has them.
STAGES = [
    # Read path: Proxy → QueryNode → index → reduce → answer.
    "kmilvus.proxy.search:ProxySearchMixin.Search",
    "kmilvus.proxy.meta_cache:MetaCache.get",
    "kmilvus.proxy.search:ProxySearchMixin.prepare_field_search",
    "kmilvus.proxy.search_util:parse_search_info",
    "kmilvus.proxy.search:query_vectors",
    "kmilvus.proxy.search:ProxySearchMixin.search_metric",
    "kmilvus.proxy.read_path:index_infos",
    "kmilvus.proxy.search:ProxySearchMixin.read_scope",
    "kmilvus.proxy.read_path:serving_nodes",
    "kmilvus.proxy.read_path:read_timestamps",
    "kmilvus.proxy.read_path:collection_ttl_ts",
    "kmilvus.proxy.search:ProxySearchMixin.run_field_search",
    "kmilvus.proxy.read_path:fan_out",
    "kmilvus.querynode.query_node:QueryNode.Search",
    "kmilvus.querynode.query_node:QueryNode.search_table",
    "kmilvus.querynode.query_node:QueryNode._serviceable",
    "kmilvus.querynode.query_node:plan_from_request",
    "kmilvus.querynode.query_node:LoadedCollection.refresh_versions",
    "kmilvus.querynode.query_node:LoadedCollection.segments",
    "kmilvus.querynode.segments:GrowingSegment.data",
    "kmilvus.querynode.reduce:_alive",
    "kmilvus.querynode.reduce:search_segments",
    "kmilvus.querynode.reduce:_segment_hits",
    "kmilvus.index.vector_index:VectorIndex.search",
    "kmilvus.querynode.vector_search:search",
    "kmilvus.querynode.reduce:_output_columns",
    "kmilvus.querynode.reduce:merge_search",
    "kmilvus.reduce:to_ipc",
    "kmilvus.reduce:from_ipc",
    "kmilvus.proxy.search:result_data",
    "kmilvus.querynode.query_node:QueryNode.Query",
    # Insert.
    "kmilvus.proxy.proxy:Proxy.Insert",
    "kmilvus.proxy.insert:InsertTask.pre_execute",
    "kmilvus.util.fielddata:fields_data_to_columns",
    "kmilvus.proxy.insert:InsertTask.execute",
    "kmilvus.allocator.allocator:IDAllocator.alloc_array",
    "kmilvus.proxy.insert:shard_of",
    "kmilvus.util.typeutil:columns_to_record_batch",
    "kmilvus.proxy.insert:InsertTask._route",
    "kmilvus.datacoord.data_coord:DataCoord.AssignSegmentID",
    "kmilvus.proxy.insert:ipc_bytes",
    "kmilvus.msgstream.jetstream:Producer.publish_many",
    "kmilvus.util.typeutil:primary_keys_to_ids",
    # Delete.
    "kmilvus.proxy.delete:ProxyDeleteMixin.Delete",
    "kmilvus.proxy.delete:DeleteTask.pre_execute",
    "kmilvus.parser:parse",
    "kmilvus.proxy.delete:DeleteTask.execute",
    "kmilvus.proxy.delete:delete_messages",
    # Drops and statistics.
    "kmilvus.proxy.proxy:Proxy.DropCollection",
    "kmilvus.rootcoord.root_coord:RootCoord.DropCollection",
    "kmilvus.rootcoord.root_coord:RootCoord._drop_meta",
    "kmilvus.rootcoord.drop_tasks:DropTask.broadcast",
    "kmilvus.rootcoord.partitions:PartitionMixin._drop_partition_meta",
    "kmilvus.proxy.partitions:ProxyPartitionsMixin.DropPartition",
    "kmilvus.proxy.load:ProxyLoadMixin.check_partition_released",
    "kmilvus.rootcoord.partitions:PartitionMixin.DropPartition",
    "kmilvus.rootcoord.partitions:PartitionMixin._broadcast_drop_partition",
    "kmilvus.rootcoord.root_coord:RootCoord._commit_collection",
    "kmilvus.rootcoord.root_coord:RootCoord._broadcast_drop",
    "kmilvus.rootcoord.root_coord:RootCoord._publish_ddl",
    "kmilvus.rootcoord.root_coord:RootCoord._invalidate_proxies",
    "kmilvus.proxy.proxy:Proxy.InvalidateCollectionMetaCache",
    "kmilvus.meta.etcdkv:EtcdKV.txn",
    "kmilvus.allocator.allocator:TimestampAllocator.alloc",
    "kmilvus.proxy.proxy:Proxy._dd",
    "kmilvus.proxy.proxy:Proxy._dd_call",
    "kmilvus.proxy.task:DdTaskQueue.enqueue",
    "kmilvus.proxy.task:DmTaskQueue.enqueue",
    "kmilvus.proxy.proxy:Proxy.primary_keys_matching",
    "kmilvus.proxy.query:ProxyQueryMixin.Query",
    "kmilvus.proxy.read_path:check_expr",
    "kmilvus.components:Registry.clients",
    "kmilvus.proxy.proxy:Proxy.GetCollectionStatistics",
    "kmilvus.datacoord.data_coord:DataCoord.GetCollectionStatistics",
]

_current: contextvars.ContextVar[list | None] = contextvars.ContextVar("trace", default=None)
_done: collections.deque = collections.deque(maxlen=200_000)
_lock = threading.Lock()
now = time.perf_counter


def _timed(name: str, fn):
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrap(*a, **kw):
            ev = _current.get()
            if ev is None:
                return await fn(*a, **kw)
            t0 = now()
            try:
                return await fn(*a, **kw)
            finally:
                ev.append((name, t0, now()))

        return awrap

    @functools.wraps(fn)
    def wrap(*a, **kw):
        ev = _current.get()
        if ev is None:
            return fn(*a, **kw)
        t0 = now()
        try:
            return fn(*a, **kw)
        finally:
            ev.append((name, t0, now()))

    return wrap


def _follow_queued_tasks() -> None:
    """A Proxy task runs in its queue's worker, not in the handler that enqueued it: carry the
    handler's trace over, so what the task calls in this process (an in-process coordinator's
    stages) is timed as part of the request."""
    from kmilvus.proxy import task as ptask

    enqueue, run = ptask.Task.on_enqueue, ptask.Task.run

    async def on_enqueue(self):
        self._trace_events = _current.get()
        return await enqueue(self)

    async def traced_run(self):
        events = getattr(self, "_trace_events", None)
        if events is None:
            return await run(self)
        token = _current.set(events)
        try:
            return await run(self)
        finally:
            _current.reset(token)

    ptask.Task.on_enqueue = on_enqueue
    ptask.Task.run = traced_run


def install(stages=STAGES) -> list[str]:
    """Wrap each stage that exists (a name that moved is reported, not fatal)."""
    _follow_queued_tasks()
    missing = []
    for target in stages:
        mod_name, qual = target.split(":")
        try:
            owner = importlib.import_module(mod_name)
            *path, attr = qual.split(".")
            for p in path:
                owner = getattr(owner, p)
            fn = inspect.getattr_static(owner, attr)
        except (ImportError, AttributeError):
            missing.append(target)
            continue
        label = qual
        if isinstance(fn, staticmethod | classmethod):
            missing.append(target)
            continue
        setattr(owner, attr, _timed(label, fn))
    return missing


def _interceptor():
    import grpc

    class TraceInterceptor(grpc.aio.ServerInterceptor):
        """Opens a trace at receipt; deserialisation, the handler and serialisation are stages."""

        async def intercept_service(self, continuation, details):
            t_recv = now()
            handler = await continuation(details)
            if handler is None or handler.unary_unary is None:
                return handler
            service, _, method = details.method.lstrip("/").partition("/")
            method = f"{service.rsplit('.', 1)[-1]}/{method}"  # e.g. MilvusService/Search, RootCoord/DropCollection
            events: list = []
            trace = {"method": method, "t_recv": t_recv, "events": events}
            deser, ser, behavior = handler.request_deserializer, handler.response_serializer, handler.unary_unary

            def req_deser(b):
                t0 = now()
                r = deser(b) if deser else b
                events.append(("grpc.deserialize", t0, now()))
                trace["request_bytes"] = len(b)
                return r

            def resp_ser(m):
                t0 = now()
                b = ser(m) if ser else m
                t1 = now()
                events.append(("grpc.serialize", t0, t1))
                trace["t_end"] = t1
                trace["response_bytes"] = len(b)
                with _lock:
                    _done.append(trace)
                return b

            async def run(req, ctx):
                token = _current.set(events)
                t0 = now()
                try:
                    return await behavior(req, ctx)
                finally:
                    events.append(("grpc.handler", t0, now()))
                    _current.reset(token)

            return grpc.unary_unary_rpc_method_handler(
                run, request_deserializer=req_deser, response_serializer=resp_ser
            )

    return TraceInterceptor()


def _patch_server_factory() -> None:
    """Put the trace interceptor first on every gRPC server kmilvus starts."""
    import grpc

    orig = grpc.aio.server

    def server(*a, **kw):
        kw["interceptors"] = [_interceptor(), *(kw.get("interceptors") or [])]
        return orig(*a, **kw)

    grpc.aio.server = server


def _patch_remote_clients() -> None:
    """A call to another component through its gRPC client (a loopback hop even in one process
    when the caller holds a RemoteClient) is a stage too: `remote <role>.<RPC>`."""
    from kmilvus.components import RemoteClient

    orig = RemoteClient.__getattr__

    def getattr_timed(self, name: str):
        return _timed(f"remote {self.role}.{name}", orig(self, name))

    RemoteClient.__getattr__ = getattr_timed


def dump(path: str) -> int:
    with _lock:
        traces = list(_done)
        _done.clear()
    Path(path).write_text(json.dumps(traces))
    return len(traces)


def summarise(traces: list[dict], method: str) -> dict:
    """Per-stage medians over the traces of MilvusService/`method`: start offset from receipt,
    duration, and how often the stage ran per call; plus the total server time. Internal RPCs
    served while a call ran (another component's gRPC server in this process: `served <RPC>`)
    count as its stages — exact for one client at a time."""
    ts = [t for t in traces if t["method"] == f"MilvusService/{method}" and "t_end" in t]
    if not ts:
        return {"calls": 0}
    inner = sorted(
        (t for t in traces if not t["method"].startswith("MilvusService/") and "t_end" in t),
        key=lambda t: t["t_recv"],
    )
    stages: dict[str, dict[str, list[float]]] = {}
    for t in ts:
        seen: dict[str, float] = {}
        served = []
        for i in inner:
            if t["t_recv"] <= i["t_recv"] and i["t_end"] <= t["t_end"]:
                served.append((f"served {i['method']}", i["t_recv"], i["t_end"]))
                served += [
                    (f"{i['method']}: {n}", a, b)
                    for n, a, b in i["events"]
                    if not n.startswith("grpc.") and a < i["t_end"]
                ]
        # A task the handler spawned inherits its trace; what it does after the answer is not
        # the call's (a drop's resumable tail, an allocator's refill).
        events = [e for e in t["events"] if e[1] < t["t_end"]] + served
        t["events"] = events
        for name, s, e in events:
            d = stages.setdefault(name, {"start": [], "dur": [], "count": []})
            if name not in seen:
                d["start"].append(s - t["t_recv"])
            seen[name] = seen.get(name, 0.0) + (e - s)
        for name, total in seen.items():
            stages[name]["dur"].append(total)
            stages[name]["count"].append(sum(1 for n, _, _ in t["events"] if n == name))
    total = [t["t_end"] - t["t_recv"] for t in ts]
    out = {
        "calls": len(ts),
        "server_total_median_s": statistics.median(total),
        "server_total_mean_s": statistics.fmean(total),
        "stages": {},
    }
    for name, d in sorted(stages.items(), key=lambda kv: statistics.median(kv[1]["start"] or [0])):
        out["stages"][name] = {
            "start_median_s": statistics.median(d["start"]) if d["start"] else None,
            "dur_median_s": statistics.median(d["dur"]),
            "dur_mean_s": statistics.fmean(d["dur"]),
            "per_call": statistics.fmean(d["count"]),
            "in_calls": len(d["dur"]) / len(ts),
        }
    return out


def main() -> None:
    argv = sys.argv[1:]
    out = "trace.json"
    if argv[:1] == ["--out"]:
        out, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    _patch_server_factory()
    _patch_remote_clients()
    missing = install()
    if missing:
        print(f"trace_standalone: not found (not timed): {missing}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGUSR2, lambda *_: print(f"trace: {dump(out)} traces", file=sys.stderr, flush=True))
    os.environ.setdefault("KMILVUS_TRACE_OUT", out)
    from kmilvus.cli import main as kmain

    sys.argv = ["kmilvus", "standalone", *argv]
    kmain()


if __name__ == "__main__":
    main()
