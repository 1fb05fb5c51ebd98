"""Filter expressions for Search and Query: parsed once per request by `kmilvus.parser` (Milvus'
grammar and error messages), evaluated column-wise over each segment's Arrow table, together with
the collection TTL's cut-off (rows inserted before it have expired)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import Plan, evaluate, parse
from kmilvus.parser.evaluator import TextIndexOf
from kmilvus.util.typeutil import TIMESTAMP_FIELD


@dataclass
class Filter:
    """A parsed expression; `mask(table)` is the rows it keeps (None: every row)."""

    expr: str
    plan: Plan | None = None
    expire_before: int = 0  # hybrid timestamp; 0: no TTL

    @cached_property
    def pk_in(self) -> np.ndarray | None:
        """The keys of a filter naming Int64 primary keys only (`pk in [...]`, `pk == v`, an `or`
        of those — what Delete takes without a query): such a filter is answered from the
        segment's sorted primary keys instead of a scan. None: any other filter."""
        if self.plan is None:
            return None
        try:
            keys = self.plan.primary_keys()
        except (OverflowError, ValueError, TypeError):  # a key outside int64: the scan says no
            return None
        return keys if isinstance(keys, np.ndarray) else None

    def mask(
        self,
        table: Any,
        pk_rows: Callable[[np.ndarray], np.ndarray] | None = None,
        indexes: Mapping[int, Any] | None = None,
        text_index: TextIndexOf | None = None,
    ) -> np.ndarray | None:
        """`pk_rows(values)`: the row offsets holding these primary keys (used for `pk_in`);
        `indexes`: the segment's scalar indexes by field ID, which the evaluator asks first;
        `text_index`: the segment's text-match indexes (SegmentData.text_index)."""
        keep = None
        values = self.pk_in if pk_rows is not None else None
        if values is not None and pk_rows is not None:
            keep = np.zeros(table.num_rows, dtype=bool)
            keep[pk_rows(values)] = True
        elif self.plan is not None:
            m = evaluate(self.plan, table, indexes=indexes, text_index=text_index)
            keep = np.asarray(m.to_numpy(zero_copy_only=False), dtype=bool)
        if self.expire_before:
            ts = table.column(str(TIMESTAMP_FIELD))
            fresh = np.asarray(pc.greater_equal(ts, self.expire_before).to_numpy(zero_copy_only=False), dtype=bool)
            keep = fresh if keep is None else keep & fresh
        return keep


def compile_filter(
    expr: str, schema: schema_pb2.CollectionSchema, expire_before: int = 0, values: dict[str, Any] | None = None
) -> Filter:
    """`values`: the request's expression template values (`{name}` in `expr`)."""
    expr = (expr or "").strip()
    return Filter(expr, parse(expr, schema, values) if expr else None, int(expire_before))
