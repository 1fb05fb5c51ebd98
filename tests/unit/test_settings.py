"""Settings: every `KMILVUS_*` name the Helm chart or the plain manifests give a process is read
by the code (`kmilvus/`, `controllers/`), so a setting cannot silently do nothing; every name a
release ever read keeps working, with the value checked (a boolean "ture" is an error, not
false); secrets are never printed; the command-line flags stay; the version is written once."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from kmilvus import __version__
from kmilvus.config import SECTIONS, Config, ConfigError

ROOT = Path(__file__).resolve().parents[2]
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
    read = {Config.env_name(name) for name in Config.model_fields}
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
    read = names_read()
    unread = {name: sorted(files) for name, files in set_by.items() if name not in read}
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


# Every KMILVUS_<SETTING> read before Config was a validated model: each must keep working.
_NAMES = """
AUDIT_LOG AUTH AUTO_COMPACTION CLUSTER COMPACTION_CHECK_INTERVAL COMPACTION_MAX_SOURCES
COMPACTION_MIN_SEGMENTS COMPACTION_SMALL_PROPORTION COMPACTION_TARGET_SIZE_MB DEFAULT_SHARDS_NUM
DML_CHANNEL_NUM EMBEDDED_NATS_MEMORY_MB ETCD_ENDPOINTS ETCD_MAX_TXN_OPS ETCD_PASSWORD ETCD_TLS_CA
ETCD_TLS_CERT ETCD_TLS_KEY ETCD_USER FLUSH_STATE_WAIT GC_INTERVAL GC_TOLERANCE HTTP_ACCEPT_TYPE_ALLOW_INT64
HTTP_PORT HTTP_REQUEST_TIMEOUT INPROCESS_JOB_MAX_MB INSERT_BUFFER_SIZE_MB INTERNAL_HOST INTERNAL_TLS_CA
INTERNAL_TLS_CERT INTERNAL_TLS_KEY INTERNAL_TLS_SERVER_NAME MAX_DATABASE_NUM MAX_DIM MAX_INSERT_BYTES
MAX_MESSAGE_BYTES MAX_PARTITION_NUM MAX_PENDING_INSERT_MB MAX_VARCHAR_LENGTH METRICS_PORT NATS_PASSWORD
NATS_TLS_CA NATS_TLS_CERT NATS_TLS_KEY NATS_URL NATS_USER PROXY_HOST PROXY_PORT ROOT_PASSWORD
SEGMENT_MAX_IDLE_TIME SEGMENT_MAX_LIFETIME SEGMENT_MAX_SIZE_MB SEGMENT_SEAL_PROPORTION SESSION_TTL
SPARK_DRIVER_MEMORY SPARK_EXECUTOR_INSTANCES SPARK_EXECUTOR_MEMORY SPARK_IMAGE SPARK_IMAGE_PULL_POLICY
SPARK_JOB_TIMEOUT SPARK_MASTER SPARK_MAX_CONCURRENT_JOBS SPARK_NAMESPACE SPARK_POLL_INTERVAL SPARK_RUNNER
SPARK_S3_ACCESS_KEY_ID_KEY SPARK_S3_SECRET_ACCESS_KEY_KEY SPARK_S3_SECRET_NAME SPARK_SERVICE_ACCOUNT
SPARK_SUBMIT SPARK_VERSION SPARK_WARM SPARK_WARM_IDLE_TIMEOUT SPARK_WORK_DIR STORAGE_URI
STREAM_RETENTION_SECONDS TIME_TICK_IDLE_INTERVAL TIME_TICK_INTERVAL VCHANNEL_IDLE_TICK_INTERVAL
"""
ENVIRONMENT_NAMES = _NAMES.split()


def _other_value(name: str) -> tuple[str, object]:
    """A valid value of setting `name` unlike its default: (its text in the environment, the
    value Config must hold)."""
    field = Config.model_fields[name]
    default = field.get_default(call_default_factory=True)
    kind = field.annotation
    if typing.get_origin(kind) is typing.Literal:
        value = next(v for v in typing.get_args(kind) if v != default)
        return value, value
    if kind is bool:
        return ("false", False) if default else ("true", True)
    if kind is int:
        return str(default + 1), default + 1
    if kind is float:
        value = default / 2 if default else 0.5
        return repr(value), value
    if typing.get_origin(kind) is list:
        return "h1:1, h2:2", ["h1:1", "h2:2"]
    if kind is SecretStr:
        return "s3cr3t-value", "s3cr3t-value"
    return "other-value", "other-value"


@pytest.mark.parametrize("name", ENVIRONMENT_NAMES)
def test_every_environment_name_keeps_working(name):
    field = name.lower()
    assert field in Config.model_fields, f"KMILVUS_{name} is no longer a setting"
    text, want = _other_value(field)
    got = getattr(Config.from_env({f"KMILVUS_{name}": text}), field)
    assert (got.get_secret_value() if isinstance(got, SecretStr) else got) == want


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("AUTH", "ture", "valid boolean"),
        ("SPARK_WARM", "", "valid boolean"),
        ("PROXY_PORT", "70000", "less than or equal to 65535"),
        ("SESSION_TTL", "0", "greater than 0"),
        ("SESSION_TTL", "ten", "valid integer"),
        ("SEGMENT_SEAL_PROPORTION", "1.5", "less than or equal to 1"),
        ("SPARK_IMAGE_PULL_POLICY", "Sometimes", "'Always', 'IfNotPresent' or 'Never'"),
        ("SPARK_RUNNER", "yarn", "'local' or 'sparkapplication'"),
    ],
)
def test_invalid_values_are_errors_naming_the_variable(name, text, why):
    with pytest.raises(ConfigError) as err:
        Config.from_env({f"KMILVUS_{name}": text})
    assert f"KMILVUS_{name}={text!r}" in str(err.value) and why in str(err.value)


def test_flags_win_over_the_environment_and_are_validated_too():
    cfg = Config.from_env({"KMILVUS_PROXY_PORT": "1234", "KMILVUS_CLUSTER": "env"}, proxy_port=4321, cluster=None)
    assert (cfg.proxy_port, cfg.cluster) == (4321, "env")
    with pytest.raises(ConfigError, match=r"^invalid configuration: proxy_port=-1: "):
        Config.from_env({}, proxy_port=-1)
    with pytest.raises(ValueError, match="proxy_port"):
        cfg.proxy_port = 70000  # assignment is validated
    with pytest.raises(ConfigError, match="nope: Extra inputs are not permitted"):
        cfg.replace(nope=1)  # a misspelt setting is an error, never ignored
    assert cfg.replace(proxy_port=5).proxy_port == 5 and cfg.proxy_port == 4321


def test_secrets_are_never_printed():
    secrets = {
        "KMILVUS_ROOT_PASSWORD": "root-pw-1",
        "KMILVUS_ETCD_PASSWORD": "etcd-pw-1",
        "KMILVUS_NATS_PASSWORD": "n-1",
    }
    cfg = Config.from_env(secrets)
    shown = [repr(cfg), str(cfg), cfg.model_dump_json(), str(cfg.model_dump())]
    for value in secrets.values():
        assert not [s for s in shown if value in s]
    assert cfg.root_password.get_secret_value() == "root-pw-1"
    assert cfg.etcd_options()["password"] == "etcd-pw-1" and cfg.nats_options()["password"] == "n-1"
    with pytest.raises(ConfigError) as err:  # an error elsewhere does not show them either
        Config.from_env({**secrets, "KMILVUS_AUTH": "maybe"})
    assert not [v for v in secrets.values() if v in str(err.value)]
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    rows = {r.split("|")[1].strip(" `"): r for r in docs_hooks.config_markdown().splitlines() if r.startswith("| `")}
    assert set(rows) == {Config.env_name(n) for n in Config.model_fields}  # the docs list every setting
    for name in ("ROOT_PASSWORD", "ETCD_PASSWORD", "NATS_PASSWORD"):
        assert "| secret | (empty) |" in rows[f"KMILVUS_{name}"]


def test_sections_hold_every_setting_once():
    owned = [name for section in SECTIONS for name in section.__annotations__]
    assert sorted(owned) == sorted(Config.model_fields) and len(owned) == len(set(owned))
    assert {s.__name__ for s in SECTIONS} >= {"Etcd", "Nats", "Storage", "Spark", "Security", "Proxy", "Http"}
    for section in SECTIONS:
        assert section.__doc__ and section.__doc__.strip().split("\n")[0], section


# The command-line flags of each command (they are part of the interface, as the variables are).
FLAGS = {
    "kmilvus standalone": "--auth --cluster --data-dir --etcd-endpoint --host --http-port --log-level "
    "--metrics-port --nats-url --no-auth --port --storage-uri --tls-ca --tls-cert --tls-key",
    "kmilvus run": "--auth --cluster --etcd-endpoint --host --http-port --internal-host --log-level "
    "--metrics-port --nats-url --no-auth --port --storage-uri --tls-ca --tls-cert --tls-key roles",
    "kmilvus-operator": "--cluster --etcd-endpoint --health-port --log-level --metrics-port --namespace "
    "--nats-url --peering --priority --sdk-namespace --standalone --storage-uri --version",
}


def test_command_line_flags_are_unchanged():
    from controllers.main import main as operator_main
    from kmilvus.cli import main

    commands = {"kmilvus standalone": main.commands["standalone"], "kmilvus run": main.commands["run"]}
    commands["kmilvus-operator"] = operator_main
    for name, cmd in commands.items():
        flags = sorted(o for p in cmd.params for o in [*p.opts, *getattr(p, "secondary_opts", [])])
        assert flags == FLAGS[name].split(), name


def test_an_invalid_setting_stops_the_command_with_a_clear_message(tmp_path):
    from click.testing import CliRunner

    from kmilvus.cli import main

    out = CliRunner().invoke(main, ["standalone", "--data-dir", str(tmp_path)], env={"KMILVUS_AUTH": "ture"})
    assert out.exit_code == 1 and "Error: invalid configuration: KMILVUS_AUTH='ture'" in out.output
    assert "Traceback" not in out.output


def test_the_version_is_written_once():
    """kmilvus/__init__.py holds it; pyproject.toml reads it; what cannot read it repeats it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kmilvus.__version__"}
    assert importlib.metadata.version("kmilvus") == __version__  # the installed metadata too
    chart = yaml.safe_load((ROOT / "charts/kmilvus/Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    kustomization = yaml.safe_load((ROOT / "operator/kustomization.yaml").read_text())
    assert [i["newTag"] for i in kustomization["images"]] == [__version__]
    (spark_image,) = [
        e["value"]
        for doc in yaml.safe_load_all((ROOT / "operator/operator.yaml").read_text())
        if doc and doc.get("kind") == "Deployment"
        for c in doc["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
        if e["name"] == "KMILVUS_SPARK_IMAGE"
    ]
    assert spark_image == Config().spark_image == f"kmilvus/kmilvus-spark:{__version__}"
