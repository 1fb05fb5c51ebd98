"""The SparkApplication CRD (`sparkoperator.k8s.io/v1beta2`) for the test control plane.

The Kubeflow spark-operator's Go module (and with it its CRD manifests) is not reachable from
these machines; its API types are, as the Python models Kubeflow publishes on PyPI
(`kubeflow-spark-api`, pinned to the spark-operator release e2e/ installs). This turns those
models' JSON schema into the CRD's structural schema, so the API server checks what
kmilvus creates the way the real CRD does: field names and types, required fields (type,
sparkVersion, mainApplicationFile, driver, executor), unknown fields pruned, status a
subresource. The real CRD's enum markers (mode, restartPolicy.type) are not in the models: those
values are not checked here.
"""

from __future__ import annotations

import functools
from typing import Any

GROUP, VERSION, PLURAL, KIND = "sparkoperator.k8s.io", "v1beta2", "sparkapplications", "SparkApplication"


def _structural(node: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON-schema node → an OpenAPI v3 structural-schema node (refs inlined,
    Optional unwrapped, titles, descriptions and defaults dropped)."""
    if "$ref" in node:
        return _structural(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in node:
        kinds = [n for n in node["anyOf"] if n.get("type") != "null"]
        if len(kinds) == 1:
            return _structural(kinds[0], defs)
        types = {n.get("type") for n in kinds}
        if types <= {"integer", "string"}:
            return {"x-kubernetes-int-or-string": True}
        return {"x-kubernetes-preserve-unknown-fields": True}
    t = node.get("type")
    if t is None:  # Any
        return {"x-kubernetes-preserve-unknown-fields": True}
    out: dict[str, Any] = {"type": t}
    if t == "object":
        if props := node.get("properties"):
            out["properties"] = {k: _structural(v, defs) for k, v in props.items()}
            if req := node.get("required"):
                out["required"] = sorted(req)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra, defs)
        elif not props:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif t == "array":
        out["items"] = _structural(node.get("items") or {}, defs)
    return out


@functools.cache
def spark_application_crd() -> dict[str, Any]:
    from kubeflow_spark_api.models import SparkV1beta2SparkApplication

    schema = SparkV1beta2SparkApplication.model_json_schema(by_alias=True)
    root = _structural(schema, schema.get("$defs") or {})
    root["properties"]["metadata"] = {"type": "object"}
    root["required"] = ["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # A *.k8s.io group is protected: the real CRD carries the approval of the Kubernetes API
        # review; this copy says it has none (the API server accepts that and notes it).
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "annotations": {"api-approved.kubernetes.io": "unapproved, made for kmilvus' tests"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": "sparkapplication", "shortNames": ["sparkapp"]},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                }
            ],
        },
    }
