"""Object storage (local directory / S3), storage paths, and Parquet insert / DDL binlogs."""

from kmilvus.storage.binlog import (
    BinlogInfo,
    aread_binlog,
    aread_ddl_binlog,
    aread_segment,
    awrite_ddl_binlogs,
    awrite_insert_binlog,
    read_binlog,
    read_ddl_binlog,
    read_ddl_records,
    read_segment,
    write_ddl_binlogs,
    write_insert_binlog,
)
from kmilvus.storage.objectstore import ObjectStore

__all__ = [
    "BinlogInfo",
    "ObjectStore",
    "aread_binlog",
    "aread_ddl_binlog",
    "aread_segment",
    "awrite_ddl_binlogs",
    "awrite_insert_binlog",
    "read_binlog",
    "read_ddl_binlog",
    "read_ddl_records",
    "read_segment",
    "write_ddl_binlogs",
    "write_insert_binlog",
]
