"""TruncateCollection in RootCoord (Milvus 2.6): every row goes, the collection stays — its
schema, partitions, indexes, properties and load state.

The drop flow (`drop_tasks`) at row scope:

1. Under the DDL lock, DataCoord's `Flush` seals every segment of the collection; its timestamp
   is the truncate timestamp T (a row is truncated iff it is older). The task record (the
   collection and T) is committed to etcd; from here the running RootCoord drives the rest to its
   end, and a restarted one resumes it.
2. Broadcast: a TruncateCollection message (carrying T) on the collection's vchannels; each
   QueryNode hides the rows older than T from then on (sealed and growing alike), so a read
   after the call sees none of them.
3. DataCoord's `DropSegmentsByTime(T)`: once every row older than T is flushed, every segment
   holding one is dropped — meta first, files through the fenced remover — and QueryCoord
   releases them. The task record goes last.

The call answers once all of it is done (a retry of a call that timed out waits for the same
task). An insert running while the truncate takes its timestamp may be kept or not: its rows
share segments with the truncated ones only if it was assigned before the seal, and then they go
with them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from pymilvus.grpc_gen import milvus_pb2

from kmilvus import components as roles
from kmilvus.log import get_logger
from kmilvus.meta import Cmp, Op
from kmilvus.meta import catalog as keys
from kmilvus.msgstream import MsgType
from kmilvus.proto import data_coord_pb2, internal_pb2
from kmilvus.rootcoord.drop_tasks import DropTask
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_DB
from kmilvus.util.failpoint import afailpoint

if TYPE_CHECKING:
    from kmilvus.rootcoord.host import RootCoordHost
else:
    RootCoordHost = object

log = get_logger(__name__)
WAIT_SECONDS = 120.0  # the call's wait for the task; a retry waits for the same task again


class TruncateMixin(RootCoordHost):
    """RootCoord's TruncateCollection."""

    @merr.rpc(milvus_pb2.TruncateCollectionResponse)
    async def TruncateCollection(self, req: milvus_pb2.TruncateCollectionRequest, context=None):
        async with self._ddl_lock:
            info = self._get(req.db_name, req.collection_name)
            task = self.drops.pending(_name_of(info))
            if task is None:
                task = await self._truncate_meta(info)
            await task.broadcast()  # in the lock, as the DDL it is
        try:
            async with asyncio.timeout(WAIT_SECONDS):  # not wait_for: may swallow a cancel (3.11)
                await task.done.wait()
        except TimeoutError:
            raise merr.MilvusError(
                merr.SERVICE_UNAVAILABLE,
                f"truncate of collection {info.schema.name} is still removing its data; call again to wait for it",
            ) from None
        return milvus_pb2.TruncateCollectionResponse()

    async def _truncate_meta(self, info: internal_pb2.CollectionInfo) -> DropTask:
        """Seal the collection (the flush's timestamp is T) and record the task: ONE etcd write,
        guarded on the collection still existing. Returns the tail, driven from now on."""
        datacoord = self.registry.client(roles.DATACOORD)
        flush = await datacoord.Flush(data_coord_pb2.FlushRequest(collectionID=info.ID, dbID=info.dbID))
        merr.check(flush.status)
        task = internal_pb2.TruncateTask(truncate_ts=flush.flush_ts)
        task.collection.CopyFrom(info)
        if not await self.kv.txn(
            [Op.put(keys.truncate_task_key(info.ID), task.SerializeToString())],
            [Cmp.exists(keys.collection_key(info.ID))],
        ):
            raise merr.collection_not_found(info.schema.name)
        log.info("collection truncating", collection=info.schema.name, id=info.ID, truncate_ts=task.truncate_ts)
        return self._start_truncate(task)

    def _start_truncate(self, task: internal_pb2.TruncateTask) -> DropTask:
        info = task.collection
        return self.drops.start(
            _name_of(info),
            DropTask(
                self.kv,
                keys.truncate_task_key(info.ID),
                "truncate",
                f"{info.db_name or DEFAULT_DB}.{info.schema.name} ({info.ID})",
                lambda: self._broadcast_truncate(task),
                lambda: self._truncate_data(task),
                done="done",
            ),
        )

    async def _broadcast_truncate(self, task: internal_pb2.TruncateTask) -> None:
        """The TruncateCollection message onto the collection's channels (QueryNodes hide the rows
        older than T from then on)."""
        await afailpoint("rootcoord.truncate.broadcast")
        info = task.collection
        msg = internal_pb2.TruncateCollectionMsg(
            db_name=info.db_name,
            collection_name=info.schema.name,
            dbID=info.dbID,
            collectionID=info.ID,
            truncate_ts=task.truncate_ts,
        )
        async with self.ticks.publishing() as ts:
            await self._publish_ddl(info, ts, MsgType.TruncateCollection, msg)

    async def _truncate_data(self, task: internal_pb2.TruncateTask) -> None:
        """DataCoord drops the segments holding rows older than T (idempotent; done at once for a
        collection dropped meanwhile)."""
        req = data_coord_pb2.DropSegmentsByTimeRequest(collectionID=task.collection.ID, timestamp=task.truncate_ts)
        merr.check(await self.registry.client(roles.DATACOORD).DropSegmentsByTime(req))

    async def _resume_truncates(self) -> None:
        for _, raw in await self.kv.get_prefix(keys.TRUNCATE_TASK_PREFIX):
            task = internal_pb2.TruncateTask.FromString(raw)
            log.warning("resuming interrupted truncate", collection=task.collection.schema.name)
            self._start_truncate(task)


def _name_of(info: internal_pb2.CollectionInfo) -> tuple[str, ...]:
    """What a pending truncate is found by: its collection's ID (a collection dropped and created
    again under its name does not inherit it)."""
    return ("truncate", str(info.ID))
