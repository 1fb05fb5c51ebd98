"""Partitions in RootCoord (Milvus' CreatePartition / DropPartition / HasPartition /
ShowPartitions), with Milvus' codes and messages.

A partition lives in its collection's CollectionInfo; its ID is allocated like any ID. The
partition DDL travels on the collection's vchannels (docs/architecture/ddl-flush.md), so every DataNode's DDNode sees
it in order with the inserts and keeps it for the DDL binlogs of the next manual flush.

DropPartition follows the DropCollection flow (docs/architecture/drop.md) at partition scope: the collection
meta without the partition and a resumable task record are ONE etcd transaction; then the
DropPartition message goes onto the channels (the DataNodes discard the partition's buffers) and
the call answers. The tail: every Proxy's cache entry is invalidated, and DataCoord removes the
partition's segments, binlogs and delta logs; the task record goes last. The running RootCoord
drives that tail to its end (`drop_tasks`), a restarted one resumes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.msgstream import MsgType
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.rootcoord.drop_tasks import TAIL_DEFER, DropTask
from kmilvus.schemautil import validate_name
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB, DEFAULT_PARTITION
from kmilvus.util.failpoint import afailpoint, failpoint
from kmilvus.util.merr import MilvusError
from kmilvus.util.tsoutil import physical_ms

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)


class PartitionMixin(RootCoordHost):
    """RootCoord's partition RPCs."""

    async def _commit_collection(self, info: internal_pb2.CollectionInfo, extra: Sequence[Op] = ()) -> None:
        ok = await self.kv.txn(
            [Op.put(keys.collection_key(info.ID), info.SerializeToString()), *extra],
            [Cmp.exists(keys.collection_key(info.ID))],
        )
        if not ok:
            raise merr.collection_not_found(info.schema.name)

    @merr.rpc()
    async def CreatePartition(self, req: milvus_pb2.CreatePartitionRequest, context=None):
        validate_name(req.partition_name, "partition")
        async with self._ddl_lock:
            current = self._get(req.db_name, req.collection_name)
            if any(p.partitionName == req.partition_name for p in current.partitions):
                return merr.success()  # Milvus: "add duplicate partition" is a no-op
            limit = self.cfg.max_partition_num
            if len(current.partitions) >= limit:
                raise MilvusError(
                    merr.UNEXPECTED,
                    f"partition number ({len(current.partitions)}) exceeds max configuration ({limit}), "
                    f"collection: {current.schema.name}",
                )
            info = internal_pb2.CollectionInfo()
            info.CopyFrom(current)
            part = info.partitions.add(partitionID=await self.ids.alloc(), partitionName=req.partition_name)
            async with self.ticks.publishing() as ts:
                part.created_timestamp = ts
                await self._publish_ddl(
                    info, ts, MsgType.CreatePartition, _partition_msg(internal_pb2.CreatePartitionMsg, info, part)
                )
                await self._commit_collection(info)
            self._cache(info)
        await self._invalidate_proxies(info)
        log.info("partition created", collection=info.schema.name, partition=req.partition_name, id=part.partitionID)
        return merr.success()

    @merr.rpc()
    async def DropPartition(self, req: milvus_pb2.DropPartitionRequest, context=None):
        if req.partition_name == DEFAULT_PARTITION:
            raise MilvusError(merr.UNEXPECTED, "default partition cannot be deleted")
        validate_name(req.partition_name, "partition")
        async with self._ddl_lock:
            current = self._get(req.db_name, req.collection_name)
            part = next((p for p in current.partitions if p.partitionName == req.partition_name), None)
            if part is None:
                pending = self.drops.pending(_name_of(current, req.partition_name))
                if pending is None:
                    return merr.success()  # Milvus: dropping a non-existent partition succeeds
            else:
                pending = await self._drop_partition_meta(current, part)
                await pending.broadcast()  # in the lock, as the DDL it is
        # A retry whose first call failed after the meta change: done once the broadcast is.
        await pending.broadcast()
        return merr.success()

    async def _drop_partition_meta(
        self, current: internal_pb2.CollectionInfo, part: internal_pb2.PartitionInfo
    ) -> DropTask:
        """The partition drop's ONE meta transaction (under the DDL lock); returns its tail,
        which the running RootCoord drives from now on."""
        task = internal_pb2.DropPartitionTask(drop_time=await self.tso.alloc())
        task.collection.CopyFrom(current)
        task.partition.CopyFrom(part)
        info = internal_pb2.CollectionInfo()
        info.CopyFrom(current)
        del info.partitions[:]
        info.partitions.extend(p for p in current.partitions if p.partitionID != part.partitionID)
        # One transaction: the collection without the partition, the drop's remaining steps.
        task_key = keys.drop_partition_task_key(info.ID, part.partitionID)
        await self._commit_collection(info, [Op.put(task_key, task.SerializeToString())])
        failpoint("rootcoord.drop_partition.after_meta_txn")
        self._cache(info)
        self.dropped(task.drop_time)
        return self._start_partition_drop(task)

    def _start_partition_drop(self, task: internal_pb2.DropPartitionTask) -> DropTask:
        coll, part = task.collection, task.partition
        return self.drops.start(
            _name_of(coll, part.partitionName),
            DropTask(
                self.kv,
                keys.drop_partition_task_key(coll.ID, part.partitionID),
                "partition",
                f"{coll.schema.name}.{part.partitionName} ({part.partitionID})",
                lambda: self._broadcast_drop_partition(task),
                lambda: self._drop_partition_data(task),
                defer=TAIL_DEFER,
            ),
        )

    async def _broadcast_drop_partition(self, task: internal_pb2.DropPartitionTask) -> None:
        """DropPartition onto the collection's channels: the last step the caller waits for."""
        await afailpoint("rootcoord.drop_partition.broadcast")
        info = task.collection
        async with self.ticks.publishing() as ts:
            await self._publish_ddl(
                info, ts, MsgType.DropPartition, _partition_msg(internal_pb2.DropPartitionMsg, info, task.partition)
            )

    async def _drop_partition_data(self, task: internal_pb2.DropPartitionTask) -> None:
        """After the answer: every Proxy forgets the collection's meta (one that does not hear of
        it publishes nothing into the partition: `meta_epoch`), then DataCoord removes the
        partition's data (each idempotent)."""
        await afailpoint("rootcoord.drop_partition.tail")
        await self._invalidate_proxies(task.collection)
        merr.check(
            await self.registry.client(roles.DATACOORD).DropPartition(
                data_coord_pb2.DropPartitionRequest(
                    collectionID=task.collection.ID,
                    partitionID=task.partition.partitionID,
                    channelNames=task.collection.virtual_channel_names,
                )
            )
        )

    async def _resume_partition_drops(self) -> None:
        for _, raw in await self.kv.get_prefix(keys.DROP_PARTITION_TASK_PREFIX):
            task = internal_pb2.DropPartitionTask.FromString(raw)
            log.warning("resuming interrupted partition drop", partition=task.partition.partitionName)
            self._start_partition_drop(task)

    @merr.rpc(milvus_pb2.BoolResponse)
    async def HasPartition(self, req: milvus_pb2.HasPartitionRequest, context=None):
        info = self._get(req.db_name, req.collection_name)
        return milvus_pb2.BoolResponse(value=any(p.partitionName == req.partition_name for p in info.partitions))

    @merr.rpc(milvus_pb2.ShowPartitionsResponse)
    async def ShowPartitions(self, req: milvus_pb2.ShowPartitionsRequest, context=None):
        info = self._get(req.db_name, req.collection_name, req.collectionID)
        parts = list(info.partitions)
        if req.partition_names:
            known = {p.partitionName for p in parts}
            for name in req.partition_names:
                if name not in known:
                    raise MilvusError(merr.PARTITION_NOT_FOUND, f"partition not found[partition={name}]")
            parts = [p for p in parts if p.partitionName in set(req.partition_names)]
        return milvus_pb2.ShowPartitionsResponse(
            partition_names=[p.partitionName for p in parts],
            partitionIDs=[p.partitionID for p in parts],
            created_timestamps=[p.created_timestamp for p in parts],
            created_utc_timestamps=[physical_ms(p.created_timestamp) for p in parts],
            inMemory_percentages=[0 for _ in parts],
        )


def _partition_msg(cls, info: internal_pb2.CollectionInfo, part: internal_pb2.PartitionInfo):
    return cls(
        db_name=info.db_name,
        collection_name=info.schema.name,
        partition_name=part.partitionName,
        dbID=info.dbID,
        collectionID=info.ID,
        partitionID=part.partitionID,
    )


def _name_of(info: internal_pb2.CollectionInfo, partition: str) -> tuple[str, ...]:
    """What a pending partition drop is found by: the collection's database, name and ID (a
    collection dropped and created again under its name does not inherit it) and the partition."""
    return ("partition", info.db_name or DEFAULT_DB, info.schema.name, str(info.ID), partition)
