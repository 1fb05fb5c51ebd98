"""Bulk import: Parquet / JSON / CSV files → validated → segments in kmilvus' binlog layout.

Spec (JSON, built by DataCoord's ImportManager):

    kind "import", job_id, collection_id, partition_id, collection_name,
    schema            base64 CollectionSchema
    storage_uri       the kmilvus storage root the binlogs go to
    files             [InputFile dicts] (or plain names, resolved against storage_uri)
    options           {"sep": ",", "format": ...}
    timestamp         the import's timestamp (every row gets it)
    row_id_start, row_id_count        row IDs: row_id_start + (row's index in the import)
    log_id_start, log_id_count        a binlog's log ID: log_id_start + index of its first row
    segment_id_start, segment_count   segment IDs, in row order
    segment_max_rows  rows per segment (about: a segment holds one shard's rows of a bucket)
    shards            the collection's vchannels (absent: 1)
    manifest_key      where the manifest goes (a key in storage_uri)

Rows go to the shard (vchannel) their primary key hashes to, as an Insert's do
(`kmilvus.util.hashing.shard_of`): a delete of the key, routed the same way, then applies on the
channel that holds the row. The rows are cut into buckets of `segment_max_rows × shards` rows
in row order (`__seg` below is the bucket), and each bucket into one segment per shard
(segment index = bucket × shards + shard); the manifest names each segment's shard.

How (no Python runs per row; Spark parses and types, pyarrow checks and writes):

1. Footer / header checks per file (names, types, dims) — the same ones DataCoord ran.
2. One DataFrame per file with the fields typed for kmilvus (ints as bigint until range-checked),
   the file index, the row's index in its file, and `__err`: a problem Spark found parsing the
   row (JSON through VARIANT: missing / unknown keys, wrong types; CSV through try_cast).
   Parquet row indexes come from `_metadata.row_index`; text files are one task per file.
3. Row counts per file (Parquet: footers; text: a count over the cached parse) give every row
   a dense index `__g` and so its row ID and bucket (buckets of equal size).
4. Primary keys unique within the import (unless autoID): one aggregation over the key column.
5. `mapInArrow(binlog_writer)`: per task, check values (nulls, ranges, lengths, dims, NaN/Inf,
   JSON) on whole Arrow batches, convert to `typeutil.arrow_schema`, write one binlog per
   (task, segment), answer the files written or the first problem.
6. Any problem: delete every file written, fail with a report naming file, row and reason.

Parquet inputs that need nothing of Spark SQL (`local_route_refusal`: no extra columns for
`$meta`, no sparse vectors as JSON text) skip steps 2 and 5's frames: Spark schedules tasks of
row groups, and each task reads its row groups with pyarrow and feeds them to a `BinlogWriter`
(`write_row_groups`), so no row passes through the JVM (Spark's Parquet reader and its Arrow
conversion would cost more than the whole job).

`run_local(spec)` is the in-process route for small Parquet imports (no Spark, no JVM): the SAME
`write_row_groups` over every row group in one thread; steps 1, 3, 4 and 6 are the same
functions. JSON / CSV parsing is Spark SQL's, so text imports always run on Spark.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from typing import Any

from kmilvus_jobs.common import JobFailure, prefetched, progress
from kmilvus_jobs.sources import (
    ROW_INDEX_MASK,
    arrow_csv_frame,
    arrow_parquet_frame,
    arrow_text_frame,
    parquet_batches,
    parquet_starts,
    spark_native,
)
from kmilvus_jobs.writer import (
    RESULT_SPARK_SCHEMA,
    BinlogWriter,
    binlog_writer,
    decode_schema,
    segment_entry,
    writing_task,
)

CSV_NULL = "\u0000\u0001kmilvus-null\u0001\u0000"  # no CSV cell is read as null
SNIPPET = 60
DRIVER_KEY_CHECK_ROWS = 20_000_000  # Parquet imports up to this size check keys in the driver


def _spark_type(field):
    """The Spark type of a field's column in the job's frames (`files.frame_type`)."""
    import pyarrow as pa

    from kmilvus.spark.files import frame_type
    from kmilvus_jobs.sources import spark_schema_of

    return spark_schema_of(pa.schema([("x", frame_type(field))]))[0].dataType


def _first_error(conds):
    from pyspark.sql import functions as F

    if not conds:
        return F.lit(None).cast("string")
    return F.coalesce(*[F.when(c, m) for c, m in conds])


def _snippet(col):
    from pyspark.sql import functions as F

    return F.substring(col, 1, SNIPPET)


# ------------------------------------------------------------------------------ per format


EMPTY_META = "{}"  # `$meta` of a row when the file has no column beyond the schema's


def _dynamic_column(schema, extras):
    """The `$meta` column (named by its field ID) from columns `extras` (the file's names
    → Spark columns): one JSON object per row, `{}` without extras; None without a dynamic field."""
    from pyspark.sql import functions as F

    from kmilvus.util import typeutil

    dyn = typeutil.dynamic_field(schema)
    if dyn is None:
        return None
    value = F.to_json(F.struct(*[c.alias(n) for n, c in extras])) if extras else F.lit(EMPTY_META)
    return value.alias(str(dyn.fieldID))


def _spark_list_type(t):
    """A Parquet column's Arrow type as the pyarrow reader hands it to Spark (`to_list`)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_type)
    return t


def parquet_columns(f, schema, fields) -> tuple[list[tuple], list[str], list]:
    """How pyarrow reads a Parquet file for the job (`sources.arrow_parquet_frame` columns), the
    file's extra columns (for `$meta`) and the sparse-vector fields it holds as JSON text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kmilvus.spark.files import dynamic_extras, frame_type
    from kmilvus.util import typeutil

    with f.filesystem().open_input_file(f.fs_path) as src:
        file_schema = pq.read_schema(src)
    have = set(file_schema.names)
    extras = dynamic_extras(file_schema.names, schema)
    cols, text_sparse = [], []
    for fl in fields:
        want = frame_type(fl)
        src_name = fl.name if fl.name in have else None
        if src_name is not None and fl.data_type == typeutil.DT.SparseFloatVector:
            t = file_schema.field(fl.name).type
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                want = pa.string()
                text_sparse.append(fl)
        cols.append((src_name, str(fl.fieldID), want, fl.SerializeToString()))
    cols += [(n, f"__x{k}", _spark_list_type(file_schema.field(n).type), None) for k, n in enumerate(extras)]
    return cols, extras, text_sparse


def parquet_frame(spark, i: int, f, schema, fields):
    """Spark's Parquet reader when every field is of a type it reads as the job wants, else
    pyarrow in tasks (`files.frame_column`: uint8 bytes of 16-bit vectors, sparse maps, ...).
    A nullable / default field the file leaves out is a column of nulls."""
    from pyspark.sql import functions as F

    from kmilvus.spark.files import SPARK_PARQUET_TYPES, dynamic_extras

    if not spark_native(spark, f) or any(fl.data_type not in SPARK_PARQUET_TYPES for fl in fields):
        cols, extras, text_sparse = parquet_columns(f, schema, fields)
        frame = arrow_parquet_frame(spark, f, i, cols)
        meta = _dynamic_column(schema, [(n, F.col(f"__x{k}")) for k, n in enumerate(extras)])
        values = [F.col(str(fl.fieldID)) for fl in fields]
        conds = []
        for fl in text_sparse:
            k = fields.index(fl)
            values[k], bad = _sparse_from_text(F.col(str(fl.fieldID)))
            conds.append((bad, F.lit(f"the value of field '{fl.name}' is not a valid SparseFloatVector")))
        values = [v.alias(str(fl.fieldID)) for v, fl in zip(values, fields, strict=True)]
        if meta is not None:
            values.append(meta)
        err = _first_error(conds) if conds else F.col("__err")
        return frame.select(*values, "__file", "__row", err.alias("__err"))
    raw = spark.read.parquet(f.spark_path())
    have = {s.name: s.dataType for s in raw.schema}
    columns = []
    for fl in fields:
        c = F.col(f"`{fl.name}`")
        want = _spark_type(fl)
        if fl.name not in have:  # a nullable / default field left out
            c = F.lit(None)
        columns.append((c if have.get(fl.name) == want else c.cast(want)).alias(str(fl.fieldID)))
    meta = _dynamic_column(schema, [(n, F.col(f"`{n}`")) for n in dynamic_extras(raw.columns, schema)])
    if meta is not None:
        columns.append(meta)
    return raw.select(
        *columns,
        F.lit(i).cast("int").alias("__file"),
        F.col("_metadata.row_index").cast("long").alias("__row"),
        F.lit(None).cast("string").alias("__err"),
    )


def _sparse_from_text(text):
    """JSON text of a sparse vector — `{"indices": [...], "values": [...]}` or `{"index": value}`
    — → (struct<indices, values>, whether the text is neither). Null text stays null."""
    from pyspark.sql import functions as F

    iv = F.from_json(text, "struct<indices:array<bigint>,`values`:array<double>>")
    mp = F.from_json(text, "map<string,double>")
    pairs = F.struct(
        F.transform(F.map_keys(mp), lambda k: k.try_cast("bigint")).alias("indices"),
        F.map_values(mp).alias("values"),
    )
    is_iv = F.get_json_object(text, "$.indices").isNotNull() | F.get_json_object(text, "$.values").isNotNull()
    value = F.when(text.isNull(), F.lit(None)).when(is_iv, iv).otherwise(pairs)
    bad = text.isNotNull() & (~F.ltrim(text).startswith("{") | (is_iv & iv.isNull()) | (~is_iv & mp.isNull()))
    return value, bad


def _json_checks(fl, val, raw_value, raw_text):
    """Row problems of a JSON / CSV value Spark typed as `val` (`raw_text`: the value's JSON
    text): wrong element types of a list (Spark reads 5 into a string list as "5")."""
    from pyspark.sql import functions as F

    from kmilvus.util import typeutil

    DT = typeutil.DT
    out = []
    if fl.data_type == DT.Array:
        elem = typeutil.type_name(fl.element_type)
        wrong = F.exists(val, lambda e: e.isNull())
        if fl.element_type == DT.VarChar:
            wrong = wrong | ~F.forall(
                F.from_json(raw_text, "array<variant>"), lambda e: F.schema_of_variant(e) == F.lit("STRING")
            )
        out.append(
            (
                val.isNotNull() & wrong,
                F.concat(F.lit(f"expected element type '{elem}' in array field '{fl.name}', got "), raw_value),
            )
        )
    return out


def json_frame(spark, i: int, f, schema, fields):
    from pyspark.sql import functions as F

    from kmilvus.util import typeutil

    DT = typeutil.DT
    raw = (
        spark.read.text(f.spark_path(), wholetext=True)
        if spark_native(spark, f)
        else arrow_text_frame(spark, f, i).select("value")
    )
    v = F.col("value")
    t = F.ltrim(v)
    arr = (
        F.when(t.startswith("["), F.from_json(v, "array<string>"))
        .when(t.rlike(r'^\{\s*"rows"\s*:'), F.from_json(v, "struct<rows:array<string>>").getField("rows"))
        .otherwise(F.split(v, r"\r?\n"))
    )
    file_err = F.when(
        arr.isNull(),
        F.lit('the file is not valid JSON: expected {"rows": [...]}, an array of rows, or one JSON object per line'),
    )
    # Parse the file once, then explode without carrying the file's text along with every row.
    parsed = raw.select(F.coalesce(arr, F.array(F.lit(None).cast("string"))).alias("__arr"), file_err.alias("__ferr"))
    rows = parsed.select(F.posexplode("__arr").alias("__row", "__raw"), "__ferr").where(
        F.col("__raw").isNull() | (F.trim(F.col("__raw")) != "")
    )
    from kmilvus.spark.files import optional

    allowed = [fl.name for fl in fields]
    # A sparse vector is read as its JSON text (two forms), then parsed by `_sparse_from_text`.
    struct = ", ".join(
        f"`{fl.name}` {'string' if fl.data_type == DT.SparseFloatVector else _spark_type(fl).simpleString()}"
        for fl in fields
    )
    # One typed parse per row (Jackson, partial results: a value of the wrong type reads as null)
    # and one key listing (null when the row is not a JSON object).
    rows = rows.select(
        "*", F.from_json(F.col("__raw"), struct).alias("__s"), F.expr("json_object_keys(__raw)").alias("__k")
    )
    keys = F.col("__k")
    extras = F.array_except(keys, F.array(*[F.lit(n) for n in allowed]))
    conds = [
        (F.col("__ferr").isNotNull(), F.col("__ferr")),
        (keys.isNull(), F.concat(F.lit("the row is not a valid JSON object: "), _snippet(F.col("__raw")))),
    ]
    pk = typeutil.primary_field(schema)
    if pk.autoID:
        conds.append(
            (
                F.array_contains(keys, pk.name),
                F.lit(f"the primary key '{pk.name}' is auto-generated (autoID): the file must not provide it"),
            )
        )
    for out in (fl for fl in schema.fields if fl.is_function_output):
        conds.append(
            (
                F.array_contains(keys, out.name),
                F.lit(f"the field '{out.name}' is output by function, no need to provide"),
            )
        )
    dyn = typeutil.dynamic_field(schema)
    values = []
    if dyn is None:
        conds.append(
            (
                F.size(extras) > 0,
                F.concat(
                    F.lit("key '"), F.element_at(extras, 1), F.lit(f"' is not a field of collection {schema.name}")
                ),
            )
        )
    else:
        # Extra keys go to `$meta` with their JSON types (a VARIANT map keeps them as written).
        conds.append(
            (
                F.array_contains(keys, typeutil.DYNAMIC_FIELD_NAME),
                F.lit(
                    f"dynamic field is enabled, explicit specification of "
                    f"'{typeutil.DYNAMIC_FIELD_NAME}' is not allowed"
                ),
            )
        )
        static = F.array(*[F.lit(n) for n in allowed])
        row_map = F.from_json(F.col("__raw"), "map<string,variant>")
        values.append(
            F.to_json(F.map_filter(row_map, lambda k, _: ~F.array_contains(static, k))).alias(str(dyn.fieldID))
        )
    for fl in fields:
        name, dt = fl.name, fl.data_type
        val = F.col("__s").getField(name)
        raw_text = F.get_json_object(F.col("__raw"), f"$.{name}")
        raw_value = F.coalesce(_snippet(raw_text), F.lit("null"))
        what = "a list of numbers" if dt == DT.FloatVector else f"a valid {typeutil.type_name(dt)}"
        if dt == DT.SparseFloatVector:
            val, bad = _sparse_from_text(val)
            conds.append(
                (bad, F.concat(F.lit(f"the value of field '{name}' is not a valid SparseFloatVector: "), raw_value))
            )
        if optional(fl):  # missing or null: null, or the default (the writer's)
            conds.append(
                (
                    val.isNull() & raw_text.isNotNull(),
                    F.concat(F.lit(f"the value of field '{name}' is not {what}: "), raw_value),
                )
            )
        else:
            conds.append((~F.array_contains(keys, name), F.lit(f"field '{name}' is missing")))
            conds.append(
                (val.isNull(), F.concat(F.lit(f"the value of field '{name}' is null or not {what}: "), raw_value))
            )
        conds += _json_checks(fl, val, raw_value, raw_text)
        if dt == DT.JSON:
            conds.append(
                (
                    val.isNotNull() & F.expr(f"try_parse_json(__s.`{name}`)").isNull(),
                    F.concat(
                        F.lit(f"the value of JSON field '{name}' must be an object or a string holding JSON: "),
                        raw_value,
                    ),
                )
            )
        values.append(val.alias(str(fl.fieldID)))
    return rows.select(
        *values,
        F.lit(i).cast("int").alias("__file"),
        F.col("__row").cast("long").alias("__row"),
        _first_error(conds).alias("__err"),
    )


def csv_frame(spark, i: int, f, schema, fields, options):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from kmilvus.spark.files import csv_header, optional
    from kmilvus.util import typeutil

    DT = typeutil.DT
    sep = (options or {}).get("sep") or ","
    names = csv_header(f, sep)
    if spark_native(spark, f):
        sch = T.StructType(
            [T.StructField(n, T.StringType()) for n in names] + [T.StructField("_corrupt_record", T.StringType())]
        )
        raw = (
            spark.read.schema(sch)
            .option("header", True)
            .option("multiLine", True)
            .option("sep", sep)
            .option("quote", '"')
            .option("escape", '"')
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
            .option("nullValue", CSV_NULL)
            .option("enforceSchema", True)
            .csv(f.spark_path())
        )
        raw = raw.withColumn("__row", F.monotonically_increasing_id().bitwiseAND(F.lit(ROW_INDEX_MASK)))
    else:
        raw = arrow_csv_frame(spark, f, i, names, sep)
    conds = [
        (
            F.col("_corrupt_record").isNotNull(),
            F.concat(
                F.lit(f"malformed CSV line (expected {len(names)} columns): "), _snippet(F.col("_corrupt_record"))
            ),
        )
    ]
    values = []
    for fl in fields:
        name, dt = fl.name, fl.data_type
        if name not in names:  # a nullable / default field left out (the header check let it)
            values.append(F.lit(None).cast(_spark_type(fl)).alias(str(fl.fieldID)))
            continue
        s = F.col(f"`{name}`")
        want = typeutil.type_name(dt)
        bad = F.concat(F.lit(f"the value of field '{name}' is not a valid {want}: '"), _snippet(s), F.lit("'"))
        extra = []
        if dt == DT.Bool:
            val = F.trim(s).try_cast("boolean")
        elif dt in (DT.Int8, DT.Int16, DT.Int32, DT.Int64):
            val = F.trim(s).try_cast("bigint")
        elif dt in (DT.Float, DT.Double):
            val = F.trim(s).try_cast("float" if dt == DT.Float else "double")
        elif dt == DT.VarChar:
            val = s
        elif dt == DT.JSON:
            val = F.when(F.expr(f"try_parse_json(`{name}`)").isNotNull(), s)
        elif dt == DT.SparseFloatVector:
            val, not_sparse = _sparse_from_text(s)
            val = F.when(~not_sparse, val)
        elif dt in (DT.FloatVector, DT.BinaryVector, DT.Float16Vector, DT.BFloat16Vector, DT.Array):
            val = F.from_json(s, _spark_type(fl).simpleString())
            if dt == DT.FloatVector:
                bad = F.concat(
                    F.lit(f"the value of field '{name}' is not a list of numbers: '"), _snippet(s), F.lit("'")
                )
            extra = _json_checks(fl, val, F.concat(F.lit("'"), _snippet(s), F.lit("'")), s)
        else:
            raise JobFailure(
                [{"file": f.uri, "row": None, "field": name, "reason": f"data type {want} cannot be imported"}]
            )
        if optional(fl):  # Milvus' CSV null key: an empty cell is null (or the default)
            empty = s == F.lit("")
            val = F.when(~empty, val)
            ok = empty | val.isNotNull()
        else:
            ok = val.isNotNull()
        conds.append((~ok, bad))
        conds += extra
        values.append(F.when(ok, val).cast(_spark_type(fl)).alias(str(fl.fieldID)))
    from kmilvus.spark.files import dynamic_extras

    meta = _dynamic_column(schema, [(n, F.col(f"`{n}`")) for n in dynamic_extras(names, schema)])
    if meta is not None:
        values.append(meta)
    return raw.select(
        *values,
        F.lit(i).cast("int").alias("__file"),
        F.col("__row").cast("long").alias("__row"),
        _first_error(conds).alias("__err"),
    )


# ------------------------------------------------------------------------------ primary keys


def duplicate_key_spark(df, pk):
    """(value, count, (file, row), (file, row)) of a duplicated primary key, or None.

    One aggregation over the key column; the rows are looked up only when a duplicate exists."""
    from pyspark.sql import functions as F

    key = str(pk.fieldID)
    agg = (
        df.select(key)
        .where(F.col(key).isNotNull())
        .groupBy(key)
        .count()
        .where("count > 1")
        .agg(F.count(F.lit(1)).alias("keys"), F.min(F.struct(key, "count")).alias("first"))
        .collect()
    )
    if not agg or not agg[0]["keys"]:
        return None
    value, n = agg[0]["first"][key], agg[0]["first"]["count"]
    rows = df.where(F.col(key) == F.lit(value)).select("__file", "__row").orderBy("__file", "__row").limit(2).collect()
    return value, n, (rows[0]["__file"], rows[0]["__row"]), (rows[-1]["__file"], rows[-1]["__row"])


def duplicate_key_parquet(files, counts, pk):
    """The same check for Parquet inputs of moderate size: read only the key column with pyarrow
    in the driver (a few MB per million rows) and sort it — far cheaper than a Spark shuffle."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cols = []
    for f in files:
        with f.filesystem().open_input_file(f.fs_path) as src:
            cols.append(pq.read_table(src, columns=[pk.name]).column(0).combine_chunks())
    if pa.types.is_integer(cols[0].type):
        keys = np.concatenate([c.to_numpy(zero_copy_only=False).astype(np.int64, copy=False) for c in cols])
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        same = np.flatnonzero(sk[1:] == sk[:-1])
        if not len(same):
            return None
        value = int(sk[same[0]])
        where = np.flatnonzero(keys == value)
    else:
        keys = pa.chunked_array(cols).combine_chunks() if len(cols) > 1 else cols[0]
        counts_ = pc.value_counts(keys)
        dup = pc.filter(counts_, pc.greater(counts_.field("counts"), 1))
        if not len(dup):
            return None
        value = dup.field("values")[0].as_py()
        where = np.flatnonzero(pc.equal(keys, value).to_numpy(zero_copy_only=False))
    offsets = np.cumsum([0, *counts])

    def locate(g):
        fi = int(np.searchsorted(offsets, g, side="right") - 1)
        return fi, int(g - offsets[fi])

    return value, len(where), locate(int(where[0])), locate(int(where[1]))


# ------------------------------------------------------------------------------ row groups → binlogs


class Cancelled(Exception):
    """The in-process run was asked to stop."""


def row_group_ctx(plan, offsets: list[int], n_bucket: int, total: int, segments: list[list[int]]) -> dict:
    """What a writer of row groups needs (plain data, shipped to Spark tasks): each file, how
    pyarrow reads it for the job, its row groups' first rows, and the job's layout."""
    from kmilvus.util import typeutil

    dyn = typeutil.dynamic_field(plan.schema)
    return {
        "writer": plan.writer_ctx(segments),
        "files": [f.to_dict() for f in plan.files],
        "columns": [parquet_columns(f, plan.schema, plan.fields)[0] for f in plan.files],
        "starts": [parquet_starts(f) for f in plan.files],
        "offsets": offsets,
        "n_bucket": n_bucket,
        "total": total,
        "dynamic": None if dyn is None else str(dyn.fieldID),
    }


def row_groups(ctx: dict) -> list[tuple[int, int]]:
    """Every (file, row group) of the job, in row order."""
    return [(i, rg) for i, starts in enumerate(ctx["starts"]) for rg in range(len(starts))]


def write_row_groups(ctx: dict, writer: BinlogWriter, items: list[tuple[int, int]], cancelled=lambda: False) -> None:
    """Row groups `items` → `writer`, each batch with its rows' index in the job (`__g`) and
    bucket (`__seg`: the Spark SQL route's formula), so every route writes the same rows
    with the same IDs into the same segments. `cancelled()` is polled per batch."""
    import numpy as np
    import pyarrow as pa

    for i, group in itertools.groupby(items, key=lambda item: item[0]):
        rgs = [rg for _, rg in group]
        for batch in prefetched(parquet_batches(ctx["files"][i], i, ctx["columns"][i], ctx["starts"][i], rgs)):
            if cancelled():
                raise Cancelled("cancelled")
            g = batch.column("__row").to_numpy() + ctx["offsets"][i]
            seg = (g * ctx["n_bucket"]) // max(1, ctx["total"])
            extra = {"__g": pa.array(g), "__seg": pa.array(seg.astype(np.int32))}
            if ctx["dynamic"] is not None:
                extra[ctx["dynamic"]] = pa.array([EMPTY_META] * batch.num_rows, pa.string())
            for name, arr in extra.items():
                batch = batch.append_column(name, arr)
            writer.add(batch)
            if writer.failed:
                return


def row_group_writer(ctx: dict, items: list[tuple[int, int]]):
    """For `_tasks(spark, items).mapInArrow(..., RESULT_SPARK_SCHEMA)`: a task writes its row groups."""

    def feed(writer: BinlogWriter, batches) -> None:
        for b in batches:
            if not writer.failed:
                write_row_groups(ctx, writer, [items[t] for t in b.column("__task").to_pylist()])

    return writing_task(ctx["writer"], feed)


# ------------------------------------------------------------------------------ the job


def _problem(files, file_index, row, field, reason) -> dict:
    uri = files[file_index].uri if file_index is not None and 0 <= file_index < len(files) else None
    row = None if row is None or row < 0 else int(row)
    where = (f"file {uri}" if uri else "import") + (f", row {row}" if row is not None else "")
    return {"file": uri, "row": row, "field": field, "reason": reason, "message": f"{where}: {reason}"}


def cleanup(storage_uri: str, keys: list[str], prefixes: list[str]) -> None:
    """Remove what the job wrote (files it reported and every target segment directory)."""
    from kmilvus.storage import ObjectStore

    store = ObjectStore.from_uri(storage_uri)
    for k in keys:
        store.delete_sync(k)
    for p in prefixes:
        store.delete_prefix_sync(p)


class _Plan:
    """A checked import spec: its files (inspected), schema, fields and primary key."""

    def __init__(self, spec: dict):
        from kmilvus.spark.files import ImportError_, InputFile, importable_fields, inspect, resolve
        from kmilvus.util import typeutil

        self.spec = spec
        self.schema = decode_schema(spec["schema"])
        self.options = dict(spec.get("options") or {})
        self.storage_uri = spec["storage_uri"]
        self.coll, self.part = int(spec["collection_id"]), int(spec["partition_id"])
        try:
            self.files = [
                InputFile.from_dict(d) if isinstance(d, dict) else resolve(d, self.storage_uri, self.options)
                for d in spec["files"]
            ]
        except ImportError_ as exc:
            raise JobFailure([p.to_dict() for p in exc.problems]) from None
        problems = []
        for f in self.files:
            problems += inspect(f, self.schema, self.options)
        if problems:
            raise JobFailure([p.to_dict() for p in problems])
        self.fields = importable_fields(self.schema)
        self.pk = typeutil.primary_field(self.schema)
        files = self.files
        progress(
            "inspected", files=len(files), bytes=sum(f.size for f in files), rows=sum(max(0, f.rows) for f in files)
        )

    def reserved_prefixes(self) -> list[str]:
        from kmilvus.storage import paths

        start = int(self.spec["segment_id_start"])
        return [paths.segment_prefix(self.coll, self.part, start + k) for k in range(int(self.spec["segment_count"]))]

    @property
    def shards(self) -> int:
        return max(1, int(self.spec.get("shards") or 1))

    def layout(self, counts: list[int]) -> tuple[int, int, list[int], list[list[int]]]:
        """(rows, buckets, each file's first row in the job, [collection, partition, segment] per
        target: a bucket's shards in order) — or a failure when the coordinator reserved too
        few IDs."""
        spec, total = self.spec, sum(counts)
        seg_rows = max(1, int(spec["segment_max_rows"]))
        n_bucket = max(1, math.ceil(total / (seg_rows * self.shards))) if total else 0
        n_seg = n_bucket * self.shards
        if total > int(spec["row_id_count"]) or total > int(spec["log_id_count"]) or n_seg > int(spec["segment_count"]):
            raise JobFailure(
                [
                    _problem(
                        self.files,
                        None,
                        None,
                        None,
                        f"the import has {total} rows in {n_seg} segments but the coordinator "
                        f"reserved IDs for {spec['row_id_count']} rows and {spec['segment_count']} "
                        f"segments",
                    )
                ]
            )
        offsets, acc = [], 0
        for c in counts:
            offsets.append(acc)
            acc += c
        seg_start = int(spec["segment_id_start"])
        return total, n_bucket, offsets, [[self.coll, self.part, seg_start + k] for k in range(n_seg)]

    def check_duplicate(self, dup) -> None:
        """Fail on the duplicated key `duplicate_key_*` found (a no-op for None)."""
        if dup is None:
            return
        value, n, (fa, ra), (fb, rb) = dup
        files = self.files
        other = (f"file {files[fb].uri}, " if fb != fa else "") + f"row {rb}"
        raise JobFailure(
            [_problem(files, fa, ra, self.pk.name, f"duplicate primary key {value!r} ({n} rows; again at {other})")]
        )

    def writer_ctx(self, segments: list[list[int]]) -> dict:
        spec = self.spec
        return {
            "mode": "import",
            "schema": spec["schema"],
            "storage_uri": self.storage_uri,
            "segments": segments,
            "log_id_start": int(spec["log_id_start"]),
            "row_id_start": int(spec["row_id_start"]),
            "timestamp": int(spec["timestamp"]),
            "shards": self.shards,
        }

    def manifest(self, counts: list[int], segments: list[list[int]], results: list[dict], started: float) -> dict:
        """The completed manifest from the writers' results; any problem they report fails the
        job (after removing what they wrote)."""
        from kmilvus.storage import paths

        spec, files, total = self.spec, self.files, sum(counts)
        shards = self.shards
        n_bucket = len(segments) // shards
        binlogs = [r for r in results if r["kind"] == "binlog"]
        errors = sorted((r for r in results if r["kind"] == "error"), key=lambda r: (r["file"], r["row"]))
        written = sum(r["rows"] for r in binlogs)
        if not errors and written != total:
            errors = [
                {"file": -1, "row": -1, "field": None, "reason": f"wrote {written} rows but the input has {total}"}
            ]
        if errors:
            cleanup(self.storage_uri, [r["key"] for r in binlogs], [paths.segment_prefix(*s) for s in segments])
            raise JobFailure([_problem(files, e["file"], e["row"], e["field"], e["reason"]) for e in errors])
        out_segments = []
        row_id_start = int(spec["row_id_start"])
        for k, (_c, p, sid) in enumerate(segments):
            logs = sorted((r for r in binlogs if r["seg"] == k), key=lambda r: r["log_id"])
            if not logs:
                continue  # no row of the bucket hashed to this shard
            entry = segment_entry(logs)
            bucket = k // shards
            first, end = -(-bucket * total // n_bucket), -(-(bucket + 1) * total // n_bucket)
            out_segments.append(
                {
                    "segment_id": sid,
                    "partition_id": p,
                    "shard": k % shards,
                    **entry,
                    # The bucket's row IDs (its rows of this shard are some of them).
                    "row_id_from": row_id_start + first,
                    "row_id_to": row_id_start + end - 1,
                }
            )
        progress("written", rows=written, segments=len(out_segments))
        return {
            "kind": "import",
            "status": "completed",
            "job_id": spec.get("job_id"),
            "collection_id": self.coll,
            "partition_id": self.part,
            "rows": written,
            "timestamp": int(spec["timestamp"]),
            "files": [
                {"uri": f.uri, "format": f.fmt, "size": f.size, "rows": c} for f, c in zip(files, counts, strict=True)
            ],
            "input_bytes": sum(f.size for f in files),
            "segments": out_segments,
            "spark_seconds": round(time.time() - started, 3),
        }


def _frame(spark, plan):
    """All inputs as one Spark frame (step 2)."""
    frames = []
    for i, f in enumerate(plan.files):
        if f.fmt == "parquet":
            frames.append(parquet_frame(spark, i, f, plan.schema, plan.fields))
        elif f.fmt == "json":
            frames.append(json_frame(spark, i, f, plan.schema, plan.fields))
        else:
            frames.append(csv_frame(spark, i, f, plan.schema, plan.fields, plan.options))
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _run_row_groups(spark, plan, spec: dict, started: float) -> dict:
    """`run` for Parquet that needs nothing of Spark SQL: tasks of row groups (module docstring)."""
    from kmilvus_jobs.sources import _tasks

    counts = [f.rows for f in plan.files]
    progress("counted", rows=sum(counts))
    try:
        total, n_bucket, offsets, segments = plan.layout(counts)
        if not plan.pk.autoID and total:
            if total > int(spec.get("driver_key_check_rows", DRIVER_KEY_CHECK_ROWS)):
                plan.check_duplicate(duplicate_key_spark(_frame(spark, plan), plan.pk))
            else:
                plan.check_duplicate(duplicate_key_parquet(plan.files, counts, plan.pk))
            progress("validated", rows=total)
        ctx = row_group_ctx(plan, offsets, n_bucket, total, segments)
        items = row_groups(ctx)
        results = []
        if total and items:
            tasks = _tasks(spark, items).mapInArrow(row_group_writer(ctx, items), RESULT_SPARK_SCHEMA)
            results = [r.asDict() for r in tasks.collect()]
    except BaseException:
        cleanup(plan.storage_uri, [], plan.reserved_prefixes())
        raise
    result: dict[str, Any] = plan.manifest(counts, segments, results, started)
    return result


def run(spark, spec: dict) -> dict:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.time()
    plan = _Plan(spec)
    if local_route_refusal(spec) is None:
        return _run_row_groups(spark, plan, spec, started)
    files, pk = plan.files, plan.pk
    df = _frame(spark, plan)
    text = any(f.fmt != "parquet" for f in files)
    cached = None
    if text:
        cached = df = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            bad = df.where(F.col("__err").isNotNull()).select("__file", "__row", "__err").limit(1).collect()
            if bad:
                r = bad[0]
                raise JobFailure([_problem(files, r["__file"], r["__row"], None, r["__err"])])
            got = {r["__file"]: r["count"] for r in df.groupBy("__file").count().collect()}
        except BaseException:
            cached.unpersist()
            raise
        counts = [int(got.get(i, 0)) for i in range(len(files))]
    else:
        counts = [f.rows for f in files]
    progress("counted", rows=sum(counts))

    try:
        total, n_bucket, offsets, segments = plan.layout(counts)
        if len(files) == 1:
            g = F.col("__row") + F.lit(offsets[0]).cast("long")
        else:
            g = F.element_at(F.array(*[F.lit(o).cast("long") for o in offsets]), F.col("__file") + 1) + F.col("__row")
        df = df.withColumn("__g", g)
        # Bucket k holds rows [ceil(k·total/n), ceil((k+1)·total/n)): sizes differ by one at most.
        df = df.withColumn("__seg", F.expr(f"cast((__g * {n_bucket}) div {max(1, total)} as int)"))

        if not pk.autoID and total:
            if text or total > int(spec.get("driver_key_check_rows", DRIVER_KEY_CHECK_ROWS)):
                plan.check_duplicate(duplicate_key_spark(df, pk))
            else:
                plan.check_duplicate(duplicate_key_parquet(files, counts, pk))
            progress("validated", rows=total)

        ctx = plan.writer_ctx(segments)
        results = (
            [r.asDict() for r in df.mapInArrow(binlog_writer(ctx), RESULT_SPARK_SCHEMA).collect()] if total else []
        )
    except BaseException:
        cleanup(plan.storage_uri, [], plan.reserved_prefixes())
        raise
    finally:
        if cached is not None:
            cached.unpersist()
    return plan.manifest(counts, segments, results, started)


# ------------------------------------------------------------------------------ in-process


def local_route_refusal(spec: dict) -> str | None:
    """Why the job needs Spark SQL, so neither runs `run_local` nor `write_row_groups` in Spark
    tasks (None: it needs neither). Text formats are parsed by Spark SQL, and so are sparse vectors held as JSON
    text; the `$meta` JSON of extra Parquet columns is Spark's `to_json`."""
    from kmilvus.spark.files import InputFile, importable_fields

    schema = decode_schema(spec["schema"])
    fields = importable_fields(schema)
    for d in spec["files"]:
        if not isinstance(d, dict):
            return "a file not resolved by the coordinator"
        f = InputFile.from_dict(d)
        if f.fmt != "parquet":
            return f"{f.fmt} input is parsed by Spark"
        _cols, extras, text_sparse = parquet_columns(f, schema, fields)
        if extras:
            return "dynamic fields from extra columns are serialized by Spark"
        if text_sparse:
            return "sparse vectors as JSON text are parsed by Spark"
    return None


def run_local(spec: dict, cancelled=lambda: False) -> dict:
    """The import without Spark (see the module docstring); `cancelled()` is polled per batch."""
    started = time.time()
    plan = _Plan(spec)
    if refusal := local_route_refusal(spec):
        raise JobFailure([_problem(plan.files, None, None, None, f"cannot run in-process: {refusal}")])
    counts = [f.rows for f in plan.files]
    progress("counted", rows=sum(counts))
    writer = None
    try:
        total, n_bucket, offsets, segments = plan.layout(counts)
        if not plan.pk.autoID and total:
            plan.check_duplicate(duplicate_key_parquet(plan.files, counts, plan.pk))
            progress("validated", rows=total)
        ctx = row_group_ctx(plan, offsets, n_bucket, total, segments)
        writer = BinlogWriter(ctx["writer"])
        write_row_groups(ctx, writer, row_groups(ctx), cancelled)
        results = writer.finish().to_pylist()
    except BaseException:
        if writer is not None:
            writer.abort()
        cleanup(plan.storage_uri, [], plan.reserved_prefixes())
        raise
    return plan.manifest(counts, segments, results, started)
