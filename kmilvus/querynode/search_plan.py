"""What one vector search over a set of segments takes (Milvus' plan: the query info plus the
filter), built once per request from the Proxy's internal SearchRequest and handed to every
segment search. A hybrid search is several of these, one per vector field; group-by and the
search iterator are properties of the plan, so a segment search reads them from one place."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pymilvus.grpc_gen import schema_pb2

from kmilvus.index import params as P
from kmilvus.index import vectors as kvectors
from kmilvus.parser import template_values
from kmilvus.proto import query_node_pb2
from kmilvus.querynode.filter import Filter, compile_filter
from kmilvus.querynode.segments import field_type


@dataclass
class GroupBy:
    """Group-by search: `topk` of the plan counts groups of up to `size` rows each."""

    field_id: int
    size: int = 1
    strict: bool = False


@dataclass
class IteratorBound:
    """A search iterator page: rows past `bound` (the previous page's last score), and rows
    within `tolerance` of it unless their primary key was returned there already (`excluded`):
    each row once, even when scores tie or differ by a rounding after a compaction."""

    bound: float
    tolerance: float = 0.0
    excluded: np.ndarray = field(default_factory=lambda: np.array([], dtype=np.int64))

    def closeness_floor(self, larger_is_closer: bool) -> float:
        """The closest score a row of this page may have (scores as the metric orders them)."""
        return self.bound + self.tolerance if larger_is_closer else self.bound - self.tolerance


@dataclass
class SearchPlan:
    anns_field: int
    queries: kvectors.Vectors  # nq × dim float32 (dense), nq × dim/8 uint8 (binary) or SparseRows
    topk: int
    metric: str
    filter: Filter
    pk_field: int
    output_ids: list[int] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    radius: float | None = None
    range_filter: float | None = None
    group: GroupBy | None = None
    bound: IteratorBound | None = None
    mvcc_ts: int = 0  # 0: every consumed row, no snapshot
    iterating: bool = False  # a search iterator's page: exact over what the index stores
    scorer: Any = None  # BM25: a sparse index's document-value hook (kmilvus/querynode/bm25.py)

    @property
    def nq(self) -> int:
        return len(self.queries)

    @property
    def larger_is_closer(self) -> bool:
        return P.larger_is_closer(self.metric)


def plan_from_request(
    req: query_node_pb2.SearchRequest, schema: schema_pb2.CollectionSchema, pk_field: int
) -> SearchPlan:
    flt = compile_filter(
        req.expr, schema, req.collection_ttl_ts, template_values(req.expr_template_values) if req.expr else None
    )
    params = json.loads(req.params) if req.params else {}
    radius, range_filter = params.get("radius"), params.get("range_filter")
    group = None
    if req.group_by_fieldID:
        group = GroupBy(req.group_by_fieldID, max(1, req.group_size), req.strict_group_size)
    bound = None
    if req.HasField("iterator_bound"):
        b = req.iterator_bound
        excluded = (
            np.array(b.excluded_int_pks, dtype=np.int64) if b.excluded_int_pks else np.array(list(b.excluded_str_pks))
        )
        bound = IteratorBound(float(b.bound), float(b.tolerance), excluded)
    return SearchPlan(
        anns_field=req.anns_fieldID,
        queries=kvectors.decode(req.vectors, req.nq, field_type(schema, req.anns_fieldID)),
        topk=int(req.topk),
        metric=P.check_metric(req.metric_type),
        filter=flt,
        pk_field=pk_field,
        output_ids=list(req.output_fieldIDs),
        params=params,
        radius=None if radius is None else float(radius),
        range_filter=None if range_filter is None else float(range_filter),
        group=group,
        bound=bound,
        mvcc_ts=int(req.mvcc_ts),
        iterating=req.iterator_v2,
    )
