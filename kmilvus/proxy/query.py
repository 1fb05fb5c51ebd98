"""Query and Get (MilvusService.Query; pymilvus' get(ids) sends `pk in [...]`) and `count(*)`:
validated as Milvus does, fanned out to the QueryNodes at the guarantee timestamp, merged with
Arrow (primary-key order when paginated, or ORDER BY's: kmilvus/reduce/orderby.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus import reduce
from kmilvus.proto import query_node_pb2
from kmilvus.proxy import read_path, search_util
from kmilvus.reduce import orderby
from kmilvus.util import fielddata, merr, typeutil

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

DT = schema_pb2.DataType
COUNT = "count(*)"


@dataclass
class QueryParams:
    """A query's params as Milvus' parseQueryParams reads them."""

    limit: int | None = None  # None: no limit
    offset: int = 0
    iterator: bool = False
    reduce_stop_for_best: bool = False
    ignore_growing: bool = False
    order_by: str = ""  # `order_by_fields` as sent ("price:desc,rating:asc")


def _bool(params: dict[str, str], key: str, what: str) -> bool:
    raw = params.get(key)
    if raw is None:
        return False
    if raw not in search_util.GO_BOOLS:
        raise merr.invalid(f"{what}: invalid parameter[expected=true or false][actual={raw}]")
    return search_util.GO_BOOLS[raw]


def parse_query_params(req: milvus_pb2.QueryRequest, meta) -> QueryParams:
    """Every query param honoured or refused (search_util's tables), with Milvus' texts."""
    params = search_util.request_params(req, search_util.QUERY)
    qp = QueryParams()
    raw = params.get("ignore_growing")
    if raw is not None:
        if raw not in search_util.GO_BOOLS:
            raise merr.invalid("parse search growing failed: invalid parameter")
        qp.ignore_growing = search_util.GO_BOOLS[raw]
    qp.reduce_stop_for_best = _bool(params, "reduce_stop_for_best", "value for reduce_stop_for_best is invalid")
    qp.iterator = _bool(params, "iterator", "value for iterator field is invalid")
    if "collection_id" in params:
        try:
            coll_id = int(params["collection_id"], 0)
        except ValueError:
            raise merr.invalid(
                "value for collection id is invalid: invalid parameter[expected=int value for collection_id]"
                "[actual=collection_id]"
            ) from None
        if coll_id > 0 and coll_id != meta.id:
            raise merr.invalid(
                "Input collection id is not consistent to collectionID in the context,"
                "alias or database may have changed: invalid parameter"
            )
    if "limit" in params:
        qp.limit = _int(params, "limit")
        qp.offset = _int(params, "offset") if "offset" in params else 0
        search_util.check_query_window(qp.offset, qp.limit)
    qp.order_by = params.get("order_by_fields", "").strip()
    if qp.order_by and qp.limit is None:  # each segment sorts what it keeps: bounded by the limit
        raise merr.invalid("ORDER BY requires explicit limit: invalid parameter")
    if qp.order_by and qp.iterator:  # iterators page in primary-key order
        raise merr.invalid("ORDER BY with iterator is not supported: invalid parameter")
    return qp


def _int(params: dict[str, str], key: str) -> int:
    try:
        return int(params[key], 0)
    except ValueError:
        raise merr.MilvusError(merr.UNEXPECTED, f"{key} [{params[key]}] is invalid") from None


class ProxyQueryMixin(ProxyHost):
    async def primary_keys_matching(self, meta, expr: str, partition_names=()) -> pa.Array:
        """The primary keys of every row `expr` matches (in `partition_names`, or all), read at
        a fresh timestamp (Delete by expression, as Milvus: query, then delete) — as the
        QueryNodes' Arrow answers hold them, never through the client's per-value FieldData.
        The caller has parsed `expr` already."""
        req = milvus_pb2.QueryRequest(
            db_name=meta.db,
            collection_name=meta.name,
            expr=expr,
            output_fields=[meta.pk.name],
            partition_names=list(partition_names),
            consistency_level=common_pb2.ConsistencyLevel.Strong,
        )
        results, _ = await self._query_nodes(meta, req, QueryParams(), [meta.pk.fieldID])
        table = _rows(results, None, 0, [])
        pk_type = typeutil.arrow_type(meta.pk)
        if table is None or str(meta.pk.fieldID) not in table.column_names:
            return pa.array([], pk_type)
        return table.column(str(meta.pk.fieldID)).combine_chunks().cast(pk_type)

    @merr.rpc(milvus_pb2.QueryResults)
    async def Query(self, req: milvus_pb2.QueryRequest, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        qp = parse_query_params(req, meta)
        names = [n.strip() for n in req.output_fields]
        count = any(n.lower() == COUNT for n in names)
        if count and len(names) > 1:
            raise merr.invalid("count entities with pagination is not allowed")
        read_path.check_expr(meta, req.expr, req.expr_template_values)
        order = orderby.parse(qp.order_by, meta.schema) if qp.order_by else []
        limit, offset = qp.limit, qp.offset
        if not req.expr.strip() and not count and limit is None:
            raise merr.invalid("empty expression should be used with limit")
        out_ids: list[int] = []
        out_names: list[str] = []
        if not count:
            out_ids, out_names = read_path.output_fields(meta, names)
            if meta.pk.fieldID not in out_ids:
                out_ids.insert(0, meta.pk.fieldID)
                out_names.insert(0, meta.pk.name)
        results, session_ts = await self._query_nodes(meta, req, qp, out_ids, count, order)
        out = milvus_pb2.QueryResults(collection_name=meta.name, session_ts=session_ts)
        if count:
            fd = out.fields_data.add(type=DT.Int64, field_name=COUNT)
            fd.scalars.long_data.data.append(sum(r.count for r in results))
            out.output_fields.append(COUNT)
            return out
        table = _rows(results, limit, offset, order)
        by_id = {f.fieldID: f for f in meta.schema.fields}
        n = 0 if table is None else table.num_rows
        for fid in out_ids:
            f = by_id[fid]
            if table is not None and str(fid) in table.column_names:
                col = table.column(str(fid)).combine_chunks()
            else:
                col = pa.array([], typeutil.arrow_type(f)) if n == 0 else pa.nulls(n, typeutil.arrow_type(f))
            fd = fielddata.array_to_field_data(f, col)
            fd.is_dynamic = f.is_dynamic
            out.fields_data.append(fd)
        out.output_fields.extend(out_names)
        return out

    async def _query_nodes(
        self, meta, req: milvus_pb2.QueryRequest, qp: QueryParams, out_ids: list[int], count: bool = False, order=()
    ) -> tuple[list, int]:
        """The query fanned out to the QueryNodes serving the collection, at the request's
        guarantee timestamp: their answers, and the session timestamp."""
        nodes, loaded = await read_path.serving_nodes(self, meta)
        parts = read_path.partition_ids(meta, list(req.partition_names), loaded, req.expr, req.expr_template_values)
        ts, mvcc = await read_path.read_timestamps(self, meta, req, qp.iterator)
        ttl_ts = await read_path.collection_ttl_ts(self, meta)
        limit, offset = qp.limit, qp.offset
        qreq = query_node_pb2.QueryRequest(
            collectionID=meta.id,
            guarantee_ts=ts,
            collection_ttl_ts=ttl_ts,
            expr=req.expr,
            output_fieldIDs=out_ids,
            limit=-1 if limit is None else limit + offset,
            partitionIDs=parts,
            count=count,
            ignore_growing=qp.ignore_growing,
            mvcc_ts=mvcc,
            order_by=[f.to_proto() for f in order],
            schema_version=meta.schema.version,
        )
        for name, value in req.expr_template_values.items():
            qreq.expr_template_values[name].CopyFrom(value)

        async def one(node, chans):
            r = query_node_pb2.QueryRequest()
            r.CopyFrom(qreq)
            r.vchannels.extend(chans)
            return await node.Query(r)

        return await read_path.fan_out(self, nodes, one), mvcc or ts


def _rows(results, limit: int | None, offset: int, order) -> pa.Table | None:
    """The QueryNodes' Arrow answers as one table: the newest version of each key, then (with a
    limit) ordered — by primary key, or ORDER BY's fields — and cut to the page."""
    tables = [reduce.from_ipc(r.arrow) for r in results if r.arrow]
    tables = [t for t in tables if t.num_rows]
    table = reduce.newest_rows(pa.concat_tables(tables, promote_options="default")) if tables else None
    if table is not None and limit is not None:
        ranked = orderby.sort_indices(table, order) if order else pc.sort_indices(table.column("pk"))
        table = table.take(ranked.slice(offset, limit))
    return table
