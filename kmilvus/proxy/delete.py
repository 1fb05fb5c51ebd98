"""The Proxy's Delete and Upsert (Milvus' deleteTask / upsertTask).

Delete: the expression is parsed (kmilvus.parser) to the primary keys it names (any other
expression is a Strong query for them first), and `Delete` messages (Arrow IPC: `pk`, `ts`) are
published on the collection's vchannels, routed by primary-key hash exactly like inserts, with
the partition they apply to (the one named, as Milvus; else -1: every partition). A key that
does not exist is accepted; `delete_count` is the number of keys in the expression.

Upsert: a delete of the rows' keys plus their insert, both at ONE timestamp and published
inside one `publishing()` window, so no time tick passes that timestamp before both are in the
channels: any later reader sees both or neither. A delete applies to rows with a smaller
timestamp only, so the new rows survive their own delete.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import milvus_pb2, schema_pb2

from kmilvus.msgstream import Msg, MsgType
from kmilvus.proxy import partial_update, partition_key
from kmilvus.proxy.insert import InsertTask, all_succeeded, fill_function_outputs, ipc_bytes
from kmilvus.proxy.meta_cache import CollectionMeta
from kmilvus.proxy.task import Task
from kmilvus.storage import deltalog
from kmilvus.util import fielddata, merr, typeutil
from kmilvus.util.constants import ALL_PARTITIONS
from kmilvus.util.hashing import shard_of

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object

DT = schema_pb2.DataType


def delete_messages(
    meta: CollectionMeta, keys: pa.Array, ts: int, partition: int, max_bytes: int
) -> list[tuple[str, Msg]]:
    """`Delete` messages for `keys` at `ts`, one or more per vchannel the keys hash to (the
    hash inserts route by: `shard_of`), cut from the key array without a per-key step."""
    per_key = max(1, (keys.nbytes + 8 * len(keys)) // max(1, len(keys)))
    chunk = max(1, max_bytes // per_key)
    items: list[tuple[str, Msg]] = []
    for ch, part in _by_shard(meta.vchannels, keys):
        for start in range(0, len(part), chunk):
            pks = part.slice(start, chunk)
            batch = pa.record_batch(
                [pks, pa.array(np.full(len(pks), ts, dtype=np.int64))], schema=deltalog.delta_schema(pks.type)
            )
            headers = {"collection": str(meta.id), "partition": str(partition), "rows": str(len(pks))}
            items.append((ch, Msg(MsgType.Delete, ts, ipc_bytes(batch), headers)))
    return items


def _by_shard(vchannels: list[str], keys: pa.Array) -> list[tuple[str, pa.Array]]:
    """The keys of each vchannel, in one stable sort by shard (one shard: the array as it is)."""
    if len(vchannels) == 1:
        return [(vchannels[0], keys)] if len(keys) else []
    shards = shard_of(keys, len(vchannels))
    order = np.argsort(shards, kind="stable")
    bounds = np.searchsorted(shards[order], np.arange(len(vchannels) + 1))
    return [
        (ch, keys.take(pa.array(order[bounds[i] : bounds[i + 1]])))
        for i, ch in enumerate(vchannels)
        if bounds[i + 1] > bounds[i]
    ]


class DeleteTask(Task):
    name = "DeleteTask"

    def __init__(self, proxy: ProxyHost, req: milvus_pb2.DeleteRequest):
        super().__init__()
        self.proxy = proxy
        self.req = req
        self._meta: CollectionMeta | None = None
        self.keys: pa.Array | None = None  # the primary keys to delete (pre_execute finds them)
        self.partition = ALL_PARTITIONS

    @property
    def meta(self) -> CollectionMeta:
        """The collection, as `pre_execute` resolved it (the queue runs that first)."""
        assert self._meta is not None, "pre_execute resolves the collection"
        return self._meta

    async def pre_execute(self) -> None:
        from kmilvus.parser import parse  # the expression parser (planparserv2)

        req = self.req
        self._meta = meta = await self.proxy.meta_cache.get(req.db_name, req.collection_name)
        partition_key.refuse_named(meta, req.partition_name, merr.UNEXPECTED)
        if req.partition_name:
            self.partition = meta.partition(req.partition_name)  # the delete applies there only
        if not req.expr.strip():
            raise merr.invalid("expr cannot be empty")
        plan = parse(req.expr, meta.schema)
        pks = plan.primary_keys()
        pk_type = pa.int64() if meta.pk.data_type == DT.Int64 else pa.string()
        if pks is None:  # any other expression: a Strong query finds the keys (kmilvus.proxy.query)
            parts = [req.partition_name] if req.partition_name else []
            self.keys = (await self.proxy.primary_keys_matching(meta, req.expr, parts)).cast(pk_type)
        else:  # the keys as the parser read them: one typed array, never key by key
            self.keys = (pks if isinstance(pks, pa.Array) else pa.array(pks)).cast(pk_type)

    async def execute(self) -> None:
        meta, proxy, keys = self.meta, self.proxy, self.keys
        assert keys is not None, "pre_execute finds the keys"
        ts = 0
        if len(keys):
            async with proxy.publishing(meta, [self.partition]) as ts:
                items = delete_messages(meta, keys, ts, self.partition, proxy.cfg.max_message_bytes)
                await proxy.producer.publish_many(items)
                if not await proxy.session_valid():
                    raise merr.MilvusError(
                        merr.SERVICE_UNAVAILABLE, "the proxy's session expired during the delete: outcome unknown"
                    )
        # As Milvus >= 2.3.2: the count and the timestamp, not the keys (pymilvus then answers
        # {"delete_count": n}).
        self.result = milvus_pb2.MutationResult(delete_cnt=len(keys), timestamp=ts)


class UpsertTask(InsertTask):
    name = "UpsertTask"

    async def pre_execute(self) -> None:
        req = self.req
        meta = await self.proxy.meta_cache.get(req.db_name, req.collection_name)
        if meta.pk.autoID:
            raise merr.invalid(f"upsert can not assign primary field data when auto id enabled {meta.pk.name}")
        if req.partial_update and req.field_ops:
            raise merr.invalid("field_ops of a partial update are not supported by this server")
        await super().pre_execute()

    async def columns_of(self, n: int) -> dict[int, pa.Array]:
        """A partial update's columns are the given ones over the stored rows."""
        if not self.req.partial_update:
            return await super().columns_of(n)
        given = fielddata.fields_data_to_columns(self.meta.schema, self.req.fields_data, n, partial=True)
        columns = await partial_update.merge(self.proxy, self.meta, given, n)
        await fill_function_outputs(self.meta.schema, columns)
        return columns

    async def execute(self) -> None:
        meta, n, proxy = self.meta, self.req.num_rows, self.proxy
        row_ids = await proxy.ids.alloc_array(n)
        keys = self.columns[meta.pk.fieldID]
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        shards = shard_of(keys, len(meta.vchannels))
        async with proxy.publishing(meta, self.partitions()) as ts:
            batch = typeutil.columns_to_record_batch(meta.schema, self.columns, row_ids, ts)
            # As Milvus: the old rows go in the upsert's partition (a key in another partition
            # stays there, and reads return the newest version of a key); with a partition key
            # the old row may sit in another partition than the new one: all of them.
            part = ALL_PARTITIONS if partition_key.key_field(meta.schema) is not None else self.partition_id
            deletes = delete_messages(meta, keys, ts, part, proxy.cfg.max_message_bytes)
            inserts = await self._route(batch, shards, ts)
            await proxy.producer.publish_many(deletes + inserts)
            if not await proxy.session_valid():
                raise merr.MilvusError(
                    merr.SERVICE_UNAVAILABLE, "the proxy's session expired during the upsert: outcome unknown"
                )
        self.result = all_succeeded(n, IDs=typeutil.primary_keys_to_ids(meta.pk, keys), upsert_cnt=n, timestamp=ts)


class ProxyDeleteMixin(ProxyHost):
    """Delete and Upsert RPCs (MilvusService), mixed into the Proxy."""

    @merr.rpc(milvus_pb2.MutationResult)
    async def Delete(self, req: milvus_pb2.DeleteRequest, context=None):
        return await self.dm_queue.enqueue(DeleteTask(self, req))

    @merr.rpc(milvus_pb2.MutationResult)
    async def Upsert(self, req: milvus_pb2.UpsertRequest, context=None):
        return await self.dm_queue.enqueue(UpsertTask(self, req))
