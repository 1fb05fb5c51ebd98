"""mkdocs hooks (mkdocs.yml `hooks:`): the parts of the docs that are read from the code at build
time, so they cannot drift from it.

- `<!-- generated:config -->` in a page becomes the tables of every setting of
  `kmilvus.config.Config`, one per section (`kmilvus.config.SECTIONS`: the section's docstring is
  its title and introduction): environment variable, type, default and the field's docstring.
  A secret's default is never shown.
- `<!-- generated:cli COMMAND -->` becomes the options of `kmilvus standalone`, `kmilvus run` or
  `kmilvus-operator`, from their click definitions.
- `bench/results/` is served under `benchmarks/results/` (the pages link the measurements and
  show their charts without copies in docs/).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MARKER = re.compile(r"<!--\s*generated:(?P<what>[\w-]+)(?P<arg>[^>]*?)\s*-->")


@dataclasses.dataclass
class Setting:
    name: str
    type: str
    default: Any
    doc: str
    section: str


def _type_name(annotation: Any) -> str:
    """int, float, bool, str, secret, list, or one of the values of a Literal."""
    from pydantic import SecretStr

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " | ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin is list:
        return "list"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        return annotation.__name__
    return str(annotation)


def _bounds(metadata: list[Any]) -> str:
    """A field's range from its annotated_types constraints: " ≥ 0", " in [0, 65535]"."""
    lo = hi = None
    for m in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">")):
            if getattr(m, attr, None) is not None:
                lo = (sign, getattr(m, attr))
        for attr, sign in (("le", "≤"), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                hi = (sign, getattr(m, attr))
    if lo and hi and lo[0] == "≥" and hi[0] == "≤":
        return f" in [{lo[1]}, {hi[1]}]"
    return "".join(f" {sign} {value}" for sign, value in filter(None, (lo, hi)))


def config_settings() -> list[Setting]:
    """Every field of `Config`, section by section, with its docstring."""
    from kmilvus.config import Config

    out = []
    for section in Config.sections:
        title = (section.__doc__ or "").strip().partition("\n")[0]
        for name in section.__annotations__:
            f = Config.model_fields[name]
            secret = _type_name(f.annotation) == "secret"
            default = "" if secret else f.get_default(call_default_factory=True)
            doc = " ".join((f.description or "").split())
            kind = _type_name(f.annotation) + _bounds(f.metadata)
            out.append(Setting(name, kind, default, doc, title.strip()))
    return out


def config_sections() -> dict[str, str]:
    """Section title → its introduction."""
    from kmilvus.config import Config

    out = {}
    for section in Config.sections:
        title, _, intro = (section.__doc__ or "").strip().partition("\n")
        out[title.strip()] = " ".join(intro.split())
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
    intros = config_sections()
    for s in config_settings():
        if s.section != section:
            section = s.section
            parts += ["", f"### {section}", ""]
            if intros.get(section):
                parts += [intros[section], ""]
            parts += ["| variable | type | default | meaning |", "|---|---|---|---|"]
        kind = "comma-separated list" if s.type == "list" else s.type.replace("|", "\\|")
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
