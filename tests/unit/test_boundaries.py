"""The wall between the core and the operator, checked on the source (docs/architecture/index.md).

- `kmilvus/` imports neither `controllers`, `kopf`, `kubernetes` nor `aiohttp`;
- `controllers/` reaches the coordinators only through `kmilvus.coordinator` (their facade): it
  imports no coordinator package and no etcd catalog of the core, and touches no coordinator
  internals — no attribute named `meta`, `collections`, `segments`, `components`, `rootcoord`,
  `datacoord`, `querycoord`, and no private attribute (`x._name`) of anything but itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE_FORBIDDEN = ("controllers", "kopf", "kubernetes", "aiohttp")
CONTROLLERS_FORBIDDEN = (
    "kmilvus.rootcoord",
    "kmilvus.datacoord",
    "kmilvus.querycoord",
    "kmilvus.datanode",
    "kmilvus.proxy",
    "kmilvus.meta",
    "kmilvus.components",
)
# Allowed: pure schema rules shared with RootCoord (one place for each rule), and the etcd client
# the operator's own leader lock (kmilvus.sessionutil.leader) holds — no key of the core is read.
CONTROLLERS_ALLOWED = ("kmilvus.rootcoord.schema", "kmilvus.meta.EtcdKV")
COORDINATOR_STATE = {"meta", "collections", "segments", "components", "rootcoord", "datacoord", "querycoord"}


def _modules(pkg: str):
    for path in sorted((ROOT / pkg).rglob("*.py")):
        if "proto" in path.relative_to(ROOT).parts and path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        yield path, ast.parse(path.read_text(), str(path))


def _imports(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def _under(name: str, pkgs: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in pkgs)


def test_core_never_imports_the_operator():
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path, tree in _modules("kmilvus")
        for name in _imports(tree)
        if _under(name, CORE_FORBIDDEN)
    ]
    assert not bad, bad


def test_controllers_import_no_coordinator_internals():
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path, tree in _modules("controllers")
        for name in _imports(tree)
        if _under(name, CONTROLLERS_FORBIDDEN) and name not in CONTROLLERS_ALLOWED
    ]
    assert not bad, bad


def _state_access(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value.id if isinstance(node.value, ast.Name) else None
        private = node.attr.startswith("_") and not node.attr.startswith("__") and owner not in ("self", "cls")
        if node.attr in COORDINATOR_STATE or private:
            out.append((node.lineno, node.attr))
    return out


def test_controllers_touch_no_coordinator_state():
    bad = [
        f"{path.relative_to(ROOT)}:{line}: .{attr}"
        for path, tree in _modules("controllers")
        for line, attr in _state_access(tree)
    ]
    assert not bad, bad


def test_the_checks_see_a_violation():
    """The scanners are not vacuous: they flag the patterns this boundary removed."""
    tree = ast.parse(
        "from kmilvus.meta import catalog\nimport kopf\n"
        "x = co.rootcoord.collections\ny = dc.meta._dropping\nz = self._ok\n"
    )
    assert [n for n in _imports(tree) if _under(n, CONTROLLERS_FORBIDDEN)] == ["kmilvus.meta.catalog"]
    assert [n for n in _imports(tree) if _under(n, CORE_FORBIDDEN)] == ["kopf"]
    assert sorted(a for _, a in _state_access(tree)) == ["_dropping", "collections", "meta", "rootcoord"]
