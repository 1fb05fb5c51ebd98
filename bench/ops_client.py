"""A client process that exercises every write and read path of a collection, journaling each
operation and its outcome (`ops_model.Journal`) for the invariant check.

Each client owns its lineages (collection names) and works on one operation at a time, so its
journal is the order of the effects. The operation mix (weights, `MIXES`):

- insert: 100–2,000 new keys (a tenth of them 10,000: split into several messages), into a
  random partition;
- upsert: up to 200 live keys of one partition, new values, into that partition;
- delete_ids: up to 200 live keys, `id in [...]`; delete_expr: `id >= a and id < b and
  val % m == r` over a window of 2,000 keys (the Proxy finds the keys with a Strong query);
- import: 1,000–5,000 new keys written by this client as a Parquet file, `do_bulk_insert`,
  followed until Completed or Failed;
- flush; compact (manual; DataCoord's policy compacts on its own too);
- query (Strong, by ID: up to 50 keys whose state is known, checked against the model) and
  count (Strong `count(*)`, within [live, live + maybe]);
- drop_partition: release, drop a partition, create it again under the same name, load;
- drop_collection: drop, create again under the same name (new ID), partitions, an index
  (FLAT, IVF_FLAT, HNSW in turn), load.

Writes go out without pymilvus' own retries (`retry_times=0`): a retried insert whose first
attempt was published is stored twice yet acknowledged once. Set-up and DDL are retried until
acknowledged (they are idempotent); a DDL that never is gets an `unknown` end.
"""

from __future__ import annotations

import contextlib
import random
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ops_model import (
    ACK,
    DELETED,
    DROPPED,
    FAIL,
    FAILED,
    LIVE,
    MAYBE,
    UNKNOWN,
    WRITES,
    Journal,
    LineageModel,
    lineage_base,
    read_journal,
    row_values,
)

PARTITIONS = ("_default", "p1", "p2")
INDEXES = (
    {"index_type": "FLAT", "metric_type": "L2", "params": {}},
    {"index_type": "IVF_FLAT", "metric_type": "L2", "params": {"nlist": 16}},
    {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 8, "efConstruction": 32}},
)
MIXES = {
    # op: weight
    "chaos": {
        "insert": 30,
        "upsert": 10,
        "delete_ids": 8,
        "delete_expr": 4,
        "import": 2,
        "flush": 6,
        "compact": 2,
        "query": 10,
        "count": 4,
        "drop_partition": 1.0,
        "drop_collection": 0.4,
    },
    # bench/load.py: mostly inserts, every path still taken
    "load": {
        "insert": 60,
        "upsert": 6,
        "delete_ids": 5,
        "delete_expr": 2,
        "import": 1,
        "flush": 4,
        "compact": 1,
        "query": 4,
        "count": 2,
        "drop_partition": 0.3,
        "drop_collection": 0.3,
    },
}
DDL_PATIENCE = 180.0  # seconds a DDL step is retried before its outcome is left unknown
JOB_PATIENCE = 180.0  # seconds an import or compaction is followed
RATE_LIMIT = 8  # Milvus' code for a request refused by the quota: nothing was published


@dataclass
class ClientSpec:
    index: int
    uri: str
    lineages: list[str]
    seed: int
    journal: str
    files_dir: str
    mix: str = "chaos"
    only: tuple[str, ...] = ()  # operations to run (the mix's weights), empty: all of the mix
    dim: int = 8
    shards: int = 2


@dataclass
class Lineage:
    name: str
    model: LineageModel
    coll: object | None = None
    incarnation: int = 0


def schema(dim: int):
    from pymilvus import CollectionSchema, DataType, FieldSchema

    return CollectionSchema(
        [
            FieldSchema("id", DataType.INT64, is_primary=True),
            FieldSchema("val", DataType.INT64),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=dim),
        ]
    )


def quiet_pymilvus() -> None:
    """pymilvus 3.0 warns that the ORM is deprecated on every call and logs every failed RPC
    with its traceback: under chaos that buries the report. Outcomes are journaled instead."""
    import logging

    warnings.filterwarnings("ignore", module="pymilvus")
    warnings.filterwarnings("ignore", message=".*ORM-style PyMilvus API.*")
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)


def parse_client_arguments(ap):
    """The options chaos and load share (--load, --ops), added to `ap`, then parsed and checked;
    pymilvus is quieted for the run."""
    ap.add_argument("--load", type=int, default=0, help="busy-loop processes beside the run (cpuload)")
    ap.add_argument(
        "--ops",
        type=lambda v: [x for x in v.split(",") if x],
        default=[],
        help=f"only these operations, comma-separated (of: {', '.join(MIXES['chaos'])})",
    )
    args = ap.parse_args()
    if unknown := set(args.ops) - set(MIXES["chaos"]):
        ap.error(f"unknown operations: {', '.join(sorted(unknown))}")
    quiet_pymilvus()
    return args


def describe_error(exc: BaseException) -> tuple[str, int | None]:
    code = getattr(exc, "code", None)
    msg = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}({code}): {msg[:160]}", code if isinstance(code, int) else None


class OpsClient:
    def __init__(self, spec: ClientSpec, stop):
        self.spec = spec
        self.stop = stop  # a multiprocessing.Event
        self.rng = random.Random(spec.seed * 1000 + spec.index)
        self.nprng = np.random.default_rng(spec.seed * 1000 + spec.index)
        self.journal = Journal(Path(spec.journal))
        self.alias = f"ops-{spec.index}"
        self.lineages = [
            Lineage(name, LineageModel(name, lineage_base(spec.index, i))) for i, name in enumerate(spec.lineages)
        ]

    # ---------------------------------------------------------------- running
    def run(self) -> None:
        from pymilvus import connections

        quiet_pymilvus()
        connections.connect(self.alias, uri=self.spec.uri, timeout=60)
        self.journal.note(client=self.spec.index, bases={ln.name: ln.model.base for ln in self.lineages})
        for ln in self.lineages:
            self.incarnate(ln)
        mix = {op: w for op, w in MIXES[self.spec.mix].items() if not self.spec.only or op in self.spec.only}
        ops, weights = zip(*mix.items(), strict=True)
        while not self.stop.is_set():
            ln = self.rng.choice(self.lineages)
            op = self.rng.choices(ops, weights)[0]
            if ln.coll is None and op != "drop_collection":
                self.incarnate(ln)
                continue
            getattr(self, "op_" + op)(ln)
        self.resolve_imports()
        self.journal.close()

    def record(self, ln: Lineage, op: str, fn, **data) -> str:
        """Run `fn(n, extra)` as journaled operation n; its outcome, whatever `fn` put in `extra`,
        and the model's update follow."""
        n = self.journal.begin(op, ln.name, **data)
        extra: dict = {}
        try:
            fn(n, extra)
            outcome = ACK
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome, journaled
            err, code = describe_error(exc)
            outcome = FAIL if isinstance(exc, RefusedError) or code == RATE_LIMIT else UNKNOWN
            extra["error"] = err
            if op in WRITES or op in ("query", "count"):
                time.sleep(0.2)
        self.journal.end(n, outcome, **extra)
        ln.model.apply({"n": n, "op": op, "lineage": ln.name, **data}, {"n": n, "end": outcome, **extra})
        return outcome

    def retry_ddl(self, fn):
        """An idempotent DDL step retried until acknowledged (or DDL_PATIENCE runs out)."""
        deadline = time.monotonic() + DDL_PATIENCE
        attempts = 0
        while True:
            attempts += 1
            try:
                return fn(), attempts
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(min(5.0, 0.5 * attempts))

    @staticmethod
    def create_partition(coll, name: str) -> None:
        """CreatePartition as an idempotent step: an attempt whose answer was lost (a Proxy
        killed after the commit) may have created it, and pymilvus' ORM refuses to create a
        partition it finds (PartitionAlreadyExistException)."""
        if not coll.has_partition(name):
            coll.create_partition(name)

    # ---------------------------------------------------------------- DDL
    def incarnate(self, ln: Lineage) -> None:
        """Create (or find) the lineage's collection, its partitions, an index; load it."""
        from pymilvus import Collection

        idx = INDEXES[ln.incarnation % len(INDEXES)]

        def create(n, extra):
            coll, extra["attempts"] = self.retry_ddl(
                lambda: Collection(ln.name, schema(self.spec.dim), shards_num=self.spec.shards, using=self.alias)
            )
            extra["collection_id"] = coll.describe()["collection_id"]
            for p in PARTITIONS[1:]:
                self.retry_ddl(lambda p=p: self.create_partition(coll, p))
            self.retry_ddl(lambda: None if coll.has_index() else coll.create_index("vec", idx))
            self.retry_ddl(lambda: coll.load(timeout=120))
            ln.coll = coll

        if self.record(ln, "create_collection", create, index=idx["index_type"]) == ACK:
            ln.incarnation += 1

    def op_drop_collection(self, ln: Lineage) -> None:
        from pymilvus import Collection

        def drop(n, extra):
            coll = ln.coll or Collection(ln.name, using=self.alias)
            extra["collection_id"] = coll.describe()["collection_id"]
            _, extra["attempts"] = self.retry_ddl(lambda: coll.drop(timeout=60))
            ln.coll = None

        self.record(ln, "drop_collection", drop)
        if ln.coll is None:
            self.incarnate(ln)

    def op_drop_partition(self, ln: Lineage) -> None:
        """Milvus refuses to drop a loaded partition: release, drop, create again, load."""
        slot = self.rng.randrange(1, len(PARTITIONS))
        name, coll = PARTITIONS[slot], ln.coll

        def drop(n, extra):
            self.retry_ddl(lambda: coll.release(timeout=60))
            _, extra["attempts"] = self.retry_ddl(lambda: coll.drop_partition(name, timeout=60))

        def create(n, extra):
            self.retry_ddl(lambda: self.create_partition(coll, name))
            self.retry_ddl(lambda: coll.load(timeout=120))

        self.record(ln, "drop_partition", drop, part=slot, name=name)
        self.record(ln, "create_partition", create, part=slot, name=name)

    # ---------------------------------------------------------------- writes
    def vectors(self, n: int) -> np.ndarray:
        return self.nprng.random((n, self.spec.dim), dtype=np.float32)

    def op_insert(self, ln: Lineage) -> None:
        count = 10_000 if self.rng.random() < 0.1 else self.rng.randint(100, 2000)
        slot = self.rng.randrange(len(PARTITIONS))
        start = ln.model.size

        def insert(n, extra):
            keys = np.arange(start, start + count, dtype=np.int64) + ln.model.base
            data = [keys.tolist(), row_values(n, keys).tolist(), self.vectors(count)]
            ln.coll.insert(data, partition_name=PARTITIONS[slot], retry_times=0)

        self.record(ln, "insert", insert, part=slot, start=start, count=count)

    def op_upsert(self, ln: Lineage) -> None:
        slot = self.rng.randrange(len(PARTITIONS))
        keys = self.sample(ln.model.keys_in([LIVE], part=slot), 200)
        if not len(keys):
            return

        def upsert(n, extra):
            data = [keys.tolist(), row_values(n, keys).tolist(), self.vectors(len(keys))]
            ln.coll.upsert(data, partition_name=PARTITIONS[slot], retry_times=0)

        self.record(ln, "upsert", upsert, part=slot, keys=keys.tolist())

    def op_delete_ids(self, ln: Lineage) -> None:
        keys = self.sample(ln.model.keys_in([LIVE]), 200)
        if not len(keys):
            return
        self.record(
            ln,
            "delete_ids",
            lambda n, extra: ln.coll.delete(f"id in {keys.tolist()}", retry_times=0),
            keys=keys.tolist(),
        )

    def op_delete_expr(self, ln: Lineage) -> None:
        m = ln.model
        if m.size == 0:
            return
        lo = m.base + self.rng.randrange(max(1, m.size - 1000))
        hi, mod = lo + 2000, self.rng.choice((2, 3, 5))
        rem = self.rng.randrange(mod)

        def delete(n, extra):
            res = ln.coll.delete(f"id >= {lo} and id < {hi} and val % {mod} == {rem}", retry_times=0)
            extra["delete_count"] = int(getattr(res, "delete_count", -1))

        self.record(ln, "delete_expr", delete, lo=lo, hi=hi, mod=mod, rem=rem)

    def op_import(self, ln: Lineage) -> None:
        """A Parquet file of new keys (BulkWriter's layout: vectors as list<float>), imported and
        followed until Completed (ack) or Failed (fail: nothing of it may be stored)."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pymilvus import utility

        count = self.rng.randint(1000, 5000)
        slot = self.rng.randrange(len(PARTITIONS))
        start = ln.model.size

        def run(n, extra):
            keys = np.arange(start, start + count, dtype=np.int64) + ln.model.base
            path = Path(self.spec.files_dir) / f"{ln.name}-{self.spec.index}-{n}.parquet"
            vec = pa.FixedSizeListArray.from_arrays(pa.array(self.vectors(count).ravel()), self.spec.dim)
            pq.write_table(
                pa.table({"id": keys, "val": row_values(n, keys), "vec": vec.cast(pa.list_(pa.float32()))}), path
            )
            extra["job"] = utility.do_bulk_insert(
                ln.name, files=[str(path)], partition_name=PARTITIONS[slot], using=self.alias, retry_times=0
            )
            extra["state"] = state = self.follow_import(extra["job"])
            if state in ("Failed", "FailedAndCleaned"):
                raise RefusedError(f"import job {extra['job']} {state}")
            if state != "Completed":
                raise TimeoutError(f"import job {extra['job']}: still {state} after {JOB_PATIENCE:.0f} s")

        self.record(ln, "import", run, part=slot, start=start, count=count)

    def follow_import(self, job: int, patience: float = JOB_PATIENCE) -> str:
        from pymilvus import utility

        deadline = time.monotonic() + patience
        state = "?"
        while time.monotonic() < deadline:
            try:
                state = utility.get_bulk_insert_state(job, using=self.alias, timeout=30).state_name
            except Exception:  # noqa: BLE001 - unavailable for now: ask again
                state = "unreachable"
            if state in ("Completed", "Failed", "FailedAndCleaned"):
                return state
            time.sleep(0.5)
        return state

    def resolve_imports(self) -> None:
        """Imports a timeout left unknown: ask once more how they ended (a later end record
        replaces the first)."""
        for b, e in read_journal(Path(self.spec.journal)):
            if b["op"] != "import" or e["end"] != UNKNOWN or e.get("job") is None:
                continue
            state = self.follow_import(int(e["job"]), patience=60.0)
            if state == "Completed":
                self.journal.end(b["n"], ACK, job=e["job"], resolved=state)
            elif state in ("Failed", "FailedAndCleaned"):
                self.journal.end(b["n"], FAIL, job=e["job"], resolved=state)

    # ---------------------------------------------------------------- jobs
    def op_flush(self, ln: Lineage) -> None:
        self.record(ln, "flush", lambda n, extra: ln.coll.flush(timeout=120))

    def op_compact(self, ln: Lineage) -> None:
        def compact(n, extra):
            ln.coll.compact(timeout=60)
            extra["completed"] = bool(ln.coll.wait_for_compaction_completed(timeout=JOB_PATIENCE))

        self.record(ln, "compact", compact)

    # ---------------------------------------------------------------- reads
    def op_query(self, ln: Lineage) -> None:
        """Strong query by ID of keys whose state is known: live ones (value checked) and
        deleted, dropped or refused ones (must not be there)."""
        m = ln.model
        keys = np.concatenate(
            [self.sample(m.keys_in([LIVE]), 35), self.sample(m.keys_in([DELETED, DROPPED, FAILED]), 15)]
        )
        if not len(keys):
            return

        def query(n, extra):
            rows = ln.coll.query(
                f"id in {keys.tolist()}", output_fields=["id", "val"], consistency_level="Strong", timeout=60
            )
            extra.update(read_violations(m, keys, rows))

        self.record(ln, "query", query, keys=len(keys))

    def op_count(self, ln: Lineage) -> None:
        m = ln.model
        live = int((m.state[: m.size] == LIVE).sum())
        maybe = int((m.state[: m.size] == MAYBE).sum())

        def count(n, extra):
            res = ln.coll.query("", output_fields=["count(*)"], consistency_level="Strong", timeout=60)
            got = extra["count"] = int(res[0]["count(*)"])
            if not live <= got <= live + maybe:
                extra["violation"] = {"count": [got, live, live + maybe]}

        self.record(ln, "count", count)

    def sample(self, keys: np.ndarray, k: int) -> np.ndarray:
        if len(keys) <= k:
            return keys
        return np.sort(self.nprng.choice(keys, k, replace=False))


class RefusedError(Exception):
    """A definite failure: nothing of the operation may be stored (an import that ended Failed)."""


def read_violations(m: LineageModel, keys: np.ndarray, rows: list[dict]) -> dict:
    """A Strong query's rows against the model (keys of definite state only)."""
    got: dict[int, list[int]] = {}
    for r in rows:
        got.setdefault(int(r["id"]), []).append(int(r["val"]))
    out: dict[str, list[int]] = {"missing": [], "resurrected": [], "wrong_value": [], "duplicated": []}
    for k in keys.tolist():
        off = k - m.base
        vals = got.get(k, [])
        if len(vals) > 1:
            out["duplicated"].append(k)
        if m.state[off] == LIVE:
            if not vals:
                out["missing"].append(k)
            elif vals[0] != m.val[off]:
                out["wrong_value"].append(k)
        elif vals:
            out["resurrected"].append(k)
    bad = {k: v for k, v in out.items() if v}
    return {"violation": bad} if bad else {}


def client_main(spec: ClientSpec, stop) -> None:
    """Entry point of a client process (multiprocessing, spawn)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    with contextlib.suppress(KeyboardInterrupt):
        OpsClient(spec, stop).run()
