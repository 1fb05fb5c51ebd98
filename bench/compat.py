"""`./dev compat [DIR]`: run pymilvus example programs unchanged against a fresh `kmilvus
standalone` each, and print which pass and, for each failure, the first failing call and why.

The examples connect to `localhost:19530`. When that port is free the standalone listens on it
and every example runs exactly as written; otherwise the only edit is the address (a copy in a
temporary directory, never in the repository, with `localhost:19530` replaced by the
standalone's port) and the table says so.

A failure is classified from the example's traceback:
- `not built` — the server answered UNIMPLEMENTED (a feature kmilvus has not built yet);
- `external`  — the example needs a service outside Milvus (MinIO / S3);
- `timeout`   — the example did not finish within the per-example limit;
- `example`   — the example itself failed before or without a server call (e.g. a missing module);
- `bug`       — kmilvus answered an error a Milvus server would not have.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from standalone_proc import Standalone

DEFAULT_DIR = ROOT.parent / "shared" / "pymilvus-examples"
MILVUS_PORT = 19530
ADDRESS = re.compile(r"localhost:19530")
_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_MILVUS_EXC = re.compile(r"code=(?P<code>[^,]+), message=(?P<msg>.*)\)>\s*$", re.S)
_GRPC_STATUS = re.compile(r'status = StatusCode\.(?P<status>\w+)\s+details = "(?P<details>[^"]*)"')
# pymilvus logs every failed RPC; an async example's `finally:` can hide the first one from the
# traceback (pymilvus' `raise e from e` suppresses the chained context).
_LOGGED_RPC_ERROR = re.compile(
    r"\[_log_rpc_error\]: grpc RpcError: \[(?P<method>\w+)\], "
    r"<\w+: StatusCode\.(?P<status>\w+), (?P<details>.*?)>, <elapsed"
)
_EXTERNAL = re.compile(r"minio|botocore|\bs3\b|amazonaws|:9000\b|Could not connect to the endpoint", re.I)
_UNIMPLEMENTED = re.compile(r"UNIMPLEMENTED|Method not implemented|unimplemented", re.I)


@dataclass
class Outcome:
    example: str
    passed: bool
    seconds: float
    call: str = ""  # `example.py:LINE method` of the first failing call
    code: str = ""  # the server's code (or gRPC status) when there is one
    why: str = ""  # the exception's message
    category: str = ""  # not built | external | timeout | example | bug
    address_edited: bool = False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def examples(directory: Path) -> list[Path]:
    """Every *.py under `directory`, in a stable order."""
    return sorted(p for p in directory.rglob("*.py") if p.is_file() and "__pycache__" not in p.parts)


_CHAINED = re.compile(
    r"\n(During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)\n"
)


def _first_traceback(stderr: str) -> list[str]:
    """The first traceback: with chained exceptions (a `finally:` that fails again) it is the
    original failure, printed before the later ones."""
    at = stderr.find("Traceback (most recent call last):")
    if at < 0:
        return []
    return _CHAINED.split(stderr[at:], maxsplit=1)[0].splitlines()


def classify(stderr: str, script: Path, timed_out: bool = False) -> tuple[str, str, str, str]:
    """(call, code, why, category) of a failed run from its stderr."""
    if timed_out:
        return "", "", "no exit within the time limit", "timeout"
    lines = _first_traceback(stderr)
    if not lines:
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        return "", "", tail[-1] if tail else "exited non-zero without a traceback", "bug"
    frames = []
    for i, ln in enumerate(lines):
        m = _FRAME.match(ln)
        if m:
            frames.append((m["file"], int(m["line"]), m["func"], lines[i + 1].strip() if i + 1 < len(lines) else ""))
    # The exception is everything after the last frame's source line.
    last = max((i for i, ln in enumerate(lines) if _FRAME.match(ln)), default=0)
    exc = "\n".join(lines[last + 2 :]).strip() or lines[-1]
    exc_type, _, exc_msg = exc.partition(": ")
    mine = [k for k, f in enumerate(frames) if Path(f[0]).name == script.name]
    call = ""
    if mine:
        k = mine[-1]
        lib = next((f for f in frames[k + 1 :] if "pymilvus" in f[0]), None)
        method = lib[2] if lib else ""
        # The client method that sent the failing request (a convenience call may send several).
        sent = [f[2] for f in frames[k + 1 :] if "grpc_handler" in Path(f[0]).name]
        if sent and sent[-1].lstrip("_") != method.lstrip("_"):
            method += f" → {sent[-1]}"
        call = f"{script.name}:{frames[k][1]} {method or frames[k][3]}".strip()
    code, why = "", exc_msg or exc_type
    m = _MILVUS_EXC.search(exc)
    g = _GRPC_STATUS.search(exc)
    if m:
        code, why = m["code"].strip(), m["msg"].strip()
    elif g:
        code, why = f"StatusCode.{g['status']}", g["details"]
    logged = _LOGGED_RPC_ERROR.search(stderr)
    if logged and logged["method"] not in call:
        call = f"{logged['method']} (first RPC error pymilvus logged; the traceback ends at {call})"
        code, why = f"StatusCode.{logged['status']}", logged["details"]
        exc = f"{code} {why}"
    if _UNIMPLEMENTED.search(exc):
        category = "not built"
    elif _EXTERNAL.search(exc):
        category = "external"
    elif not any("pymilvus" in f[0] for f in frames):
        category = "example"
    else:
        category = "bug"
    return call, code, why.splitlines()[0] if why else "", category


def _runnable(script: Path, port: int, workdir: Path) -> tuple[Path, bool]:
    """The script itself when the standalone is on 19530, else a copy whose address is the only edit."""
    if port == MILVUS_PORT:
        return script, False
    copy = workdir / script.name
    copy.write_text(ADDRESS.sub(f"127.0.0.1:{port}", script.read_text()))
    return copy, True


def run_one(script: Path, timeout: float, port: int | None = None) -> Outcome:
    """Run one example against its own fresh standalone."""
    workdir = Path(tempfile.mkdtemp(prefix="kmilvus-compat-"))
    server = Standalone(data_dir=workdir / "data")
    server.port = port or (MILVUS_PORT if port_free(MILVUS_PORT) else server.port)
    server.data_dir.mkdir(parents=True, exist_ok=True)
    server.start()
    try:
        target, edited = _runnable(script, server.port, workdir)
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, str(target)],
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            _, stderr = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            timed_out = True
        seconds = time.perf_counter() - started
    finally:
        server.stop()
    name = script.name
    if proc.returncode == 0 and not timed_out:
        return Outcome(name, True, seconds, address_edited=edited)
    call, code, why, category = classify(stderr, target, timed_out)
    return Outcome(name, False, seconds, call, code, why, category, edited)


def _cell(s: str, width: int = 110) -> str:
    s = s.replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= width else s[: width - 1] + "…"


def table(outcomes: list[Outcome]) -> str:
    """A Markdown table: example, pass/fail, and the first failing call, code, why and class."""
    rows = ["| example | result | first failing call | code | why | class |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        result = "pass" if o.passed else "FAIL"
        if o.address_edited:
            result += " (address edited)"
        rows.append(f"| {o.example} | {result} | {_cell(o.call)} | {_cell(o.code)} | {_cell(o.why)} | {o.category} |")
    passed = sum(o.passed for o in outcomes)
    rows.append("")
    rows.append(f"{passed} of {len(outcomes)} pass.")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=str(DEFAULT_DIR), help="directory of example programs")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per example")
    ap.add_argument("-k", dest="only", default="", help="run only examples whose path contains this")
    args = ap.parse_args(argv)
    directory = Path(args.dir).resolve()
    found = [p for p in examples(directory) if args.only in str(p.relative_to(directory))]
    if not found:
        print(f"no example programs under {directory}", file=sys.stderr)
        return 2
    if not port_free(MILVUS_PORT):
        print(
            f"port {MILVUS_PORT} is in use: each example runs from a temporary copy whose only edit is the address",
            file=sys.stderr,
        )
    outcomes = []
    for script in found:
        o = run_one(script, args.timeout)
        o.example = str(script.relative_to(directory))
        print(
            f"{o.example}: {'pass' if o.passed else 'FAIL ' + o.category} ({o.seconds:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        outcomes.append(o)
    print(table(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
