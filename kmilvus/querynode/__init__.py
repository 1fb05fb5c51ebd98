"""QueryNode: loaded segments, delegated DML channels, Search and Query (issue 14)."""

from kmilvus.querynode.query_node import QueryNode

__all__ = ["QueryNode"]
