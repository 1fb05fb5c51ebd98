"""The Proxy's collection meta cache (Milvus' globalMetaCache).

Filled from RootCoord.DescribeCollection on a miss; entries are dropped by
InvalidateCollectionMetaCache, which RootCoord sends to every Proxy before a drop (or an alias
change) returns, so a Proxy never serves a dropped collection or a moved alias from its cache.
An alias is cached under its own name; `name` is always the collection's real name.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus.util import merr, typeutil
from kmilvus.util.constants import DEFAULT_DB, DEFAULT_PARTITION


@dataclass
class CollectionMeta:
    id: int
    name: str
    db: str
    schema: schema_pb2.CollectionSchema
    vchannels: list[str]
    partitions: dict[str, int]  # name → ID
    describe: milvus_pb2.DescribeCollectionResponse
    pk: schema_pb2.FieldSchema = field(init=False)

    def __post_init__(self) -> None:
        self.pk = typeutil.primary_field(self.schema)

    @property
    def partition_id(self) -> int:
        """The `_default` partition's ID."""
        return self.partitions[DEFAULT_PARTITION]

    def partition(self, name: str) -> int:
        """A partition's ID by name ('' = `_default`), or Milvus' "partition not found"."""
        part = self.partitions.get(name or DEFAULT_PARTITION)
        if part is None:
            raise merr.MilvusError(merr.PARTITION_NOT_FOUND, f"partition not found[partition={name}]")
        return part


class MetaCache:
    def __init__(self, rootcoord):
        self.rootcoord = rootcoord
        self._by_name: dict[tuple[str, str], CollectionMeta] = {}
        self._lock = asyncio.Lock()

    async def get(self, db: str, name: str) -> CollectionMeta:
        key = (db or DEFAULT_DB, name)
        meta = self._by_name.get(key)
        if meta is not None:
            return meta
        resp = await self.rootcoord.DescribeCollection(
            milvus_pb2.DescribeCollectionRequest(db_name=key[0], collection_name=name)
        )
        merr.check(resp.status)
        parts = await self.rootcoord.ShowPartitions(milvus_pb2.ShowPartitionsRequest(collectionID=resp.collectionID))
        merr.check(parts.status)
        meta = CollectionMeta(
            id=resp.collectionID,
            name=resp.collection_name or name,
            db=key[0],
            schema=resp.schema,
            vchannels=list(resp.virtual_channel_names),
            partitions=dict(zip(parts.partition_names, parts.partitionIDs, strict=True)),
            describe=resp,
        )
        self._by_name[key] = meta
        return meta

    def remove(self, db: str, name: str = "", coll_id: int = 0) -> None:
        for key, meta in list(self._by_name.items()):
            if (name and key == (db or DEFAULT_DB, name)) or (coll_id and meta.id == coll_id):
                del self._by_name[key]

    def by_id(self, coll_id: int) -> CollectionMeta | None:
        return next((m for m in self._by_name.values() if m.id == coll_id), None)
