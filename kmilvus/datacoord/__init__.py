"""DataCoord: segments, flush (seed 000), binlog meta (seed 002), channels, garbage collection."""

from kmilvus.datacoord.data_coord import DataCoord

__all__ = ["DataCoord"]
