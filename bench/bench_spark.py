"""Spark jobs benchmark: bulk import and compaction of 1M × 128-dim rows, each beside a plain
Spark Parquet read-and-write of the same data, in the same run, through the same spark-submit.

    .venv/bin/python bench/bench_spark.py                    # 1M rows, 3 rounds, local[2]
    .venv/bin/python bench/bench_spark.py --rows 200000 --rounds 1
    .venv/bin/python bench/bench_spark.py --e2e --rows 10000 --rounds 5      # through pymilvus
    .venv/bin/python bench/bench_spark.py --e2e --rows 1000000 --rounds 1 --routes inprocess

Every measurement is one `spark-submit --master local[2]` (kmilvus.spark.LocalSparkRunner, the
runner DataCoord uses), so each pays the same JVM start. Reported per job, median of the rounds
(rounds interleave the jobs so machine noise hits them alike):

- job s:   inside the application, from its first read to its last write (excludes JVM and
           SparkSession start);
- wall s:  spark-submit from start to exit;
- rows/s and MB/s from the job time; MB = Arrow (in-memory) bytes of the rows.

`ratio` = plain copy job time / kmilvus job time (throughput relative to the plain copy; the
target is ≥ 0.7). Data: int64 pk, 128-dim float32 vector, varchar tag (docs/benchmarks/method.md).

`--e2e`: what a user waits for instead — `utility.do_bulk_insert` of one Parquet file through
pymilvus against `kmilvus standalone` until `get_bulk_insert_state` says Completed (polled every
10 ms), then `compact()` of `--sources` small flushed segments until its state is Completed, per job route:
`inprocess` (the job runs in DataCoord's process, KMILVUS_INPROCESS_JOB_MAX_MB raised to fit the
input), `spark` (KMILVUS_INPROCESS_JOB_MAX_MB=0, KMILVUS_SPARK_WARM=false: a cold spark-submit per
job), `warm` (KMILVUS_INPROCESS_JOB_MAX_MB=0: every job on the warm Spark driver, which the first
round starts) and `default` (the defaults: jobs up to KMILVUS_INPROCESS_JOB_MAX_MB, 1024 MiB,
in-process, the rest warm). One standalone per route; a fresh collection per round; the first
round apart from the later ones.
`--out NAME` writes bench/results/NAME.{json,md,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.spark import application
from kmilvus.spark.runner import LocalSparkRunner
from kmilvus.storage import ObjectStore, paths, write_insert_binlog
from kmilvus.util import typeutil

DT = schema_pb2.DataType
PLAIN_COPY = """
import json, sys, time
from pyspark.sql import SparkSession
spec = json.loads(sys.argv[1])
spark = SparkSession.builder.appName("plain-copy").getOrCreate()
t0 = time.time()
spark.read.parquet(*spec["src"]).write.mode("overwrite").parquet(spec["dst"])
json.dump({"seconds": time.time() - t0}, open(spec["out"], "w"))
spark.stop()
"""


def make_schema(dim: int) -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name="bench")
    s.fields.add(fieldID=100, name="id", data_type=DT.Int64, is_primary_key=True)
    s.fields.add(
        fieldID=101,
        name="vec",
        data_type=DT.FloatVector,
        type_params=[common_pb2.KeyValuePair(key="dim", value=str(dim))],
    )
    s.fields.add(
        fieldID=102,
        name="tag",
        data_type=DT.VarChar,
        type_params=[common_pb2.KeyValuePair(key="max_length", value="64")],
    )
    return s


def make_table(n: int, dim: int) -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * dim, dtype=np.float32)), dim),
            "tag": pa.array([f"tag-{i % 1000:04d}-payload" for i in range(n)]),
        }
    )


async def submit(runner: LocalSparkRunner, app: dict) -> tuple[float, str]:
    t0 = time.monotonic()
    handle = await runner.submit(app)
    while not (st := await runner.state(handle)).state.terminal:
        await asyncio.sleep(0.1)
    wall = time.monotonic() - t0
    if st.state.value != "COMPLETED":
        raise RuntimeError(f"{app['metadata']['name']} {st.state.value}: {st.message}")
    await runner.release(handle)
    return wall, st.state.value


def plain_app(name: str, main: Path, src: list[str], dst: str, out: str) -> dict:
    app = application.build_application("import", {}, name=name)
    app["spec"]["mainApplicationFile"] = str(main)
    app["spec"]["arguments"] = [json.dumps({"src": src, "dst": dst, "out": out})]
    return app


def import_spec(schema, src: str, storage_uri: str, n: int, seg_rows: int, job: int) -> dict:
    segs = -(-n // seg_rows)
    return {
        "kind": "import",
        "job_id": job,
        "collection_id": 1,
        "partition_id": 2,
        "collection_name": "bench",
        "schema": base64.b64encode(schema.SerializeToString()).decode(),
        "storage_uri": storage_uri,
        "files": [src],
        "options": {},
        "timestamp": 1 << 40,
        "row_id_start": 1 << 41,
        "row_id_count": n,
        "log_id_start": 1 << 42,
        "log_id_count": n,
        "segment_id_start": 1000 + job * 100,
        "segment_count": segs,
        "segment_max_rows": seg_rows,
        "manifest_key": f"manifests/import-{job}.json",
    }


def make_sources(store: ObjectStore, schema, table: pa.Table, n_src: int) -> list[dict]:
    """`n_src` flushed-segment-like sources written with kmilvus' own binlog writer."""
    n = table.num_rows
    cols = {
        100: table.column("id").combine_chunks(),
        101: table.column("vec").combine_chunks(),
        102: table.column("tag").combine_chunks(),
    }
    batch = typeutil.columns_to_record_batch(schema, cols, np.arange(n, dtype=np.int64) + (1 << 41), 1 << 40)
    out = []
    bounds = np.linspace(0, n, n_src + 1, dtype=np.int64)
    for i in range(n_src):
        key = paths.insert_log_key(1, 2, 500 + i, 1)
        info = write_insert_binlog(store, key, batch.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])))
        out.append({"segment_id": 500 + i, "binlogs": [{"key": key, "rows": info.entries_num, "size": info.size}]})
    return out


def compact_spec(schema, storage_uri: str, sources: list[dict], n: int, seg_rows: int, job: int) -> dict:
    targets = -(-n // seg_rows)
    return {
        "kind": "compact",
        "job_id": job,
        "collection_id": 1,
        "schema": base64.b64encode(schema.SerializeToString()).decode(),
        "storage_uri": storage_uri,
        "manifest_key": f"manifests/compact-{job}.json",
        "log_id_start": 1 << 43,
        "log_id_count": n,
        "plans": [
            {
                "plan_id": 1,
                "partition_id": 2,
                "channel": "c",
                "target_ids": list(range(9000 + job * 10, 9000 + job * 10 + targets)),
                "sources": sources,
            }
        ],
    }


def fmt(label: str, rows: int, nbytes: int, job_s: list[float], wall_s: list[float], base: float | None) -> str:
    j, w = statistics.median(job_s), statistics.median(wall_s)
    ratio = f"{base / j:5.2f}" if base else "  -  "
    return (
        f"{label:<28} job {j:6.2f} s  wall {w:6.2f} s  {rows / j:>10,.0f} rows/s  "
        f"{nbytes / j / 1e6:7.1f} MB/s   ratio {ratio}"
    )


# The standalone's environment per job route.
ROUTES: dict[str, dict[str, str]] = {
    "inprocess": {"KMILVUS_INPROCESS_JOB_MAX_MB": "1000000"},  # every job in DataCoord's process
    "spark": {"KMILVUS_INPROCESS_JOB_MAX_MB": "0", "KMILVUS_SPARK_WARM": "false"},  # a spark-submit per job
    "warm": {"KMILVUS_INPROCESS_JOB_MAX_MB": "0", "KMILVUS_SPARK_WARM": "true"},  # every job on the warm driver
    "default": {},  # the defaults: small jobs in-process, the rest on the warm driver
}


def e2e(args: argparse.Namespace, root: Path) -> None:
    """Import and compaction through pymilvus against `kmilvus standalone`, per job route."""
    from pymilvus import CollectionSchema, DataType, FieldSchema, MilvusClient, connections, utility
    from pymilvus.client.types import BulkInsertState

    from bench.standalone_proc import Standalone

    src = root / "input.parquet"
    pq.write_table(make_table(args.rows, args.dim), src, row_group_size=128_000)
    schema = CollectionSchema(
        [
            FieldSchema("id", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=args.dim),
            FieldSchema("tag", DataType.VARCHAR, max_length=64),
        ]
    )
    small = make_table(args.compact_rows, args.dim)
    print(
        f"e2e: import of {args.rows:,} rows × {args.dim} ({src.stat().st_size / 1e6:.0f} MB Parquet); compaction of "
        f"{args.sources} segments × {args.compact_rows} rows; routes {', '.join(args.routes)}; {args.rounds} round(s)",
        flush=True,
    )
    results: dict[str, dict[str, list[float]]] = {}
    loads: dict[str, list[float]] = {}  # 1-minute load average before and after each route
    for route in args.routes:
        env = {**ROUTES[route], "KMILVUS_AUTO_COMPACTION": "false"}
        loads[route] = [os.getloadavg()[0]]
        (root / f"standalone-{route}").mkdir(exist_ok=True)
        node = Standalone(data_dir=root / f"standalone-{route}", env=env).start()
        times: dict[str, list[float]] = {"import": [], "compact": []}
        results[route] = times
        try:
            client = MilvusClient(uri=node.uri)
            connections.connect(route, uri=node.uri)
            for r in range(args.rounds):
                name = f"b_{route}_{r}"
                client.create_collection(name, schema=schema)
                t0 = time.perf_counter()
                task = utility.do_bulk_insert(name, files=[str(src)], using=route)
                while (st := utility.get_bulk_insert_state(task, using=route)).state not in (
                    BulkInsertState.ImportCompleted,
                    BulkInsertState.ImportFailed,
                ):
                    time.sleep(0.01)
                times["import"].append(time.perf_counter() - t0)
                if st.state != BulkInsertState.ImportCompleted:
                    raise RuntimeError(f"import failed: {st.infos}")
                if args.sources:
                    cname = f"c_{route}_{r}"
                    client.create_collection(cname, schema=schema)
                    for i in range(args.sources):
                        rows = small.to_pylist()
                        for k, row in enumerate(rows):
                            row["id"] = i * len(rows) + k
                        client.insert(cname, rows)
                        client.flush(cname)
                    t0 = time.perf_counter()
                    job = client.compact(cname)
                    while client.get_compaction_state(job) != "Completed":
                        time.sleep(0.01)
                    times["compact"].append(time.perf_counter() - t0)
                    client.drop_collection(cname)
                client.drop_collection(name)
                print(f"{route} round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v))
            connections.disconnect(route)
            client.close()
        finally:
            node.stop()
            loads[route].append(os.getloadavg()[0])
    print()
    for route, times in results.items():
        for k, v in times.items():
            if v:
                later = f"; later rounds median {statistics.median(v[1:]):6.2f} s" if len(v) > 1 else ""
                print(
                    f"{k:<8} {route:<10} median {statistics.median(v):6.2f} s  (min {min(v):.2f}, max {max(v):.2f});"
                    f" first {v[0]:.2f} s{later}  load {loads[route][0]:.1f}→{loads[route][1]:.1f}"
                )
    if args.out:
        write_e2e(args, src.stat().st_size, results, loads)


def write_e2e(args: argparse.Namespace, src_bytes: int, results: dict, loads: dict) -> None:
    """bench/results/NAME.{json,md,png}: per route and job, the first round (on the warm route
    it includes starting the driver) apart from the later ones."""
    from bench.workload import markdown_table

    out = Path(__file__).resolve().parent / "results"
    doc = {
        "args": {k: v for k, v in vars(args).items() if k != "dir"},
        "input_bytes": src_bytes,
        "cpus": os.cpu_count(),
        "routes": {r: {**ROUTES[r]} for r in results},
        "seconds": results,
        "load_average_1m": loads,
    }
    (out / f"{args.out}.json").write_text(json.dumps(doc, indent=1))
    body = []
    for route, times in results.items():
        for k, v in times.items():
            if v:
                rest = v[1:]
                body.append(
                    [
                        k,
                        route,
                        f"{v[0]:.2f}",
                        f"{statistics.median(rest):.2f} ({min(rest):.2f}–{max(rest):.2f})" if rest else "–",
                        f"{loads[route][0]:.1f}–{loads[route][1]:.1f}",
                    ]
                )
    md = [
        f"# bench_spark --e2e: {args.rows:,} rows × {args.dim} import, {args.sources}-segment compaction",
        "",
        f"`bench/bench_spark.py --e2e --rows {args.rows} --rounds {args.rounds} --sources {args.sources}"
        f" --routes {' '.join(args.routes)}`;"
        f" {os.cpu_count()} CPUs shared with other benchmarks (load average: last column).",
        " Routes: " + "; ".join(f"{r}: {ROUTES[r] or 'defaults'}" for r in results) + ".",
        "",
        markdown_table(["job", "route", "first round s", "later rounds median s (min–max)", "load avg"], body),
        "",
        f"![chart]({args.out}.png)",
        "",
    ]
    (out / f"{args.out}.md").write_text("\n".join(md))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{b[0]}\n{b[1]}" for b in body]
    first = [float(b[2]) for b in body]
    later = [float(b[3].split()[0]) if b[3] != "–" else 0.0 for b in body]
    fig, ax = plt.subplots(figsize=(max(6, len(body) * 1.3), 4))
    xs = np.arange(len(body))
    ax.bar(xs - 0.2, first, 0.4, label="first round")
    ax.bar(xs + 0.2, later, 0.4, label="later rounds (median)")
    ax.set_xticks(xs, labels)
    ax.set_ylabel("seconds (lower is better)")
    ax.set_title(f"import of {args.rows:,} × {args.dim}, compaction of {args.sources} segments")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{args.out}.png", dpi=110)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sources", type=int, default=20, help="source segments for the compaction")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    ap.add_argument("--e2e", action="store_true", help="through pymilvus against kmilvus standalone")
    ap.add_argument("--routes", nargs="+", choices=list(ROUTES), default=list(ROUTES), help="--e2e job routes")
    ap.add_argument("--compact-rows", type=int, default=1000, help="--e2e rows per source segment")
    ap.add_argument("--out", default="", help="--e2e: write bench/results/OUT.{json,md,png}")
    args = ap.parse_args()

    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-spark-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.e2e:
        try:
            e2e(args, root)
        finally:
            if not args.dir:
                shutil.rmtree(root, ignore_errors=True)
        return
    try:
        schema = make_schema(args.dim)
        table = make_table(args.rows, args.dim)
        nbytes = table.nbytes
        src = root / "input.parquet"
        pq.write_table(table, src, row_group_size=128_000)
        store_uri = (root / "store").as_uri()
        store = ObjectStore.from_uri(store_uri)
        sources = make_sources(store, schema, table, args.sources)
        source_paths = [store.uri(b["key"]) for s in sources for b in s["binlogs"]]
        seg_rows = max(1, (512 << 20) // typeutil.estimate_row_size(schema))
        main_py = root / "plain_copy.py"
        main_py.write_text(PLAIN_COPY)
        runner = LocalSparkRunner(master=args.master, work_dir=str(root / "work"))
        res: dict[str, tuple[list, list]] = {
            k: ([], []) for k in ("plain-import", "import", "plain-compact", "compact")
        }
        print(
            f"{args.rows:,} rows × {args.dim} dims, {nbytes / 1e6:.0f} MB in memory, input Parquet "
            f"{src.stat().st_size / 1e6:.0f} MB; {args.sources} source segments; master {args.master}; "
            f"{args.rounds} round(s)",
            flush=True,
        )
        for r in range(args.rounds):
            # Plain copy of the import's input, then the import.
            out = root / f"plain-{r}.json"
            wall, _ = await submit(
                runner, plain_app(f"plain-import-{r}", main_py, [src.as_uri()], (root / f"copy-{r}").as_uri(), str(out))
            )
            res["plain-import"][0].append(json.loads(out.read_text())["seconds"])
            res["plain-import"][1].append(wall)
            spec = import_spec(schema, str(src), store_uri, args.rows, seg_rows, r)
            wall, _ = await submit(runner, application.build_application("import", spec, name=f"bench-import-{r}"))
            m = json.loads(store.read_sync(spec["manifest_key"]))
            assert m["rows"] == args.rows, m
            res["import"][0].append(m["spark_seconds"])
            res["import"][1].append(wall)
            # Plain copy of the compaction's sources, then the compaction.
            wall, _ = await submit(
                runner, plain_app(f"plain-compact-{r}", main_py, source_paths, (root / f"ccopy-{r}").as_uri(), str(out))
            )
            res["plain-compact"][0].append(json.loads(out.read_text())["seconds"])
            res["plain-compact"][1].append(wall)
            cspec = compact_spec(schema, store_uri, sources, args.rows, seg_rows, r)
            wall, _ = await submit(runner, application.build_application("compact", cspec, name=f"bench-compact-{r}"))
            cm = json.loads(store.read_sync(cspec["manifest_key"]))
            assert cm["rows"] == args.rows, cm
            res["compact"][0].append(cm["spark_seconds"])
            res["compact"][1].append(wall)
            for k in (f"copy-{r}", f"ccopy-{r}"):
                shutil.rmtree(root / k, ignore_errors=True)
            for s in range(spec["segment_count"]):
                store.delete_prefix_sync(paths.segment_prefix(1, 2, spec["segment_id_start"] + s))
            for t in cspec["plans"][0]["target_ids"]:
                store.delete_prefix_sync(paths.segment_prefix(1, 2, t))
            print(
                f"round {r + 1}: " + ", ".join(f"{k} {v[0][-1]:.2f}/{v[1][-1]:.2f} s" for k, v in res.items()),
                flush=True,
            )
        print()
        base = statistics.median(res["plain-import"][0])
        print(fmt("plain Spark copy (import)", args.rows, nbytes, *res["plain-import"], None))
        print(fmt("kmilvus import (Parquet)", args.rows, nbytes, *res["import"], base))
        base = statistics.median(res["plain-compact"][0])
        print(fmt("plain Spark copy (compact)", args.rows, nbytes, *res["plain-compact"], None))
        print(
            fmt(
                f"kmilvus compaction ({args.sources}→{-(-args.rows // seg_rows)})",
                args.rows,
                nbytes,
                *res["compact"],
                base,
            )
        )
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
