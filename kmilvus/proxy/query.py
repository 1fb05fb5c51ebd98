"""Query and Get (MilvusService.Query; pymilvus' get(ids) sends `pk in [...]`) and `count(*)`:
validated as Milvus does, fanned out to the QueryNodes at the guarantee timestamp, merged with
Arrow (primary-key order when paginated)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus.proto import query_node_pb2
from kmilvus.proxy import read_path
from kmilvus.querynode import reduce
from kmilvus.util import merr, typeutil

DT = schema_pb2.DataType
COUNT = "count(*)"
MAX_WINDOW = 16384  # Milvus' quotaAndLimits.limits.maxQueryResultWindow


def _param(params: dict[str, str], key: str) -> int | None:
    raw = params.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(json.loads(raw))
    except (ValueError, TypeError):
        raise merr.invalid(f"{key} [{raw}] is invalid, should be an integer") from None


class ProxyQueryMixin:
    async def primary_keys_matching(self, meta, expr: str, partition_names=()) -> pa.Array:
        """The primary keys of every row `expr` matches (in `partition_names`, or all), read at
        a fresh timestamp (Delete by expression, as Milvus: query, then delete)."""
        req = milvus_pb2.QueryRequest(
            db_name=meta.db,
            collection_name=meta.name,
            expr=expr,
            output_fields=[meta.pk.name],
            partition_names=list(partition_names),
            consistency_level=common_pb2.ConsistencyLevel.Strong,
        )
        resp = await self.Query(req)
        merr.check(resp.status)
        fd = next(f for f in resp.fields_data if f.field_name == meta.pk.name)
        if meta.pk.data_type == DT.Int64:
            return pa.array(fd.scalars.long_data.data, pa.int64())
        return pa.array(list(fd.scalars.string_data.data), pa.string())

    @merr.rpc(milvus_pb2.QueryResults)
    async def Query(self, req: milvus_pb2.QueryRequest, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        params = {kv.key: kv.value for kv in req.query_params}
        limit, offset = _param(params, "limit"), _param(params, "offset") or 0
        names = [n.strip() for n in req.output_fields]
        count = any(n.lower() == COUNT for n in names)
        if count and len(names) > 1:
            raise merr.invalid("count entities with pagination is not allowed")
        if not req.expr.strip() and not count and limit is None:
            raise merr.invalid("empty expression should be used with limit")
        if limit is not None and (limit <= 0 or offset < 0 or limit + offset > MAX_WINDOW):
            raise merr.invalid(
                f"invalid max query result window, (offset+limit) should be in range [1, {MAX_WINDOW}], "
                f"but got {(limit or 0) + offset}"
            )
        out_ids: list[int] = []
        out_names: list[str] = []
        if not count:
            out_ids, out_names = read_path.output_fields(meta, names)
            if meta.pk.fieldID not in out_ids:
                out_ids.insert(0, meta.pk.fieldID)
                out_names.insert(0, meta.pk.name)
        nodes, loaded = await read_path.serving_nodes(self, meta)
        parts = read_path.partition_ids(meta, list(req.partition_names), loaded)
        ts = await read_path.guarantee_ts(self, meta, req)
        ttl_ts = await read_path.collection_ttl_ts(self, meta)
        qreq = query_node_pb2.QueryRequest(
            collectionID=meta.id,
            guarantee_ts=ts,
            collection_ttl_ts=ttl_ts,
            expr=req.expr,
            output_fieldIDs=out_ids,
            limit=-1 if limit is None else limit + offset,
            partitionIDs=parts,
            count=count,
        )

        async def one(node, chans):
            r = query_node_pb2.QueryRequest()
            r.CopyFrom(qreq)
            r.vchannels.extend(chans)
            return await node.Query(r)

        results = await read_path.fan_out(self, nodes, one)
        out = milvus_pb2.QueryResults(collection_name=meta.name, session_ts=ts)
        if count:
            fd = out.fields_data.add(type=DT.Int64, field_name=COUNT)
            fd.scalars.long_data.data.append(sum(r.count for r in results))
            out.output_fields.append(COUNT)
            return out
        tables = [reduce.from_ipc(r.arrow) for r in results if r.arrow]
        tables = [t for t in tables if t.num_rows]
        table = reduce.newest_rows(pa.concat_tables(tables, promote_options="default")) if tables else None
        if table is not None and limit is not None:
            table = table.take(pc.sort_indices(table.column("pk")).slice(offset, limit))
        by_id = {f.fieldID: f for f in meta.schema.fields}
        n = 0 if table is None else table.num_rows
        for fid in out_ids:
            f = by_id[fid]
            if table is not None and str(fid) in table.column_names:
                col = table.column(str(fid)).combine_chunks()
            else:
                col = pa.array([], typeutil.arrow_type(f)) if n == 0 else pa.nulls(n, typeutil.arrow_type(f))
            fd = typeutil.array_to_field_data(f, col)
            fd.is_dynamic = f.is_dynamic
            out.fields_data.append(fd)
        out.output_fields.extend(out_names)
        return out
