"""Timestamp oracle: hybrid timestamps (kmilvus.util.tsoutil), strictly increasing."""

from kmilvus.tso.allocator import GlobalTSOAllocator

__all__ = ["GlobalTSOAllocator"]
