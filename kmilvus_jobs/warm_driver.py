"""python -m kmilvus_jobs.warm_driver CONF_JSON — a long-lived local Spark driver (`kmilvus.spark.warm`).

One SparkSession (CONF_JSON: its settings, `spark.master` included) serves job after job, so a
job above the in-process limit pays the JVM start once per driver, not once per job. Each job
runs the SAME entry as under spark-submit (`common.run_on` with `importer.run` /
`compactor.run`), in a thread of its own under a Spark job group named after the application.

Commands come as JSON lines on stdin:
    {"op": "run", "name": APP, "spec": SPEC_PATH, "workdir": DIR}
    {"op": "cancel", "name": APP}
A job appends its events to DIR/events.jsonl and, when it ends, writes its exit code to DIR/rc —
the files a spark-submit run leaves, so the runner reads both alike. End of stdin (the
coordinator stopped or died) ends the driver and, with it, its JVM (PySpark's gateway exits when
its parent's pipe closes).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from kmilvus_jobs import common, compactor, importer

RUNS = {"import": importer.run, "compact": compactor.run}
CANCEL_REPEAT = 0.2  # seconds: a cancelled job's group is cancelled again until its thread ends


def _write_atomic(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _run(spark, cmd: dict) -> None:
    started = time.time()
    workdir = cmd["workdir"]
    events = os.path.join(workdir, "events.jsonl")

    def sink(rec: dict) -> None:
        with open(events, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")

    common.EVENT_SINK.set(sink)
    spark.sparkContext.setJobGroup(cmd["name"], cmd["name"], interruptOnCancel=True)
    rc = 1
    try:
        spec = common.load_spec(cmd["spec"])
        rc = common.run_on(spark, spec, RUNS[spec["kind"]], started)
    except BaseException as exc:  # noqa: BLE001 - the job could not even start: report it as its failure
        common.emit("failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        _write_atomic(os.path.join(workdir, "rc"), str(rc))


def _cancel(spark, name: str, thread: threading.Thread) -> None:
    """Cancel the job's Spark jobs until its thread ends: an action it starts after the first
    cancel (the job code runs between actions) is cancelled too."""
    while thread.is_alive():
        spark.sparkContext.cancelJobGroup(name)
        thread.join(CANCEL_REPEAT)


def main() -> int:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for k, v in json.loads(sys.argv[1]).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    jobs: dict[str, threading.Thread] = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "run":
            jobs[cmd["name"]] = t = threading.Thread(target=_run, args=(spark, cmd), name=cmd["name"], daemon=True)
            t.start()
        elif cmd["op"] == "cancel" and cmd["name"] in jobs:
            threading.Thread(target=_cancel, args=(spark, cmd["name"], jobs[cmd["name"]]), daemon=True).start()
        for name in [n for n, t in jobs.items() if not t.is_alive()]:
            del jobs[name]
    os._exit(0)  # stdin closed: the coordinator is gone; no job of ours is followed any more


if __name__ == "__main__":
    sys.exit(main())
