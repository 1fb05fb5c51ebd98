"""QueryNode: loaded segments, delegated DML channels, Search and Query (docs/architecture/read-path.md)."""

from kmilvus.querynode.query_node import QueryNode

__all__ = ["QueryNode"]
