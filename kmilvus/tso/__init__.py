"""Timestamp oracle: hybrid timestamps (physical ms << 18 | logical), strictly increasing."""

from kmilvus.tso.allocator import LOGICAL_BITS, GlobalTSOAllocator, compose, parse, physical_ms

__all__ = ["LOGICAL_BITS", "GlobalTSOAllocator", "compose", "parse", "physical_ms"]
