"""Filter expressions for Search and Query, evaluated column-wise over a segment's Arrow table.

The grammar belongs to `kmilvus.parser` (wip-expr: `parse(expr, schema)` once per request,
`evaluate(plan, table)` per segment). Until it is merged, only what pymilvus' `get(ids=...)` and
`query(ids=...)` send is understood — `<pk> in [..]` / `<pk> == v` — and any other expression is
refused with Milvus' "cannot parse expression" code, never silently ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.util import merr, typeutil

_PK_EXPR = re.compile(r"^\s*\(?\s*([A-Za-z_][A-Za-z0-9_]*)\s*(in|==)\s*(.+?)\s*\)?\s*$", re.S)


@dataclass
class Filter:
    """A parsed expression; `mask(table)` is the rows it keeps (None: every row)."""

    expr: str
    plan: Any = None  # kmilvus.parser's Plan
    pk_field: int = 0
    pk_values: pa.Array | None = None

    def mask(self, table: pa.Table) -> np.ndarray | None:
        if not self.expr:
            return None
        if self.plan is not None:
            from kmilvus.parser import evaluate  # type: ignore[import-not-found]

            m = evaluate(self.plan, table)
        else:
            m = pc.is_in(table.column(str(self.pk_field)), value_set=self.pk_values)
        if isinstance(m, pa.ChunkedArray):
            m = m.combine_chunks()
        return np.asarray(m.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def compile_filter(expr: str, schema: schema_pb2.CollectionSchema) -> Filter:
    expr = (expr or "").strip()
    if not expr:
        return Filter("")
    try:
        from kmilvus.parser import parse  # type: ignore[import-not-found]
    except ImportError:
        return _pk_filter(expr, schema)
    return Filter(expr, plan=parse(expr, schema))


def _pk_filter(expr: str, schema: schema_pb2.CollectionSchema) -> Filter:
    pk = typeutil.primary_field(schema)
    m = _PK_EXPR.match(expr)
    if m is None or m.group(1) != pk.name:
        raise merr.MilvusError(
            merr.PARAMETER_INVALID,
            f"failed to create query plan: cannot parse expression: {expr}, "
            "error: only primary key expressions (`pk in [...]`, `pk == v`) are supported yet",
        )
    try:
        raw = json.loads(m.group(3).replace("'", '"'))
    except ValueError:
        raise merr.MilvusError(
            merr.PARAMETER_INVALID, f"failed to create query plan: cannot parse expression: {expr}"
        ) from None
    values = raw if isinstance(raw, list) else [raw]
    arrow_t = pa.int64() if pk.data_type == schema_pb2.DataType.Int64 else pa.string()
    try:
        arr = pa.array(values, arrow_t)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise merr.MilvusError(
            merr.PARAMETER_INVALID,
            f"failed to create query plan: cannot parse expression: {expr}, error: value type does not match {pk.name}",
        ) from None
    return Filter(expr, pk_field=pk.fieldID, pk_values=arr)
