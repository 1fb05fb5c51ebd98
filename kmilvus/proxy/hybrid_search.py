"""HybridSearch (MilvusService.HybridSearch, pymilvus' `hybrid_search`): one search per
`AnnSearchRequest` — each with its own vector field, filter, params, radius / range_filter and
limit — at one guarantee timestamp, then fused by a reranker (RRF, weighted, decay; legacy rank
params or a rerank function) into `limit` hits after `offset`, or `limit` groups for a group-by.
Milvus' advanced search: the per-request answers are reduced in the Proxy, then reranked."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2

from kmilvus.proxy import read_path, rerank, search_util
from kmilvus.proxy.search import FieldSearch, result_data
from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object


class ProxyHybridSearchMixin(ProxyHost):
    @merr.rpc(milvus_pb2.SearchResults)
    async def HybridSearch(self, req: milvus_pb2.HybridSearchRequest, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        rank_params = search_util.request_params(req, search_util.RANK)
        if len(req.requests) > search_util.MAX_SEARCH_REQUESTS:
            raise merr.MilvusError(
                merr.UNEXPECTED, f"maximum of ann search requests is {search_util.MAX_SEARCH_REQUESTS}"
            )
        if not req.requests:
            raise merr.invalid("hybrid search needs at least one ann search request: invalid parameter")
        rank = search_util.parse_rank_params(rank_params, meta.schema)
        if req.HasField("function_score"):
            fusion = rerank.from_function_score(req.function_score, meta.schema)
        else:
            fusion = rerank.from_rank_params(rank_params)
        scorer = rerank.group_scorer(rank_params)
        if not fusion.supports_group and rank.group.field is not None:
            raise merr.invalid("Current rerank does not support grouping search: invalid parameter")
        subs: list[FieldSearch] = []
        nq = 0
        for sub in req.requests:
            params = search_util.request_params(sub, search_util.SEARCH)
            fs = await self.prepare_field_search(
                meta, params, sub.placeholder_group, sub.dsl, sub.expr_template_values, rank
            )
            sub_nq = search_util.search_request_nq(sub, len(fs.queries))
            if nq and sub_nq != nq:
                raise merr.invalid(
                    f"sub search request nq should be the same: invalid parameter[expected={nq}][actual={sub_nq}]"
                )
            nq = sub_nq
            subs.append(fs)
        out_ids, out_names = read_path.output_fields(meta, list(req.output_fields))
        scope = await self.read_scope(meta, req, list(req.partition_names), out_ids, iterator=False)
        scope.out_ids = out_ids + [f for f in fusion.input_fields if f not in out_ids]
        tables = await asyncio.gather(*(self.run_field_search(meta, fs, scope) for fs in subs))
        window = rerank.Window(
            rank.limit,
            rank.offset,
            rank.round_decimal,
            rank.group.size,
            rank.group.strict,
            scorer,
            grouped=rank.group.field is not None,
        )
        fused = rerank.fuse(fusion, list(tables), [fs.metric for fs in subs], window)
        data = result_data(meta, fused, nq, rank.limit, -1, out_ids, out_names, rank.group.field)
        return milvus_pb2.SearchResults(results=data, collection_name=meta.name, session_ts=scope.guarantee_ts)
