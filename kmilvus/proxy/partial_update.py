"""Partial-update upserts (Milvus 2.6's `upsert(..., partial_update=True)`): only the fields a
request gives change; every other field of a row that exists keeps its stored value, read at a
fresh (Strong) timestamp by primary key. A key not stored yet is an insert: its missing fields
take their default or null, or the request is refused as an insert missing them would be. The
dynamic field's keys merge (given keys replace, others stay). Functions recompute their
outputs from the merged row."""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus import reduce
from kmilvus.proto import query_node_pb2
from kmilvus.proxy import read_path
from kmilvus.proxy.meta_cache import CollectionMeta
from kmilvus.util import fielddata, merr, typeutil

DT = schema_pb2.DataType
KEYS = "partial_update_keys"


async def stored_rows(proxy, meta: CollectionMeta, keys: pa.Array, out_ids: list[int]) -> pa.Table | None:
    """The stored rows with these primary keys (latest version, deletes applied), `out_ids`
    columns, read at a Strong guarantee timestamp; None when none is stored."""
    nodes, loaded = await read_path.serving_nodes(proxy, meta)
    ts = await read_path.guarantee_ts(proxy, meta, _Strong())
    qreq = query_node_pb2.QueryRequest(
        collectionID=meta.id,
        guarantee_ts=ts,
        collection_ttl_ts=await read_path.collection_ttl_ts(proxy, meta),
        expr=f"{meta.pk.name} in {{{KEYS}}}",
        output_fieldIDs=out_ids,
        limit=-1,
        partitionIDs=loaded,
        schema_version=meta.schema.version,
    )
    value = qreq.expr_template_values[KEYS].array_val
    if meta.pk.data_type == DT.Int64:
        value.long_data.data.extend(keys.to_numpy(zero_copy_only=False).astype(np.int64))
    else:
        value.string_data.data.extend(keys.to_pylist())

    async def one(node, chans):
        r = query_node_pb2.QueryRequest()
        r.CopyFrom(qreq)
        r.vchannels.extend(chans)
        return await node.Query(r)

    results = await read_path.fan_out(proxy, nodes, one)
    tables = [t for t in (reduce.from_ipc(r.arrow) for r in results if r.arrow) if t.num_rows]
    return pa.concat_tables(tables, promote_options="default") if tables else None


class _Strong:
    """A read request's consistency fields, as a Strong read."""

    use_default_consistency = False
    consistency_level = common_pb2.ConsistencyLevel.Strong
    guarantee_timestamp = 0


def _merge_json(new: pa.Array, old: pa.Array) -> pa.Array:
    """Per row: the stored object's keys, then the given ones over them."""
    out = []
    for n, o in zip(new.to_pylist(), old.to_pylist(), strict=True):
        merged = orjson.loads(o) if o else {}
        merged.update(orjson.loads(n) if n else {})
        out.append(orjson.dumps(merged))
    return pa.array(out, pa.binary())


async def merge(proxy, meta: CollectionMeta, given: dict[int, pa.Array], num_rows: int) -> dict[int, pa.Array]:
    """The full columns of a partial update: `given` over the stored rows."""
    schema = meta.schema
    if meta.pk.fieldID not in given:
        raise merr.MilvusError(merr.PARAMETER_MISSING, f"must assign pk when upsert, primary field: {meta.pk.name}")
    keys = given[meta.pk.fieldID]
    fields = [f for f in typeutil.user_fields(schema) if not f.is_function_output and not f.is_primary_key]
    want = [f.fieldID for f in fields if f.fieldID not in given or f.is_dynamic]
    stored = await stored_rows(proxy, meta, keys, [meta.pk.fieldID, *want]) if want else None
    if stored is not None:
        at = pc.index_in(keys, value_set=stored.column("pk").combine_chunks().cast(keys.type))
    else:
        at = pa.nulls(num_rows, pa.int32())
    missing = pc.is_null(at).to_numpy(zero_copy_only=False)
    out = dict(given)
    for f in fields:
        name = str(f.fieldID)
        old = None
        if stored is not None and name in stored.column_names:
            old = stored.column(name).combine_chunks().take(at)
        if f.fieldID in given:
            if f.is_dynamic and old is not None:
                out[f.fieldID] = _merge_json(given[f.fieldID], pc.fill_null(old, b"{}"))
            continue
        arrow = typeutil.arrow_type(f)
        if old is None:
            old = pa.nulls(num_rows, arrow)
        if missing.any():
            filler = typeutil.missing_column(f, arrow, num_rows)
            if filler is None:
                if f.is_dynamic:
                    filler = fielddata.empty_objects(num_rows)
                else:
                    raise merr.MilvusError(
                        merr.PARAMETER_MISSING,
                        f"insert missed an field `{f.name}` to collection without set nullable==true or set "
                        "default_value",
                    )
            old = pc.if_else(pa.array(missing), filler.cast(arrow), old.cast(arrow))
        out[f.fieldID] = old
    return out
