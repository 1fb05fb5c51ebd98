"""One index build (Milvus' indexnode indexBuildTask): read the indexed column of a flushed
segment's insert binlogs, build the vector or scalar index, write its file.

It needs only the job's request and the object store: no meta, no etcd. DataCoord decides what
to build and records the outcome (kmilvus.datacoord.index_builder).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pymilvus.grpc_gen import schema_pb2

from kmilvus import index as kindex
from kmilvus.index import params as P
from kmilvus.index import scalar_index, scalar_params
from kmilvus.index import vectors as kvectors
from kmilvus.proto import index_node_pb2
from kmilvus.storage import binlog
from kmilvus.util import memory, typeutil
from kmilvus.util.failpoint import afailpoint


@dataclass(frozen=True)
class BuildResult:
    """What DataCoord records of a finished build."""

    index_file_keys: list[str]
    serialized_size: int
    num_rows: int


def vectors_of(column, params: dict[str, str]):
    """The column as the index takes it, by the field's type kept with the index's params."""
    data_type = schema_pb2.DataType.Value(params.get(P.DATA_TYPE, "FloatVector"))
    return kvectors.from_arrow(column, data_type, int(params.get(P.DIM, 0)))


def read_column(store, req: index_node_pb2.CreateJobRequest):
    """The indexed column in row-offset order; rows written before the field was added read as
    the QueryNode reads them (its default, else null)."""
    logs, field_id = list(req.data_paths), str(req.fieldID)
    if not req.HasField("added_field"):
        return binlog.read_column(store, logs, field_id)
    field = req.added_field
    kind = typeutil.arrow_type(field)
    missing = lambda rows: typeutil.missing_column(field, kind, rows)  # noqa: E731
    return typeutil.conform_column(field, binlog.read_column(store, logs, field_id, missing))


class BuildCancelled(Exception):
    """The job was dropped while its thread built: nothing is written."""


async def build(
    store,
    req: index_node_pb2.CreateJobRequest,
    cancelled: threading.Event | None = None,
    session_valid: Callable[[], Awaitable[bool]] | None = None,
) -> BuildResult:
    """Build and write; the file is at `req.index_file_key` when this returns. A job `cancelled`
    meanwhile, or whose node's session lapsed (a paused process: DataCoord has assigned the build
    again, and may have dropped the collection since), writes nothing — and takes its file back
    if it was cancelled while writing. What is left is a pause between the last check and the
    write itself, which storage cannot refuse: the garbage collector removes such a file."""
    params = {kv.key: kv.value for kv in req.index_params}
    column = await asyncio.to_thread(read_column, store, req)
    vectors = None
    if scalar_params.is_scalar_build(params):  # kmilvus/index/scalar_index.py
        built = await scalar_index.abuild(column, params)
    else:
        vectors = await asyncio.to_thread(vectors_of, column, params)
        built = await kindex.abuild(vectors, params[P.INDEX_TYPE], params[P.METRIC_TYPE], params)
    await afailpoint("indexnode.build.before_write")  # built, nothing written yet
    given_up = BuildCancelled(f"build {req.buildID} version {req.index_version} dropped")
    if (cancelled is not None and cancelled.is_set()) or (session_valid is not None and not await session_valid()):
        raise given_up
    await store.write(req.index_file_key, built.data)
    if cancelled is not None and cancelled.is_set():
        await store.delete(req.index_file_key)
        raise given_up
    await afailpoint("indexnode.build.after_write")  # the file written, its job not yet Finished
    result = BuildResult([req.index_file_key], built.serialized_size, built.num_rows)
    del built, vectors, column
    if result.num_rows >= memory.RELEASE_AFTER_ROWS:
        # faiss' build memory is free now, but malloc keeps it: give it back (util.memory).
        await asyncio.to_thread(memory.release)
    return result
