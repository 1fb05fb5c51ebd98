"""No import cycle among the modules of `kmilvus/`, `controllers/` and `kmilvus_jobs/`.

A cycle is a set of modules that import each other, directly or through others: none of them can
be read, tested or moved without the rest. The layer contracts in pyproject.toml
(`lint-imports`) order the packages; this test covers what they do not: modules within one
package (`util.typeutil` and `util.fieldtypes`, `msgstream.dispatcher` and `msgstream.jetstream`).

Counted: every import a module runs when it is loaded (at module level, in a class body, under
`try` or `if`). Not counted: imports inside a function, which run when it is called (a CLI
sub-command, the Spark jobs' executors), and those under `if TYPE_CHECKING:`, which never run: a
mixin naming its host's Protocol (`kmilvus.proxy.host`), whose members are typed by the mixins'
own classes, is such a type-only loop, and is how the components' mixins are typed. The layer
contracts see both kinds: no function-local or type-only import may go up a layer either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kmilvus", "controllers", "kmilvus_jobs")


def _modules(root: Path, packages: Sequence[str]) -> dict[str, Path]:
    found = {}
    for pkg in packages:
        for path in (root / pkg).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _loaded_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of `body` that run when the module loads."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _loaded_imports(node.orelse)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            sub = getattr(node, field, None)
            if isinstance(sub, list):
                yield from _loaded_imports([s for s in sub if isinstance(s, ast.stmt)] + _handler_bodies(sub))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _handler_bodies(nodes: list) -> list[ast.stmt]:
    """`except` clauses and `match` cases hold statements one level down."""
    return [s for n in nodes if isinstance(n, (ast.ExceptHandler, ast.match_case)) for s in n.body]


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: dict[str, Path]) -> set[str]:
    """The known modules an import statement loads: `from a.b import c` is `a.b.c` when that is a
    module, else `a.b` (a name defined in it)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def import_graph(root: Path, packages: Sequence[str]) -> dict[str, set[str]]:
    known = _modules(root, packages)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = set()
        for node in _loaded_imports(tree.body):
            graph[module] |= _targets(node, module, path.name == "__init__.py", known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted; sorted by their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_import_cycle():
    found = cycles(import_graph(ROOT, PACKAGES))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_check_sees_a_cycle(tmp_path):
    """The scanner is not vacuous: a cycle at module level, a relative one in a class body and
    `try` are found, also through the runtime branch of `if TYPE_CHECKING: ... else:`; an import
    inside a function or under TYPE_CHECKING alone is not counted."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "import pkg.a\n",
        "c.py": "import typing\nif typing.TYPE_CHECKING:\n    from pkg.d import D\n",
        "d.py": "from pkg.c import *\n",
        "m.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n    from pkg import n\n",
        "n.py": "import pkg.m\n",
        "e.py": "def f():\n    from pkg import f\n",
        "f.py": "import pkg.e\n",
        "sub/__init__.py": "from .g import G\n",
        "sub/g.py": "try:\n    from pkg.sub import h\nexcept ImportError:\n    pass\nG = 1\n",
        "sub/h.py": "class H:\n    from ..sub import g\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    assert cycles(import_graph(tmp_path, ["pkg"])) == [
        ["pkg.a", "pkg.b"],
        ["pkg.m", "pkg.n"],
        ["pkg.sub.g", "pkg.sub.h"],
    ]
