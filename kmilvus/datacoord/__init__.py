"""DataCoord: segments, flush, binlog meta, channels, garbage collection (docs/architecture/flush.md)."""

from kmilvus.datacoord.data_coord import DataCoord

__all__ = ["DataCoord"]
