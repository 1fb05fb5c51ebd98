"""`./dev`'s background build of the pinned tools (helm, the Kubernetes binaries).

`./dev test` starts `tools/build.sh helm k8s` in the background and tells pytest where its log
and exit code land (tests/conftest.py waits for them). This runs the script's own function
against a recording `tools/build.sh` in a scratch copy, so what the build receives is checked,
not assumed.
"""

from __future__ import annotations

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
