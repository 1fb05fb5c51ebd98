"""The retrieve core of Query / Get / count (Milvus' segcore Retrieve + the proxy's output fields).

A QueryNode calls `retrieve` / `count` on each segment's Arrow table (sealed or growing) with a
`visible` mask for what its timestamp and deletes leave; the Proxy resolves output fields with
`resolve_output_fields` and turns the merged table into FieldData with `to_field_data`.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser.evaluator import JsonCache, evaluate
from kmilvus.parser.plan import Plan
from kmilvus.util import fielddata, merr, typeutil
from kmilvus.util.merr import MilvusError

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class OutputFields:
    """What a query returns (Milvus' translateOutputFields).

    `field_ids`: schema fields to return, the primary key always among them; `names`: the
    user's output fields as QueryResults.output_fields lists them (pymilvus picks dynamic keys
    out of `$meta` by these); `dynamic_keys`: the `$meta` keys asked for, or None for all of
    `$meta` (when `*` or `$meta` was asked) — `$meta` is then in `field_ids` either way.
    """

    field_ids: tuple[int, ...]
    names: tuple[str, ...]
    dynamic_keys: tuple[str, ...] | None = None


def resolve_output_fields(schema: schema_pb2.CollectionSchema, output_fields: Sequence[str]) -> OutputFields:
    """`*` is every field (vectors and `$meta` included); a schema field name is that field; any
    other name is a dynamic key when the collection has `$meta`, else "field x not exist"."""
    by_name = {f.name: f for f in typeutil.user_fields(schema)}
    dynamic = typeutil.dynamic_field(schema)
    pk = typeutil.primary_field(schema)
    ids: dict[int, None] = {pk.fieldID: None}
    names: dict[str, None] = {pk.name: None}
    keys: dict[str, None] = {}
    all_dynamic = False
    for raw in output_fields:
        name = raw.strip()
        if name == "*":
            for f in by_name.values():
                ids[f.fieldID] = None
                names[f.name] = None
            all_dynamic = dynamic is not None
        elif name in by_name:
            ids[by_name[name].fieldID] = None
            names[name] = None
            all_dynamic = all_dynamic or (dynamic is not None and name == dynamic.name)
        elif dynamic is not None and _KEY.fullmatch(name):
            ids[dynamic.fieldID] = None
            names[name] = None
            keys[name] = None
        else:
            raise MilvusError(merr.PARAMETER_INVALID, f"field {name} not exist")
    order = {f.fieldID: i for i, f in enumerate(schema.fields)}
    field_ids = tuple(sorted(ids, key=order.__getitem__))
    dynamic_keys = None if all_dynamic or not keys else tuple(keys)
    return OutputFields(field_ids, tuple(names), dynamic_keys)


def match(
    table: pa.Table | pa.RecordBatch,
    plan: Plan,
    visible: pa.BooleanArray | None = None,
    json_cache: JsonCache | None = None,
) -> pa.BooleanArray:
    """Rows matching `plan`, restricted to `visible` ones (not deleted, within the timestamp)."""
    mask = evaluate(plan, table, json_cache)
    if visible is not None:
        mask = pc.and_(mask, visible)
    return mask


def count(
    table: pa.Table | pa.RecordBatch,
    plan: Plan,
    visible: pa.BooleanArray | None = None,
    json_cache: JsonCache | None = None,
) -> int:
    """`count(*)` of the rows matching `plan`."""
    return int(pc.sum(match(table, plan, visible, json_cache)).as_py() or 0)


def retrieve(
    table: pa.Table | pa.RecordBatch,
    plan: Plan,
    output_fields: Sequence[str] | OutputFields,
    limit: int | None = None,
    offset: int = 0,
    visible: pa.BooleanArray | None = None,
    json_cache: JsonCache | None = None,
) -> pa.Table:
    """The matching rows' output columns (named by field ID), `offset` rows skipped and at most
    `limit` kept, in the table's order; `$meta` keeps only the dynamic keys asked for."""
    out = (
        output_fields if isinstance(output_fields, OutputFields) else resolve_output_fields(plan.schema, output_fields)
    )
    rows = np.flatnonzero(match(table, plan, visible, json_cache).to_numpy(zero_copy_only=False))
    end = None if limit is None or limit < 0 else offset + limit
    rows = rows[offset:end]
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    present = set(table.schema.names)
    columns = [str(fid) for fid in out.field_ids if str(fid) in present]
    result = table.select(columns).take(pa.array(rows, pa.int64()))
    dynamic = typeutil.dynamic_field(plan.schema)
    if dynamic is not None and out.dynamic_keys is not None and str(dynamic.fieldID) in columns:
        i = result.schema.get_field_index(str(dynamic.fieldID))
        result = result.set_column(i, result.schema.field(i), pick_keys(result.column(i), out.dynamic_keys))
    return result


def pick_keys(col: pa.Array | pa.ChunkedArray, keys: Sequence[str]) -> pa.Array:
    """Each `$meta` object reduced to `keys` (runs over output rows only, after the limit)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    wanted = tuple(keys)
    enabled = gc.isenabled()
    gc.disable()
    try:
        objs = map(orjson.loads, pc.fill_null(col, b"{}").to_numpy(zero_copy_only=False))
        picked = [orjson.dumps({k: o[k] for k in wanted if k in o}) for o in objs]
    finally:
        if enabled:
            gc.enable()
    return pa.array(picked, col.type)


def to_field_data(
    schema: schema_pb2.CollectionSchema, table: pa.Table | pa.RecordBatch, out: OutputFields
) -> list[schema_pb2.FieldData]:
    """The result columns as QueryResults.fields_data (`$meta` flagged `is_dynamic`)."""
    fields = fielddata.record_batch_to_field_data(schema, table, out.field_ids)
    dynamic = typeutil.dynamic_field(schema)
    for fd in fields:
        if dynamic is not None and fd.field_id == dynamic.fieldID:
            fd.is_dynamic = True
    return fields
