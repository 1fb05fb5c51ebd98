"""`./dev`'s background build of the pinned tools (helm, the Kubernetes binaries), and
`./dev test --fast`.

`./dev test` starts `tools/build.sh helm k8s` in the background and tells pytest where its log
and exit code land (tests/conftest.py waits for them). `./dev test --fast` builds nothing and
lints nothing: it runs the unit tier. Both are run in a scratch copy against a recording
`tools/build.sh` (and a recording venv), so what the script does is checked, not assumed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_background_build_gets_exactly_the_tools_named(tmp_path: Path) -> None:
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    (tmp_path / "tools").mkdir()
    build = tmp_path / "tools" / "build.sh"
    build.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$(dirname "$0")/args"\nexit 3\n')
    build.chmod(0o755)
    venv = tmp_path / ".venv"
    venv.mkdir()
    # Only the function is taken from ./dev (the script itself would run a sub-command).
    script = (
        'set -euo pipefail; cd "$1"; VENV="$1/.venv"; log() { :; }\n'
        "source <(sed -n '/^background_tools()/,/^}/p' dev)\n"
        'background_tools helm k8s\nwait "$KMILVUS_TOOLS_BUILD_PID"\n'
        'printf "%s\\n%s\\n" "$KMILVUS_TOOLS_BUILD_LOG" "$KMILVUS_TOOLS_BUILD_RC"\n'
    )
    out = subprocess.run(
        ["bash", "-c", script, "bash", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert out == [str(venv / "tools-build.log"), str(venv / "tools-build.rc")]
    assert (tmp_path / "tools" / "args").read_text().split() == ["helm", "k8s"]
    # The build's own exit code is what the tests read, written whole.
    assert (venv / "tools-build.rc").read_text().strip() == "3"
    assert not (venv / "tools-build.rc.tmp").exists()


def test_fast_runs_the_unit_tier_and_builds_and_lints_nothing(tmp_path: Path) -> None:
    for name in ("dev", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    record = '#!/usr/bin/env bash\nprintf "%s %s\\n" "$(basename "$0")" "$*" >> "$KMILVUS_TEST_CALLS"\n'
    (tmp_path / "tools").mkdir()
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    # The venv's python and lint tools, and the tool build, say what they are asked and succeed.
    for exe in (
        tmp_path / "tools" / "build.sh",
        *(bin_ / n for n in ("python", "pip", "ruff", "lint-imports", "mypy", "mkdocs")),
    ):
        exe.write_text(record)
        exe.chmod(0o755)
    # The venv is up to date with pyproject.toml: nothing to install.
    (tmp_path / ".setup-stamp").write_text(
        hashlib.sha256((tmp_path / "pyproject.toml").read_bytes()).hexdigest() + "\n"
    )
    calls = tmp_path / "calls"
    subprocess.run(
        [str(tmp_path / "dev"), "test", "--fast", "-x"],
        check=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "KMILVUS_TEST_CALLS": str(calls)},
    )
    ran = calls.read_text().splitlines()
    assert ran[-1] == "python -m pytest tests/unit -x"
    assert [c for c in ran if not c.startswith("python ")] == [], "no build, no install, no lint"
