"""QueryCoord: which collections are loaded; releases them on drop (docs/architecture/read-path.md)."""

from kmilvus.querycoord.query_coord import QueryCoord

__all__ = ["QueryCoord"]
