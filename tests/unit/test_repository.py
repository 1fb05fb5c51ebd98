"""Rules about the repository's text that no linter checks.

- Comments, docstrings and docs point at the project's own docs (`docs/...`), never at documents
  outside the repository: no seed, issue or defect numbers, no DESIGN.md.
- No dated benchmark figure in code: a date in a comment or docstring is a measurement that went
  stale the day after; figures live on the benchmarks page (docs/benchmarks/index.md) and the
  code keeps only the reason.
- Every docs page a file names (`docs/....md`) exists, so a pointer cannot dangle.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Measurements as they were taken (generated, and dated by design); this file names the patterns.
SKIP = ("bench/results/", "tests/unit/test_repository.py")
TEXT_SUFFIXES = {".py", ".proto", ".yaml", ".yml", ".toml", ".sh", ".tpl", ".md", ".txt", ".cfg", ".ini", ".json"}
CODE_NAMES = {"Dockerfile", "dev", "run"}

CITATION = re.compile(
    r"\bseeds? ?#?\d{3}\b|\bseeds/|\bissues? ?#?\d+\b|\bdefects? ?\d+\b|\bdeliverable ?\d+\b|\bDESIGN\.md\b",
    re.IGNORECASE,
)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
DOCS_PAGE = re.compile(r"\bdocs/[\w./-]+?\.md\b")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        names = out.splitlines()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file under the root
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    files = []
    for name in names:
        if name.startswith(SKIP):
            continue
        p = ROOT / name
        if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name in CODE_NAMES):
            files.append(p)
    return files


def python_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                value = body[0].value.value
                if isinstance(value, str):
                    out.append((body[0].lineno, value))
    return out


def other_comments(path: Path, text: str) -> list[tuple[int, str]]:
    """(line, text) of the comment lines of a non-Python code file (`#` or `//` comments)."""
    marker = "//" if path.suffix == ".proto" else "#"
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        i = line.find(marker)
        if i >= 0 and (i == 0 or line[:i].strip() == "" or line[i - 1] in " \t"):
            out.append((n, line[i:]))
        elif "{{/*" in line:
            out.append((n, line))
    return out


def comments(path: Path, text: str) -> list[tuple[int, str]]:
    if path.suffix == ".py" or (path.suffix == "" and text.startswith("#!/usr/bin/env python")):
        return python_comments(text)
    return other_comments(path, text)


def tracked_lines() -> Iterator[tuple[str, int, str]]:
    """(file, line number, line) of every tracked text file."""
    for p in tracked_files():
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            yield str(p.relative_to(ROOT)), n, line


def test_nothing_cites_seeds_issues_or_documents_outside_the_repository():
    found = [
        f"{f}:{n}: {m.group(0)!r} in {line.strip()[:100]!r}"
        for f, n, line in tracked_lines()
        if (m := CITATION.search(line))
    ]
    assert not found, "point at docs/ instead (or say the why in place):\n" + "\n".join(found)


def test_no_dated_figure_in_code():
    found = []
    for p in tracked_files():
        if p.suffix in (".md", ".txt", ".json"):
            continue
        text = p.read_text(errors="replace")
        for n, comment in comments(p, text):
            if m := DATE.search(comment):
                found.append(f"{p.relative_to(ROOT)}:{n}: {m.group(0)} in {comment.strip()[:100]!r}")
    assert not found, "move the figure to docs/benchmarks/index.md and keep only the reason:\n" + "\n".join(found)


def test_every_docs_page_named_exists():
    missing = [
        f"{f}:{n}: {page}"
        for f, n, line in tracked_lines()
        for page in DOCS_PAGE.findall(line)
        if not (ROOT / page).is_file()
    ]
    assert not missing, "these docs pages do not exist:\n" + "\n".join(missing)


def test_the_checks_see_what_they_look_for():
    """The patterns and the comment extraction catch what they are meant to (so a green run means
    something)."""
    src = '"""Doc (seed 000 §4)."""\nx = "2026-01-02"  # measured 2026-11-26: 5 ms\n'
    found = python_comments(src)
    assert [n for n, _ in found] == [2, 1]
    assert any(CITATION.search(t) for _, t in found)
    assert [DATE.search(t) is not None for _, t in found] == [True, False]  # the string literal is not a comment
    assert CITATION.search("see issue 11, defect 6") and CITATION.search("DESIGN.md") and CITATION.search("Seed 002")
    assert not CITATION.search("tissue 3") and not CITATION.search("issuer_name")
    proto = other_comments(Path("x.proto"), "message A {}\n// flush (2026-11-26)\nint64 x = 1; // a\n")
    assert [n for n, _ in proto] == [2, 3]
    yaml = other_comments(Path("x.yaml"), "tag: RELEASE.2024-12-18T13-15-44Z\n  # comment\nurl: a#b\n")
    assert [n for n, _ in yaml] == [2]
    assert DOCS_PAGE.findall("see docs/architecture/flush.md.") == ["docs/architecture/flush.md"]
