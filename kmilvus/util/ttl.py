"""Collection TTL (Milvus' `collection.ttl.seconds`): a row expires once its insert timestamp is
older than the TTL. Reads skip expired rows (the Proxy sends the cut-off with each request, as
Milvus' `CollectionTtlTimestamps`); compaction removes them from the binlogs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kmilvus.util.tsoutil import compose, physical_ms

COLLECTION_TTL = "collection.ttl.seconds"


def ttl_seconds(properties: Iterable[Any]) -> int:
    """The collection's TTL from its properties (KeyValuePairs); 0 = rows never expire."""
    for kv in properties:
        if kv.key == COLLECTION_TTL:
            try:
                return max(0, int(kv.value))
            except ValueError:
                return 0
    return 0


def expire_before(now_ts: int, ttl_s: int) -> int:
    """The hybrid timestamp below which rows have expired at `now_ts` (0: nothing expires)."""
    if ttl_s <= 0:
        return 0
    return compose(max(0, physical_ms(now_ts) - ttl_s * 1000))
