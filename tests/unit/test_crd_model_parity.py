"""The models of controllers/v1alpha1.py and the CRDs committed in crds/ say the same thing.

tests/unit/test_crds.py fails when a committed CRD is not what tools/gen_crds.py generates; this file
checks that what is generated means what the operator checks, for objects nobody wrote by hand:

- for many malformed and hostile specs (tests/crfuzz.py), the operator's model refuses exactly
  what the CRD's openAPIV3Schema refuses, at the same paths (the API server's structural
  validation, run here by jsonschema with the Kubernetes extension that restricts values);
- every CEL rule of the CRDs is one the operator's interpreter evaluates (a rule it could not
  compile or run would be skipped silently: the operator would be laxer than the API server);
- every printer column names a field of the schema.

The operator reads objects as the API server serves them: a number the API server accepted for
an integer (`2.0`) comes back as one (`2`), so specs are compared after that round trip.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from pydantic import ValidationError

from controllers import crd
from controllers.v1alpha1 import KINDS, CollectionSpec, FlushRequestSpec, SegmentSpec
from tests.crfuzz import collection_spec, flush_spec, segment_spec
from tests.unit.test_crds import KEYED, CRDValidator, collection, crds, schema

DERANDOMIZE = not os.environ.get("KMILVUS_FUZZ_RANDOM")
FUZZ = settings(
    max_examples=400,
    deadline=None,
    derandomize=DERANDOMIZE,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# The model checks that are the operator's alone: a defaultValue is any JSON to the CRD
# (x-kubernetes-preserve-unknown-fields); its type is checked against the field's by the model.
OPERATOR_ONLY = {"value_error"}


def served(value: Any) -> Any:
    """`value` as the API server serves it back: an integral number is an integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: served(v) for k, v in value.items()}
    if isinstance(value, list):
        return [served(v) for v in value]
    return value


def crd_error_paths(kind: str, spec: Any) -> set[tuple]:
    """Where the CRD's structural schema finds the spec invalid (jsonschema: no CEL)."""
    validator = CRDValidator(schema(kind)["properties"]["spec"])
    return {tuple(e.absolute_path) for e in validator.iter_errors(spec)}


def model_error_paths(model: type[crd.Model], spec: Any) -> set[tuple]:
    """Where the operator's model finds it invalid; a missing key is reported, as the API server
    reports it, at the object that lacks it."""
    try:
        model.model_validate(spec)
    except ValidationError as exc:
        return {
            tuple(e["loc"])[:-1] if e["type"] == "missing" else tuple(e["loc"])
            for e in exc.errors(include_url=False)
            if e["type"] not in OPERATOR_ONLY
        }
    return set()


def assert_same_verdict(kind: str, model: type[crd.Model], spec: Any) -> None:
    spec = served(spec)
    if not isinstance(spec, dict):  # not an object: both refuse it whole
        assert crd_error_paths(kind, spec) == {()} and crd.validate(model, spec).problems
        return
    assert model_error_paths(model, spec) == crd_error_paths(kind, spec), spec


@FUZZ
@given(spec=collection_spec())
@example(spec={"fields": [{"name": "id", "dataType": "Int64", "isPrimaryKey": True, "dim": 2.0}], "shardsNum": 1.0})
@example(spec={"fields": [], "indexes": [{"fieldName": "v", "params": {"M": [16], "nlist": True, "x": None}}]})
@example(spec={"fields": [{"name": "id"}], "partitions": [None, 7, "p"], "load": "true", "shardsNum": -0.0})
@example(spec={**KEYED["spec"], "numPartitions": 0})
def test_the_collection_model_refuses_what_its_crd_refuses(spec):
    assert_same_verdict("Collection", CollectionSpec, spec)


@FUZZ
@given(spec=flush_spec(known=["base"]))
@example(spec={"collectionNames": ["base"], "ttlSecondsAfterFinished": -0.0})
@example(spec={"collectionNames": "base", "database": 5})
def test_the_flushrequest_model_refuses_what_its_crd_refuses(spec):
    assert_same_verdict("FlushRequest", FlushRequestSpec, spec)


@FUZZ
@given(spec=segment_spec())
@example(spec={"segmentID": -1, "collectionID": 2**63, "channel": None})
def test_the_segment_model_refuses_what_its_crd_refuses(spec):
    assert_same_verdict("Segment", SegmentSpec, spec)


def _rich_collection() -> dict:
    """A valid spec that reaches every node of the Collection schema that carries a rule."""
    spec = collection(
        partitions=["p1"],
        indexes=[{"name": "vec_ix", "fieldName": "vec", "indexType": "HNSW", "params": {"M": 16}}],
        consistencyLevel="Strong",
    )["spec"]
    spec["fields"] += [
        {"name": "tags", "dataType": "Array", "elementType": "VarChar", "maxCapacity": 4, "maxLength": 8},
        {"name": "n", "dataType": "Int32", "nullable": True, "defaultValue": 3},
    ]
    return spec


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("Collection", _rich_collection()),
        ("Collection", KEYED["spec"]),
        ("FlushRequest", {"collectionNames": ["a"]}),
        ("Segment", {"segmentID": 1, "collectionID": 2, "channel": "ch"}),
    ],
    ids=["collection", "partition-key", "flushrequest", "segment"],
)
def test_every_cel_rule_is_one_the_operator_evaluates(kind, spec):
    """Each rule compiles in the operator's CEL interpreter and, on a valid object, evaluates to
    true (not to "could not evaluate", which the operator would take as no problem)."""
    node_schema = schema(kind)["properties"]["spec"]
    evaluated, transition = set(), set()
    for node, value, path in crd._walk(node_schema, crd.with_defaults(node_schema, spec), "spec"):
        for r in node.get("x-kubernetes-validations") or []:
            crd._program(r["rule"])  # compiles
            if "oldSelf" in r["rule"]:  # the API server's alone (the operator compares with Milvus)
                transition.add(r["rule"])
                continue
            assert crd._evaluate(r["rule"], value) is True, (path, r["rule"])
            evaluated.add(r["rule"])
    every = {r["rule"] for _p, n in _nodes(node_schema) for r in n.get("x-kubernetes-validations") or []}
    if kind == "Collection" and spec is not KEYED["spec"]:
        assert evaluated | transition == every  # the rich spec reaches all of them


def _nodes(node: dict, path: str = ""):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from _nodes(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")


def _resolve(root: dict, json_path: str) -> dict | None:
    """The schema node a printer column's jsonPath reads (`.status.conditions[?(...)].status`)."""
    node: dict | None = root
    for name, selector in re.findall(r"\.([A-Za-z_][\w-]*)(\[[^\]]*\])?", json_path):
        node = ((node or {}).get("properties") or {}).get(name)
        if selector and node is not None:
            node = node.get("items")
    return node


@pytest.mark.parametrize("kind", [k.kind for k in KINDS])
def test_every_printer_column_names_a_field_of_the_schema(kind):
    (version,) = crds()[kind]["spec"]["versions"]
    root = schema(kind)
    root = {**root, "properties": {**root["properties"], "metadata": {"properties": {"creationTimestamp": {}}}}}
    types = {"integer": {"integer"}, "string": {"string"}, "date": {"string"}}
    for column in version["additionalPrinterColumns"]:
        node = _resolve(root, column["jsonPath"])
        assert node is not None, column
        if "type" in node:  # creationTimestamp: metadata is not in the schema
            want = types[column["type"]] | ({"array"} if column["type"] == "string" else set())
            assert node["type"] in want, column
