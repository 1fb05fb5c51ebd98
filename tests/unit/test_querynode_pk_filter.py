"""`pk in [...]` / `pk == v` filters answered from a segment's sorted primary keys give exactly
the rows the column-wise evaluation gives (sorted or unsorted keys, repeated keys, keys absent,
TTL), and every other filter still takes the column-wise path."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pymilvus.grpc_gen import schema_pb2

from kmilvus.querynode.filter import compile_filter
from kmilvus.querynode.segments import SegmentData

DT = schema_pb2.DataType
SCHEMA = schema_pb2.CollectionSchema(
    fields=[
        schema_pb2.FieldSchema(fieldID=1, name="Timestamp", data_type=DT.Int64),
        schema_pb2.FieldSchema(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True),
        schema_pb2.FieldSchema(fieldID=101, name="x", data_type=DT.Int64),
    ]
)


def segment(pks: np.ndarray) -> SegmentData:
    n = len(pks)
    table = pa.table(
        {
            "1": pa.array(np.arange(1000, 1000 + n, dtype=np.int64)),
            "100": pa.array(pks.astype(np.int64)),
            "101": pa.array(np.arange(n, dtype=np.int64) % 7),
        }
    )
    return SegmentData.build(1, 1, table, SCHEMA)


KEYS = {
    "sorted": np.arange(0, 3000, 3),
    "unsorted": np.random.default_rng(5).permutation(np.arange(0, 3000, 3)),
    "repeated": np.random.default_rng(6).integers(0, 50, 400),
    "empty": np.zeros(0, dtype=np.int64),
}
EXPRS = [
    "id in [0, 3, 2997, 5, -1, 3000000]",
    "id in []",
    "id == 42",
    "id in [7, 7, 7, 8, 9, 10, 11, 12]",
    "id not in [0, 3]",
    "id in [1, 3] and x > 2",
    "id == 9 or id in [12, 300]",
    "x in [1, 2]",
]


@pytest.mark.parametrize("keys", sorted(KEYS))
@pytest.mark.parametrize("expr", EXPRS)
@pytest.mark.parametrize("expire_before", [0, 1100])
def test_pk_path_equals_the_scan(keys, expr, expire_before):
    seg = segment(KEYS[keys])
    flt = compile_filter(expr, SCHEMA, expire_before)
    fast = flt.mask(seg.table, seg.pk_rows)
    scan = flt.mask(seg.table)
    if fast is None or scan is None:
        assert fast is None and scan is None
    else:
        assert np.array_equal(fast, scan)


def test_which_filters_take_the_pk_path():
    assert compile_filter("id in [1, 2]", SCHEMA).pk_in.tolist() == [1, 2]
    assert compile_filter("id == 5", SCHEMA).pk_in.tolist() == [5]
    assert compile_filter("id == 5 or id in [6, 5]", SCHEMA).pk_in.tolist() == [5, 6]
    for expr in ("id not in [1]", "x in [1]", "id in [1] and x > 0", "id > 3", ""):
        assert compile_filter(expr, SCHEMA).pk_in is None
