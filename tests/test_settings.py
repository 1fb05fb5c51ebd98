"""Every `KMILVUS_*` name the Helm chart or the plain manifests give a process is read by the
code (`kmilvus/`, `controllers/`), so a setting cannot silently do nothing."""

from __future__ import annotations

import ast
import dataclasses
import re
import tomllib
from pathlib import Path

from kmilvus.config import Config

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bKMILVUS_[A-Z0-9_]*[A-Z0-9]\b")
DEPLOYMENT_DIRS = ("charts", "operator")
CODE_DIRS = ("kmilvus", "controllers")


def names_set() -> dict[str, set[str]]:
    """KMILVUS_* names in every file of charts/ and operator/ → the files naming them."""
    found: dict[str, set[str]] = {}
    for d in DEPLOYMENT_DIRS:
        for path in sorted((ROOT / d).rglob("*")):
            if path.is_file():
                for name in NAME.findall(path.read_text()):
                    found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _env_reads(tree: ast.AST) -> set[str]:
    """String constants the code reads as environment variables: `os.environ.get(X)`,
    `os.getenv(X)`, `os.environ[X]`, click's `envvar=X`."""
    out: set[str] = set()
    for node in ast.walk(tree):
        keys: list[ast.AST] = []
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and ((f.attr == "get" and _is_environ(f.value)) or f.attr == "getenv"):
                keys += node.args[:1]
            keys += [k.value for k in node.keywords if k.arg == "envvar"]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            keys.append(node.slice)
        out |= {k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return out


def names_read() -> set[str]:
    """Config fields (Config.from_env reads KMILVUS_<FIELD>) + direct environment reads."""
    read = {"KMILVUS_" + f.name.upper() for f in dataclasses.fields(Config)}
    for d in CODE_DIRS:
        for path in sorted((ROOT / d).rglob("*.py")):
            if "_pb2" not in path.name:
                read |= {n for n in _env_reads(ast.parse(path.read_text())) if n.startswith("KMILVUS_")}
    return read


def test_config_fields_are_read_from_the_environment(monkeypatch):
    """What `names_read` assumes of Config: each field comes from KMILVUS_<FIELD>."""
    monkeypatch.setenv("KMILVUS_SPARK_IMAGE", "registry.example.com/spark:9")
    monkeypatch.setenv("KMILVUS_SESSION_TTL", "17")
    cfg = Config.from_env()
    assert cfg.spark_image == "registry.example.com/spark:9" and cfg.session_ttl == 17


def test_every_setting_the_deployment_sets_is_read():
    set_by = names_set()
    assert {"KMILVUS_CLUSTER", "KMILVUS_ETCD_ENDPOINT", "KMILVUS_SPARK_IMAGE"} <= set(set_by)
    unread = {name: sorted(files) for name, files in set_by.items() if name not in names_read()}
    assert unread == {}, f"set in charts/ or operator/ but read by no code: {unread}"


def _dockerfile_spark_version() -> str:
    text = (ROOT / "images" / "spark" / "Dockerfile").read_text()
    m = re.search(r"^ARG SPARK_IMAGE=apache/spark:(\d+\.\d+\.\d+)-", text, re.M)
    assert m, "images/spark/Dockerfile names no apache/spark:<version> base image"
    return m.group(1)


def test_spark_image_version_is_the_tested_pyspark_and_the_spec_version():
    """The image's Spark = the PySpark the jobs are tested with = every spec's sparkVersion."""
    import pyspark

    from kmilvus.spark import application

    assert _dockerfile_spark_version() == application.SPARK_VERSION == pyspark.__version__
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [d for d in deps if d.startswith("pyspark")] == [f"pyspark=={application.SPARK_VERSION}"]
    app = application.build_application("compact", {"kind": "compact"}, name="kmilvus-compact-1-2")
    assert app["spec"]["sparkVersion"] == application.SPARK_VERSION
