"""Bulk-import input files: where they are, what format, how many rows, and the checks that need
no more than a file's footer or header line.

Shared by DataCoord (to reject a bad import before any Spark job starts and to size the ID ranges
it pre-allocates) and by the Spark import job (which repeats the checks: it is the authority when
it runs from a SparkApplication without the coordinator having looked).

A file is named as the user gave it to `do_bulk_insert(files=[...])`:

- `s3://bucket/key` / `s3a://bucket/key`  an object on S3 (the storage's endpoint and credentials
  when the storage is S3, else AWS_* environment variables)
- `/abs/path` / `file:///abs/path`       a local file
- `relative/key`                          an object under the storage root (Milvus' convention:
                                          files live in the storage bucket)

Formats by extension: `.parquet`, `.json` (`{"rows": [...]}`, a top-level array, or JSON lines),
`.jsonl` / `.ndjson`, `.csv` (header line with field names; vectors as `"[1.0, 2.0]"`).
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import asdict, dataclass
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pymilvus.grpc_gen import schema_pb2

from kmilvus.storage.objectstore import ObjectStore
from kmilvus.util import typeutil

DT = schema_pb2.DataType
FORMATS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv"}
HEADER_PEEK = 1 << 20


@dataclass
class InputFile:
    uri: str  # as the user named it
    fmt: str  # parquet | json | csv
    fs_path: str  # path on `filesystem()`
    local: bool
    size: int = 0
    rows: int = -1  # exact for Parquet, -1 when unknown (text formats)
    s3_endpoint: str = ""  # scheme://host:port of the S3 endpoint ("" = AWS / environment)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> InputFile:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def filesystem(self) -> pafs.FileSystem:
        if self.local:
            return pafs.LocalFileSystem()
        return _s3_filesystem(self.s3_endpoint)

    def spark_path(self) -> str:
        """What `spark.read` takes (s3a:// needs hadoop-aws on the Spark classpath)."""
        return ("file://" + self.fs_path) if self.local else ("s3a://" + self.fs_path)


@dataclass
class Problem:
    """Why an import cannot be accepted: the file, the row (None: the whole file), the reason."""

    file: str
    reason: str
    row: int | None = None
    field: str | None = None

    def message(self) -> str:
        where = f"file {self.file}" + (f", row {self.row}" if self.row is not None else "")
        return f"{where}: {self.reason}"

    def to_dict(self) -> dict:
        return {
            "file": self.file,
            "row": self.row,
            "field": self.field,
            "reason": self.reason,
            "message": self.message(),
        }


class ImportError_(ValueError):
    """Raised with the first problem found (and the rest, up to a few)."""

    def __init__(self, problems: list[Problem]):
        super().__init__(problems[0].message())
        self.problems = problems


def _s3_filesystem(endpoint: str) -> pafs.S3FileSystem:
    kw: dict = {}
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    if endpoint:
        e = urlparse(endpoint if "://" in endpoint else "http://" + endpoint)
        kw["endpoint_override"] = e.netloc
        kw["scheme"] = e.scheme or "http"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        kw["access_key"] = os.environ["AWS_ACCESS_KEY_ID"]
        kw["secret_key"] = os.environ["AWS_SECRET_ACCESS_KEY"]
    return pafs.S3FileSystem(**kw)


def _store_endpoint(storage_uri: str) -> str:
    u = urlparse(storage_uri)
    if u.scheme not in ("s3", "s3a"):
        return ""
    for part in u.query.split("&"):
        k, _, v = part.partition("=")
        if k == "endpoint":
            return unquote(v)
    return ""


def format_of(uri: str, options: dict | None = None) -> str:
    forced = (options or {}).get("format")
    if forced:
        if forced not in ("parquet", "json", "csv"):
            raise ImportError_([Problem(uri, f"unsupported format {forced!r} (parquet, json or csv)")])
        result: str = forced
        return result
    path = urlparse(uri).path if "://" in uri else uri
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ImportError_(
            [Problem(uri, f"unsupported file type {ext or '(none)'!r}: use .parquet, .json, .jsonl or .csv")]
        )
    return FORMATS[ext]


def resolve(uri: str, storage_uri: str, options: dict | None = None) -> InputFile:
    """Name → InputFile (no I/O)."""
    fmt = format_of(uri, options)
    if uri.startswith(("s3://", "s3a://")):
        u = urlparse(uri)
        if not u.netloc or not u.path.strip("/"):
            raise ImportError_([Problem(uri, "an S3 file needs a bucket and a key: s3://bucket/key")])
        return InputFile(
            uri, fmt, f"{u.netloc}/{u.path.strip('/')}", local=False, s3_endpoint=_store_endpoint(storage_uri)
        )
    if uri.startswith("file://"):
        return InputFile(uri, fmt, os.path.abspath(unquote(urlparse(uri).path)), local=True)
    if uri.startswith("/"):
        return InputFile(uri, fmt, os.path.abspath(uri), local=True)
    if "://" in uri:
        raise ImportError_([Problem(uri, "unsupported file location (use a path, file:// or s3://)")])
    store = ObjectStore.from_uri(storage_uri)
    try:
        path = store.path(uri)
    except ValueError as exc:
        raise ImportError_([Problem(uri, str(exc))]) from None
    return InputFile(uri, fmt, path, local=store.local, s3_endpoint="" if store.local else _store_endpoint(storage_uri))


# ------------------------------------------------------------------------------ schema checks


def importable_fields(schema: schema_pb2.CollectionSchema) -> list[schema_pb2.FieldSchema]:
    """The fields an input file must carry: every user field but an autoID primary key, a
    function's output (the import fills it) and the dynamic field (`$meta`, built by the import
    from the row's extra keys / columns)."""
    return [
        f
        for f in typeutil.user_fields(schema)
        if not (f.is_primary_key and f.autoID) and not f.is_dynamic and not f.is_function_output
    ]


# The field types the import job reads (all kmilvus stores); the others are refused up front.
IMPORT_TYPES = frozenset(typeutil.SUPPORTED_TYPES)
# The types Spark's own Parquet reader types as the job wants them (the others go through pyarrow).
SPARK_PARQUET_TYPES = frozenset(
    {DT.Bool, DT.Int8, DT.Int16, DT.Int32, DT.Int64, DT.Float, DT.Double, DT.VarChar, DT.JSON, DT.FloatVector}
)


def unimportable_fields(schema: schema_pb2.CollectionSchema) -> list[schema_pb2.FieldSchema]:
    """Fields the import job cannot fill: types beyond IMPORT_TYPES."""
    return [f for f in importable_fields(schema) if f.data_type not in IMPORT_TYPES]


def optional(field: schema_pb2.FieldSchema) -> bool:
    """A field a file may leave out (or give null): nullable, or with a default value."""
    return field.nullable or typeutil.has_default(field)


# --------------------------------------------------------------------------- the job's columns
# Every field reaches the binlog writer in one "frame" type, whatever the file's format: integers
# as int64 (range-checked by the writer), vectors and arrays as lists, a sparse vector as
# struct<indices: list<int64>, values: list<float64>> (rows unsorted, as written).

_FRAME_SCALARS = {
    DT.Bool: pa.bool_(),
    DT.Int8: pa.int64(),
    DT.Int16: pa.int64(),
    DT.Int32: pa.int64(),
    DT.Int64: pa.int64(),
    DT.Float: pa.float32(),
    DT.Double: pa.float64(),
    DT.VarChar: pa.string(),
    DT.JSON: pa.string(),
}
SPARSE_FRAME = pa.struct([("indices", pa.list_(pa.int64())), ("values", pa.list_(pa.float64()))])


def frame_type(field: schema_pb2.FieldSchema) -> pa.DataType:
    dt = field.data_type
    if dt in _FRAME_SCALARS:
        return _FRAME_SCALARS[dt]
    if dt in (DT.FloatVector, DT.Float16Vector, DT.BFloat16Vector):
        return pa.list_(pa.float32())
    if dt == DT.BinaryVector:
        return pa.list_(pa.int64())
    if dt == DT.SparseFloatVector:
        return SPARSE_FRAME
    if dt == DT.Array:
        return pa.list_(_FRAME_SCALARS[field.element_type])
    raise KeyError(dt)


def _as_list(col: pa.Array) -> pa.Array:
    """fixed_size_list / large_list → list."""
    if pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
        return col.cast(pa.list_(col.type.value_type))
    return col


def frame_column(field: schema_pb2.FieldSchema, col: pa.Array) -> pa.Array:
    """A Parquet column (its type passed `parquet_problems`) → the field's frame type; a sparse
    column of JSON text stays text (the job parses it in Spark)."""
    dt, want = field.data_type, frame_type(field)
    if dt == DT.SparseFloatVector:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            return col.cast(pa.string())
        if pa.types.is_map(col.type):
            offsets = col.offsets
            rows = [pa.ListArray.from_arrays(offsets, part) for part in (col.keys, col.items)]
            return pa.StructArray.from_arrays(
                [r.cast(t.type) for r, t in zip(rows, want, strict=True)], fields=list(want), mask=col.is_null()
            )
        return col.cast(want)
    col = _as_list(col) if pa.types.is_list(want) else col
    if dt in (DT.Float16Vector, DT.BFloat16Vector) and pa.types.is_integer(col.type.value_type):
        return _half_bytes_to_floats(dt, col)
    return col if col.type == want else col.cast(want)


def _half_bytes_to_floats(dt: int, col: pa.Array) -> pa.Array:
    """list<uint8> holding float16 / bfloat16 bytes → list<float32> of their (exact) values."""
    import numpy as np

    raw = col.flatten().cast(pa.uint8()).to_numpy(zero_copy_only=False)
    raw = raw[: len(raw) // 2 * 2].tobytes()
    if dt == DT.Float16Vector:
        values = np.frombuffer(raw, "<f2").astype(np.float32)
    else:
        values = (np.frombuffer(raw, "<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
    offsets = (col.offsets.to_numpy() - col.offsets[0].as_py()) // 2
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values), mask=col.is_null())


def dynamic_extras(names: list[str], schema: schema_pb2.CollectionSchema) -> list[str]:
    """Columns of a file that go into `$meta`: those naming no static field, when the collection
    has a dynamic field (else none)."""
    if typeutil.dynamic_field(schema) is None:
        return []
    static = {f.name for f in typeutil.user_fields(schema) if not f.is_dynamic}
    return [n for n in names if n not in static]


def explicit_meta_problem(uri: str) -> Problem:
    """Milvus 2.4's import refuses `$meta` given by name: extra keys / columns are the way."""
    return Problem(
        uri,
        f"dynamic field is enabled, explicit specification of '{typeutil.DYNAMIC_FIELD_NAME}' is not allowed",
        field=typeutil.DYNAMIC_FIELD_NAME,
    )


def _column_problems(uri: str, names: list[str], schema: schema_pb2.CollectionSchema) -> list[Problem]:
    out: list[Problem] = []
    fields = {f.name: f for f in typeutil.user_fields(schema) if not f.is_dynamic}
    want = {f.name for f in importable_fields(schema)}
    extras = set(dynamic_extras(names, schema))
    for n in names:
        f = fields.get(n)
        if n == typeutil.DYNAMIC_FIELD_NAME and extras:
            out.append(explicit_meta_problem(uri))
        elif n in extras:
            continue
        elif f is None:
            out.append(Problem(uri, f"column '{n}' is not a field of collection {schema.name}", field=n))
        elif f.is_function_output:  # Milvus' import message
            out.append(Problem(uri, f"the field '{n}' is output by function, no need to provide", field=n))
        elif f.is_primary_key and f.autoID:
            out.append(
                Problem(uri, f"the primary key '{n}' is auto-generated (autoID): the file must not provide it", field=n)
            )
    for n in sorted(want - set(names)):
        if not optional(fields[n]):
            out.append(Problem(uri, f"field '{n}' is missing", field=n))
    return out


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _elements_ok(dt: int, t: pa.DataType) -> bool:
    """Values of type `t` can feed a field (or array element) of type `dt`."""
    if dt == DT.Bool:
        return bool(pa.types.is_boolean(t))
    if dt in (DT.Int8, DT.Int16, DT.Int32, DT.Int64):
        return bool(pa.types.is_integer(t))
    if dt in (DT.Float, DT.Double):
        return bool(pa.types.is_floating(t) or pa.types.is_integer(t))
    if dt == DT.VarChar:
        return bool(pa.types.is_string(t) or pa.types.is_large_string(t))
    return False


def _arrow_type_ok(field: schema_pb2.FieldSchema, t: pa.DataType) -> str | None:
    """None when a Parquet column of type `t` can feed `field`, else the reason (the Parquet
    forms of Milvus' import: vectors as lists — 16-bit ones of floats or of their uint8 bytes —,
    a sparse vector as JSON text, a map or struct<indices, values>, an array as a list)."""
    dt = field.data_type
    want = typeutil.type_name(dt)
    if dt == DT.JSON:
        ok = (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
        )
    elif dt in _FRAME_SCALARS:
        ok = _elements_ok(dt, t)
    elif dt in (DT.FloatVector, DT.Float16Vector, DT.BFloat16Vector, DT.BinaryVector):
        what = "a list of uint8" if dt == DT.BinaryVector else "a list of floats"
        if dt == DT.BinaryVector:
            ok = _is_list(t) and pa.types.is_integer(t.value_type)
        elif dt == DT.FloatVector:
            ok = _is_list(t) and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type))
        else:
            what = "a list of floats or of uint8 bytes"
            ok = _is_list(t) and (pa.types.is_floating(t.value_type) or pa.types.is_uint8(t.value_type))
        if not ok:
            return f"field '{field.name}' has type {t}, the collection expects {want} ({what})"
        dim = typeutil.dim_of(field)
        per_row = {DT.BinaryVector: dim // 8, DT.FloatVector: dim}.get(
            dt, 2 * dim if pa.types.is_integer(t.value_type) else dim
        )
        if pa.types.is_fixed_size_list(t) and t.list_size != per_row:
            got = t.list_size * 8 if dt == DT.BinaryVector else t.list_size
            return f"the dim ({got}) of field data({field.name}) is not equal to schema dim ({dim})"
        return None
    elif dt == DT.SparseFloatVector:
        if pa.types.is_map(t):
            ok = pa.types.is_integer(t.key_type) and (
                pa.types.is_floating(t.item_type) or pa.types.is_integer(t.item_type)
            )
        elif pa.types.is_struct(t):
            names = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
            ok = (
                set(names) == {"indices", "values"}
                and _is_list(names["indices"])
                and pa.types.is_integer(names["indices"].value_type)
                and _is_list(names["values"])
                and (
                    pa.types.is_floating(names["values"].value_type) or pa.types.is_integer(names["values"].value_type)
                )
            )
        else:
            ok = pa.types.is_string(t) or pa.types.is_large_string(t)
        if not ok:
            return (
                f"field '{field.name}' has type {t}, the collection expects {want} (JSON text, a map of "
                f"index to value, or a struct of indices and values)"
            )
        return None
    elif dt == DT.Array:
        elem = typeutil.type_name(field.element_type)
        if not (_is_list(t) and _elements_ok(field.element_type, t.value_type)):
            return f"field '{field.name}' has type {t}, the collection expects {want} (a list of {elem})"
        return None
    else:
        return f"field '{field.name}': data type {want} cannot be imported"
    return None if ok else f"field '{field.name}' has type {t}, the collection expects {want}"


def parquet_problems(uri: str, arrow_schema: pa.Schema, schema: schema_pb2.CollectionSchema) -> list[Problem]:
    out = _column_problems(uri, arrow_schema.names, schema)
    fields = {f.name: f for f in importable_fields(schema)}
    for col in arrow_schema:
        f = fields.get(col.name)
        if f is not None and (why := _arrow_type_ok(f, col.type)):
            out.append(Problem(uri, why, field=f.name))
    return out


def csv_header(f: InputFile, sep: str = ",") -> list[str]:
    with f.filesystem().open_input_stream(f.fs_path) as src:
        head = src.read(HEADER_PEEK)
    text = head.decode("utf-8-sig", errors="replace")
    line = next(csv.reader(io.StringIO(text), delimiter=sep), None)
    return [c.strip() for c in line] if line else []


def inspect(f: InputFile, schema: schema_pb2.CollectionSchema, options: dict | None = None) -> list[Problem]:
    """Size, Parquet row count, and the problems a footer / header reveals. Fills `f` in place."""
    fs = f.filesystem()
    try:
        info = fs.get_file_info(f.fs_path)
    except OSError as exc:
        return [Problem(f.uri, f"cannot read the file: {exc}")]
    if info.type != pafs.FileType.File:
        return [Problem(f.uri, "file not found")]
    f.size = info.size
    if f.fmt == "parquet":
        try:
            with fs.open_input_file(f.fs_path) as src:
                pf = pq.ParquetFile(src)
                f.rows = pf.metadata.num_rows
                arrow = pf.schema_arrow
        except Exception as exc:  # noqa: BLE001 - a broken file is the user's problem to see
            return [Problem(f.uri, f"not a readable Parquet file: {exc}")]
        return parquet_problems(f.uri, arrow, schema)
    if f.fmt == "csv":
        sep = (options or {}).get("sep") or ","
        names = csv_header(f, sep)
        if not names:
            return [Problem(f.uri, "the CSV file has no header line")]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            return [Problem(f.uri, f"duplicated column name {dup[0]} in the CSV header")]
        return _column_problems(f.uri, names, schema)
    return []


def min_row_bytes(schema: schema_pb2.CollectionSchema, fmt: str) -> int:
    """A lower bound on the bytes one row takes in a text file (sizes the row-ID range): fields a
    row may leave out count for nothing."""
    fields = [f for f in importable_fields(schema) if not optional(f)]
    if fmt == "csv":
        n = max(1, len(fields))  # separators + the newline
        for f in fields:
            if f.data_type == DT.FloatVector:
                n += 2 * typeutil.dim_of(f)  # "[" + dim digits + (dim - 1) commas + "]"
        return n
    n = 2  # {}
    for f in fields:
        n += len(f.name) + 3 + 1  # "name": plus one character of value
        if f.data_type == DT.FloatVector:
            n += 2 * typeutil.dim_of(f)
    return n + max(0, len(fields) - 1)


def row_bound(f: InputFile, schema: schema_pb2.CollectionSchema) -> int:
    """Exact rows (Parquet) or an upper bound (text) for one inspected file."""
    if f.rows >= 0:
        return f.rows
    return f.size // max(1, min_row_bytes(schema, f.fmt)) + 1
