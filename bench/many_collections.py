"""Many collections: what K idle collections cost, kmilvus beside Milvus 2.3.5.

    .venv/bin/python bench/many_collections.py --milvus-venv /work/main/bench/.venv-milvus
    .venv/bin/python bench/many_collections.py --systems kmilvus --ladder 10,100 --idle 10
    .venv/bin/python bench/many_collections.py --from-json bench/results/collections.json   # redraw

On one fresh server per system (kmilvus standalone; Milvus 2.3.5's embedded standalone), for K
on `--ladder` (cumulative: step K creates the collections K_prev+1..K):

  create   CreateCollection RPC alone (raw stub, schema id INT64 pk / vec FLOAT_VECTOR(128) /
           tag VARCHAR(64), 2 shards), then an insert of `--rows` rows into it (not flushed:
           the rows stay in growing segments); p50 / p99 over this step's creates
  idle     `--idle` s with no client request: CPU seconds of every server process (kmilvus +
           etcd + nats-server; Milvus' one process) over the window as % of one core, and the
           RSS sum at its end; for kmilvus also the messages written into JetStream streams
           (sum of the streams' last_seq from nats-server's /jsz, before and after) — with no
           client traffic these are time ticks
  profile  kmilvus only, after the largest K's idle window: `py-spy record` of the standalone
           process for `--profile` s (a separate window, so the sampler's cost is not measured)
  drop     every collection, DropCollection RPC alone, p50 / p99

Each system runs in its own client venv and (where `unshare -n` works) its own network namespace,
as vs_milvus.py and scaling.py do; every child process is reaped. Output:
bench/results/<name>.{json,md,png} (+ <name>-pyspy.txt, the profile's collapsed stacks).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import readpath
import workload as w


def ladder(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def cpu_by_name(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of `pid` and its descendants, summed per process name."""
    out: dict[str, float] = {}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                out[p.name()] = out.get(p.name(), 0.0) + t.user + t.system
    return out


def nats_monitor(server: w.Server) -> str | None:
    """kmilvus standalone's nats-server monitoring URL, from the config it was started with."""
    conf = getattr(server, "data_dir", Path("/nonexistent")) / "nats" / "nats.conf"
    if server.system != "kmilvus" or not conf.exists():
        return None
    for line in conf.read_text().splitlines():
        if line.startswith("http:"):
            return "http://" + line.split('"')[1]
    return None


def stream_msgs(monitor: str | None) -> int | None:
    """Messages ever written into JetStream streams (sum of last_seq) and nats' in_msgs."""
    if not monitor:
        return None
    with urllib.request.urlopen(f"{monitor}/jsz?streams=true", timeout=10) as r:
        js = json.load(r)
    return sum(s["state"]["last_seq"] for a in js.get("account_details", []) for s in a.get("stream_detail", []) or [])


def create_2shards(client: w.Client, name: str, shards: int) -> float:
    """The CreateCollection RPC alone (same request pymilvus' Collection() sends)."""
    from pymilvus import CollectionSchema, DataType, FieldSchema
    from pymilvus.client.prepare import Prepare

    schema = CollectionSchema(
        [
            FieldSchema("id", DataType.INT64, is_primary=True),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=w.DIM),
            FieldSchema("tag", DataType.VARCHAR, max_length=w.TAG_MAX),
        ]
    )
    req = Prepare.create_collection_request(name, schema, shards_num=shards)
    t0 = time.perf_counter()
    st = client.stub.CreateCollection(req, timeout=120)
    dt = time.perf_counter() - t0
    if st.error_code != 0:
        raise RuntimeError(f"CreateCollection {name}: {st}")
    return dt


def pyspy(pid: int, seconds: float, out: Path) -> str | None:
    """py-spy record (collapsed stacks, idle threads left out) of `pid` for `seconds`."""
    exe = Path(sys.executable).parent / "py-spy"
    if not exe.exists():
        return "py-spy not installed in this venv"
    argv = [str(exe), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "50"]
    argv += ["--format", "raw", "--output", str(out), "--nonblocking"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    return None if r.returncode == 0 else (r.stderr or r.stdout)[-500:]


def top_frames(collapsed: Path, n: int = 15) -> dict[str, list]:
    """From py-spy's collapsed stacks: the n leaf frames and n inclusive frames with most samples."""
    leaf: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        c = int(count)
        total += c
        frames = stack.split(";")
        leaf[frames[-1]] = leaf.get(frames[-1], 0) + c
        for f in set(frames[1:]):
            incl[f] = incl.get(f, 0) + c

    def top(d: dict[str, int]) -> list:
        return [[f, c, round(c / total, 3)] for f, c in sorted(d.items(), key=lambda x: -x[1])[:n]]

    return {"samples": total, "leaf": top(leaf), "inclusive": top(incl)}


# ------------------------------------------------------------------------------------------------
# The workload (runs in the system's own client venv).


def run_main(args) -> None:
    from pymilvus import Collection

    tmp = Path(tempfile.mkdtemp(prefix=f"colls-{args.system}-", dir=args.tmp_dir))
    server = w.start_server(args.system, tmp, pidfile=args.pidfile, kmilvus_bin=args.kmilvus_bin)
    res: dict = {"system": args.system, "version": server.version, "steps": [], "shards": args.shards}
    res |= {"rows_per_collection": args.rows, "idle_s": args.idle, "flushed": False}
    names: list[str] = []
    few = w.Batches(args.rows, batch=args.rows, pool_rows=args.rows)
    monitor = nats_monitor(server)
    try:
        client = w.Client(server.host, server.port)
        for k in ladder(args.ladder):
            creates: list[float] = []
            t_step = time.perf_counter()
            while len(names) < k:
                name = f"c{len(names):05d}"
                creates.append(create_2shards(client, name, args.shards))
                Collection(name, using=client.alias).insert(few.batches[0])
                names.append(name)
            step_s = time.perf_counter() - t_step
            time.sleep(args.settle)
            load0 = list(psutil.getloadavg())
            cpu0, msgs0, t0 = cpu_by_name(server.pid), stream_msgs(monitor), time.perf_counter()
            time.sleep(args.idle)
            cpu1, msgs1, secs = cpu_by_name(server.pid), stream_msgs(monitor), time.perf_counter() - t0
            rss = readpath.tree_rss(server.pid)
            cpu = {n: round((cpu1[n] - cpu0.get(n, 0.0)) / secs * 100, 2) for n in cpu1}
            step = {
                "k": k,
                "created": len(creates),
                "create_p50_ms": round(1e3 * pct(creates, 50), 2) if creates else None,
                "create_p99_ms": round(1e3 * pct(creates, 99), 2) if creates else None,
                "create_max_ms": round(1e3 * max(creates), 2) if creates else None,
                "step_s": round(step_s, 2),
                "idle_cpu_pct": round(sum(cpu.values()), 2),
                "idle_cpu_pct_by_process": cpu,
                "rss_mib": round(sum(rss.values()) / 2**20, 1),
                "rss_by_process_mib": {n: round(v / 2**20, 1) for n, v in rss.items()},
                "stream_msgs_per_s": round((msgs1 - msgs0) / secs, 1) if msgs0 is not None else None,
                "loadavg_idle": load0,
            }
            res["steps"].append(step)
            Path(args.out).write_text(json.dumps(res, indent=1))  # what a timeout leaves
            w.log(f"{args.system} K={k}: {json.dumps({x: y for x, y in step.items() if 'by_process' not in x})}")
        if args.profile and args.system == "kmilvus" and names:
            out = Path(args.out).with_suffix(".pyspy.txt")
            res["profile"] = {"seconds": args.profile, "k": len(names), "loadavg": list(psutil.getloadavg())}
            err = pyspy(server.pid, args.profile, out)
            if err or not out.exists():
                res["profile"]["error"] = err
            else:
                res["profile"] |= top_frames(out)
        drops = [client.drop(n) for n in names]
        res["drop"] = {
            "n": len(drops),
            "p50_ms": round(1e3 * pct(drops, 50), 2) if drops else None,
            "p99_ms": round(1e3 * pct(drops, 99), 2) if drops else None,
            "max_ms": round(1e3 * max(drops), 2) if drops else None,
        }
        w.log(f"{args.system} drop: {res['drop']}")
        client.close()
    except Exception as exc:  # noqa: BLE001 - what was measured is still written
        res["error"] = repr(exc)[:500]
        w.log(f"{args.system} failed: {exc!r}")
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
    tmp = Path(tempfile.mkdtemp(prefix="colls-"))
    out_dir = Path(args.out_dir)
    results = {}
    load_before = list(psutil.getloadavg())
    try:
        for system in systems:
            out, pidfile = tmp / f"{system}.json", tmp / f"{system}.pids"
            vs.REAPER.pidfiles.append(pidfile)
            argv = [*prefix, pythons[system], str(Path(__file__).resolve()), "run", "--system", system]
            argv += ["--out", str(out), "--pidfile", str(pidfile), "--tmp-dir", str(tmp)]
            argv += ["--ladder", args.ladder, "--rows", str(args.rows), "--shards", str(args.shards)]
            argv += ["--idle", str(args.idle), "--settle", str(args.settle), "--profile", str(args.profile)]
            if system == "kmilvus":
                argv += ["--kmilvus-bin", str(Path(pythons[system]).parent / "kmilvus")]
            vs.log(f"collections: {system}")
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
            if p.returncode != 0:
                results[system].setdefault("error", f"exit code {p.returncode} (timeout: partial steps)")
            prof = out.with_suffix(".pyspy.txt")
            if prof.exists():
                prof.replace(out_dir / f"{args.name}-pyspy.txt")
    finally:
        vs.REAPER.cleanup()
    data = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": {"before": load_before, "after": list(psutil.getloadavg())},
        "systems": results,
    }
    (out_dir / f"{args.name}.json").write_text(json.dumps(data, indent=1))
    write_outputs(data, out_dir, args.name)
    return 0 if all("error" not in r for r in results.values()) else 1


COLUMNS = [
    ("create_p50_ms", "create p50 ms"),
    ("create_p99_ms", "create p99 ms"),
    ("idle_cpu_pct", "idle CPU % of one core"),
    ("rss_mib", "RSS MiB"),
    ("stream_msgs_per_s", "stream msgs/s idle"),
    ("loadavg_idle", "load avg"),
]


def write_outputs(data: dict, out_dir: Path, name: str) -> None:
    systems = data["systems"]
    la = data["load_average"]
    lines = [
        f"# Many collections — {data['date']}",
        "",
        f"`{data['command']}`; load average before {la['before']}, after {la['after']}.",
        "",
        "| system | K | " + " | ".join(h for _, h in COLUMNS) + " |",
        "|---" * (2 + len(COLUMNS)) + "|",
    ]
    for s, r in systems.items():
        for st in r.get("steps", []):
            cells = [str(st.get(k)) if k != "loadavg_idle" else f"{st[k][0]:.1f}" for k, _ in COLUMNS]
            lines.append(f"| {s} {r.get('version', '')} | {st['k']:,} | " + " | ".join(cells) + " |")
    lines += ["", "| system | dropped | drop p50 ms | drop p99 ms | max ms |", "|---|---|---|---|---|"]
    for s, r in systems.items():
        d = r.get("drop") or {}
        lines.append(f"| {s} | {d.get('n')} | {d.get('p50_ms')} | {d.get('p99_ms')} | {d.get('max_ms')} |")
    for s, r in systems.items():
        if r.get("error"):
            lines.append(f"\n{s} failed: `{r['error']}`")
        steps = r.get("steps") or []
        if steps:
            by = steps[-1]["idle_cpu_pct_by_process"]
            lines.append(f"\n{s}, idle CPU % by process at K={steps[-1]['k']}: {by}")
        prof = r.get("profile")
        if prof and prof.get("inclusive"):
            lines += ["", f"{s}: py-spy, {prof['seconds']} s at K={prof['k']}, {prof['samples']} samples; "]
            lines += ["", "| leaf frame | share |", "|---|---|"]
            lines += [f"| `{f}` | {share:.1%} |" for f, _, share in prof["leaf"][:10]]
    (out_dir / f"{name}.md").write_text("\n".join(lines) + "\n")
    draw(data, out_dir / f"{name}.png")


def draw(data: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [c for c in COLUMNS if c[0] != "loadavg_idle"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (key, label) in zip(axes, panels, strict=True):
        for system, r in data["systems"].items():
            pts = [(s["k"], s[key]) for s in r.get("steps", []) if s.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=system)
        ax.set_xscale("log")
        ax.set_xlabel("collections (2 shards each)", fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"K idle collections: kmilvus vs Milvus 2.3.5 ({data['date']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    ap.add_argument("--systems", default="kmilvus,milvus")
    ap.add_argument("--milvus-venv", default=str(BENCH / ".venv-milvus"))
    ap.add_argument("--out-dir", default=str(BENCH / "results"))
    ap.add_argument("--name", default="collections")
    ap.add_argument("--run-timeout", type=float, default=3600.0)
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--from-json", default=None, help="only redraw the table and plot from this JSON")
    r = sub.add_parser("run")
    r.add_argument("--system", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--pidfile", default=None)
    r.add_argument("--tmp-dir", default=None)
    r.add_argument("--kmilvus-bin", default=None)
    for p in (ap, r):
        p.add_argument("--ladder", default="10,100,1000")
        p.add_argument("--rows", type=int, default=10, help="rows inserted into each collection (not flushed)")
        p.add_argument("--shards", type=int, default=2)
        p.add_argument("--idle", type=float, default=30.0, help="idle window per step, s")
        p.add_argument("--settle", type=float, default=5.0, help="pause before each idle window, s")
        p.add_argument("--profile", type=float, default=20.0, help="kmilvus: py-spy seconds at the largest K (0: off)")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run_main(args)
        return 0
    if args.from_json:
        write_outputs(json.loads(Path(args.from_json).read_text()), Path(args.out_dir), args.name)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
