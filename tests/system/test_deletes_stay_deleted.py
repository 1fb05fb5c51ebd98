"""Deleted rows never come back: the user's scenario on a real `kmilvus standalone`, through
pymilvus only.

Import 10,000 rows from Parquet, delete 200 of them, flush, release and load; insert 12 small
flushed segments and compact three times; delete rows (imported and inserted ones) while a
compaction runs (held at its swap by a failpoint until the deletes are flushed); restart the
whole standalone. After every step the deleted keys stay hidden from get and query, and
`count(*)` counts exactly the live rows."""

from __future__ import annotations

import uuid

from pymilvus import Collection, MilvusClient, connections

from tests.system.test_delete import _compact, _count, _import, _indexed_and_loaded, _rows, _schema
from tests.system.test_standalone import start_standalone, stop_and_check_clean
from tests.util import wait_until

NAME = "docs"
IMPORTED = 10_000
TIMEOUT = 240


class Checker:
    """What a client must see: `live` keys present, `deleted` keys gone, count(*) exact."""

    def __init__(self) -> None:
        self.live: set[int] = set()
        self.deleted: set[int] = set()

    def insert(self, ids) -> None:
        self.live |= set(ids)

    def delete(self, ids) -> None:
        self.live -= set(ids)
        self.deleted |= set(ids)

    def check(self, client: MilvusClient, when: str) -> None:
        gone = sorted(self.deleted)
        back = client.query(NAME, filter=f"id in {gone}", output_fields=["id"], consistency_level="Strong")
        assert not back, f"{when}: {len(back)} deleted rows are back, e.g. {sorted(r['id'] for r in back)[:5]}"
        assert not client.get(NAME, ids=gone[:100]), f"{when}: get returns deleted rows"
        count = _count(client, NAME)
        assert count == len(self.live), f"{when}: count(*) is {count}, {len(self.live)} rows are live"
        some = sorted(self.live)[:: max(1, len(self.live) // 200)]
        got = client.query(NAME, filter=f"id in {some}", output_fields=["id"], consistency_level="Strong")
        assert sorted(r["id"] for r in got) == some, f"{when}: live rows missing"

    def reload(self, client: MilvusClient, when: str) -> None:
        client.release_collection(NAME)
        client.load_collection(NAME)
        self.check(client, f"{when}, after release and load")


def test_deleted_rows_stay_deleted_through_flush_compaction_reload_and_restart(tmp_path):
    go = tmp_path / "swap-may-go"
    go.touch()  # compactions swap at once until the test removes the file
    env = {"KMILVUS_FAILPOINTS": f"datacoord.compaction.before_swap=wait({go})", "KMILVUS_AUTO_COMPACTION": "false"}
    proc, port, log = start_standalone(tmp_path, env=env)
    uri = f"http://127.0.0.1:{port}"
    client = MilvusClient(uri=uri)
    alias = "d" + uuid.uuid4().hex[:8]
    connections.connect(alias, uri=uri)
    seen = Checker()
    try:
        client.create_collection(NAME, schema=_schema())
        _indexed_and_loaded(client, NAME)

        # Import 10,000 rows, delete 200 of them, flush, release and load.
        _import(uri, NAME, tmp_path / "rows.parquet", list(range(IMPORTED)))
        seen.insert(range(IMPORTED))
        first = list(range(0, IMPORTED, 50))
        assert client.delete(NAME, ids=first)["delete_count"] == 200
        seen.delete(first)
        client.flush(NAME)
        seen.check(client, "deleted imported rows, flushed")
        seen.reload(client, "deleted imported rows, flushed")

        # 12 small flushed segments, then three compactions.
        for i in range(12):
            ids = range(IMPORTED + 100 * i, IMPORTED + 100 * (i + 1))
            client.insert(NAME, _rows(ids))
            client.flush(NAME)
            seen.insert(ids)
        seen.check(client, "12 segments inserted")
        for n in range(3):
            _compact(uri, NAME)
            seen.reload(client, f"compaction {n + 1}")

        # More small segments, and deletes of imported and inserted rows while a compaction runs.
        for i in range(12, 16):
            ids = range(IMPORTED + 100 * i, IMPORTED + 100 * (i + 1))
            client.insert(NAME, _rows(ids))
            client.flush(NAME)
            seen.insert(ids)
        go.unlink()
        held = log.read_text(errors="replace").count("failpoint reached: waiting for its file")
        coll = Collection(NAME, using=alias)
        coll.compact()
        wait_until(
            lambda: log.read_text(errors="replace").count("failpoint reached: waiting for its file") > held,
            timeout=TIMEOUT,
            interval=0.1,
            what="the compaction held before its swap",
        )
        during = list(range(25, IMPORTED, 50)) + list(range(IMPORTED + 5, IMPORTED + 1600, 10))
        assert client.delete(NAME, ids=during)["delete_count"] == len(during)
        seen.delete(during)
        client.flush(NAME)
        seen.check(client, "deleted while a compaction runs")
        go.touch()
        assert coll.wait_for_compaction_completed(timeout=TIMEOUT)
        seen.check(client, "the compaction that ran during the deletes swapped")
        seen.reload(client, "the compaction that ran during the deletes swapped")
        _compact(uri, NAME)
        seen.reload(client, "compacted once more")

        # The whole standalone restarted: nothing deleted comes back.
        client.close()
        connections.disconnect(alias)
        stop_and_check_clean(proc)
        proc, _, _ = start_standalone(tmp_path, env=env, port=port)
        client = MilvusClient(uri=uri)
        connections.connect(alias, uri=uri)
        client.load_collection(NAME)
        seen.check(client, "standalone restarted")
        _compact(uri, NAME)
        seen.reload(client, "standalone restarted, compacted")
    finally:
        go.touch()
        client.close()
        connections.disconnect(alias)
        if proc.poll() is None:
            stop_and_check_clean(proc)
