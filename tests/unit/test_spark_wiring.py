"""The SparkApplications DataCoord builds from the `spark_*` settings (docs/architecture/jobs.md): the
driver's service account, image and pull policy, Spark version, S3 credentials by secretKeyRef
on driver AND executors (never inlined), and the templates found as package data."""

from __future__ import annotations

import json
import zipfile
from importlib import resources

import pytest

from kmilvus.config import Config
from kmilvus.spark import application

SPEC = {"kind": "import", "job_id": 3, "collection_id": 42, "collection_name": "films"}


def test_application_from_settings(monkeypatch):
    for k, v in {
        "SPARK_NAMESPACE": "team-a",
        "SPARK_IMAGE": "registry.example.com/spark:7",
        "SPARK_IMAGE_PULL_POLICY": "Always",
        "SPARK_SERVICE_ACCOUNT": "drv",
        "SPARK_S3_SECRET_NAME": "s3-creds",
        "SPARK_S3_ACCESS_KEY_ID_KEY": "access",
        "SPARK_S3_SECRET_ACCESS_KEY_KEY": "secret",
    }.items():
        monkeypatch.setenv("KMILVUS_" + k, v)
    app = application.from_config("import", SPEC, "kmilvus-import-42-3", Config.from_env())
    s = app["spec"]
    assert app["metadata"]["namespace"] == "team-a"
    assert s["image"] == "registry.example.com/spark:7" and s["imagePullPolicy"] == "Always"
    assert s["sparkVersion"] == application.SPARK_VERSION
    assert s["driver"]["serviceAccount"] == "drv"
    want = [
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "access"}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "secret"}}},
    ]
    for pod in ("driver", "executor"):
        env = s[pod]["env"]
        assert [e for e in env if e["name"].startswith("AWS_")] == want
        assert not [e for e in env if e["name"] == "PYTHONPATH"]  # kmilvus_jobs is installed in the image
    assert json.loads(s["arguments"][0]) == SPEC


def test_application_defaults_match_the_chart():
    """Without settings: the chart's driver account, no credentials (ambient: IRSA etc.)."""
    app = application.from_config("compact", {"kind": "compact"}, "kmilvus-compact-1-2", Config())
    s = app["spec"]
    assert s["driver"]["serviceAccount"] == "kmilvus-spark" and s["imagePullPolicy"] == "IfNotPresent"
    assert not [e for pod in ("driver", "executor") for e in s[pod]["env"] if e["name"].startswith("AWS_")]


def test_bad_pull_policy_is_refused():
    with pytest.raises(ValueError, match="spark_image_pull_policy"):
        Config(spark_image_pull_policy="Sometimes")
    with pytest.raises(ValueError, match="imagePullPolicy"):
        application.build_application("import", SPEC, name="kmilvus-import-42-3", image_pull_policy="Sometimes")


def test_templates_are_package_data(tmp_path):
    """The templates ship inside the package: what build_application reads is what a wheel holds."""
    for kind in application.KINDS:
        res = resources.files("kmilvus.spark").joinpath("templates", f"{kind}.yaml")
        assert res.is_file() and "kind: SparkApplication" in res.read_text()
    # One source of truth: the old copy next to the jobs is gone.
    assert not (application.spark_operator_dir() / "templates").exists()


def test_wheel_contains_the_templates(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(root),
        ],
        check=True,
        cwd=tmp_path,
    )
    wheel = next(tmp_path.glob("kmilvus-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"kmilvus/spark/templates/{k}.yaml" for k in application.KINDS} <= names
