"""crds/: the CustomResourceDefinitions are generated from the models of controllers/v1alpha1.py
(tools/gen_crds.py; a committed file that differs fails here), are valid apiextensions.k8s.io/v1
objects with structural schemas; the examples validate against them; invalid instances are
rejected by the openAPIV3Schema (checked with jsonschema) — and what only the CEL rules catch
(jsonschema cannot run CEL) is caught by the controller, which evaluates those same rules."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pymilvus.grpc_gen import milvus_pb2

from controllers.schema import (
    DT,
    SpecError,
    check_spec,
    declared_indexes,
    k8s_name,
    spec_from_collection,
    to_schema,
)

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
EXAMPLES = CRDS / "examples"

if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
    kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(
        kubernetes_validate.utils.schema_contents
    )


@functools.cache
def crds() -> dict[str, dict]:
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        out[doc["spec"]["names"]["kind"]] = doc
    return out


def schema(kind: str) -> dict:
    (version,) = crds()[kind]["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def _int_or_string(validator, enabled, instance, node):
    """x-kubernetes-int-or-string, which the API server enforces and jsonschema does not know."""
    if enabled and (isinstance(instance, bool) or not isinstance(instance, int | str)):
        yield jsonschema.ValidationError(f"{instance!r} is not an integer or a string")


# Draft 7 plus the one Kubernetes extension that restricts a value's type. List-type uniqueness
# (x-kubernetes-list-type) is not run here: the operator's checks of it are asserted below.
CRDValidator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-kubernetes-int-or-string": _int_or_string})


def validate(kind: str, obj: dict) -> list[str]:
    v = CRDValidator(schema(kind))
    return sorted(e.message for e in v.iter_errors(obj))


def pruned(obj, node: dict, path: str = "") -> list[str]:
    """Fields of `obj` an API server would prune: not declared in the structural schema."""
    if node.get("x-kubernetes-preserve-unknown-fields") or path == ".metadata":
        return []
    out = []
    if isinstance(obj, dict) and node.get("type") == "object":
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        for k, v in obj.items():
            if k not in props and isinstance(extra, dict):
                out += pruned(v, extra, f"{path}.{k}")
            elif k not in props:
                out.append(f"{path}.{k}")
            else:
                out += pruned(v, props[k], f"{path}.{k}")
    elif isinstance(obj, list) and node.get("type") == "array":
        for i, v in enumerate(obj):
            out += pruned(v, node["items"], f"{path}[{i}]")
    return out


def check_instance(obj: dict) -> list[str]:
    """Schema errors plus pruned fields of an object as written by the operator."""
    return validate(obj["kind"], obj) + [f"pruned: {p}" for p in pruned(obj, schema(obj["kind"]))]


def collection(**spec) -> dict:
    base = {
        "fields": [
            {"name": "id", "dataType": "Int64", "isPrimaryKey": True},
            {"name": "vec", "dataType": "FloatVector", "dim": 128},
            {"name": "tag", "dataType": "VarChar", "maxLength": 64},
        ]
    }
    base.update(spec)
    return {"apiVersion": "kmilvus.io/v1alpha1", "kind": "Collection", "metadata": {"name": "c"}, "spec": base}


# `tag` is the partition key: rows hash to _default_0 … _default_{numPartitions-1}.
KEYED = collection(
    fields=[
        {"name": "id", "dataType": "Int64", "isPrimaryKey": True},
        {"name": "vec", "dataType": "FloatVector", "dim": 128},
        {"name": "tag", "dataType": "VarChar", "maxLength": 64, "isPartitionKey": True},
    ],
    numPartitions=8,
)


def with_field(i: int, **changes) -> dict:
    c = collection()
    c["spec"]["fields"][i].update(changes)
    for k, v in list(c["spec"]["fields"][i].items()):
        if v is None:
            del c["spec"]["fields"][i][k]
    return c


# The CRDs themselves ----------------------------------------------------------------------------
def test_three_crds_in_group_with_names():
    assert set(crds()) == {"Collection", "FlushRequest", "Segment"}
    for crd in crds().values():
        s = crd["spec"]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and s["group"] == "kmilvus.io"
        assert crd["metadata"]["name"] == f"{s['names']['plural']}.kmilvus.io"
        assert s["scope"] == "Namespaced" and "kmilvus" in s["names"]["categories"] and s["names"]["shortNames"]
        (v,) = s["versions"]
        assert v["name"] == "v1alpha1" and v["served"] and v["storage"]
        assert {c["name"] for c in v["additionalPrinterColumns"]} >= {"Age"}


@pytest.mark.parametrize("kind", ["Collection", "FlushRequest", "Segment"])
def test_crd_validates_strictly_as_a_kubernetes_object(kind):
    kubernetes_validate.validate(crds()[kind], "1.29", strict=True)


def _walk(node: dict, path: str):
    yield path, node
    for k, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{k}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", ["Collection", "FlushRequest", "Segment"])
def test_schema_is_structural(kind):
    for path, node in _walk(schema(kind), kind):
        if path.endswith(".metadata"):
            assert node == {"type": "object"}, path  # only type for metadata
            continue
        assert (
            "type" in node or node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string")
        ), f"{path}: no type"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{path}: array without items"
        if "properties" in node:
            assert node["type"] == "object", path
            assert "additionalProperties" not in node, path
        for junctor in ("allOf", "anyOf", "oneOf", "not"):
            assert junctor not in node, f"{path}: keep value validations out of junctors"
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), f"{path}: map keys must be required"
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["rule"] and rule["message"], path
        # CEL cost is bounded: lists and strings used in rules have maxima.
        if node.get("x-kubernetes-validations") and node.get("type") == "array":
            assert "maxItems" in node, path


def test_collection_crd_details():
    crd = crds()["Collection"]
    (v,) = crd["spec"]["versions"]
    assert v["subresources"] == {"status": {}}
    cols = {c["name"]: c["jsonPath"] for c in v["additionalPrinterColumns"]}
    assert {"ID", "Phase", "Rows", "Ready", "Age"} <= set(cols)
    spec = schema("Collection")["properties"]["spec"]
    f = spec["properties"]["fields"]["items"]["properties"]
    assert f["dataType"]["enum"] == [
        "Bool",
        "Int8",
        "Int16",
        "Int32",
        "Int64",
        "Float",
        "Double",
        "VarChar",
        "JSON",
        "Array",
        "FloatVector",
        "BinaryVector",
        "Float16Vector",
        "BFloat16Vector",
        "SparseFloatVector",
    ]
    assert (f["dim"]["minimum"], f["dim"]["maximum"]) == (1, 32768)
    assert f["name"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]*$" and f["name"]["maxLength"] == 255
    assert spec["properties"]["deletionPolicy"]["enum"] == ["Delete", "Retain"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert "self.fields.exists(f, (has(f.isPrimaryKey) && f.isPrimaryKey))" in rules
    assert "self.fields.filter(f, has(f.isPrimaryKey) && f.isPrimaryKey).size() <= 1" in rules
    assert spec["properties"]["fields"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    status = schema("Collection")["properties"]["status"]["properties"]
    assert {
        "collectionID",
        "vchannels",
        "phase",
        "rows",
        "segments",
        "conditions",
        "observedGeneration",
        "createdBy",
    } <= set(status)
    assert status["createdBy"]["enum"] == ["operator", "sdk"]
    cond = status["conditions"]["items"]["properties"]
    assert {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"} == set(cond)


def test_flushrequest_and_segment_crd_details():
    fr = schema("FlushRequest")
    assert fr["properties"]["status"]["properties"]["phase"]["enum"] == ["Pending", "Flushing", "Completed", "Failed"]
    assert {"flushTs", "collections", "flushed", "total", "conditions", "completionTime"} <= set(
        fr["properties"]["status"]["properties"]
    )
    assert "ttlSecondsAfterFinished" in fr["properties"]["spec"]["properties"]
    (v,) = crds()["Segment"]["spec"]["versions"]
    cols = [c["name"] for c in v["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Collection", "Partition", "State", "Rows", "Channel", "Age"]


# Instances ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate(path):
    doc = yaml.safe_load(path.read_text())
    assert validate(doc["kind"], doc) == []
    if doc["kind"] == "Collection":
        assert check_spec(doc["spec"], doc["metadata"]["name"]) == []
        to_schema(doc["spec"], doc["metadata"]["name"])


def test_a_partition_key_collection():
    """isPartitionKey / numPartitions: valid for the CRD, in the schema RootCoord gets, and mirrored
    back from an existing collection."""
    assert validate("Collection", KEYED) == [] and check_spec(KEYED["spec"], "c") == []
    schema = to_schema(KEYED["spec"], "c")
    assert [f.name for f in schema.fields if f.is_partition_key] == ["tag"]
    desc = milvus_pb2.DescribeCollectionResponse(collection_name="c", num_partitions=8, shards_num=1)
    desc.schema.CopyFrom(schema)
    back = spec_from_collection(desc)
    assert back["numPartitions"] == 8 and back["fields"][2]["isPartitionKey"] is True
    assert validate("Collection", collection(numPartitions=2000, fields=KEYED["spec"]["fields"]))


def test_a_good_collection_validates():
    assert validate("Collection", collection()) == []
    assert validate("Collection", collection(partitions=["p1", "p2"])) == []
    indexes = [{"name": "vec_hnsw", "fieldName": "vec", "indexType": "HNSW", "metricType": "L2", "params": {"M": 16}}]
    assert validate("Collection", collection(indexes=indexes)) == []


def test_declared_indexes_checked_as_the_proxy_checks_create_index():
    """spec.indexes → the params DataCoord stores (Milvus' defaults filled in); what the CRD
    cannot see (ranges of params, a scalar field) is refused with Milvus' own messages."""
    spec = collection(
        indexes=[
            {"fieldName": "vec", "indexType": "HNSW", "metricType": "L2", "params": {"M": 16, "efConstruction": "64"}}
        ]
    )["spec"]
    (ix,) = declared_indexes(spec, to_schema(spec, "c"))
    assert ix.name == "vec" and ix.field == "vec"
    assert ix.params == {"index_type": "HNSW", "metric_type": "L2", "M": "16", "efConstruction": "64", "dim": "128"}
    spec["indexes"] = [{"name": "auto", "fieldName": "vec"}]
    (ix,) = declared_indexes(spec, to_schema(spec, "c"))
    assert ix.name == "auto" and ix.params == {"index_type": "AUTOINDEX", "metric_type": "COSINE", "dim": "128"}
    spec.pop("indexes")
    assert declared_indexes(spec, to_schema(spec, "c")) is None  # not declared: left to the Milvus API
    for bad, expect in [
        ({"fieldName": "vec", "indexType": "IVF_FLAT", "params": {"nlist": 0}}, "nlist out of range: [1, 65536]"),
        ({"fieldName": "vec", "indexType": "HNSW", "params": {"M": 100, "efConstruction": 64}}, "M out of range"),
        ({"fieldName": "tag", "indexType": "FLAT"}, "can't build flat in not vector type."),
        ({"fieldName": "vec", "params": {"M": True}}, "spec.indexes[0].params.M must be an integer or a string"),
    ]:
        spec["indexes"] = [bad]
        with pytest.raises(SpecError, match=re.escape(expect)) as err:
            declared_indexes(spec, to_schema(spec, "c"))
        assert err.value.reason == "InvalidIndex"


@pytest.mark.parametrize(
    "bad,expect",
    [
        (with_field(1, dim=0), "0 is less than the minimum of 1"),
        (with_field(1, dim=40000), "40000 is greater than the maximum of 32768"),
        (with_field(0, name="1id"), "does not match"),
        (with_field(0, name="a-b"), "does not match"),
        (with_field(0, name="x" * 256), "is too long"),
        (with_field(2, dataType="Text"), "is not one of"),
        (with_field(2, maxLength=0), "0 is less than the minimum of 1"),
        (collection(name="my collection"), "does not match"),
        (collection(shardsNum=17), "17 is greater than the maximum of 16"),
        (collection(deletionPolicy="Orphan"), "is not one of"),
        (collection(consistencyLevel="Weak"), "is not one of"),
        (collection(fields=[]), "should be non-empty"),
        (with_field(1, dataType=None), "'dataType' is a required property"),
        (collection(partitions=["p1", "1p"]), "does not match"),
        (collection(indexes=[{"fieldName": "vec", "indexType": "DISKANN"}]), "is not one of"),
        (collection(indexes=[{"fieldName": "vec", "metricType": "HAMMING"}]), "is not one of"),
        (collection(indexes=[{"indexType": "FLAT"}]), "'fieldName' is a required property"),
        (collection(indexes=[{"fieldName": "vec", "params": {"M": [16]}}]), "[16] is not an integer or a string"),
        (
            {"apiVersion": "kmilvus.io/v1alpha1", "kind": "Collection", "metadata": {}, "spec": {}},
            "'fields' is a required property",
        ),
    ],
    ids=[
        "dim0",
        "dim-too-big",
        "name-digit",
        "name-dash",
        "name-too-long",
        "bad-type",
        "maxlength0",
        "bad-collection-name",
        "shards",
        "policy",
        "consistency",
        "no-fields",
        "no-datatype",
        "bad-partition-name",
        "bad-index-type",
        "bad-metric-type",
        "index-without-field",
        "param-neither-int-nor-string",
        "no-fields-key",
    ],
)
def test_invalid_collections_rejected_by_the_openapi_schema(bad, expect):
    errors = validate("Collection", bad)
    assert any(expect in e for e in errors), errors
    # the controller says so too, whatever the CRD did
    assert check_spec(bad.get("spec") or {}, "c")


# What only CEL catches: jsonschema lets it through, the controller does not.
@pytest.mark.parametrize(
    "bad,expect",
    [
        (
            with_field(2, dataType="Int64", maxLength=None, isPrimaryKey=True),
            "exactly one field must be the primary key",
        ),
        (with_field(0, isPrimaryKey=False), "exactly one field must be the primary key (isPrimaryKey), found none"),
        (collection(fields=[{"name": "id", "dataType": "Int64", "isPrimaryKey": True}]), "needs a vector field"),
        (with_field(1, dim=None), "a dense vector field needs dim"),
        (with_field(0, dim=8), "dim only applies to dense vector"),
        (with_field(2, maxLength=None), "a VarChar field (or an Array of VarChar) needs maxLength"),
        (with_field(0, maxLength=8), "maxLength only applies to VarChar"),
        (with_field(0, dataType="Float"), "a primary key must be Int64 or VarChar"),
        (with_field(2, autoID=True), "only the primary key can set autoID"),
        (with_field(2, dataType="Array", maxLength=None), "an Array field needs elementType and maxCapacity"),
        (with_field(2, dataType="Int64", maxLength=None, maxCapacity=4), "only apply to Array fields"),
        (with_field(1, nullable=True), "a primary key or a vector field cannot be nullable"),
        # x-kubernetes-list-type: set (the API server refuses duplicates; jsonschema does not know it)
        (collection(partitions=["p1", "p1"]), "spec.partitions: duplicate value(s) 'p1'"),
        (collection(indexes=[{"fieldName": "nope"}]), "an index's fieldName must name a field of spec.fields"),
        (
            collection(indexes=[{"fieldName": "vec"}, {"name": "vec", "fieldName": "tag"}]),
            "index names must be unique (name defaults to fieldName)",
        ),
        (
            collection(fields=[*KEYED["spec"]["fields"], {"name": "k", "dataType": "Int64", "isPartitionKey": True}]),
            "at most one field can be the partition key (isPartitionKey)",
        ),
        (with_field(0, isPartitionKey=True), "a partition key must be a non-nullable Int64 or VarChar field"),
        (collection(numPartitions=4), "numPartitions only applies with a partition key field"),
        (
            collection(partitions=["p1"], fields=KEYED["spec"]["fields"]),
            "a collection with a partition key declares no partitions",
        ),
        (
            collection(indexes=[{"fieldName": "vec"}, {"name": "other", "fieldName": "vec"}]),
            "one index per field (Milvus builds one index per vector field)",
        ),
    ],
    ids=[
        "two-pks",
        "no-pk",
        "no-vector",
        "vector-without-dim",
        "dim-on-int",
        "varchar-without-maxlength",
        "maxlength-on-int",
        "float-pk",
        "autoid-not-pk",
        "array-without-element",
        "capacity-on-int",
        "nullable-vector",
        "duplicate-partition",
        "index-on-unknown-field",
        "duplicate-index-name",
        "two-indexes-on-a-field",
        "two-partition-keys",
        "partition-key-on-the-primary-key",
        "num-partitions-without-a-key",
        "partitions-with-a-key",
    ],
)
def test_cel_covered_cases_caught_by_the_controller(bad, expect):
    assert validate("Collection", bad) == []  # structural schema: fine
    problems = check_spec(bad["spec"], "c")
    assert any(expect in p for p in problems), problems


def test_every_cel_rule_has_a_controller_check():
    """Each CEL message of the Collection CRD is exercised by a case above (keep them in step)."""
    covered = {
        "exactly one field must be the primary key (isPrimaryKey), found none",
        "exactly one field must be the primary key (isPrimaryKey), found several",
        "a collection needs a vector field",
        "a dense vector field needs dim",
        "dim only applies to dense vector fields",
        "a VarChar field (or an Array of VarChar) needs maxLength",
        "maxLength only applies to VarChar fields and Arrays of VarChar",
        "an Array field needs elementType and maxCapacity",
        "elementType and maxCapacity only apply to Array fields",
        "a primary key or a vector field cannot be nullable",
        "a primary key must be Int64 or VarChar",
        "only the primary key can set autoID",
        "an index's fieldName must name a field of spec.fields",
        "index names must be unique (name defaults to fieldName)",
        "one index per field (Milvus builds one index per vector field)",
        "at most one field can be the partition key (isPartitionKey)",
        "numPartitions only applies with a partition key field",
        "a collection with a partition key declares no partitions (they are _default_0, _default_1, ...)",
        "a partition key must be a non-nullable Int64 or VarChar field other than the primary key",
    }
    immutability = set()
    messages = set()
    for _path, node in _walk(schema("Collection"), "Collection"):
        for r in node.get("x-kubernetes-validations", []):
            (immutability if "oldSelf" in r["rule"] else messages).add(" ".join(r["message"].split()))
    assert messages == covered
    assert len(immutability) == 5  # name, database, shardsNum, numPartitions, fields: the controller refuses edits too


def test_duplicate_field_names_rejected():
    bad = with_field(2, name="vec", dataType="Int32", maxLength=None)
    assert "spec.fields: duplicate name value(s) 'vec'" in check_spec(bad["spec"], "c")


def test_flushrequest_instances():
    good = {
        "apiVersion": "kmilvus.io/v1alpha1",
        "kind": "FlushRequest",
        "metadata": {"name": "f"},
        "spec": {"collectionNames": ["a", "b_2"], "ttlSecondsAfterFinished": 60},
    }
    assert validate("FlushRequest", good) == []
    for spec, expect in (
        ({"collectionNames": []}, "should be non-empty"),
        ({"collectionNames": ["a-b"]}, "does not match"),
        ({"collectionNames": ["a"], "ttlSecondsAfterFinished": -1}, "less than the minimum"),
        ({}, "'collectionNames' is a required property"),
    ):
        bad = copy.deepcopy(good)
        bad["spec"] = spec
        assert any(expect in e for e in validate("FlushRequest", bad)), spec


def test_segment_instance():
    seg = {
        "apiVersion": "kmilvus.io/v1alpha1",
        "kind": "Segment",
        "metadata": {"name": "c-1"},
        "spec": {
            "segmentID": 1,
            "collection": "c",
            "collectionID": 7,
            "partitionID": 8,
            "partition": "p1",
            "channel": "ch",
        },
        "status": {
            "state": "Flushed",
            "rows": 10,
            "binlogs": 1,
            "binlogSize": 100,
            "dmlPosition": {"channel": "ch", "seq": 3, "timestamp": 4},
        },
    }
    assert validate("Segment", seg) == []
    seg["status"]["state"] = "Melted"
    assert validate("Segment", seg)


# Spec <-> Milvus schema --------------------------------------------------------------------------
def test_spec_round_trip_through_a_milvus_schema():
    from pymilvus.grpc_gen import milvus_pb2

    spec = collection(description="d", shardsNum=2)["spec"]
    schema = to_schema(spec, "my-coll")
    assert schema.name == "my_coll"  # metadata.name with '-' -> '_'
    desc = milvus_pb2.DescribeCollectionResponse(collection_name="my_coll", db_name="default", shards_num=2)
    desc.schema.CopyFrom(schema)
    back = spec_from_collection(desc)
    assert back["fields"] == spec["fields"] and back["shardsNum"] == 2 and back["name"] == "my_coll"


def test_new_field_types_round_trip_through_a_milvus_schema():
    from pymilvus.grpc_gen import milvus_pb2

    extra = [
        {"name": "bin", "dataType": "BinaryVector", "dim": 16},
        {"name": "sparse", "dataType": "SparseFloatVector"},
        {"name": "tags", "dataType": "Array", "elementType": "VarChar", "maxCapacity": 4, "maxLength": 8},
        {"name": "note", "dataType": "VarChar", "maxLength": 8, "nullable": True, "defaultValue": "none"},
        {"name": "score", "dataType": "Float", "defaultValue": 1.5},
    ]
    spec = collection()["spec"]
    spec["fields"] += extra
    assert validate("Collection", {**collection(), "spec": spec}) == []
    schema = to_schema(spec, "c")
    tags = next(f for f in schema.fields if f.name == "tags")
    assert tags.element_type == DT.VarChar and {kv.key: kv.value for kv in tags.type_params} == {
        "max_length": "8",
        "max_capacity": "4",
    }
    desc = milvus_pb2.DescribeCollectionResponse(collection_name="c", db_name="default", shards_num=1)
    desc.schema.CopyFrom(schema)
    assert spec_from_collection(desc)["fields"] == spec["fields"]
    bad = [*collection()["spec"]["fields"], {"name": "b", "dataType": "BinaryVector", "dim": 12}]
    with pytest.raises(SpecError, match="binary vector dimension should be multiple of 8"):
        to_schema({**spec, "fields": bad}, "c")
    assert any(
        "defaultValue 'x' is not a Int64" in p
        for p in check_spec(
            {
                **spec,
                "fields": [*collection()["spec"]["fields"], {"name": "n", "dataType": "Int64", "defaultValue": "x"}],
            },
            "c",
        )
    )


def test_k8s_names_for_mirrored_collections():
    assert k8s_name("default", "docs") == "docs"
    assert k8s_name("default", "my_docs") == "my-docs"
    a, b = k8s_name("default", "Docs"), k8s_name("default", "docs_")
    assert a.startswith("docs-") and b.startswith("docs-") and a != b
    assert k8s_name("db1", "docs").startswith("db1.docs-")
    assert len(k8s_name("default", "x" * 255)) <= 253


# One definition -----------------------------------------------------------------------------------
def test_committed_crds_are_generated_from_the_models():
    """crds/*.yaml, charts/kmilvus/crds/ and operator/crds.yaml are what tools/gen_crds.py writes
    from controllers/v1alpha1.py: edit the models, then run `python tools/gen_crds.py`."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_crds.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_the_index_types_are_the_cores():
    """The CRD enumerates what kmilvus.index.params accepts (no second list to keep in step)."""
    from kmilvus.index import params

    ix = schema("Collection")["properties"]["spec"]["properties"]["indexes"]["items"]["properties"]
    assert ix["indexType"]["enum"] == list(params.INDEX_TYPES)
    assert ix["metricType"]["enum"] == list(params.METRICS)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (collection(shardsNum=17)["spec"], "spec.shardsNum must be in [1, 16], got 17"),
        (collection(shardsNum="2")["spec"], "spec.shardsNum must be an integer, got '2'"),
        (collection(load="yes")["spec"], "spec.load must be a boolean, got 'yes'"),
        (collection(description=None)["spec"], "spec.description must be a string, got None"),
        (with_field(1, dim=None)["spec"], "spec.fields[1] (vec): a dense vector field needs dim"),
        (with_field(2, dataType="Text")["spec"], "spec.fields[2].dataType must be one of Bool, Int8,"),
        (with_field(0, name="1id")["spec"], "spec.fields[0].name '1id' is not a valid Milvus name"),
        (collection(indexes=[{"fieldName": "nope"}])["spec"], "spec.indexes: an index's fieldName must name a field"),
        ({"fields": []}, "spec.fields must list at least 1"),
        ({}, "spec.fields is required"),
    ],
)
def test_problems_name_the_path_as_the_api_server_does(spec, problem):
    assert any(p.startswith(problem) for p in check_spec(spec, "c")), check_spec(spec, "c")


def test_wrong_types_block_the_cel_rules_as_on_the_api_server():
    """A value of the wrong JSON type (or not in its enum) is reported alone, as the API server
    does: rules over it would only add noise."""
    spec = {"fields": "id:Int64", "shardsNum": "2"}
    assert check_spec(spec, "c") == [
        "spec.shardsNum must be an integer, got '2'",
        "spec.fields must be a list, got 'id:Int64'",
    ]
    assert check_spec(with_field(1, dataType="FloatVectr")["spec"], "c") == [
        "spec.fields[1].dataType must be one of Bool, Int8, Int16, Int32, Int64, Float, Double, VarChar, JSON, Array, "
        "FloatVector, BinaryVector, Float16Vector, BFloat16Vector, SparseFloatVector, got 'FloatVectr'"
    ]
    # A value out of range does not block them: both are reported, as kubectl shows both.
    problems = check_spec(with_field(0, isPrimaryKey=False, dim=0)["spec"], "c")
    assert any("exactly one field must be the primary key" in p for p in problems), problems
    assert any("spec.fields[0].dim must be in [1, 32768], got 0" in p for p in problems), problems


def test_a_metadata_name_that_is_no_milvus_name_needs_spec_name():
    assert check_spec(collection()["spec"], "1st-docs") == [
        "spec.name '1st_docs' (from metadata.name) is not a valid Milvus name: 1-255 characters, a letter or "
        "underscore first, then letters, digits and underscores; set spec.name"
    ]
    assert check_spec(collection(name="docs")["spec"], "1st-docs") == []
