"""Reading input files into Spark: Spark's own readers for local files (and s3a:// when the
Spark image carries hadoop-aws), else pyarrow inside Spark tasks (`mapInArrow`), which reads any
pyarrow filesystem — S3 included — with no extra jars. The pyarrow readers are also the
in-process route's (`parquet_batches`), so this module imports pyspark only where Spark is used."""

from __future__ import annotations

ROW_INDEX_MASK = (1 << 33) - 1  # monotonically_increasing_id(): partition << 33 | row in partition


def s3a_available(spark) -> bool:
    try:
        spark.sparkContext._jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem")
        return True
    except Exception:  # noqa: BLE001 - py4j wraps ClassNotFoundException
        return False


def spark_native(spark, f) -> bool:
    return f.local or s3a_available(spark)


def _tasks(spark, items: list, n: int | None = None):
    """A DataFrame of task numbers 0..len(items)-1 spread over the cluster."""
    n = max(1, min(len(items), n or spark.sparkContext.defaultParallelism))
    return spark.range(0, len(items), numPartitions=n).withColumnRenamed("id", "__task")


def parquet_starts(f) -> list[int]:
    """The index of each row group's first row in the file (from the footer)."""
    import pyarrow.parquet as pq

    with f.filesystem().open_input_file(f.fs_path) as src:
        md = pq.ParquetFile(src).metadata
    starts, acc = [], 0
    for i in range(md.num_row_groups):
        starts.append(acc)
        acc += md.row_group(i).num_rows
    return starts


def parquet_schema(columns: list[tuple]):
    import pyarrow as pa

    return pa.schema(
        [(c[1], c[2]) for c in columns] + [("__file", pa.int32()), ("__row", pa.int64()), ("__err", pa.string())]
    )


BATCH_BYTES = 32 * 1024 * 1024  # a record batch read from an input file holds about this much


def parquet_batches(fdict: dict, file_index: int, columns: list[tuple], starts: list[int], row_groups):
    """Row groups `row_groups` of a Parquet file as record batches of `parquet_schema(columns)`
    (`columns` as `arrow_parquet_frame` takes them), each of about `BATCH_BYTES` whatever the
    file's row groups hold: a local file is read page by page, so memory does not grow with the
    row group (an object store's row group is fetched whole, in coalesced ranges)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pymilvus.grpc_gen import schema_pb2

    from kmilvus.spark.files import InputFile, frame_column

    out_schema = parquet_schema(columns)
    src_names = [c[0] for c in columns if c[0] is not None]
    fields = [None if c[3] is None else schema_pb2.FieldSchema.FromString(c[3]) for c in columns]
    inp = InputFile.from_dict(fdict)
    with inp.filesystem().open_input_file(inp.fs_path) as src:
        pf = pq.ParquetFile(src, pre_buffer=not inp.local, buffer_size=0 if not inp.local else 1 << 20)
        for rg in row_groups:
            md = pf.metadata.row_group(rg)
            rows = max(1024, BATCH_BYTES // max(1, md.total_byte_size // max(1, md.num_rows)))
            first = starts[rg]
            for t in pf.iter_batches(batch_size=rows, row_groups=[rg], columns=src_names, use_pandas_metadata=False):
                n = t.num_rows
                arrays = []
                for (name, _, typ, _), field in zip(columns, fields, strict=True):
                    if name is None:
                        arrays.append(pa.nulls(n, typ))
                        continue
                    col = t.column(name)
                    col = to_list(col) if field is None else frame_column(field, col)
                    arrays.append(col if col.type == typ else col.cast(typ))
                arrays += [
                    pa.array(np.full(n, file_index, np.int32)),
                    pa.array(np.arange(first, first + n, dtype=np.int64)),
                    pa.nulls(n, pa.string()),
                ]
                first += n
                yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def arrow_parquet_frame(spark, f, file_index: int, columns: list[tuple]):
    """Parquet via pyarrow, one task item per row group.

    columns: (source column name, output column name, output arrow type, field): `field` (a
    serialized FieldSchema) converts the column with `kmilvus.spark.files.frame_column`, a None
    source name gives a column of nulls (a nullable / default field the file leaves out). The
    frame also has __file, __row (row index in the file) and __err (null).
    """
    starts = parquet_starts(f)
    fdict = f.to_dict()

    def read(batches):
        for b in batches:
            yield from parquet_batches(fdict, file_index, columns, starts, b.column("__task").to_pylist())

    tasks = _tasks(spark, starts)
    return tasks.mapInArrow(read, spark_schema_of(parquet_schema(columns)))


def arrow_text_frame(spark, f, file_index: int):
    """A whole text file as one row (`value`), read by a task (JSON from S3)."""
    import pyarrow as pa

    fdict = f.to_dict()
    schema = pa.schema([("value", pa.string()), ("__file", pa.int32())])

    def read(batches):
        from kmilvus.spark.files import InputFile

        inp = InputFile.from_dict(fdict)
        for b in batches:
            for _ in b.column("__task").to_pylist():
                with inp.filesystem().open_input_stream(inp.fs_path) as src:
                    text = src.read().decode("utf-8-sig", errors="replace")
                yield pa.RecordBatch.from_arrays([pa.array([text]), pa.array([file_index], pa.int32())], schema=schema)

    return _tasks(spark, [0]).mapInArrow(read, spark_schema_of(schema))


def arrow_csv_frame(spark, f, file_index: int, names: list[str], sep: str):
    """A CSV file via pyarrow.csv in a task: every column a string, plus __row and a corrupt-line
    column (always null: pyarrow rejects a malformed file outright, which fails the job)."""
    import pyarrow as pa

    fdict = f.to_dict()
    schema = pa.schema(
        [(n, pa.string()) for n in names]
        + [("_corrupt_record", pa.string()), ("__row", pa.int64()), ("__file", pa.int32())]
    )

    def read(batches):
        import numpy as np
        import pyarrow.csv as pcsv

        from kmilvus.spark.files import InputFile

        inp = InputFile.from_dict(fdict)
        for b in batches:
            for _ in b.column("__task").to_pylist():
                with inp.filesystem().open_input_stream(inp.fs_path) as src:
                    t = pcsv.read_csv(
                        src,
                        read_options=pcsv.ReadOptions(use_threads=False),
                        parse_options=pcsv.ParseOptions(delimiter=sep, newlines_in_values=True),
                        convert_options=pcsv.ConvertOptions(
                            column_types={n: pa.string() for n in names},
                            strings_can_be_null=False,
                            quoted_strings_can_be_null=False,
                        ),
                    )
                n = t.num_rows
                arrays = [t.column(c).combine_chunks() for c in names]
                arrays += [
                    pa.nulls(n, pa.string()),
                    pa.array(np.arange(n, dtype=np.int64)),
                    pa.array(np.full(n, file_index, np.int32)),
                ]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return _tasks(spark, [0]).mapInArrow(read, spark_schema_of(schema))


def to_list(col):
    """fixed_size_list / large_list → list (what Spark's Arrow reader takes for array<...>)."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_fixed_size_list(col.type):
        size = col.type.list_size
        values = col.values.slice(col.offset * size, len(col) * size)
        offsets = pa.array(np.arange(len(col) + 1, dtype=np.int32) * size)
        return pa.ListArray.from_arrays(offsets, values, mask=col.is_null() if col.null_count else None)
    if pa.types.is_large_list(col.type):
        return col.cast(pa.list_(col.type.value_type))
    return col


def spark_schema_of(schema):
    import pyarrow as pa
    from pyspark.sql import types as T

    def conv(t):
        if pa.types.is_boolean(t):
            return T.BooleanType()
        if pa.types.is_int8(t):
            return T.ByteType()
        if pa.types.is_int16(t):
            return T.ShortType()
        if pa.types.is_int32(t):
            return T.IntegerType()
        if pa.types.is_int64(t):
            return T.LongType()
        if pa.types.is_float32(t):
            return T.FloatType()
        if pa.types.is_float64(t):
            return T.DoubleType()
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return T.StringType()
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return T.BinaryType()
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return T.ArrayType(conv(t.value_type))
        if pa.types.is_struct(t):
            return T.StructType([T.StructField(t.field(i).name, conv(t.field(i).type)) for i in range(t.num_fields)])
        raise TypeError(f"no Spark type for {t}")

    return T.StructType([T.StructField(f.name, conv(f.type), True) for f in schema])
