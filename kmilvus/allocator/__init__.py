"""Client-side allocators for timestamps and IDs, served by RootCoord (Milvus' internal/allocator)."""

from kmilvus.allocator.allocator import IDAllocator, TimestampAllocator

__all__ = ["IDAllocator", "TimestampAllocator"]
