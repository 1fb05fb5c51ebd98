"""Search (MilvusService.Search): parse and check the request as Milvus' proxy does
(search_util.py), fan one field search out to the QueryNodes serving the collection's channels at
the guarantee timestamp of its consistency level, merge their answers (Arrow tables; top-k, or by
group) and shape pymilvus' SearchResultData. A hybrid search (hybrid_search.py) runs several of
the same field searches and fuses them; a rerank function (rerank.py) applies to a plain search
too; a search iterator page (search_iterator.py) is a field search past the previous page."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus import reduce
from kmilvus.components import RemoteClient
from kmilvus.index import params as index_params
from kmilvus.index import vectors as kvectors
from kmilvus.proto import query_node_pb2
from kmilvus.proxy import full_text, read_path, rerank, search_util
from kmilvus.proxy.search_util import SearchInfo
from kmilvus.reduce import groupby
from kmilvus.util import fielddata, merr, typeutil

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
    from kmilvus.types import LocalQueryNode, QueryNodeClient
else:
    ProxyHost = object

DT = schema_pb2.DataType


def query_vectors(placeholder_group: bytes, field: schema_pb2.FieldSchema) -> kvectors.Vectors:
    """The placeholder group's vectors as the field's index takes them (kmilvus.index.vectors),
    checked against the field's type and dim as Milvus' proxy checks them."""
    group = common_pb2.PlaceholderGroup.FromString(placeholder_group)
    if not group.placeholders:
        raise merr.invalid("the search request has no query vectors")
    return kvectors.from_placeholder(group.placeholders[0], field)


def keep_after_offset(table: pa.Table, offset: int) -> pa.Table:
    """Drop the first `offset` rows of each query (the table is sorted by query, best first)."""
    if offset <= 0 or table.num_rows == 0:
        return table
    nq = table.column("nq").to_numpy()
    rank = np.arange(len(nq)) - np.searchsorted(nq, nq, side="left")
    return table.filter(pa.array(rank >= offset))


def result_data(
    meta, table: pa.Table, nq: int, limit: int, round_decimal: int, out_ids, out_names, group_field=None
) -> schema_pb2.SearchResultData:
    res = schema_pb2.SearchResultData(num_queries=nq, top_k=limit, primary_field_name=meta.pk.name)
    res.output_fields.extend(out_names)
    n = table.num_rows
    counts = np.bincount(table.column("nq").to_numpy(), minlength=nq) if n else np.zeros(nq, dtype=np.int64)
    res.topks.extend(counts.astype(np.int64))
    if n:
        scores = table.column("score").to_numpy().astype(np.float32)
        if round_decimal >= 0:
            scores = np.round(scores, round_decimal)
        res.scores.extend(scores)
        res.ids.CopyFrom(typeutil.primary_keys_to_ids(meta.pk, table.column("pk")))
    else:
        if meta.pk.data_type == DT.Int64:
            res.ids.int_id.SetInParent()
        else:
            res.ids.str_id.SetInParent()
    by_id = {f.fieldID: f for f in meta.schema.fields}
    for fid in out_ids:
        f = by_id[fid]
        col = table.column(str(fid)) if str(fid) in table.column_names else pa.nulls(n, typeutil.arrow_type(f))
        fd = fielddata.array_to_field_data(f, col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
        fd.is_dynamic = f.is_dynamic
        res.fields_data.append(fd)
    if group_field is not None:
        # Milvus answers each hit's group value beside the hits, named and typed as the field.
        col = table.column(groupby.GROUP) if n else pa.array([], typeutil.arrow_type(group_field))
        res.group_by_field_value.CopyFrom(fielddata.array_to_field_data(group_field, col))
    return res


@dataclass
class FieldSearch:
    """One vector field's search, prepared by the Proxy: a plain search, or one request of a
    hybrid search."""

    info: SearchInfo
    queries: kvectors.Vectors
    expr: str = ""
    templates: Mapping[str, schema_pb2.TemplateValue] = field(default_factory=dict)
    metric: str = "L2"

    @property
    def larger_is_closer(self) -> bool:
        return index_params.larger_is_closer(self.metric)


@dataclass
class ReadScope:
    """Where and as of when a read runs: serving nodes, partitions, timestamps, outputs."""

    nodes: dict[int, list[str]]
    partitions: list[int]
    guarantee_ts: int
    ttl_ts: int
    mvcc_ts: int = 0
    out_ids: list[int] = field(default_factory=list)


class ProxySearchMixin(ProxyHost):
    @merr.rpc(milvus_pb2.SearchResults)
    async def Search(self, req: milvus_pb2.SearchRequest, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        params = search_util.request_params(req, search_util.SEARCH)
        fs = await self.prepare_field_search(meta, params, req.placeholder_group, req.dsl, req.expr_template_values)
        search_util.search_request_nq(req, len(fs.queries))
        info = fs.info
        fusion = None
        if req.HasField("function_score"):
            if info.iterator:
                raise merr.invalid("Range search do not support rerank: invalid parameter")
            fusion = rerank.from_function_score(req.function_score, meta.schema)
            if not fusion.supports_group and info.group.field is not None:
                raise merr.invalid("Current rerank does not support grouping search: invalid parameter")
        out_ids, out_names = read_path.output_fields(meta, list(req.output_fields))
        scope = await self.read_scope(meta, req, list(req.partition_names), out_ids, info.iterator)
        if fusion is not None:
            scope.out_ids = out_ids + [f for f in fusion.input_fields if f not in out_ids]
        bound = self.search_iterators.bound(info.iterator_v2, fs.larger_is_closer)
        merged = await self.run_field_search(meta, fs, scope, bound)
        group_field = info.group.field
        nq = len(fs.queries)
        if fusion is not None:
            window = rerank.Window(
                info.limit,
                info.offset,
                info.round_decimal,
                info.group.size,
                info.group.strict,
                grouped=bool(group_field),
            )
            merged = rerank.fuse(fusion, [merged], [fs.metric], window)
        elif group_field is not None:
            merged = groupby.merge_groups(merged, info.limit, info.group.size, fs.larger_is_closer, info.offset)
        else:
            merged = keep_after_offset(merged, info.offset)
        data = result_data(meta, merged, nq, info.limit, info.round_decimal, out_ids, out_names, group_field)
        if info.iterator_v2 is not None:
            token, last = self.search_iterators.advance(info.iterator_v2, merged)
            data.search_iterator_v2_results.token = token
            data.search_iterator_v2_results.last_bound = last
        session_ts = scope.mvcc_ts or scope.guarantee_ts
        return milvus_pb2.SearchResults(results=data, collection_name=meta.name, session_ts=session_ts)

    async def prepare_field_search(
        self, meta, params: dict[str, str], placeholder_group: bytes, expr: str, templates, rank=None
    ) -> FieldSearch:
        """Parse one field search's params (Milvus' parseSearchInfo), its vectors and filter, and
        resolve its metric from the field's index."""
        info = search_util.parse_search_info(meta.schema, params, rank)
        if info.collection_id and info.collection_id != meta.id:
            raise merr.invalid(
                f"collection id:{info.collection_id} in the request is not consistent to that in the search context,"
                f"alias or database may have been changed: {meta.id}: invalid parameter"
            )
        read_path.check_expr(meta, expr, templates)
        metric = await self.search_metric(meta, info.field, info.metric)
        index_params.check_range_params(metric, info.params)
        queries: kvectors.Vectors
        if metric == index_params.BM25:  # text in, term frequencies out (kmilvus/proxy/full_text.py)
            queries = full_text.query_rows(meta.schema, info.field, placeholder_group, params.get("analyzer_name"))
            index = (await self.vector_indexes(meta)).get(info.field.fieldID, {})
            info.params[index_params.BM25_K1], info.params[index_params.BM25_B] = index_params.bm25_params(
                index, info.params
            )
        else:
            if "analyzer_name" in params:
                raise merr.invalid(f"analyzer_name is only for a BM25 function's output field, not {info.field.name}")
            queries = query_vectors(placeholder_group, info.field)
        return FieldSearch(info, queries, expr, templates, metric)

    async def read_scope(self, meta, req, partition_names: list[str], out_ids: list[int], iterator: bool) -> ReadScope:
        nodes, loaded = await read_path.serving_nodes(self, meta)
        # A plain search's filter may pin a partition key (a hybrid search's filters are its requests').
        expr, templates = getattr(req, "dsl", ""), getattr(req, "expr_template_values", None)
        parts = read_path.partition_ids(meta, partition_names, loaded, expr, templates)
        ts, mvcc = await read_path.read_timestamps(self, meta, req, iterator)
        ttl_ts = await read_path.collection_ttl_ts(self, meta)
        return ReadScope(nodes, parts, ts, ttl_ts, mvcc, list(out_ids))

    async def run_field_search(
        self, meta, fs: FieldSearch, scope: ReadScope, bound: query_node_pb2.IteratorBound | None = None
    ) -> pa.Table:
        """One field search on every serving node, merged: per query the best `topk` hits (or
        groups), best first — the offset is still in (the caller drops it)."""
        info = fs.info
        qreq = query_node_pb2.SearchRequest(
            collectionID=meta.id,
            guarantee_ts=scope.guarantee_ts,
            collection_ttl_ts=scope.ttl_ts,
            vectors=kvectors.encode(fs.queries),
            nq=len(fs.queries),
            topk=info.topk,
            metric_type=fs.metric,
            params=json.dumps(info.params),
            expr=fs.expr,
            output_fieldIDs=scope.out_ids,
            partitionIDs=scope.partitions,
            anns_fieldID=info.field.fieldID,
            ignore_growing=info.ignore_growing,
            mvcc_ts=scope.mvcc_ts,
            schema_version=meta.schema.version,
        )
        for name, value in fs.templates.items():
            qreq.expr_template_values[name].CopyFrom(value)
        if info.group.field is not None:
            qreq.group_by_fieldID = info.group.field.fieldID
            qreq.group_size = info.group.size
            qreq.strict_group_size = info.group.strict
        if bound is not None:
            qreq.iterator_bound.CopyFrom(bound)
        qreq.iterator_v2 = info.iterator_v2 is not None

        async def one(node: QueryNodeClient, chans: list[str]) -> pa.Table | None:
            r = query_node_pb2.SearchRequest()
            r.CopyFrom(qreq)
            r.vchannels.extend(chans)
            if not isinstance(node, RemoteClient):  # a QueryNode in this process: its table as is
                return await cast("LocalQueryNode", node).search_table(r)
            resp = await node.Search(r)
            merr.check(resp.status)
            return reduce.from_ipc(resp.arrow) if resp.arrow else None

        results = await read_path.fan_out(self, scope.nodes, one, checked=False)
        tables = [t for t in results if t is not None and t.num_rows]
        if not tables:
            return reduce.empty_search_result()
        if len(tables) == 1:  # one QueryNode's answer is merged already
            return tables[0]
        merged = pa.concat_tables(tables, promote_options="default")
        if info.group.field is not None:
            return groupby.merge_groups(merged, info.topk, info.group.size, fs.larger_is_closer)
        return reduce.merge_topk(merged, info.topk, fs.larger_is_closer)

    async def vector_indexes(self, meta) -> dict[int, dict[str, str]]:
        """{vector field ID: its index params} (DataCoord's index meta)."""
        infos = await read_path.index_infos(self, meta)
        return {i.index.fieldID: {kv.key: kv.value for kv in i.index.index_params} for i in infos}

    async def search_metric(self, meta, field, requested: str) -> str:
        """The metric of the field's index; a request naming another one is refused, as Milvus."""
        index = (await self.vector_indexes(meta)).get(field.fieldID, {})
        have = index.get("metric_type", "").upper()
        if index_params.is_bm25_output(meta.schema, field):
            have = index_params.BM25  # a BM25 function's field scores with BM25, index or not
        if requested and have and requested.upper() != have:
            raise merr.invalid(f"metric type not match: invalid parameter[expected={have}][actual={requested}]")
        # Without an index: L2 for dense vectors (as before), Milvus' default for binary / sparse.
        kind = index_params.vector_kind(field.data_type)
        default = "L2" if kind == index_params.DENSE else index_params.default_metric(field.data_type)
        metric = index_params.check_metric(requested or have or default)
        return metric if metric == index_params.BM25 else index_params.check_search_metric(field.data_type, metric)
