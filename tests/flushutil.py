"""Data and read-back helpers for flush-path tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pymilvus import CollectionSchema, DataType, FieldSchema

from kmilvus.storage import binlog


def bench_schema(auto_id: bool = False) -> CollectionSchema:
    """The benchmarks' workload (docs/benchmarks/method.md): id INT64 pk, vec FLOAT_VECTOR(128), tag VARCHAR(64)."""
    return CollectionSchema(
        [
            FieldSchema("id", DataType.INT64, is_primary=True, auto_id=auto_id),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=128),
            FieldSchema("tag", DataType.VARCHAR, max_length=64),
        ]
    )


def batch(start: int, n: int, dim: int = 128, seed: int | None = None) -> tuple[list[int], np.ndarray, list[str]]:
    rng = np.random.default_rng(start if seed is None else seed)
    ids = list(range(start, start + n))
    return ids, rng.random((n, dim), dtype=np.float32), [f"tag{i}" for i in ids]


def expected_vec(pk: int, start: int, n: int, dim: int = 128) -> np.ndarray:
    """The vector `batch(start, n)` generated for `pk`."""
    return batch(start, n, dim)[1][pk - start]


def read_collection(store, segments) -> pa.Table:
    """Every row of the given segments' binlogs (internal SegmentInfo list)."""
    tables = [binlog.read_segment(store, s.collectionID, s.partitionID, s.ID) for s in segments]
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else pa.table({})
