"""How each cost grows: kmilvus beside Milvus 2.3.5, one curve per cost.

    .venv/bin/python bench/scaling.py                  # both systems, default ladders
    .venv/bin/python bench/scaling.py --systems kmilvus --quick
    .venv/bin/python bench/scaling.py --from-json bench/results/scaling.json   # redraw only
    .venv/bin/python bench/scaling.py --update --curves import_vs_size   # re-measure one curve

Curves (each measured on one fresh server per system, in this order):

  insert_vs_rows         insert rows/s per window of `--window` rows while one collection grows
                         to `--rows` (10,000-row batches, one request at a time)
  insert_vs_collections  rows/s of a 100k-row insert into a fresh collection while K other
                         collections (1 shard, 100 rows each) exist; K on `--collections`
  flush_vs_segments      one collection: insert 1,000 rows + Flush until flushed, repeated; the
                         latency of step i, when the collection already has i-1 flushed segments
  concurrent_flushes     C collections with 1,000 fresh rows each, flushed by C threads at once;
                         the wall time until all are flushed, C on `--concurrency`
  drop_vs_size           drop a flushed collection of N rows: the RPC, and until its insert_log
                         directory is empty (capped at `--files-cap`: Milvus' GC waits hours)
  import_vs_size         bulk import of an N-row Parquet file (pymilvus BulkWriter layout) until
                         Completed
  memory_vs_loaded       RSS of all the server's processes once a collection of N flushed rows is
                         indexed (IVF_FLAT nlist=128, cheap to build on both) and loaded, on a
                         server of its own (what earlier curves left in the heap is not counted)

The same script is the workload on both sides (it imports only workload.py and readpath.py, no
kmilvus), run by each system's client venv in a private network namespace like vs_milvus.py,
and every child process is reaped. Output: bench/results/scaling.{json,md,png}. The table is
the raw curve points; where each curve bends and why is in README ("How the costs grow").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import workload as w

CURVES = {
    "insert_vs_rows": ("rows in the collection", "insert rows/s"),
    "insert_vs_collections": ("collections that exist", "insert rows/s"),
    "flush_vs_segments": ("flushed segments in the collection", "small flush, s"),
    "concurrent_flushes": ("concurrent flushes", "until all flushed, s"),
    "drop_vs_size": ("rows dropped", "until files gone, s"),
    "import_vs_size": ("rows imported", "import until Completed, s"),
    "memory_vs_loaded": ("rows loaded", "RSS of all processes, MiB"),
}
FRESH = {"memory_vs_loaded"}  # measured on a server of its own
IVF = {"index_type": "IVF_FLAT", "metric_type": "L2", "params": {"nlist": 128}}


def ladder(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


# ------------------------------------------------------------------------------------------------
# The workload (runs in the system's own client venv).


class Curves:
    def __init__(self, server: w.Server, client: w.Client, args, tmp: Path):
        self.server, self.client, self.args, self.tmp = server, client, args, tmp
        self.out: dict[str, list[dict]] = {}
        self._n = 0

    def name(self, what: str) -> str:
        self._n += 1
        return f"scale_{what}_{self._n}"

    def point(self, curve: str, x: float, y: float | None, **extra) -> None:
        self.out.setdefault(curve, []).append({"x": x, "y": y, **extra})
        w.log(f"{curve}: x={x} y={y} {extra if extra else ''}")

    def insert_vs_rows(self) -> None:
        name = self.name("rows")
        coll = self.client.create(name)
        data = w.Batches(self.args.rows)
        per_window = max(1, self.args.window // w.BATCH)
        done, t0 = 0, time.perf_counter()
        for i, b in enumerate(data.batches, 1):
            coll.insert(b)
            done += len(b[0])
            if i % per_window == 0 or i == len(data.batches):
                now = time.perf_counter()
                self.point("insert_vs_rows", done, round(self.args.window / (now - t0)) if now > t0 else None)
                t0 = now
        data.free()
        self.client.drop(name)

    def insert_vs_collections(self) -> None:
        from pymilvus import Collection

        idle: list[str] = []
        few = w.Batches(100, start_id=10**9, batch=100)
        data = w.Batches(100_000, start_id=2 * 10**9)
        for k in ladder(self.args.collections):
            creates = []
            while len(idle) < k:
                name = self.name("idle")
                t0 = time.perf_counter()
                coll = self.client.create(name)
                creates.append(time.perf_counter() - t0)
                with contextlib.suppress(Exception):
                    Collection(name, using=self.client.alias).insert(few.batches[0])
                del coll
                idle.append(name)
            probe = self.name("probe")
            coll = self.client.create(probe)
            secs = self.client.insert_all(coll, data)
            self.client.drop(probe)
            self.point(
                "insert_vs_collections",
                k,
                round(data.rows / secs),
                create_p50_ms=round(1000 * statistics.median(creates), 1) if creates else None,
            )
        data.free()
        for name in idle:
            self.client.drop(name)

    def flush_vs_segments(self) -> None:
        name = self.name("segs")
        coll = self.client.create(name)
        for i in range(self.args.segments):
            b = w.Batches(w.SMALL_ROWS, start_id=i * w.SMALL_ROWS, batch=w.SMALL_ROWS)
            t0 = time.perf_counter()
            coll.insert(b.batches[0])
            self.client.flush(name)
            self.point("flush_vs_segments", i, round(time.perf_counter() - t0, 4))
        self.client.drop(name)

    def concurrent_flushes(self) -> None:
        b = w.Batches(w.SMALL_ROWS, batch=w.SMALL_ROWS)
        for c in ladder(self.args.concurrency):
            names = [self.name("cf") for _ in range(c)]
            colls = [self.client.create(n) for n in names]
            for coll in colls:
                coll.insert(b.batches[0])
            wall, took, errors = self._flush_all(names)
            self.point(
                "concurrent_flushes",
                c,
                round(wall, 4) if not errors else None,
                median_each_s=round(statistics.median(took), 4),
                errors=errors[:3],
            )
            for n in names:
                self.client.drop(n)

    def _flush_all(self, names: list[str]) -> tuple[float, list[float], list[str]]:
        """Flush `names` from one thread each, at once: (wall s, each one's s, errors)."""
        took: list[float] = [0.0] * len(names)
        errors: list[str] = []

        def one(i: int) -> None:
            try:
                took[i] = self.client.flush(names[i])[1]
            except Exception as exc:  # noqa: BLE001 - reported in the point
                errors.append(repr(exc)[:200])

        t0 = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(names))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0, took, errors

    def drop_vs_size(self) -> None:
        for rows in ladder(self.args.drop_rows):
            name = self.name("drop")
            coll = self.client.create(name)
            data = w.Batches(rows)
            self.client.insert_all(coll, data)
            data.free()
            self.client.flush(name)
            cid = self.client.collection_id(name)
            files = self.server.collection_files(name, cid)
            t0 = time.perf_counter()
            rpc = self.client.drop(name)
            gone = w.wait_files_gone(files, t0, self.args.files_cap) if files else None
            y = round(gone, 4) if gone is not None else None
            self.point(
                "drop_vs_size",
                rows,
                y,
                rpc_s=round(rpc, 4),
                files_left_after_s=None if files is None or y is not None else self.args.files_cap,
            )

    def import_vs_size(self) -> None:
        for rows in ladder(self.args.import_rows):
            path = self.tmp / f"import-{rows}.parquet"
            if not path.exists():
                w.write_parquet(path, rows)
            name = self.name("imp")
            self.client.create(name)
            res = w.bulk_import(self.client, name, [str(path)])
            self.point(
                "import_vs_size",
                rows,
                round(res["seconds"], 3) if res.get("status") == "ok" else None,
                status=res["status"],
            )
            self.client.drop(name)

    def memory_vs_loaded(self) -> None:
        import readpath
        from pymilvus import utility

        for rows in ladder(self.args.load_rows):
            name = self.name("mem")
            coll = self.client.create(name)
            data = w.Batches(rows)
            self.client.insert_all(coll, data)
            data.free()
            self.client.flush(name)
            coll.create_index("vec", IVF)
            utility.wait_for_index_building_complete(name, using=self.client.alias)
            coll.load()
            time.sleep(1.0)  # let the loaders settle before sampling
            rss = sum(readpath.tree_rss(self.server.pid).values()) if self.server.pid else None
            self.point("memory_vs_loaded", rows, round(rss / 2**20) if rss else None)
            coll.release()
            self.client.drop(name)


def run_main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f"scaling-{args.system}-", dir=args.tmp_dir))
    server = w.start_server(args.system, tmp, pidfile=args.pidfile, kmilvus_bin=args.kmilvus_bin)
    res: dict = {"system": args.system, "version": server.version, "curves": {}, "errors": {}}
    try:
        client = w.Client(server.host, server.port)
        c = Curves(server, client, args, tmp)
        for i, curve in enumerate(args.curves.split(",")):
            if curve in FRESH and i > 0:  # what earlier curves left in the heap is not this curve's
                client.close()
                server.stop()
                server = w.start_server(args.system, tmp / curve, pidfile=args.pidfile, kmilvus_bin=args.kmilvus_bin)
                client = c.client = w.Client(server.host, server.port, alias=f"bench-{curve}")
                c.server = server
            t0 = time.perf_counter()
            try:
                getattr(c, curve)()
            except Exception as exc:  # noqa: BLE001 - one broken curve must not hide the others
                res["errors"][curve] = repr(exc)[:500]
                w.log(f"{curve} failed: {exc!r}")
            w.log(f"{curve}: {time.perf_counter() - t0:.1f} s")
        res["curves"] = c.out
        client.close()
    finally:
        server.stop()
        Path(args.out).write_text(json.dumps(res, indent=1))


# ------------------------------------------------------------------------------------------------
# The driver (kmilvus' venv): one child per system, then the table and the plots.


def drive(args) -> int:
    import vs_milvus as vs

    prefix = [] if args.no_netns else vs.netns_prefix()
    pythons = {"kmilvus": str(ROOT / ".venv" / "bin" / "python")}
    systems = args.systems.split(",")
    if "milvus" in systems:
        pythons["milvus"] = str(vs.ensure_milvus_venv(Path(args.milvus_venv)))
    tmp = Path(tempfile.mkdtemp(prefix="scaling-"))
    results = {}
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    try:
        for system in systems:
            out, pidfile = tmp / f"{system}.json", tmp / f"{system}.pids"
            vs.REAPER.pidfiles.append(pidfile)
            argv = [*prefix, pythons[system], str(Path(__file__).resolve()), "run", "--system", system]
            argv += ["--out", str(out), "--pidfile", str(pidfile), "--tmp-dir", str(tmp)]
            for k in ("rows", "window", "collections", "segments", "concurrency", "drop_rows", "import_rows"):
                argv += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
            argv += ["--load-rows", args.load_rows, "--files-cap", str(args.files_cap), "--curves", args.curves]
            if system == "kmilvus":
                argv += ["--kmilvus-bin", str(Path(pythons[system]).parent / "kmilvus")]
            vs.log(f"scaling: {system}")
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(ROOT))
            vs.REAPER.popens.append(p)
            try:
                p.wait(args.run_timeout)
            except subprocess.TimeoutExpired:
                vs.log(f"{system} timed out after {args.run_timeout} s")
            finally:
                vs.REAPER.stop_popen(p)
                vs.REAPER.popens.remove(p)
                vs.REAPER.kill_leftovers(pidfile)
            results[system] = json.loads(out.read_text()) if out.exists() else {"error": "no result"}
    finally:
        vs.REAPER.cleanup()
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    data = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": {"before": load_before, "after": load_after},
        "systems": results,
    }
    out_dir = Path(args.out_dir)
    old = out_dir / f"{args.name}.json"
    if args.update and old.exists():  # re-measured curves replace theirs; the rest stay as they were
        prev = json.loads(old.read_text())
        prev.setdefault("updates", []).append({k: data[k] for k in ("command", "date", "load_average")})
        for s, r in results.items():
            dst = prev["systems"].setdefault(s, {"curves": {}, "errors": {}})
            dst["curves"].update(r.get("curves", {}))
            dst["errors"] = {k: v for k, v in dst.get("errors", {}).items() if k not in r.get("curves", {})}
            dst["errors"].update(r.get("errors", {}))
        data = prev
    (out_dir / f"{args.name}.json").write_text(json.dumps(data, indent=1))
    write_outputs(data, out_dir, args.name)
    return 0 if all(not r.get("errors") and "error" not in r for r in results.values()) else 1


def write_outputs(data: dict, out_dir: Path, name: str) -> None:
    systems = data["systems"]
    lines = [
        f"# How the costs grow — {data['date']}",
        "",
        f"`{data['command']}`; load average before {' '.join(data['load_average']['before'])}, "
        f"after {' '.join(data['load_average']['after'])}. Systems: "
        + ", ".join(f"{s} {r.get('version', '?')}" for s, r in systems.items()),
        "",
    ]
    for u in data.get("updates", []):
        lines += [
            f"Updated {u['date']}: `{u['command']}`, load average {' '.join(u['load_average']['before'])} → "
            f"{' '.join(u['load_average']['after'])}.",
            "",
        ]
    for curve, (xl, yl) in CURVES.items():
        lines += [f"## {curve}", "", f"| {xl} | " + " | ".join(f"{s}: {yl}" for s in systems) + " |"]
        lines.append("|---" * (1 + len(systems)) + "|")
        xs = sorted({p["x"] for r in systems.values() for p in r.get("curves", {}).get(curve, [])})
        for x in xs:
            cells = []
            for r in systems.values():
                pts = [p for p in r.get("curves", {}).get(curve, []) if p["x"] == x]
                cells.append(_cell(pts[0]) if pts else "—")
            lines.append(f"| {x:,} | " + " | ".join(cells) + " |")
        for s, r in systems.items():
            if curve in r.get("errors", {}):
                lines.append(f"\n{s} failed: `{r['errors'][curve]}`")
        lines.append("")
    (out_dir / f"{name}.md").write_text("\n".join(lines))
    draw(data, out_dir / f"{name}.png")


def _cell(p: dict) -> str:
    y = "n/a" if p["y"] is None else f"{p['y']:,}"
    extra = {k: v for k, v in p.items() if k not in ("x", "y") and v not in (None, [], "ok")}
    return y + (f" ({', '.join(f'{k} {v}' for k, v in extra.items())})" if extra else "")


def draw(data: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(18, 8))
    for ax, (curve, (xl, yl)) in zip(axes.flat, CURVES.items(), strict=False):
        for system, r in data["systems"].items():
            pts = [p for p in r.get("curves", {}).get(curve, []) if p["y"] is not None]
            if pts:
                ax.plot([p["x"] for p in pts], [p["y"] for p in pts], marker="o", label=system)
        ax.set_title(curve, fontsize=10)
        ax.set_xlabel(xl, fontsize=8)
        ax.set_ylabel(yl, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes.flat[-1].axis("off")
    fig.suptitle(f"kmilvus vs Milvus 2.3.5: how the costs grow ({data['date']})")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    ap.add_argument("--systems", default="kmilvus,milvus")
    ap.add_argument("--milvus-venv", default=str(BENCH / ".venv-milvus"))
    ap.add_argument("--out-dir", default=str(BENCH / "results"))
    ap.add_argument("--name", default="scaling")
    ap.add_argument("--run-timeout", type=float, default=3600.0)
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small ladders (a look, not a result)")
    ap.add_argument("--from-json", default=None, help="only redraw the table and plot from this JSON")
    ap.add_argument("--update", action="store_true", help="replace only the curves measured now in NAME.json")
    r = sub.add_parser("run")
    r.add_argument("--system", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--pidfile", default=None)
    r.add_argument("--tmp-dir", default=None)
    r.add_argument("--kmilvus-bin", default=None)
    for p in (ap, r):
        p.add_argument("--rows", type=int, default=1_000_000)
        p.add_argument("--window", type=int, default=100_000)
        p.add_argument("--collections", default="0,10,50,100,200")
        p.add_argument("--segments", type=int, default=30)
        p.add_argument("--concurrency", default="1,2,4,8")
        p.add_argument("--drop-rows", default="10000,100000,500000")
        p.add_argument("--import-rows", default="10000,100000,1000000")
        p.add_argument("--load-rows", default="20000,100000,300000")
        p.add_argument("--files-cap", type=float, default=10.0)
        p.add_argument("--curves", default=",".join(CURVES))
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run_main(args)
        return 0
    if args.from_json:
        write_outputs(json.loads(Path(args.from_json).read_text()), Path(args.out_dir), args.name)
        return 0
    if args.quick:
        args.rows, args.window, args.collections, args.segments = 100_000, 20_000, "0,5,10", 5
        args.concurrency, args.drop_rows, args.import_rows, args.load_rows = "1,2", "10000", "10000", "10000"
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
