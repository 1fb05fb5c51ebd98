"""What Search and Query share in the Proxy: the guarantee timestamp of a consistency level, the
output-field translation, and the fan-out to the QueryNodes serving a collection's channels."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus.parser import parse, template_values
from kmilvus.proto import data_coord_pb2, query_coord_pb2
from kmilvus.proxy import partition_key
from kmilvus.proxy.meta_cache import CollectionMeta
from kmilvus.util import merr, typeutil
from kmilvus.util.ttl import expire_before, ttl_seconds

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
    from kmilvus.types import QueryNodeClient

CL = common_pb2.ConsistencyLevel
BOUNDED_STALENESS_MS = 5000  # Milvus' common.gracefulTime
PHYSICAL_SHIFT = 18
DT = schema_pb2.DataType


async def guarantee_ts(proxy: ProxyHost, meta: CollectionMeta, req) -> int:
    """Milvus' consistency levels: Strong = a fresh TSO timestamp; Bounded = now minus the
    staleness; Session / Customized = the client's timestamp (its last write, sent by pymilvus);
    Eventually = 1 (whatever the node has)."""
    level = meta.describe.consistency_level if req.use_default_consistency else req.consistency_level
    if level == CL.Strong:
        ts = await proxy.tso.alloc()
        # Report a tick past `ts` at once, naming the channels (as a flush does): the read then
        # waits for a JetStream round trip, not for the periodic report and tick (Milvus: up to
        # its 200 ms tick interval).
        await proxy.report_tick_now(meta.vchannels)
        return ts
    if level == CL.Bounded:
        now = await proxy.tso.alloc()
        return max(1, ((now >> PHYSICAL_SHIFT) - BOUNDED_STALENESS_MS) << PHYSICAL_SHIFT)
    if level in (CL.Session, CL.Customized):
        ts = req.guarantee_timestamp or 1
        if ts > proxy.reported_tick:
            # The client's write may be newer than this Proxy's last report: report now, so the
            # tick the QueryNode asks for can pass it without waiting for the periodic report.
            await proxy.report_tick_now()
        return ts
    return 1


async def read_timestamps(proxy: ProxyHost, meta: CollectionMeta, req, iterator: bool = False) -> tuple[int, int]:
    """(guarantee ts, MVCC ts) of a read. An iterator's pages read one snapshot (Milvus pins the
    MVCC timestamp): the first page takes a fresh timestamp and answers it as `session_ts`, which
    pymilvus sends back as the guarantee timestamp of every later page. A plain read has no
    snapshot (MVCC ts 0: every row consumed when it runs)."""
    if iterator and req.guarantee_timestamp > 0:
        return req.guarantee_timestamp, req.guarantee_timestamp
    ts = await guarantee_ts(proxy, meta, req)
    if not iterator:
        return ts, 0
    snap = await proxy.tso.alloc()
    await proxy.report_tick_now(meta.vchannels)
    return max(ts, snap), snap


def check_expr(meta: CollectionMeta, expr: str, templates) -> None:
    """Parse a filter in the Proxy, as Milvus does before any QueryNode sees it: an invalid
    expression answers Milvus' "failed to create query plan" (code 1100)."""
    if not expr or not expr.strip():
        return
    try:
        parse(expr, meta.schema, template_values(templates))
    except merr.MilvusError as exc:
        raise merr.invalid(f"failed to create query plan: {exc.message}: invalid parameter") from None


async def collection_ttl_ts(proxy: ProxyHost, meta: CollectionMeta) -> int:
    """Milvus' CollectionTtlTimestamps: rows inserted before it have expired (0: no TTL)."""
    ttl = ttl_seconds(meta.describe.properties)
    return expire_before(await proxy.tso.alloc(), ttl) if ttl else 0


def output_fields(meta: CollectionMeta, names, *, with_vectors: bool = True) -> tuple[list[int], list[str]]:
    """Requested output names → (field IDs, names as the client sees them). `*` is every scalar
    and vector field; an unknown name is a key of the dynamic field when there is one."""
    schema = meta.schema
    by_name = {f.name: f for f in schema.fields}
    dynamic = typeutil.dynamic_field(schema)
    ids: list[int] = []
    shown: list[str] = []
    for name in names:
        name = name.strip()
        if name == "*":
            for f in typeutil.user_fields(schema):
                if f.is_dynamic or (f.data_type == DT.FloatVector and not with_vectors):
                    continue
                if f.fieldID not in ids:
                    ids.append(f.fieldID)
                    shown.append(f.name)
            if dynamic is not None and dynamic.fieldID not in ids:
                ids.append(dynamic.fieldID)
            continue
        f = by_name.get(name)
        if f is not None:
            if f.fieldID not in ids:
                ids.append(f.fieldID)
                shown.append(f.name)
        elif dynamic is not None:
            if dynamic.fieldID not in ids:
                ids.append(dynamic.fieldID)
            shown.append(name)
        else:
            raise merr.MilvusError(merr.FIELD_NOT_FOUND, f"field {name} not exist")
    return ids, shown


async def index_infos(proxy: ProxyHost, meta: CollectionMeta) -> list:
    """DataCoord's index meta of the collection (IndexInfo per index; none: no index). DataCoord
    is looked up at call time: in a standalone it is the in-process component (a read-only call,
    no gRPC round trip on every search), elsewhere its remote client."""
    resp = await proxy.registry.client(roles.DATACOORD).DescribeIndex(
        data_coord_pb2.DescribeIndexRequest(collectionID=meta.id, without_progress=True)
    )
    if resp.status.code == merr.INDEX_NOT_FOUND[0]:
        return []
    merr.check(resp.status)
    return list(resp.infos)


async def serving_nodes(proxy: ProxyHost, meta: CollectionMeta) -> tuple[dict[int, list[str]], list[int]]:
    """{QueryNode ID: its vchannels} of a loaded collection, and the loaded partition IDs."""
    qc = proxy.registry.client(roles.QUERYCOORD)
    resp = await qc.GetShardLeaders(query_coord_pb2.GetShardLeadersRequest(collectionID=meta.id))
    if resp.status.code == merr.COLLECTION_NOT_LOADED[0]:
        raise merr.MilvusError(merr.COLLECTION_NOT_LOADED, f"collection not loaded[collection={meta.name}]")
    merr.check(resp.status)
    nodes: dict[int, list[str]] = {}
    for leader in resp.leaders:
        nodes.setdefault(leader.nodeID, []).append(leader.vchannel)
    loaded = list(resp.partitionIDs)
    if not loaded and resp.released_partitionIDs:  # loaded whole, some partitions released since
        released = set(resp.released_partitionIDs)
        loaded = [p for p in meta.partitions.values() if p not in released]
        if not loaded:  # never "every partition": a stale cache entry of a collection released since
            raise merr.MilvusError(merr.COLLECTION_NOT_LOADED, f"collection not loaded[collection={meta.name}]")
    return nodes, loaded


async def fan_out(
    proxy: ProxyHost,
    nodes: dict[int, list[str]],
    call: Callable[[QueryNodeClient, list[str]], Awaitable],
    *,
    checked: bool = True,
) -> list:
    """`call(node, vchannels)` on every serving node at once; the first failure is raised (a
    failed status, when `checked`: the calls answer RPC responses)."""
    calls = [call(proxy.registry.client(roles.QUERYNODE, nid), chans) for nid, chans in nodes.items()]
    results = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)  # one node: no task
    if checked:
        for r in results:
            merr.check(r.status)
    return results


def partition_ids(meta: CollectionMeta, names, loaded: list[int], expr: str = "", templates=None) -> list[int]:
    """The partitions a request reads: the named ones (each must be loaded) or every loaded one
    — in partition key mode none may be named and a filter pinning the key narrows them
    (kmilvus/proxy/partition_key.py)."""
    partition_key.refuse_named(meta, names)
    if not names:
        return partition_key.prune(meta, expr, loaded, templates)
    out = [meta.partition(n) for n in names]
    if loaded:
        missing = [n for n, p in zip(names, out, strict=True) if p not in loaded]
        if missing:
            raise merr.MilvusError(merr.PARTITION_NOT_LOADED, f"partition not loaded[partition={missing[0]}]")
    return out
