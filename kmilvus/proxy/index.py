"""The Proxy's index RPCs (MilvusService), as pymilvus 3.0 sends them:

    Collection.create_index / MilvusClient.create_index  → CreateIndex (extra_params: index_type,
                                                            metric_type, params as JSON)
    describe_index / list_indexes / get_index_state /
    index_building_progress / wait_for_index_building_complete → DescribeIndex
    GetIndexState, GetIndexBuildProgress                   → (older clients) the same answer
    drop_index                                             → DropIndex
    alter_index_properties / drop_index_properties         → AlterIndex (mmap.enabled only)

The Proxy checks the params against the schema (kmilvus.index.params, Milvus' messages) and
resolves names; DataCoord keeps the meta and builds (kmilvus.datacoord.index_service).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import common_pb2, milvus_pb2

from kmilvus import components as roles
from kmilvus.index import params as P
from kmilvus.log import get_logger
from kmilvus.proto import data_coord_pb2
from kmilvus.proxy.meta_cache import CollectionMeta
from kmilvus.util import merr, typeutil

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

log = get_logger(__name__)


def flat_index_params(extra: list[common_pb2.KeyValuePair]) -> dict[str, str]:
    """extra_params as one flat dict: the `params` JSON object merged in (nlist, M, ...)."""
    out: dict[str, str] = {}
    for kv in extra:
        if kv.key == P.PARAMS:
            try:
                nested = json.loads(kv.value) if kv.value else {}
            except ValueError:
                raise merr.invalid(f"invalid index params: {kv.value}") from None
            if not isinstance(nested, dict):
                raise merr.invalid(f"invalid index params: {kv.value}")
            out.update({k: str(v) for k, v in nested.items()})
        else:
            out[kv.key] = kv.value
    return out


# Index properties AlterIndex may change (Milvus' indexparams.IsConfigableIndexParam).
ALTERABLE = {"mmap.enabled": ("true", "false")}


def check_alterable(keys: list[str], values: dict[str, str]) -> None:
    for k in keys:
        if k not in ALTERABLE:
            raise merr.invalid(f"{k} is not configable index param")
    for k, v in values.items():
        if v.lower() not in ALTERABLE[k]:
            raise merr.invalid(f"invalid {k} value: {v}, expected: {', '.join(ALTERABLE[k])}")


def _kvs(d: dict[str, str]) -> list[common_pb2.KeyValuePair]:
    return [common_pb2.KeyValuePair(key=k, value=v) for k, v in d.items()]


class ProxyIndexMixin(ProxyHost):
    """MilvusService RPCs for indexes (a base class of Proxy)."""

    @merr.rpc()
    async def CreateIndex(self, req: milvus_pb2.CreateIndexRequest, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        field, checked = P.check_field_index(meta.schema, req.field_name, flat_index_params(list(req.extra_params)))
        index_name = req.index_name or field.name  # Milvus names a nameless index after its field
        merr.check(
            await self.datacoord.CreateIndex(
                data_coord_pb2.CreateIndexRequest(
                    collectionID=meta.id,
                    fieldID=field.fieldID,
                    index_name=index_name,
                    index_params=_kvs(checked),
                    user_index_params=_kvs(P.user_params(checked)),
                    timestamp=await self.tso.alloc(),
                )
            )
        )
        log.info("index created", collection=meta.name, field=field.name, index=index_name, type=checked[P.INDEX_TYPE])
        return merr.success()

    async def _describe(
        self, db: str, collection: str, index_name: str
    ) -> tuple[CollectionMeta, list[data_coord_pb2.IndexInfo]]:
        meta = await self.meta_cache.get(db, collection)
        # Resolved at call time (read-only): in-process in a standalone, no gRPC round trip.
        datacoord = self.registry.client(roles.DATACOORD)
        resp = await datacoord.DescribeIndex(
            data_coord_pb2.DescribeIndexRequest(collectionID=meta.id, index_name=index_name)
        )
        merr.check(resp.status)
        return meta, list(resp.infos)

    @merr.rpc(milvus_pb2.DescribeIndexResponse)
    async def DescribeIndex(self, req: milvus_pb2.DescribeIndexRequest, context=None):
        meta, infos = await self._describe(req.db_name, req.collection_name, req.index_name)
        names = {f.fieldID: f.name for f in meta.schema.fields}
        resp = milvus_pb2.DescribeIndexResponse()
        for info in infos:
            ix = info.index
            resp.index_descriptions.add(
                index_name=ix.index_name,
                indexID=ix.indexID,
                params=list(ix.user_index_params),
                field_name=names.get(ix.fieldID, ""),
                indexed_rows=info.indexed_rows,
                total_rows=info.total_rows,
                pending_index_rows=info.pending_index_rows,
                state=info.state,
                index_state_fail_reason=info.fail_reason,
            )
        return resp

    @merr.rpc(milvus_pb2.GetIndexStateResponse)
    async def GetIndexState(self, req: milvus_pb2.GetIndexStateRequest, context=None):
        _, infos = await self._describe(req.db_name, req.collection_name, req.index_name)
        failed = next((i for i in infos if i.state == common_pb2.IndexState.Failed), None)
        if failed is not None:
            return milvus_pb2.GetIndexStateResponse(state=failed.state, fail_reason=failed.fail_reason)
        done = all(i.state == common_pb2.IndexState.Finished for i in infos)
        return milvus_pb2.GetIndexStateResponse(
            state=common_pb2.IndexState.Finished if done else common_pb2.IndexState.InProgress
        )

    @merr.rpc(milvus_pb2.GetIndexBuildProgressResponse)
    async def GetIndexBuildProgress(self, req: milvus_pb2.GetIndexBuildProgressRequest, context=None):
        _, infos = await self._describe(req.db_name, req.collection_name, req.index_name)
        return milvus_pb2.GetIndexBuildProgressResponse(
            indexed_rows=sum(i.indexed_rows for i in infos),
            total_rows=sum(i.total_rows for i in infos),
        )

    @merr.rpc()
    async def DropIndex(self, req: milvus_pb2.DropIndexRequest, context=None):
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        fields = []
        if req.field_name:
            fields.append(typeutil.field_by_name(meta.schema, req.field_name).fieldID)
        merr.check(
            await self.datacoord.DropIndex(
                data_coord_pb2.DropIndexRequest(collectionID=meta.id, index_name=req.index_name, fieldIDs=fields)
            )
        )
        return merr.success()

    @merr.rpc()
    async def AlterIndex(self, req: milvus_pb2.AlterIndexRequest, context=None):
        """Milvus 2.5's alterIndexTask: properties or delete keys (not both), alterable keys only."""
        if req.extra_params and req.delete_keys:
            raise merr.invalid("cannot provide both DeleteKeys and ExtraParams")
        if not req.extra_params and not req.delete_keys:
            raise merr.invalid("no params or delete keys provided")
        if not req.index_name:
            raise merr.invalid("index_name is empty")
        put = {kv.key: kv.value.lower() for kv in req.extra_params}
        check_alterable(list(put) + list(req.delete_keys), put)
        meta = await self.meta_cache.get(req.db_name, req.collection_name)
        merr.check(
            await self.datacoord.AlterIndex(
                data_coord_pb2.AlterIndexRequest(
                    collectionID=meta.id, index_name=req.index_name, params=_kvs(put), delete_keys=req.delete_keys
                )
            )
        )
        log.info("index altered", collection=meta.name, index=req.index_name, keys=sorted(put) or list(req.delete_keys))
        return merr.success()
