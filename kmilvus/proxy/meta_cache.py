"""The Proxy's collection meta cache (Milvus' globalMetaCache).

Filled from RootCoord.DescribeCollection on a miss; entries are dropped by
InvalidateCollectionMetaCache, which RootCoord sends to every Proxy before an alias change
returns, and right after a drop has answered (docs/architecture/drop.md). Until a Proxy hears of
a drop, its entry may still name what is gone; it never publishes into it: each entry keeps the
meta epoch known when it was read, every timestamp allocation brings RootCoord's current one, and
a write whose allocation brings a larger epoch checks its meta again first (`revalidate`) —
refused as Milvus refuses a collection or partition that does not exist, or run again when the
name now stands for a new collection. An alias is cached under its own name; `name` is always
the collection's real name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus.util import merr, typeutil
from kmilvus.util.constants import ALL_PARTITIONS, DEFAULT_DB, DEFAULT_PARTITION


@dataclass
class CollectionMeta:
    id: int
    name: str
    db: str
    schema: schema_pb2.CollectionSchema
    vchannels: list[str]
    partitions: dict[str, int]  # name → ID
    describe: milvus_pb2.DescribeCollectionResponse
    epoch: int = 0  # RootCoord's meta epoch known before this was read (MetaCache.revalidate)
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


class StaleMeta(merr.MilvusError):
    """The collection a write was prepared for was dropped and its name now stands for another
    one: the task runs again from the start, with the new meta (proxy/task.py); should that keep
    happening, the write is refused as the collection it meant is: not found."""

    def __init__(self, name: str):
        super().__init__(merr.COLLECTION_NOT_FOUND, f"collection not found[collection={name}]")


class MetaCache:
    def __init__(self, rootcoord, epoch: Callable[[], int] = lambda: 0):
        self.rootcoord = rootcoord
        self.epoch = epoch  # RootCoord's meta epoch as this Proxy last heard it
        self._by_name: dict[tuple[str, str], CollectionMeta] = {}
        self._lock = asyncio.Lock()

    async def get(self, db: str, name: str) -> CollectionMeta:
        key = (db or DEFAULT_DB, name)
        meta = self._by_name.get(key)
        if meta is not None:
            return meta
        epoch = self.epoch()  # before the read: the entry is at least as new as this
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
            epoch=epoch,
        )
        self._by_name[key] = meta
        return meta

    async def revalidate(self, meta: CollectionMeta, partitions: Iterable[int] = ()) -> None:
        """Before a write publishes with `meta`: when a drop has committed since it was read
        (this Proxy's epoch is larger), read the collection again — gone: Milvus' collection not
        found; another collection under its name: `StaleMeta`; one of `partitions` gone:
        Milvus' partition not found. Unchanged: nothing happens, one read per drop."""
        if meta.epoch >= self.epoch():
            return
        self.remove(meta.db, meta.name, meta.id)
        fresh = await self.get(meta.db, meta.name)
        if fresh.id != meta.id:
            raise StaleMeta(meta.name)
        live = set(fresh.partitions.values())
        for part in partitions:
            if part != ALL_PARTITIONS and part not in live:
                name = next((n for n, p in meta.partitions.items() if p == part), str(part))
                raise merr.MilvusError(merr.PARTITION_NOT_FOUND, f"partition not found[partition={name}]")

    def remove(self, db: str, name: str = "", coll_id: int = 0) -> None:
        for key, meta in list(self._by_name.items()):
            if (name and key == (db or DEFAULT_DB, name)) or (coll_id and meta.id == coll_id):
                del self._by_name[key]

    def by_id(self, coll_id: int) -> CollectionMeta | None:
        return next((m for m in self._by_name.values() if m.id == coll_id), None)
