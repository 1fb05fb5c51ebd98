"""Prometheus metrics (names follow Milvus' `milvus_<component>_...` style, prefixed kmilvus_).

Exposed by `--metrics-port` on every kmilvus process; the operator serves them too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

RPC_LATENCY = Histogram(
    "kmilvus_rpc_latency_seconds",
    "Time to answer an RPC, by component and method.",
    ["role", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
RPC_UNIMPLEMENTED = Counter(
    "kmilvus_rpc_unimplemented_total", "RPCs answered UNIMPLEMENTED (not built yet).", ["role", "method"]
)
RPC_FAILURES = Counter("kmilvus_rpc_failures_total", "RPCs answered with a failed status.", ["role", "method", "code"])
INSERTED_ROWS = Counter("kmilvus_proxy_inserted_rows_total", "Rows acknowledged to clients by Insert.")
INSERTED_BYTES = Counter("kmilvus_proxy_inserted_bytes_total", "Arrow bytes published by Insert.")
RATE_LIMITED = Counter("kmilvus_proxy_rate_limited_total", "Inserts refused with the rate-limit code (back-pressure).")
FLUSHED_SEGMENTS = Counter("kmilvus_datanode_flushed_segments_total", "Segments flushed (manual or sealed).")
BINLOG_BYTES = Counter("kmilvus_datanode_binlog_bytes_total", "Bytes written to insert binlogs.")
BINLOG_ROWS = Counter("kmilvus_datanode_binlog_rows_total", "Rows written to insert binlogs.")
BUFFERED_BYTES = Gauge("kmilvus_datanode_buffered_bytes", "Insert data held in DataNode memory.")
INDEX_BUILDS = Counter("kmilvus_indexnode_builds_total", "Index builds an IndexNode ran, by outcome.", ["state"])


class _CountedWhenScraped:
    """A gauge by label, read from `source` at scrape time: keeping it current would be a pass
    over every segment at a steady pace, while nobody may be scraping. `source` runs on the
    metrics server's thread, so it must only copy what it reads (no awaits, no mutation)."""

    def __init__(self, name: str, doc: str, label: str):
        self.name, self.doc, self.label = name, doc, label
        self.source: Callable[[], dict[str, int]] | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.doc, labels=[self.label])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.doc, labels=[self.label])
        source = self.source
        for value, n in (source() if source is not None else {}).items():
            family.add_metric([value], n)
        yield family


SEGMENTS = _CountedWhenScraped("kmilvus_datacoord_segments", "Segments known to DataCoord, by state.", "state")
REGISTRY.register(SEGMENTS)
TIME_TICK = Gauge("kmilvus_rootcoord_time_tick_ms", "Physical time (ms) of the last published time tick.")
ON_DEMAND_TICKS = Counter(
    "kmilvus_rootcoord_on_demand_ticks_total", "Time ticks published at once on a flushed collection's channels."
)
SCALAR_INDEX_LOOKUPS = Counter(
    "kmilvus_querynode_scalar_index_lookups_total",
    "Filter predicates a scalar index answered instead of a column scan, by index type.",
    ["index_type"],
)
DROPPED_COLLECTIONS = Counter("kmilvus_datacoord_dropped_collections_total", "Collections whose data was removed.")
DROP_RETRIES = Counter(
    "kmilvus_rootcoord_drop_retries_total",
    "Failed attempts of a drop's resumable tail (broadcast, release, DataCoord's removal), each retried.",
    ["kind"],
)
SECURITY_DENIED = Counter(
    "kmilvus_proxy_denied_total", "Calls refused by authentication or privilege checks.", ["method", "reason"]
)


# ------------------------------------------------------------------- Milvus' own series names
# The series Milvus' Grafana dashboard queries (Milvus' pkg/metrics: names, labels, millisecond
# buckets), exported where kmilvus has the same quantity (docs/operations/metrics.md). Milvus'
# Go client exposes a counter under its bare name (`milvus_proxy_req_count`); prometheus_client
# would add `_total`, so these counters are kept as monotonic gauges under Milvus' exact names.
MILVUS_BUCKETS = tuple(float(2**i) for i in range(18))  # prometheus.ExponentialBuckets(1, 2, 18), ms
TOTAL, SUCCESS, FAIL = "total", "success", "fail"  # Milvus' status label values

PROXY_REQ_COUNT = Gauge("milvus_proxy_req_count", "count of operation executed", ["node_id", "function_name", "status"])
PROXY_REQ_LATENCY = Histogram(
    "milvus_proxy_req_latency", "latency of each request", ["node_id", "function_name"], buckets=MILVUS_BUCKETS
)
PROXY_SQ_LATENCY = Histogram(
    "milvus_proxy_sq_latency", "latency of search or query successfully", ["node_id", "query_type"],
    buckets=MILVUS_BUCKETS,
)  # fmt: skip
PROXY_MUTATION_LATENCY = Histogram(
    "milvus_proxy_mutation_latency", "latency of insert or delete successfully", ["node_id", "msg_type"],
    buckets=MILVUS_BUCKETS,
)  # fmt: skip
PROXY_INSERT_VECTORS = Gauge(
    "milvus_proxy_insert_vectors_count", "counter of vectors successfully inserted", ["node_id"]
)
PROXY_SEARCH_VECTORS = Gauge(
    "milvus_proxy_search_vectors_count", "counter of vectors successfully searched", ["node_id"]
)
ROOTCOORD_DDL_REQ_COUNT = Gauge(
    "milvus_rootcoord_ddl_req_count", "count of DDL operations", ["function_name", "status"]
)
DATANODE_FLUSHED_ROWS = Gauge(
    "milvus_datanode_flushed_data_rows", "num of rows flushed to storage", ["node_id", "data_source"]
)
ROOTCOORD_COLLECTION_NUM = _CountedWhenScraped("milvus_rootcoord_collection_num", "number of collections", "db_name")
REGISTRY.register(ROOTCOORD_COLLECTION_NUM)
DATACOORD_SEGMENT_NUM = _CountedWhenScraped("milvus_datacoord_segment_num", "number of segments", "segment_state")
REGISTRY.register(DATACOORD_SEGMENT_NUM)

_QUERY_TYPES = {"Search": "search", "HybridSearch": "search", "Query": "query"}
_MSG_TYPES = {"Insert": "insert", "Delete": "delete", "Upsert": "upsert"}


def observe_milvus_rpc(role: str, node_id: int, method: str, request: object, ok: bool, seconds: float) -> None:
    """One answered Milvus API call, as Milvus' Proxy (ProxyFunctionCall, ProxyReqLatency, and the
    search/query and mutation latencies of successful calls) and RootCoord (RootCoordDDLReqCounter)
    count it. Called by the RPC wrapper for MilvusService methods only."""
    status = SUCCESS if ok else FAIL
    if role == "rootcoord":
        ROOTCOORD_DDL_REQ_COUNT.labels(method, TOTAL).inc()
        ROOTCOORD_DDL_REQ_COUNT.labels(method, status).inc()
        return
    node = str(node_id)
    ms = seconds * 1000
    PROXY_REQ_COUNT.labels(node, method, TOTAL).inc()
    PROXY_REQ_COUNT.labels(node, method, status).inc()
    PROXY_REQ_LATENCY.labels(node, method).observe(ms)
    if not ok:
        return
    if method in _QUERY_TYPES:
        PROXY_SQ_LATENCY.labels(node, _QUERY_TYPES[method]).observe(ms)
        if method == "Search":
            PROXY_SEARCH_VECTORS.labels(node).inc(getattr(request, "nq", 0))
    elif method in _MSG_TYPES:
        PROXY_MUTATION_LATENCY.labels(node, _MSG_TYPES[method]).observe(ms)
