"""Drive milvus-cli (PyPI `milvus-cli`, Milvus' command line) through its interactive prompt, as a
person types into it (pexpect on a pseudo-terminal): tests/system/test_milvus_cli.py."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pexpect

PROMPT = "milvus_cli > "
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class MilvusCli:
    """One `milvus_cli` session; `run` types a command and answers its questions in order."""

    def __init__(self, home: Path, timeout: float = 120):
        exe = Path(sys.executable).with_name("milvus_cli")
        env = {**os.environ, "HOME": str(home), "TERM": "dumb"}  # its history file lives in HOME
        self.child = pexpect.spawn(str(exe), encoding="utf-8", timeout=timeout, env=env, dimensions=(60, 500))
        self.transcript: list[str] = []
        self.child.expect_exact(PROMPT)

    def run(self, line: str, *answers: tuple[str, str]) -> str:
        """Type `line`; for each (question, answer) wait for the question and type the answer;
        return what the command printed (escape sequences removed)."""
        self.child.sendline(line)
        out = []
        for question, answer in answers:
            self.child.expect_exact(question)
            out.append(self.child.before + question)
            self.child.sendline(answer)
        self.child.expect_exact(PROMPT)
        out.append(self.child.before)
        text = _ANSI.sub("", "".join(out)).replace("\r", "")
        self.transcript.append(f"{PROMPT}{line}\n{text}")
        return text

    def close(self) -> None:
        self.child.close(force=True)
