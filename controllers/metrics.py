"""Prometheus metrics of the operator (served by `kmilvus-operator --metrics-port`).

Module-level, in prometheus_client's default registry, so several operators in one process (tests)
share them instead of registering the same names twice.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("kmilvus_operator_reconciles_total", "Reconciliations by kind and outcome.", ["kind", "result"])
API_REQUESTS = Counter(
    "kmilvus_operator_kube_requests_total",
    "Kubernetes API requests sent by the controllers' own client (kopf's not included).",
    ["verb"],
)
ACTIVE = Gauge("kmilvus_operator_active", "1 while this replica holds the coordinators (peering leader).")
SEGMENT_WRITES = Counter("kmilvus_operator_segment_writes_total", "Segment resources written, by verb.", ["verb"])
FLUSHES = Counter("kmilvus_operator_flushrequests_total", "FlushRequests finished, by phase.", ["phase"])
DROP_SECONDS = Histogram("kmilvus_operator_drop_seconds", "Time from Collection deletion to data dropped.")
