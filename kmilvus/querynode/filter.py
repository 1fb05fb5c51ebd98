"""Filter expressions for Search and Query: parsed once per request by `kmilvus.parser` (Milvus'
grammar and error messages), evaluated column-wise over each segment's Arrow table, together with
the collection TTL's cut-off (rows inserted before it have expired)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import Plan, evaluate, parse
from kmilvus.util.typeutil import TIMESTAMP_FIELD


@dataclass
class Filter:
    """A parsed expression; `mask(table)` is the rows it keeps (None: every row)."""

    expr: str
    plan: Plan | None = None
    expire_before: int = 0  # hybrid timestamp; 0: no TTL

    def mask(self, table: Any) -> np.ndarray | None:
        keep = None
        if self.plan is not None:
            m = evaluate(self.plan, table)
            keep = np.asarray(m.to_numpy(zero_copy_only=False), dtype=bool)
        if self.expire_before:
            ts = table.column(str(TIMESTAMP_FIELD))
            fresh = np.asarray(pc.greater_equal(ts, self.expire_before).to_numpy(zero_copy_only=False), dtype=bool)
            keep = fresh if keep is None else keep & fresh
        return keep


def compile_filter(expr: str, schema: schema_pb2.CollectionSchema, expire_before: int = 0) -> Filter:
    expr = (expr or "").strip()
    return Filter(expr, parse(expr, schema) if expr else None, int(expire_before))
