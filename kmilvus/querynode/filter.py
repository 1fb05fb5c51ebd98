"""Filter expressions for Search and Query: parsed once per request by `kmilvus.parser` (Milvus'
grammar and error messages), evaluated column-wise over each segment's Arrow table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import Plan, evaluate, parse


@dataclass
class Filter:
    """A parsed expression; `mask(table)` is the rows it keeps (None: every row)."""

    expr: str
    plan: Plan | None = None

    def mask(self, table: Any) -> np.ndarray | None:
        if self.plan is None:
            return None
        m = evaluate(self.plan, table)
        return np.asarray(m.to_numpy(zero_copy_only=False), dtype=bool)


def compile_filter(expr: str, schema: schema_pb2.CollectionSchema) -> Filter:
    expr = (expr or "").strip()
    return Filter(expr, parse(expr, schema) if expr else None)
