"""DataNode: one flowgraph per vchannel; writes insert and DDL binlogs (docs/architecture/flush.md)."""

from kmilvus.datanode.data_node import DataNode

__all__ = ["DataNode"]
