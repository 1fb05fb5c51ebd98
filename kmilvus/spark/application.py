"""SparkApplication specs (`sparkoperator.k8s.io/v1beta2`) for kmilvus' Spark jobs.

The templates are package data (`kmilvus/spark/templates/{import,compact}.yaml`), so an installed
wheel finds them; the job code lives in `spark-operator/jobs/` (`import_job.py`, `compact_job.py`
and the `kmilvus_jobs` package). In the Spark image that directory is `IMAGE_JOBS_DIR`; locally
`LocalSparkRunner` maps that path back to this checkout, so both run the same files with the same
arguments: one argument, the job spec as JSON.
"""

from __future__ import annotations

import copy
import json
import os
import re
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

import yaml

from kmilvus import __version__
from kmilvus.config import Config

API_VERSION = "sparkoperator.k8s.io/v1beta2"
KIND = "SparkApplication"
IMAGE_JOBS_DIR = "/opt/kmilvus/spark-operator/jobs"
KINDS = ("import", "compact")
COLLECTION_API_VERSION = "kmilvus.io/v1alpha1"
# The Spark of the job image (images/spark/Dockerfile), = the PySpark the jobs are tested with.
SPARK_VERSION = "4.3.0"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def spark_operator_dir() -> Path:
    """The job code's directory: $KMILVUS_SPARK_OPERATOR_DIR (the image sets it) or the checkout's."""
    env = os.environ.get("KMILVUS_SPARK_OPERATOR_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "spark-operator"


def jobs_dir() -> Path:
    return spark_operator_dir() / "jobs"


def template_text(kind: str) -> str:
    """The SparkApplication template of job `kind`, read as package data."""
    return resources.files("kmilvus.spark").joinpath("templates", f"{kind}.yaml").read_text()


def s3_secret_env(secret: str, access_key_id_key: str, secret_access_key_key: str) -> list[dict]:
    """AWS credentials from Secret `secret` by secretKeyRef (the values never enter the spec)."""
    return [
        {"name": env, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for env, key in (("AWS_ACCESS_KEY_ID", access_key_id_key), ("AWS_SECRET_ACCESS_KEY", secret_access_key_key))
    ]


def local_path(uri: str) -> str:
    """A path in a SparkApplication (`local://`, `file://` or plain) → this machine's file."""
    path = re.sub(r"^(local|file)://", "", str(uri))
    if path.startswith(IMAGE_JOBS_DIR + "/") or path == IMAGE_JOBS_DIR:
        path = str(jobs_dir()) + path[len(IMAGE_JOBS_DIR) :]
    return path


def app_name(kind: str, collection_id: int, job_id: int) -> str:
    """DNS-1123 name, unique per job: `kmilvus-import-<coll>-<job>`."""
    return f"kmilvus-{kind}-{int(collection_id)}-{int(job_id)}"


def collection_owner(name: str, uid: str) -> dict:
    """An ownerReference to the Collection custom resource (the operator knows its uid)."""
    return {
        "apiVersion": COLLECTION_API_VERSION,
        "kind": "Collection",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_application(
    kind: str,
    job_spec: dict,
    *,
    name: str,
    namespace: str = "default",
    image: str = f"kmilvus/kmilvus-spark:{__version__}",
    image_pull_policy: str = "IfNotPresent",
    spark_version: str = SPARK_VERSION,
    owner: dict | None = None,
    driver_cores: int = 1,
    driver_memory: str = "1g",
    executor_instances: int = 1,
    executor_cores: int = 1,
    executor_memory: str = "1g",
    service_account: str = "kmilvus-spark",
    env: list[dict] | None = None,
    shuffle_partitions: int = 4,
    spark_conf: dict | None = None,
    labels: dict | None = None,
) -> dict:
    """The SparkApplication running job `kind` ("import" | "compact") with `job_spec`.

    `env`: extra environment of the driver AND the executors (both read and write storage),
    e.g. `s3_secret_env(...)`."""
    if kind not in KINDS:
        raise ValueError(f"unknown Spark job kind {kind!r}")
    if image_pull_policy not in PULL_POLICIES:
        raise ValueError(f"imagePullPolicy must be one of {', '.join(PULL_POLICIES)}, not {image_pull_policy!r}")
    rendered = Template(template_text(kind)).substitute(
        name=name,
        namespace=namespace,
        image=image,
        image_pull_policy=image_pull_policy,
        spark_version=spark_version,
        jobs_dir=IMAGE_JOBS_DIR,
        driver_cores=int(driver_cores),
        driver_memory=driver_memory,
        executor_instances=int(executor_instances),
        executor_cores=int(executor_cores),
        executor_memory=executor_memory,
        service_account=service_account,
        shuffle_partitions=int(shuffle_partitions),
    )
    app: dict[str, Any] = yaml.safe_load(rendered)
    app["spec"]["arguments"] = [json.dumps(job_spec, separators=(",", ":"), sort_keys=True)]
    for pod in ("driver", "executor"):
        app["spec"][pod]["env"].extend(copy.deepcopy(env or []))
    if spark_conf:
        app["spec"]["sparkConf"].update({k: str(v) for k, v in spark_conf.items()})
    meta = app["metadata"]
    meta.setdefault("labels", {}).update(
        {
            "kmilvus.io/job-kind": kind,
            "kmilvus.io/collection-id": str(job_spec.get("collection_id", "")),
            "kmilvus.io/job-id": str(job_spec.get("job_id", "")),
            **(labels or {}),
        }
    )
    if owner:
        meta["ownerReferences"] = [copy.deepcopy(owner)]
    validate_application(app)
    return app


def from_config(kind: str, job_spec: dict, name: str, cfg: Config) -> dict:
    """The application as the `spark_*` settings describe it: namespace, image and pull policy,
    Spark version, driver service account, S3 credentials by secretKeyRef, resources."""
    env = (
        s3_secret_env(cfg.spark_s3_secret_name, cfg.spark_s3_access_key_id_key, cfg.spark_s3_secret_access_key_key)
        if cfg.spark_s3_secret_name
        else []
    )
    return build_application(
        kind,
        job_spec,
        name=name,
        namespace=cfg.spark_namespace,
        image=cfg.spark_image,
        image_pull_policy=cfg.spark_image_pull_policy,
        spark_version=cfg.spark_version or SPARK_VERSION,
        service_account=cfg.spark_service_account,
        env=env,
        driver_memory=cfg.spark_driver_memory,
        executor_memory=cfg.spark_executor_memory,
        executor_instances=cfg.spark_executor_instances,
    )


def validate_application(app: dict) -> None:
    """The fields spark-operator requires (v1beta2), checked before anything is submitted."""
    if app.get("apiVersion") != API_VERSION or app.get("kind") != KIND:
        raise ValueError("not a SparkApplication")
    spec = app.get("spec") or {}
    missing = [k for k in ("type", "sparkVersion", "mainApplicationFile", "driver", "executor") if not spec.get(k)]
    if missing:
        raise ValueError(f"SparkApplication spec lacks {', '.join(missing)}")
    if spec["type"] not in ("Java", "Scala", "Python", "R"):
        raise ValueError(f"bad SparkApplication type {spec['type']!r}")
    if (spec.get("restartPolicy") or {}).get("type") not in ("Never", "Always", "OnFailure"):
        raise ValueError("restartPolicy.type must be Never, Always or OnFailure")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", app["metadata"]["name"]) or len(app["metadata"]["name"]) > 63:
        raise ValueError(f"invalid application name {app['metadata']['name']!r}")


def job_spec_of(app: dict) -> dict:
    """The job spec carried in an application's arguments."""
    spec: dict[str, Any] = json.loads(app["spec"]["arguments"][0])
    return spec
