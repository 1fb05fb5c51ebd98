"""QueryCoord: which collections are loaded; releases them on drop (seed 001 §12-15)."""

from kmilvus.querycoord.query_coord import QueryCoord

__all__ = ["QueryCoord"]
