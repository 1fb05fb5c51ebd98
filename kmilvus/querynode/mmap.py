"""Field data memory-mapped from local files: Milvus' `mmap.enabled` on a field
(`alter_collection_field(..., field_params={"mmap.enabled": True})`).

A sealed segment's columns of such fields are written, once at load, to an Arrow IPC file in
`$TMPDIR/kmilvus-mmap` and read back through a memory map: the table's buffers then point into
the mapping, so the field's data lives in the page cache (which the kernel may evict and read
back) instead of the process' heap — what Milvus' mmap does with its local chunk files. The file
is unlinked as soon as it is mapped: the mapping keeps its pages, and they go with the segment
(nothing is left behind, even by a process that dies). Growing rows and the columns a schema
change adds (`typeutil.conform`) stay in memory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
from pymilvus.grpc_gen import schema_pb2

from kmilvus.util import typeutil

MMAP_ENABLED = "mmap.enabled"
MMAP_DIR = Path(tempfile.gettempdir()) / "kmilvus-mmap"


def mapped_fields(schema: schema_pb2.CollectionSchema) -> list[str]:
    """The column names (field IDs) of the fields whose data is to be memory-mapped."""
    return [str(f.fieldID) for f in schema.fields if (typeutil.type_param(f, MMAP_ENABLED) or "").lower() == "true"]


def map_columns(table: pa.Table, names: list[str], directory: Path = MMAP_DIR) -> pa.Table:
    """`table` with its columns `names` (those it has) backed by a memory-mapped file."""
    names = [n for n in names if n in table.column_names]
    if not names or not table.num_rows:
        return table
    directory.mkdir(parents=True, exist_ok=True)
    part = table.select(names)
    fd, path = tempfile.mkstemp(dir=directory, suffix=".arrow")
    try:
        with os.fdopen(fd, "wb") as sink, pa.ipc.new_file(sink, part.schema) as writer:
            writer.write_table(part)
        mapped = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
    finally:
        os.unlink(path)
    for name in names:
        table = table.set_column(table.column_names.index(name), table.field(name), mapped.column(name))
    return table
