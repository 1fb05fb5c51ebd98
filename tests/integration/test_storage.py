"""ObjectStore (local directory and S3 via moto_server), storage paths, insert and DDL binlogs."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.storage import binlog, paths
from kmilvus.storage.binlog import BinlogInfo
from kmilvus.storage.objectstore import ObjectStore
from kmilvus.util import typeutil

DT = schema_pb2.DataType
DIM = 16


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, root) -> ObjectStore:
    if request.param == "local":
        return ObjectStore.from_uri(f"file://{tmp_path}/{root}")
    endpoint = request.getfixturevalue("moto_endpoint")
    return ObjectStore.from_uri(f"s3://{root}/data?endpoint={endpoint}&region=us-east-1")


def tree(path: str) -> set[str]:
    """Every directory and file under a local path, relative to it."""
    out = set()
    for d, dirs, files in os.walk(path):
        rel = os.path.relpath(d, path)
        out.update(os.path.normpath(os.path.join(rel, x)) for x in dirs + files)
    return out


def raw_paths(store: ObjectStore) -> list[str]:
    """Everything the backend holds under the root, directory markers included."""
    sel = pafs.FileSelector(store.root, recursive=True, allow_not_found=True)
    return sorted(i.path for i in store.filesystem.get_file_info(sel))


# ------------------------------------------------------------------------------ paths


def test_path_scheme():
    assert paths.insert_log_key(1, 2, 3, 4) == "insert_log/1/2/3/4"
    assert paths.segment_prefix(1, 2, 3) == "insert_log/1/2/3/"
    assert paths.insert_log_key(1, 2, 3, 4).startswith(paths.segment_prefix(1, 2, 3))
    assert paths.parse_insert_log_key("insert_log/1/2/3/4") == (1, 2, 3, 4)
    with pytest.raises(ValueError):
        paths.parse_insert_log_key("data_definition_log/1/ts/0")
    assert paths.ddl_ts_key(7, 0) == "data_definition_log/7/ts/0"
    assert paths.ddl_key(7, 3) == "data_definition_log/7/ddl/3"
    assert paths.stats_log_prefix(7) == "stats_log/7/"
    assert paths.delta_log_prefix(7) == "delta_log/7/"
    assert paths.collection_prefixes(7) == [
        "insert_log/7/",
        "data_definition_log/7/",
        "stats_log/7/",
        "delta_log/7/",
        "index_files/7/",
    ]
    # the collection's prefixes cover its keys and nothing of collection 70
    owned = paths.collection_prefixes(7)
    for key in (paths.insert_log_key(7, 1, 2, 3), paths.ddl_ts_key(7, 1), paths.ddl_key(7, 1)):
        assert any(key.startswith(p) for p in owned)
    for key in (paths.insert_log_key(70, 1, 2, 3), paths.ddl_key(70, 1)):
        assert not any(key.startswith(p) for p in owned)


# ------------------------------------------------------------------------------ object store


def test_from_uri_local(tmp_path):
    st = ObjectStore.from_uri(f"file://{tmp_path}/a/b")
    assert os.path.isdir(tmp_path / "a" / "b") and st.local
    assert st.root_uri == f"file://{tmp_path}/a/b"
    assert st.path("x/y") == f"{tmp_path}/a/b/x/y"
    assert st.uri("x/y") == f"file://{tmp_path}/a/b/x/y"
    with pytest.raises(ValueError):
        st.path("../escape")
    with pytest.raises(ValueError):
        ObjectStore.from_uri("ftp://host/x")


def test_from_uri_s3_creates_bucket(moto_endpoint, root):
    uri = f"s3://{root}/pre/fix?endpoint={moto_endpoint}&region=us-east-1"
    st = ObjectStore.from_uri(uri)
    assert not st.local and st.bucket == root
    assert st.filesystem.get_file_info(root).type == pafs.FileType.Directory
    assert st.root_uri == f"s3a://{root}/pre/fix"
    assert st.uri("insert_log/1") == f"s3a://{root}/pre/fix/insert_log/1"
    assert st.path("k") == f"{root}/pre/fix/k"
    st.write_sync("k", b"v")
    again = ObjectStore.from_uri(uri)  # the bucket exists now
    assert again.read_sync("k") == b"v"


async def test_write_read_exists_size(store):
    assert not await store.exists("a/b/c")
    await store.write("a/b/c", b"hello")
    assert await store.exists("a/b/c")
    assert await store.read("a/b/c") == b"hello"
    assert await store.size("a/b/c") == 5
    await store.write("a/b/c", b"bye")  # overwrite
    assert await store.read("a/b/c") == b"bye"
    assert not await store.exists("a/b")  # a "directory" is not an object
    with pytest.raises(FileNotFoundError):
        await store.read("a/b/missing")
    with pytest.raises(FileNotFoundError):
        await store.size("a/b/missing")
    big = os.urandom(9 * 1024 * 1024)  # multipart on S3
    await store.write("big", big)
    assert await store.read("big") == big


async def test_list_and_walk(store):
    for key, data in [("x/1", b"a"), ("x/2/3", b"bb"), ("x/2/4", b"ccc"), ("xy/5", b"d"), ("z", b"")]:
        await store.write(key, data)
    assert await store.list("x") == [("x/1", 1), ("x/2/3", 2), ("x/2/4", 3)]
    assert await store.list("x/") == await store.list("x")
    assert await store.list("x/2") == [("x/2/3", 2), ("x/2/4", 3)]
    assert await store.list("nope") == []
    assert await store.list("x/2/4") == [("x/2/4", 3)]  # an object named exactly
    assert await store.walk() == ["x/1", "x/2/3", "x/2/4", "xy/5", "z"]
    assert [k for k, _ in await store.list("")] == await store.walk()


async def test_delete(store):
    await store.write("d/1", b"1")
    await store.write("d/2", b"2")
    await store.delete("d/1")
    await store.delete("d/1")  # missing is fine
    await store.delete("never/there")
    assert await store.walk() == ["d/2"]


async def test_delete_prefix(store):
    for key in ("p/q/1", "p/q/r/2", "p/q/r/s/3", "p/qq/4", "p/5"):
        await store.write(key, b"x")
    await store.delete_prefix("p/q/")
    assert await store.walk() == ["p/5", "p/qq/4"]
    await store.delete_prefix("p/q")  # idempotent
    await store.delete_prefix("no/such/prefix")
    assert await store.walk() == ["p/5", "p/qq/4"]
    assert not any(p.startswith(store.path("p/q") + "/") or p == store.path("p/q") for p in raw_paths(store))
    with pytest.raises(ValueError):
        await store.delete_prefix("")


async def test_local_deletes_leave_no_empty_dirs(tmp_path):
    st = ObjectStore.from_uri(f"file://{tmp_path}/root")
    await st.write("keep/1", b"k")
    before = tree(st.root)
    await st.write("insert_log/5/0/7/100", b"a")
    await st.write("insert_log/5/0/7/101", b"b")
    await st.write("insert_log/5/0/8/102", b"c")
    await st.write("data_definition_log/5/ts/0", b"d")
    await st.delete("insert_log/5/0/8/102")
    assert not os.path.exists(f"{st.root}/insert_log/5/0/8")
    assert os.path.isdir(f"{st.root}/insert_log/5/0/7")
    for prefix in paths.collection_prefixes(5):
        await st.delete_prefix(prefix)
    assert tree(st.root) == before
    assert os.path.isdir(st.root)


async def test_local_write_is_atomic_rename(tmp_path):
    st = ObjectStore.from_uri(f"file://{tmp_path}/root")
    await st.write("a/obj", b"1" * 1000)
    assert sorted(os.listdir(f"{st.root}/a")) == ["obj"]  # no temp file left behind
    # an in-flight temp file (dot-prefixed) is invisible to list / walk
    open(f"{st.root}/a/.obj2.tmp-123", "wb").close()
    assert await st.walk() == ["a/obj"]


# ------------------------------------------------------------------------------ insert binlogs


def make_schema() -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="c")
    s.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    s.fields.add(
        fieldID=101,
        name="vec",
        data_type=DT.FloatVector,
        type_params=[common_pb2.KeyValuePair(key="dim", value=str(DIM))],
    )
    s.fields.add(
        fieldID=102,
        name="tag",
        data_type=DT.VarChar,
        type_params=[common_pb2.KeyValuePair(key="max_length", value="64")],
    )
    s.fields.add(fieldID=103, name="j", data_type=DT.JSON)
    s.fields.add(fieldID=104, name="f", data_type=DT.Float)
    return s


def make_batch(schema, start: int, n: int, ts) -> pa.RecordBatch:
    rng = np.random.default_rng(start)
    cols = {
        100: pa.array(np.arange(start, start + n, dtype=np.int64)),
        101: pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM),
        102: pa.array([f"tag{i}" for i in range(start, start + n)]),
        103: pa.array([f'{{"i": {i}}}'.encode() for i in range(start, start + n)], pa.binary()),
        104: pa.array(rng.random(n, dtype=np.float32)),
    }
    return typeutil.columns_to_record_batch(schema, cols, np.arange(start, start + n) + 10_000, ts)


async def test_insert_binlog_roundtrip(store):
    schema = make_schema()
    b1 = make_batch(schema, 0, 700, np.arange(700) + 1000)
    b2 = make_batch(schema, 700, 300, 5000)
    key = paths.insert_log_key(1, 2, 3, 44)
    info = await binlog.awrite_insert_binlog(store, key, [b1, b2])
    assert isinstance(info, BinlogInfo)
    assert info.log_id == 44 and info.key == key
    assert info.entries_num == 1000
    assert (info.timestamp_from, info.timestamp_to) == (1000, 5000)
    assert info.size == await store.size(key) and info.size > 1000 * DIM * 4
    assert info.memory_size == b1.nbytes + b2.nbytes
    expected = pa.Table.from_batches([b1, b2])
    got = await binlog.aread_binlog(store, key)
    assert got.equals(expected)
    assert got.schema.field("101").metadata[b"name"] == b"vec"  # Arrow schema is kept
    # plain pyarrow, no kmilvus: a float vector is stored as its bytes (Milvus' own Parquet type for it)
    plain = pq.read_table(store.path(key), filesystem=store.filesystem)
    assert plain.num_rows == 1000 and plain.column("102").to_pylist()[699:701] == ["tag699", "tag700"]
    assert plain.schema.field("101").type == pa.binary(4 * DIM)
    assert plain.schema.field("101").metadata[binlog.LIST_SIZE_META] == str(DIM).encode()
    vectors = np.frombuffer(b"".join(plain.column("101").to_pylist()), np.float32).reshape(-1, DIM)
    assert np.array_equal(vectors, expected.column("101").combine_chunks().values.to_numpy().reshape(-1, DIM))


async def test_insert_binlog_encoding(store):
    schema = make_schema()
    key = paths.insert_log_key(1, 2, 3, 1)
    await binlog.awrite_insert_binlog(store, key, make_batch(schema, 0, 100, 7))
    with store.filesystem.open_input_file(store.path(key)) as f:
        md = pq.ParquetFile(f).metadata
    cols = {md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i) for i in range(md.num_columns)}
    vec = [c for p, c in cols.items() if p.startswith("101")]
    assert [c.path_in_schema for c in vec] == ["101"]  # one leaf: no repetition level per float
    assert vec[0].compression == "UNCOMPRESSED" and not vec[0].is_stats_set
    assert "RLE_DICTIONARY" not in vec[0].encodings and "PLAIN_DICTIONARY" not in vec[0].encodings
    for name in ("0", "1", "100", "102", "103", "104"):
        assert cols[name].compression == "ZSTD"
    assert cols["1"].statistics.min == 7 and cols["1"].statistics.max == 7


async def test_read_segment_in_log_order(store):
    schema = make_schema()
    batches = {}
    for log_id, start in ((100, 0), (9, 50), (10, 80)):  # numeric, not lexicographic, order
        b = make_batch(schema, start, 30, start)
        batches[log_id] = b
        await binlog.awrite_insert_binlog(store, paths.insert_log_key(1, 2, 3, log_id), [b])
    await binlog.awrite_insert_binlog(store, paths.insert_log_key(1, 2, 4, 1), [make_batch(schema, 999, 5, 1)])
    table = await binlog.aread_segment(store, 1, 2, 3)
    expected = pa.Table.from_batches([batches[9], batches[10], batches[100]])
    assert table.equals(expected)
    assert binlog.segment_binlog_keys(store, 1, 2, 3) == [paths.insert_log_key(1, 2, 3, x) for x in (9, 10, 100)]
    empty = await binlog.aread_segment(store, 1, 2, 99, schema=typeutil.arrow_schema(schema))
    assert empty.num_rows == 0 and empty.schema == typeutil.arrow_schema(schema)
    # plain pyarrow datasets read a whole segment directory of extension-less files
    seg_dir = store.path(paths.segment_prefix(1, 2, 3).rstrip("/"))
    d = ds.dataset(seg_dir, filesystem=store.filesystem, format="parquet")
    assert d.count_rows() == 90
    assert sorted(d.to_table().column("100").to_pylist()) == sorted(expected.column("100").to_pylist())


async def test_vector_columns_decode_zero_copy_sliced_nullable_and_from_the_old_list_layout(store):
    """Float vectors are fixed_size_list<float32> in memory and 4·dim-byte binaries on disk; both
    conversions share buffers, keep a slice's rows and a nullable field's nulls, and a segment
    written before the change (lists on disk) reads back beside newer binlogs."""
    schema = make_schema()
    b = make_batch(schema, 0, 50, 3)
    sliced = pa.Table.from_batches([b]).slice(7, 20)
    enc = binlog.to_storage(sliced)
    assert enc.schema.field("101").type == pa.binary(4 * DIM)
    assert binlog.from_storage(enc).equals(sliced)
    col = sliced.column("101").chunks[0]
    raw = enc.column("101").chunks[0]
    assert raw.buffers()[1].address == col.values.buffers()[1].address + (col.values.offset + col.offset * DIM) * 4
    field = pa.field("v", pa.list_(pa.float32(), 2))
    nullable = pa.Table.from_arrays(
        [
            pa.FixedSizeListArray.from_arrays(
                pa.array([1, 2, 0, 0, 5, 6], pa.float32()), 2, mask=pa.array([False, True, False])
            )
        ],
        schema=pa.schema([field]),
    )
    back = binlog.from_storage(binlog.to_storage(nullable))
    assert back.column("v").to_pylist() == [[1.0, 2.0], None, [5.0, 6.0]]
    # A binlog written in the old layout (the list on disk), then one in the new, in one segment.
    old = pa.Table.from_batches([make_batch(schema, 100, 10, 4)])
    binlog.write_parquet(store, paths.insert_log_key(1, 2, 8, 1), old)  # as kmilvus wrote it before
    new = make_batch(schema, 200, 10, 5)
    await binlog.awrite_insert_binlog(store, paths.insert_log_key(1, 2, 8, 2), [new])
    both = await binlog.aread_segment(store, 1, 2, 8, schema=typeutil.arrow_schema(schema))
    assert both.equals(pa.concat_tables([old, pa.Table.from_batches([new])]))
    column = binlog.read_column(store, binlog.segment_binlog_keys(store, 1, 2, 8), "101")
    assert column.type == pa.list_(pa.float32(), DIM) and len(column) == 20


async def test_local_segment_dir_reads_with_plain_pyarrow(tmp_path):
    st = ObjectStore.from_uri(f"file://{tmp_path}/r")
    schema = make_schema()
    for i in range(3):
        await binlog.awrite_insert_binlog(st, paths.insert_log_key(5, 6, 7, i), [make_batch(schema, i * 10, 10, i)])
    seg_dir = binlog.local_segment_dir(st, 5, 6, 7)
    assert sorted(os.listdir(seg_dir)) == ["0", "1", "2"]
    t = pq.read_table(seg_dir)
    assert t.num_rows == 30 and sorted(t.column("0").to_pylist()) == list(range(10_000, 10_030))
    assert ds.dataset(seg_dir, format="parquet").count_rows() == 30


async def test_insert_binlog_needs_timestamps(store):
    with pytest.raises(ValueError):
        binlog.write_insert_binlog(store, "insert_log/1/2/3/4", pa.table({"0": [1]}))
    with pytest.raises(ValueError):
        binlog.write_insert_binlog(store, "insert_log/1/2/3/4", [])


# ------------------------------------------------------------------------------ DDL binlogs


async def test_ddl_binlogs_roundtrip(store):
    ts, types, payloads = [10, 20, 30], [100, 101, 100], [b"create", b"\x00\x01drop", b""]
    ts_key, ddl_key = await binlog.awrite_ddl_binlogs(store, 7, 0, 1, ts, types, payloads)
    assert (ts_key, ddl_key) == ("data_definition_log/7/ts/0", "data_definition_log/7/ddl/1")
    t = await binlog.aread_ddl_binlog(store, ts_key)
    assert t.schema == binlog.DDL_TS_SCHEMA and t.column("ts").to_pylist() == ts
    d = await binlog.aread_ddl_binlog(store, ddl_key)
    assert d.schema == binlog.DDL_SCHEMA
    assert d.column("type").type == pa.int32() and d.column("payload").type == pa.binary()
    assert await binlog.aread_ddl_records(store, ddl_key) == list(zip(ts, types, payloads, strict=True))
    plain = pq.read_table(store.path(ddl_key), filesystem=store.filesystem)
    assert plain.column("payload").to_pylist() == payloads
    with pytest.raises(ValueError):
        binlog.write_ddl_binlogs(store, 7, 1, 2, [1], [1, 2], [b""])


# ------------------------------------------------------------------------------ dropping a collection


async def test_collection_prefixes_remove_everything_it_owns(store):
    schema = make_schema()
    before_raw = raw_paths(store)
    before_tree = tree(store.root) if store.local else None
    for coll in (5, 6):
        for seg in (1, 2):
            await binlog.awrite_insert_binlog(
                store, paths.insert_log_key(coll, 0, seg, 3), [make_batch(schema, 0, 10, 1)]
            )
        await binlog.awrite_ddl_binlogs(store, coll, 0, 0, [1], [1], [b"x"])
        await store.write(paths.stats_log_prefix(coll) + "0/1/2", b"s")
        await store.write(paths.delta_log_prefix(coll) + "0/1/2", b"d")
    await store.delete(paths.insert_log_key(5, 0, 2, 3))  # a GC'd binlog first
    for prefix in paths.collection_prefixes(5):
        await store.delete_prefix(prefix)
    left = await store.walk()
    assert left and all("/6/" in k for k in left)
    assert len(left) == 6
    owned = [store.path(p.rstrip("/")) for p in paths.collection_prefixes(5)]
    for p in raw_paths(store):
        assert not any(p == o or p.startswith(o + "/") for o in owned), p
    for prefix in paths.collection_prefixes(6):
        await store.delete_prefix(prefix)
    assert await store.walk() == []
    if store.local:
        assert tree(store.root) == before_tree
    else:
        # pyarrow's S3 filesystem leaves zero-byte markers for the parents of what it
        # deleted: only the shared top-level directories, never a collection's own.
        extra = set(raw_paths(store)) - set(before_raw)
        tops = {store.path(p.split("/")[0]) for p in paths.collection_prefixes(6)}
        assert extra <= tops | {store.root}, extra


def test_local_writes_fsync_the_file_before_the_rename_and_its_directories_after(tmp_path, monkeypatch):
    """Meta committed after a write must never point at data the OS has not
    written — the file is fsynced before it is renamed into place, its directories after."""
    from kmilvus.storage import objectstore

    synced: list[str] = []
    real = objectstore._fsync_file

    def recording(path: str) -> None:
        synced.append(path)
        real(path)

    monkeypatch.setattr(objectstore, "_fsync_file", recording)
    store = objectstore.ObjectStore.from_uri((tmp_path / "root").as_uri())
    store.write_sync("insert_log/1/2/3/44", b"data")
    root = str(tmp_path / "root")
    assert ".44.tmp-" in synced[0]  # the temp file, before the rename
    assert synced[1:] == [
        f"{root}/insert_log/1/2/3",
        f"{root}/insert_log/1/2",
        f"{root}/insert_log/1",
        f"{root}/insert_log",
        root,
    ]
    assert (tmp_path / "root/insert_log/1/2/3/44").read_bytes() == b"data"


def test_a_process_starts_while_local_storage_is_away(tmp_path):
    """Found by chaos: a coordinator restarted during a storage outage (the root replaced by a
    file) died at start with FileExistsError; object storage away for a while is a fault to ride
    out, so the store is made anyway, and writes work once the storage is back."""
    root = tmp_path / "storage"
    root.write_text("storage is away")
    st = ObjectStore.from_uri(f"file://{root}")
    with pytest.raises(OSError):
        st.write_sync("a/b", b"x")
    root.unlink()
    root.mkdir()
    st.write_sync("a/b", b"x")
    assert st.read_sync("a/b") == b"x"


def test_a_removal_while_local_storage_is_away_fails_and_removes_later(tmp_path):
    """Found by chaos: a partition dropped while the storage root was away (replaced by a file)
    "removed" its files without error — the prefix looked empty — so the drop finished and the
    files stayed for good. A removal that cannot see the store fails (the drop is retried)."""
    root = tmp_path / "storage"
    st = ObjectStore.from_uri(f"file://{root}")
    st.write_sync("insert_log/1/2/3/44", b"data")
    st.write_sync("stats_log/1/2/3/45", b"stats")
    root.rename(tmp_path / "aside")
    root.write_text("storage is away")
    with pytest.raises(OSError):
        st.delete_prefix_sync("insert_log/1/2/")
    with pytest.raises(OSError):
        st.delete_sync("stats_log/1/2/3/45")
    root.unlink()
    (tmp_path / "aside").rename(root)
    assert st.list_sync("insert_log/1/2/") == [("insert_log/1/2/3/44", 4)]
    st.delete_prefix_sync("insert_log/1/2/")
    st.delete_sync("stats_log/1/2/3/45")
    assert st.walk_sync() == []
    st.delete_prefix_sync("insert_log/9/")  # nothing there, storage present: done
    st.delete_sync("insert_log/9/1")


def test_stats_log_keys_sorted_unique_without_np_unique(tmp_path, monkeypatch):
    """A segment's stats log holds its distinct primary keys, sorted. np.unique is not used:
    numpy 2.4's is far slower than a sort for int64 keys, and the stats log is written when a
    segment is flushed, beside the inserts."""
    import numpy as np
    import pyarrow.parquet as pq

    from kmilvus.storage import ObjectStore, deltalog

    def no_unique(*_a, **_k):
        raise AssertionError("np.unique")

    store = ObjectStore.from_uri(tmp_path.as_uri())
    for keys in (np.array([5, 3, 5, 9, 3, 1], dtype=np.int64), np.array(["b", "a", "b", "c"])):
        monkeypatch.setattr(deltalog.np, "unique", no_unique)
        info = deltalog.write_stats_log(store, f"stats_log/1/2/3/100/{keys.dtype.kind}", keys)
        monkeypatch.undo()
        got = pq.read_table(store.path(info.key)).column(deltalog.PK).to_pylist()
        assert got == sorted(set(keys.tolist())) and info.entries_num == len(got)


async def test_a_prefix_deleted_while_parts_of_it_go_concurrently_is_gone_whole(store):
    """A drop deletes a collection's prefix while the garbage collector deletes some of the
    index builds under it (chaos found 11 index files of a dropped collection left behind):
    on a local store pyarrow's recursive delete stops with "not found" when an entry it
    listed is gone, and that must not leave the rest behind."""
    segs = [f"index_files/1/{p}/{s}/" for p in range(3) for s in range(40)]
    for _ in range(5):
        await asyncio.gather(*(store.write(f"{seg}{b}/index", b"x") for seg in segs for b in range(2)))
        await asyncio.gather(store.delete_prefix("index_files/1/"), *(store.delete_prefix(seg) for seg in segs[::4]))
        assert await store.walk() == []
