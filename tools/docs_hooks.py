"""mkdocs hooks (mkdocs.yml `hooks:`): the parts of the docs that are read from the code at build
time, so they cannot drift from it.

- `<!-- generated:config -->` in a page becomes the table of every setting of
  `kmilvus.config.Config`: name, environment variable, type, default, and the field's comments in
  `kmilvus/config.py` (the comment block above a field and the one at its end; a
  `# --- Title ---` line starts a section).
- `<!-- generated:cli COMMAND -->` becomes the options of `kmilvus standalone`, `kmilvus run` or
  `kmilvus-operator`, from their click definitions.
- `bench/results/` is served under `benchmarks/results/` (the pages link the measurements and
  show their charts without copies in docs/).
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG_SOURCE = ROOT / "kmilvus" / "config.py"
RESULTS = ROOT / "bench" / "results"
SECTION = re.compile(r"^#\s*---\s*(?P<title>.+?)\s*---\s*$")
MARKER = re.compile(r"<!--\s*generated:(?P<what>[\w-]+)(?P<arg>[^>]*?)\s*-->")


@dataclasses.dataclass
class Setting:
    name: str
    type: str
    default: Any
    doc: str
    section: str


def config_settings(source: Path = CONFIG_SOURCE) -> list[Setting]:
    """Every field of `Config`, in source order, with its section and its comments."""
    from kmilvus.config import Config

    text = source.read_text()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string
    lines = text.splitlines()
    cls = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Config")
    fields = {f.name: f for f in dataclasses.fields(Config)}
    out, section = [], ""
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        n = node.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            above.insert(0, lines[n - 1].strip())
            n -= 1
        for i, line in enumerate(above):
            if m := SECTION.match(line):
                section = m["title"]
                above = above[i + 1 :]  # a block starts after its section's title
        doc = [line.lstrip("#").strip() for line in above]
        end = comments.get(node.end_lineno or node.lineno)
        if end is not None and not lines[(node.end_lineno or node.lineno) - 1].strip().startswith("#"):
            doc.append(end.lstrip("#").strip())
        f = fields[node.target.id]
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        out.append(Setting(f.name, str(f.type), default, " ".join(doc), section))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`" + ",".join(map(str, value)) + "`"
    if value == "":
        return "(empty)"
    return f"`{value}`"


def config_markdown() -> str:
    parts: list[str] = []
    section = None
    for s in config_settings():
        if s.section != section:
            section = s.section
            parts += [
                "",
                f"### {section or 'Settings'}",
                "",
                "| variable | type | default | meaning |",
                "|---|---|---|---|",
            ]
        kind = "comma-separated list" if s.type.startswith("list") else s.type
        parts.append(f"| `KMILVUS_{s.name.upper()}` | {kind} | {_default(s.default)} | {_cell(s.doc)} |")
    return "\n".join(parts).strip() + "\n"


def _command(name: str) -> Any:
    if name == "kmilvus-operator":
        from controllers.main import main as operator_main

        return operator_main
    from kmilvus.cli import main

    prog, _, sub = name.partition(" ")
    if prog != "kmilvus" or sub not in main.commands:
        raise ValueError(f"unknown command in a generated:cli marker: {name!r}")
    return main.commands[sub]


def cli_markdown(name: str) -> str:
    import click

    cmd = _command(name)
    rows = ["| option | environment | default | meaning |", "|---|---|---|---|"]
    for p in cmd.params:
        if isinstance(p, click.Argument):
            choices = getattr(p.type, "choices", None)
            meaning = "one or more of " + ", ".join(f"`{c}`" for c in choices) if choices else ""
            rows.append(f"| `{p.name.upper()}...` |  |  | {meaning} |")
            continue
        if not isinstance(p, click.Option) or p.hidden or not p.expose_value:  # --version, --help
            continue
        names = " / ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        env = f"`{p.envvar}`" if isinstance(p.envvar, str) else ""
        plain = isinstance(p.default, str | int | float | Path) and not isinstance(p.default, bool)
        default = _default(str(p.default)) if plain else ""
        if p.required:
            default = "required"
        rows.append(f"| {names} | {env} | {default} | {_cell(p.help or '')} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def generate(m: re.Match[str]) -> str:
        what, arg = m["what"], m["arg"].strip()
        if what == "config":
            return config_markdown()
        if what == "cli":
            return cli_markdown(arg)
        raise ValueError(f"{page.file.src_uri}: unknown generated marker {m.group(0)!r}")

    return MARKER.sub(generate, markdown)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File, InclusionLevel

    for path in sorted(RESULTS.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            files.append(
                File.generated(
                    config,
                    f"benchmarks/results/{path.name}",
                    abs_src_path=str(path),
                    inclusion=InclusionLevel.NOT_IN_NAV,
                )
            )
    return files
