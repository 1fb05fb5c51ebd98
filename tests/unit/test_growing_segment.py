"""A growing segment's searchable data (`GrowingSegment.data`) is what a segment built from all
its rows at once would be — the same rows, float32 matrices, squared norms and answers — after
every batch, across a schema change, and for vector columns it does not keep as a growing matrix
(float16). And a batch costs its own rows: the float vectors that came before are not copied
again (a growing segment holds up to a sealed segment's worth of rows, and the first search
after every insert paid a copy of all of them)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import schema_pb2

from kmilvus.querynode import vector_search
from kmilvus.querynode.segments import GrowingSegment, SegmentData

DT = schema_pb2.DataType
DIM = 16


def _schema(
    extra: tuple[schema_pb2.FieldSchema, ...] = (), dim: int = DIM, half: bool = True
) -> schema_pb2.CollectionSchema:
    fields = [
        schema_pb2.FieldSchema(fieldID=0, name="RowID", data_type=DT.Int64),
        schema_pb2.FieldSchema(fieldID=1, name="Timestamp", data_type=DT.Int64),
        schema_pb2.FieldSchema(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True),
        schema_pb2.FieldSchema(fieldID=101, name="vec", data_type=DT.FloatVector),
    ]
    fields[3].type_params.add(key="dim", value=str(dim))
    if half:
        fields.append(schema_pb2.FieldSchema(fieldID=102, name="half", data_type=DT.Float16Vector))
        fields[4].type_params.add(key="dim", value=str(dim))
    return schema_pb2.CollectionSchema(fields=[*fields, *extra])


def _batch(rng: np.random.Generator, start: int, n: int, dim: int = DIM, half: bool = True) -> pa.RecordBatch:
    keys = np.arange(start, start + n, dtype=np.int64)
    vec = rng.standard_normal((n, dim)).astype(np.float32)
    cols = {
        "0": pa.array(keys),
        "1": pa.array(np.full(n, 1000 + start, dtype=np.int64)),
        "100": pa.array(keys),
        "101": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), dim),
    }
    if half:  # float16 rows as the binlogs hold them: 2 bytes per value
        raw = rng.standard_normal((n, dim)).astype(np.float16).tobytes()
        cols["102"] = pa.FixedSizeBinaryArray.from_buffers(pa.binary(2 * dim), n, [None, pa.py_buffer(raw)])
    return pa.record_batch(cols)


def _at_once(g: GrowingSegment) -> SegmentData:
    tables = [pa.Table.from_batches([b]) for b in g.batches]
    table = pa.concat_tables(tables, promote_options="default").combine_chunks()
    return SegmentData.build(g.segment_id, g.partition_id, table, g.schema)


def _same(got: SegmentData, want: SegmentData, queries: np.ndarray) -> None:
    assert got.table.num_rows == want.table.num_rows
    assert got.table.schema.equals(want.table.schema, check_metadata=True)
    for name in want.table.column_names:
        assert got.table.column(name).equals(want.table.column(name)), name
    assert set(got.vectors) == set(want.vectors)
    for fid, m in want.vectors.items():
        np.testing.assert_array_equal(got.vectors[fid], m)
        np.testing.assert_allclose(got.sq_norms[fid], want.sq_norms[fid], rtol=1e-6)
        for metric in ("L2", "IP", "COSINE"):
            d1, i1 = vector_search.search(got.vectors[fid], queries, 5, metric, base_sq=got.sq_norms[fid])
            d2, i2 = vector_search.search(want.vectors[fid], queries, 5, metric, base_sq=want.sq_norms[fid])
            np.testing.assert_array_equal(i1, i2)
            np.testing.assert_allclose(d1, d2, rtol=1e-5, atol=1e-5)


def test_growing_data_is_the_segment_of_all_its_rows_after_every_batch() -> None:
    rng = np.random.default_rng(3)
    queries = rng.standard_normal((3, DIM)).astype(np.float32)
    g = GrowingSegment(7, 1, _schema())
    earlier: list[tuple[SegmentData, np.ndarray, pa.ChunkedArray]] = []
    start = 0
    for n in (1, 700, 0, 2000, 5, 3000, 40):  # past several capacity growths, an empty batch
        g.add(_batch(rng, start, n))
        start += n
        data = g.data()
        assert g.data() is data  # built once per change
        _same(data, _at_once(g), queries)
        column = data.table.column("101").combine_chunks().flatten().to_numpy().copy()
        earlier.append((data, data.vectors[101].copy(), column))
    # What earlier searches were handed is unchanged by the batches appended after them, and
    # cannot be written through (later versions of the segment share its memory).
    for data, vectors, column in earlier:
        np.testing.assert_array_equal(data.vectors[101], vectors)
        np.testing.assert_array_equal(data.table.column("101").combine_chunks().flatten().to_numpy(), column)
        assert not data.vectors[101].flags.writeable and not data.sq_norms[101].flags.writeable


def test_batches_without_plain_float_rows_take_the_conversion_path() -> None:
    """An empty batch without the vector column (rows written before the field existed), then
    a batch whose vectors are null: the rows stay searchable as a segment built at once."""
    rng = np.random.default_rng(6)
    queries = rng.standard_normal((2, DIM)).astype(np.float32)
    g = GrowingSegment(10, 1, _schema(half=False))
    g.add(_batch(rng, 0, 50, half=False))
    empty = _batch(rng, 50, 0, half=False)
    g.add(empty.drop_columns(["101"]))
    data = g.data()
    _same(data, _at_once(g), queries)
    nulls = _batch(rng, 50, 3, half=False)
    vec = pa.FixedSizeListArray.from_arrays(
        pa.array(np.zeros(3 * DIM, dtype=np.float32)), DIM, mask=pa.array([False, True, False])
    )
    g.add(nulls.set_column(3, nulls.schema.field("101"), vec))
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in g.batches], promote_options="default")
    assert table.column("101").null_count == 1  # no longer plain rows: converted as before
    assert g.data().table.column("101").null_count == 1


def test_a_schema_change_rebuilds_with_the_new_field() -> None:
    rng = np.random.default_rng(4)
    queries = rng.standard_normal((2, DIM)).astype(np.float32)
    g = GrowingSegment(8, 1, _schema())
    g.add(_batch(rng, 0, 300))
    g.data()
    added = schema_pb2.FieldSchema(fieldID=103, name="tag", data_type=DT.Int64, nullable=True)
    g.adopt(_schema((added,)))
    g.add(_batch(rng, 300, 200))
    data = g.data()
    _same(data, _at_once(g), queries)
    assert data.table.column("103").null_count == 500


def test_a_batch_does_not_copy_the_float_vectors_before_it() -> None:
    rng = np.random.default_rng(5)
    dim = 128  # 512 bytes of vector per row against 24 of the other columns
    g = GrowingSegment(9, 1, _schema(dim=dim, half=False))
    g.add(_batch(rng, 0, 20_000, dim=dim, half=False))
    g.data()
    g.add(_batch(rng, 20_000, 100, dim=dim, half=False))  # the matrix doubles: room for what follows
    held = g.data()  # what a search in flight may still hold: its memory is not freed
    before = pa.total_allocated_bytes()
    g.add(_batch(rng, 20_100, 100, dim=dim, half=False))
    data = g.data()
    grew = pa.total_allocated_bytes() - before
    rows_bytes = data.vectors[101].nbytes
    assert held is not data
    # The new rows and the other columns combined again; not the 20k rows of vectors before,
    # neither from Arrow's pool nor through numpy.
    assert grew < rows_bytes // 4, f"{grew:,} bytes allocated for a 100-row batch ({rows_bytes:,} of vectors)"
    tracemalloc.start()
    try:
        g.add(_batch(rng, 20_200, 100, dim=dim, half=False))
        g.data()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < rows_bytes // 4, f"numpy allocated {peak:,} bytes for a 100-row batch"
