"""Search (MilvusService.Search): validate as Milvus does, fan the request out to the QueryNodes
serving the collection's channels at the guarantee timestamp of its consistency level, and merge
their top-k (Arrow tables) into pymilvus' SearchResultData."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus import components as roles
from kmilvus.index import params as index_params
from kmilvus.index import vectors as kvectors
from kmilvus.proto import data_coord_pb2, query_node_pb2
from kmilvus.proxy import read_path
from kmilvus.querynode import reduce, vector_search
from kmilvus.util import fieldtypes, merr, typeutil

DT = schema_pb2.DataType
TOPK_LIMIT = 16384  # Milvus' quotaAndLimits.limits.topK


def _int_param(params: dict[str, str], key: str, default: int) -> int:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(json.loads(raw))
    except (ValueError, TypeError):
        raise merr.invalid(f"{key} [{raw}] is invalid, it should be an integer") from None


def _anns_field(meta, params: dict[str, str]) -> schema_pb2.FieldSchema:
    vectors = [f for f in meta.schema.fields if fieldtypes.is_vector(f.data_type)]
    name = params.get("anns_field", "")
    if name:
        f = next((f for f in vectors if f.name == name), None)
        if f is None:
            raise merr.MilvusError(
                merr.FIELD_NOT_FOUND, f"failed to get field schema by name: fieldName({name}) not found"
            )
        return f
    if len(vectors) != 1:
        raise merr.invalid("multiple anns_fields exist, please specify a anns_field in search_params")
    return vectors[0]


def query_vectors(req: milvus_pb2.SearchRequest, field: schema_pb2.FieldSchema) -> kvectors.Vectors:
    """The placeholder group's vectors as the field's index takes them (kmilvus.index.vectors),
    checked against the field's type and dim."""
    group = common_pb2.PlaceholderGroup.FromString(req.placeholder_group)
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


def result_data(meta, table: pa.Table, nq: int, limit: int, round_decimal: int, out_ids, out_names):
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
        fd = typeutil.array_to_field_data(f, col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
        fd.is_dynamic = f.is_dynamic
        res.fields_data.append(fd)
    return res


class ProxySearchMixin:
    @merr.rpc(milvus_pb2.SearchResults)
    async def Search(self, req: milvus_pb2.SearchRequest, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        params = {kv.key: kv.value for kv in req.search_params}
        field = _anns_field(meta, params)
        limit = _int_param(params, "topk", 10)
        offset = _int_param(params, "offset", 0)
        round_decimal = _int_param(params, "round_decimal", -1)
        if limit <= 0 or limit > TOPK_LIMIT:
            raise merr.invalid(f"topk [{limit}] is invalid, should be in range [1, {TOPK_LIMIT}], but got {limit}")
        if offset < 0 or offset + limit > TOPK_LIMIT:
            raise merr.invalid(
                f"invalid max query result window, (offset+limit) should be in range [1, {TOPK_LIMIT}], "
                f"but got {offset + limit}"
            )
        if round_decimal != -1 and not 0 <= round_decimal <= 6:
            raise merr.invalid(f"round_decimal {round_decimal} is invalid, should be -1 or an integer in range [0, 6]")
        metric = await self.search_metric(meta, field, params.get("metric_type", ""))
        queries = query_vectors(req, field)
        nodes, loaded = await read_path.serving_nodes(self, meta)
        parts = read_path.partition_ids(meta, list(req.partition_names), loaded)
        out_ids, out_names = read_path.output_fields(meta, list(req.output_fields))
        ts = await read_path.guarantee_ts(self, meta, req)
        ttl_ts = await read_path.collection_ttl_ts(self, meta)
        extra = params.get("params") or "{}"
        try:
            knobs = json.loads(extra)
        except ValueError:
            knobs = None
        if not isinstance(knobs, dict):
            raise merr.invalid(f"search params must be a JSON object, got {extra}")
        index_params.check_range_params(metric, knobs)
        qreq = query_node_pb2.SearchRequest(
            collectionID=meta.id,
            guarantee_ts=ts,
            collection_ttl_ts=ttl_ts,
            vectors=kvectors.encode(queries),
            nq=len(queries),
            topk=offset + limit,
            metric_type=metric,
            params=extra,
            expr=req.dsl,
            output_fieldIDs=out_ids,
            partitionIDs=parts,
            anns_fieldID=field.fieldID,
        )

        async def one(node, chans):
            r = query_node_pb2.SearchRequest()
            r.CopyFrom(qreq)
            r.vchannels.extend(chans)
            return await node.Search(r)

        results = await read_path.fan_out(self, nodes, one)
        tables = [reduce.from_ipc(r.arrow) for r in results if r.arrow]
        tables = [t for t in tables if t.num_rows]
        if len(tables) == 1:  # one QueryNode's answer is merged already (top-k per query, best first)
            merged = keep_after_offset(tables[0], offset)
        elif tables:
            merged = reduce.merge_topk(
                pa.concat_tables(tables, promote_options="default"),
                offset + limit,
                vector_search.larger_is_closer(metric),
            )
            merged = keep_after_offset(merged, offset)
        else:
            merged = reduce.empty_search_result()
        data = result_data(meta, merged, len(queries), limit, round_decimal, out_ids, out_names)
        return milvus_pb2.SearchResults(results=data, collection_name=meta.name, session_ts=ts)

    async def vector_indexes(self, meta) -> dict[int, dict[str, str]]:
        """{vector field ID: its index params} (DataCoord's index meta). DataCoord is looked up
        at call time: in a standalone it is the in-process component (a read-only call, no gRPC
        round trip on every search), elsewhere its remote client."""
        datacoord = self.registry.client(roles.DATACOORD)
        resp = await datacoord.DescribeIndex(
            data_coord_pb2.DescribeIndexRequest(collectionID=meta.id, without_progress=True)
        )
        if resp.status.code == merr.INDEX_NOT_FOUND[0]:
            return {}
        merr.check(resp.status)
        return {i.index.fieldID: {kv.key: kv.value for kv in i.index.index_params} for i in resp.infos}

    async def search_metric(self, meta, field, requested: str) -> str:
        """The metric of the field's index; a request naming another one is refused, as Milvus."""
        index = (await self.vector_indexes(meta)).get(field.fieldID, {})
        have = index.get("metric_type", "").upper()
        if requested and have and requested.upper() != have:
            raise merr.invalid(f"metric type not match: invalid parameter[expected={have}][actual={requested}]")
        # Without an index: L2 for dense vectors (as before), Milvus' default for binary / sparse.
        kind = index_params.vector_kind(field.data_type)
        default = "L2" if kind == index_params.DENSE else index_params.default_metric(field.data_type)
        return index_params.check_search_metric(
            field.data_type, vector_search.check_metric(requested or have or default)
        )
