"""DataNode: one flowgraph per vchannel; writes insert and DDL binlogs (seeds 000, 002)."""

from kmilvus.datanode.data_node import DataNode

__all__ = ["DataNode"]
