"""Hybrid timestamps (Milvus' tsoutil): physical milliseconds << 18 | a logical counter. Pure
arithmetic, for every reader of a timestamp; the allocator that hands them out is kmilvus.tso."""

from __future__ import annotations

LOGICAL_BITS = 18
_LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def compose(physical: int, logical: int = 0) -> int:
    return (physical << LOGICAL_BITS) | logical


def parse(ts: int) -> tuple[int, int]:
    return ts >> LOGICAL_BITS, ts & _LOGICAL_MASK


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS
