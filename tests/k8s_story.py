"""The Collection story as users live it on Kubernetes, one module for both places it runs, so the
two cannot drift: tests/deploy/test_kubernetes.py (the session's control plane, pods on this machine,
pymilvus on the Proxy pod's loopback port) and e2e/test_e2e.py (a kind cluster, images, pymilvus
through `kubectl port-forward`). What differs is how to reach the cluster (`Cluster`); the steps
and what they check are these:

apply the example Collection → Ready (`kubectl wait`, kstatus) → rows through pymilvus → the
example FlushRequest → Completed, Segments with status, owned by the Collection → a bulk import
and a compaction, in the operator or as SparkApplications (below / above `spark.inProcessMaxMB`)
→ `kubectl delete collection` → the Milvus collection, its Segments and its SparkApplications gone.
"""

from __future__ import annotations

import copy
import io
import json
import random
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "crds" / "examples"
SPARK_APPS = "sparkapplications.sparkoperator.k8s.io"


@dataclass
class Cluster:
    """How to reach a cluster where charts/kmilvus is installed and serves `namespace`."""

    kubectl: Callable[..., subprocess.CompletedProcess]  # kubectl(*args, input=None, check=True)
    namespace: str  # where the Collections live
    milvus_uri: str  # the Proxy, as pymilvus reaches it
    put_object: Callable[[str, bytes], None]  # write a key under the chart's storage root
    diagnostics: Callable[[], str] = lambda: ""  # what a failure message adds (pod logs)


def wait_for(
    what: str, fn: Callable[[], object], timeout: float, interval: float = 1.0, why: Callable[[], str] = lambda: ""
):
    """Poll `fn` until it returns a truthy value; fail with the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last seen: {json.dumps(last, default=str)[:2000]}"
                + why()
            )
        time.sleep(interval)


def condition(obj: dict | None, ctype: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def example(name: str, namespace: str) -> dict:
    """An example resource from crds/examples, moved into `namespace`."""
    (doc,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    obj = copy.deepcopy(doc)
    obj["metadata"]["namespace"] = namespace
    return obj


def rows_for(fields: list[dict], start: int, n: int) -> list[dict]:
    """`n` rows for a Collection's spec.fields, primary keys start..start+n-1."""
    rnd = random.Random(start)
    out = []
    for i in range(start, start + n):
        row: dict = {}
        for f in fields:
            t = f["dataType"]
            if f.get("isPrimaryKey"):
                if not f.get("autoID"):
                    row[f["name"]] = i if t == "Int64" else f"pk-{i}"
            elif t == "FloatVector":
                row[f["name"]] = [rnd.random() for _ in range(int(f["dim"]))]
            elif t == "VarChar":
                row[f["name"]] = f"tag-{i % 97}"[: int(f.get("maxLength", 64))]
            elif t in ("Int64", "Int32", "Int16", "Int8"):
                row[f["name"]] = i % 100
            elif t in ("Float", "Double"):
                row[f["name"]] = rnd.random()
            elif t == "Bool":
                row[f["name"]] = i % 2 == 0
            elif t == "JSON":
                row[f["name"]] = {"i": i, "even": i % 2 == 0}
            else:
                raise AssertionError(f"no data for dataType {t} (field {f['name']})")
        out.append(row)
    return out


def parquet_of(fields: list[dict], rows: list[dict]) -> bytes:
    def column(f: dict) -> pa.Array:
        values = [r[f["name"]] for r in rows]
        if f["dataType"] == "JSON":
            return pa.array([json.dumps(v) for v in values])
        if f["dataType"] == "FloatVector":
            return pa.array(values, pa.list_(pa.float32(), int(f["dim"])))
        return pa.array(values)

    table = pa.table({f["name"]: column(f) for f in fields if f["name"] in rows[0]})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


@dataclass
class Story:
    """The example Collection's life on `cluster`, step by step; each step checks what it did."""

    cluster: Cluster
    coll: dict = field(default_factory=lambda: example("collection.yaml", "default"))
    rows: int = 0  # rows the collection holds by now
    collection_id: int = 0
    vchannels: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.coll["metadata"]["namespace"] = self.cluster.namespace
        self.name = self.coll["metadata"]["name"]
        self.milvus_name = self.coll["spec"].get("name") or self.name.replace("-", "_").replace(".", "_")
        self.fields = self.coll["spec"]["fields"]

    # -------------------------------------------------------------------------- reading
    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        out = self.cluster.kubectl(*args, input=input, check=False)
        if check and out.returncode:
            raise AssertionError(f"kubectl {' '.join(args)}: {out.stderr.strip()}" + self.cluster.diagnostics())
        return out

    def get(self, *what: str) -> dict | None:
        out = self.kubectl("-n", self.cluster.namespace, "get", *what, "-o", "json", check=False)
        if out.returncode:
            assert "NotFound" in out.stderr, out.stderr
            return None
        return json.loads(out.stdout)

    def collection(self) -> dict:
        o = self.get("collection", self.name)
        assert o is not None, f"Collection {self.name} is gone"
        return o

    def status(self) -> dict:
        return self.collection().get("status") or {}

    def segments(self) -> list[dict]:
        items = self.get("segments", "-l", f"kmilvus.io/collection-id={self.collection_id}")["items"]
        # The label is how the operator finds them; spec.collectionID is what they say: both agree.
        assert all(int(s["spec"]["collectionID"]) == self.collection_id for s in items), items
        return [s for s in items if (s.get("status") or {}).get("state") != "Dropped"]

    def spark_applications(self) -> list[dict]:
        return self.get(SPARK_APPS)["items"]

    def milvus(self):
        from pymilvus import MilvusClient

        return MilvusClient(uri=self.cluster.milvus_uri)

    def wait(self, what: str, fn: Callable[[], object], timeout: float):
        return wait_for(what, fn, timeout, why=self.cluster.diagnostics)

    # -------------------------------------------------------------------------- steps
    def apply_collection(self, timeout: float = 300) -> dict:
        """Apply the example Collection and wait as GitOps tools do (`kubectl wait`, kstatus)."""
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(self.coll))
        self.kubectl("-n", self.cluster.namespace, "wait", "--for=condition=Ready", f"collection/{self.name}",
                     f"--timeout={int(timeout)}s")  # fmt: skip
        o = self.collection()
        st = o["status"]
        assert st["phase"] == "Ready" and st["observedGeneration"] == o["metadata"]["generation"], (
            st
        )  # kstatus: current
        assert condition(o, "Reconciling").get("status", "False") == "False", st
        assert condition(o, "Stalled").get("status", "False") == "False", st
        assert st["name"] == self.milvus_name, st
        self.collection_id, self.vchannels = int(st["collectionID"]), st["vchannels"]
        c = self.milvus()
        try:
            described = c.describe_collection(self.milvus_name)
        finally:
            c.close()
        assert {f["name"] for f in described["fields"]} >= {f["name"] for f in self.fields}
        return o

    def insert(self, n: int, batch: int = 2000) -> None:
        c = self.milvus()
        try:
            for start in range(self.rows, self.rows + n, batch):
                res = c.insert(self.milvus_name, rows_for(self.fields, start, min(batch, self.rows + n - start)))
                assert res["insert_count"] == min(batch, self.rows + n - start)
        finally:
            c.close()
        self.rows += n

    def flush(self, timeout: float = 300) -> list[dict]:
        """The example FlushRequest → Completed; every Segment Flushed, owned by the Collection,
        holding every row; the Collection's status.rows and pymilvus agree."""
        flush = example("flushrequest.yaml", self.cluster.namespace)
        flush["metadata"]["name"] = f"flush-{uuid.uuid4().hex[:6]}"
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(flush))

        def done():
            o = self.get("flushrequest", flush["metadata"]["name"])
            phase = ((o or {}).get("status") or {}).get("phase")
            assert phase != "Failed", o["status"]
            return o if phase == "Completed" else None

        fst = self.wait(f"FlushRequest {flush['metadata']['name']} Completed", done, timeout)["status"]
        assert fst["total"] >= 1 and fst["flushed"] == fst["total"] and fst.get("completionTime"), fst

        def all_flushed():
            segs = self.segments()
            ok = segs and all(s["status"].get("state") == "Flushed" for s in segs)
            return segs if ok and sum(int(s["status"].get("rows", 0)) for s in segs) == self.rows else None

        segs = self.wait("every Segment Flushed with all rows", all_flushed, 120)
        for s in segs:
            owners = s["metadata"].get("ownerReferences") or []
            assert [(o["kind"], o["name"]) for o in owners] == [("Collection", self.name)], s["metadata"]
        self.wait(f"status.rows {self.rows}", lambda: self.status().get("rows") == self.rows, 120)
        c = self.milvus()
        try:
            assert int(c.get_collection_stats(self.milvus_name)["row_count"]) == self.rows
        finally:
            c.close()
        return segs

    def bulk_import(self, n: int, key: str, *, spark: bool, timeout: float = 900) -> dict:
        """A Parquet file of `n` new rows at `key` under the storage root, `do_bulk_insert` of
        that key → status.imports shows it Completed; through a SparkApplication in the
        Collection's namespace, owned by it, or in the operator."""
        from pymilvus import connections, utility

        self.cluster.put_object(key, parquet_of(self.fields, rows_for(self.fields, self.rows, n)))
        alias = "story-" + uuid.uuid4().hex[:6]
        connections.connect(alias, uri=self.cluster.milvus_uri)
        try:
            task = utility.do_bulk_insert(self.milvus_name, files=[key], using=alias)
        finally:
            connections.disconnect(alias)

        def finished():
            imp = self.status().get("imports") or {}
            last = imp.get("last") or {}
            return (
                imp if last.get("jobID") == task and last.get("state") in ("ImportCompleted", "ImportFailed") else None
            )

        imp = self.wait("the bulk import", finished, timeout)
        assert imp["last"]["state"] == "ImportCompleted" and imp["running"] == 0, f"{imp}{self.cluster.diagnostics()}"
        self._check_route(imp["last"], spark)
        self.rows += n
        self.wait(f"status.rows {self.rows}", lambda: self.status().get("rows") == self.rows, 120)
        return imp

    def compact(self, *, spark: bool, timeout: float = 900) -> dict:
        """A compaction of the flushed Segments: Completed, fewer Segments, the same rows."""
        before = len(self.segments())
        c = self.milvus()
        try:
            compaction_id = c.compact(self.milvus_name)
        finally:
            c.close()

        def compacted():
            comp = self.status().get("compactions") or {}
            last = comp.get("last") or {}
            return last if last.get("compactionID") == compaction_id and comp.get("running") == 0 else None

        last = self.wait("the compaction", compacted, timeout)
        assert last["state"] == "Completed" and last["plans"] >= 1, f"{last}{self.cluster.diagnostics()}"
        self._check_route(last, spark)
        self.wait(f"fewer than {before} Segments", lambda: (s := self.segments()) and len(s) < before, 120)
        assert sum(int(s["status"]["rows"]) for s in self.segments()) == self.rows
        assert self.status()["rows"] == self.rows
        return last

    def _check_route(self, last: dict, spark: bool) -> None:
        """In the operator: no SparkApplication named. As one: named, and while it is still there
        (DataCoord deletes a finished one) in the Collection's namespace, owned by it, COMPLETED."""
        if not spark:
            assert not last.get("sparkApplication"), last
            return
        assert last.get("sparkApplication"), last
        app = self.get(SPARK_APPS, last["sparkApplication"])
        if app is not None:
            owners = [(o["kind"], o["name"]) for o in app["metadata"].get("ownerReferences") or []]
            assert owners == [("Collection", self.name)], app["metadata"]
            assert app["status"]["applicationState"]["state"] == "COMPLETED", app["status"]

    def delete(self, timeout: float = 300) -> None:
        """`kubectl delete collection` → the Milvus collection, its Segments and its
        SparkApplications gone (the garbage collector, by ownerReference)."""
        self.kubectl("-n", self.cluster.namespace, "delete", "collection", self.name, f"--timeout={int(timeout)}s")
        assert self.get("collection", self.name) is None
        self.wait("no Segment left", lambda: not self.segments(), 120)

        def mine() -> list[dict]:
            owned = lambda a: any(  # noqa: E731
                o["kind"] == "Collection" and o["name"] == self.name for o in a["metadata"].get("ownerReferences") or []
            )
            return [a for a in self.spark_applications() if owned(a)]

        self.wait("its SparkApplications to go", lambda: not mine(), 120)
        c = self.milvus()
        try:
            assert self.milvus_name not in c.list_collections()
        finally:
            c.close()
