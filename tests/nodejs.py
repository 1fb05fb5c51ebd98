"""Run the Node.js SDK scripts of tests/node/ (installed by `./dev setup`: `npm ci` there, pinned
by its package-lock.json) and read the record each prints (tests/node/lib.mjs)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

NODE_DIR = Path(__file__).resolve().parent / "node"
SDK = NODE_DIR / "node_modules" / "@zilliz" / "milvus2-sdk-node" / "package.json"


def run_script(script: str, *args: str, timeout: float = 240) -> dict:
    """`node tests/node/SCRIPT ARGS...` → its record: step name → {ok, value | error}."""
    node = shutil.which("node")
    assert node, "node is not on PATH (Node 20 is part of the machine; ./dev setup needs it)"
    assert SDK.exists(), f"{SDK} is missing: run ./dev setup (npm ci in tests/node)"
    proc = subprocess.run(
        [node, script, *args], cwd=NODE_DIR, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{script} printed no record:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return json.loads(lines[-1])


def failed_steps(record: dict) -> dict[str, str]:
    return {name: step["error"] for name, step in record.items() if not step["ok"]}


def sdk_version() -> str:
    return json.loads(SDK.read_text())["version"]
