"""The wall between the core and the operator, checked on the source (docs/architecture/index.md).

What each side may import is import-linter's to check (pyproject.toml, `lint-imports` in
`./dev lint`): `kmilvus/` imports neither `controllers`, `kopf`, `kubernetes` nor `aiohttp`, and
`controllers/` imports only the core's facades (`kmilvus.coordinator` and a few more, no
coordinator package, no etcd catalog of the core). What no import rule sees is checked here:
`controllers/` touches no coordinator internals — no attribute named `meta`, `collections`,
`segments`, `components`, `rootcoord`, `datacoord`, `querycoord`, and no private attribute
(`x._name`) of anything but itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COORDINATOR_STATE = {"meta", "collections", "segments", "components", "rootcoord", "datacoord", "querycoord"}


def _modules(pkg: str):
    for path in sorted((ROOT / pkg).rglob("*.py")):
        if "proto" in path.relative_to(ROOT).parts and path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        yield path, ast.parse(path.read_text(), str(path))


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


def test_the_check_sees_a_violation():
    """The scanner is not vacuous: it flags the patterns this boundary removed."""
    tree = ast.parse("x = co.rootcoord.collections\ny = dc.meta._dropping\nz = self._ok\n")
    assert sorted(a for _, a in _state_access(tree)) == ["_dropping", "collections", "meta", "rootcoord"]
