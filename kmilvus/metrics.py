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
