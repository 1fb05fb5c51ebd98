"""A VarChar field's analyzer settings, as Milvus' FieldSchemaHelper reads them from its type
params (`enable_analyzer`, `enable_match`, `analyzer_params`, `multi_analyzer_params`), and the
analyzer a field's text goes through."""

from __future__ import annotations

from pymilvus.grpc_gen import schema_pb2

from kmilvus.analyzer.analyzer import Analyzer, MultiAnalyzer, build, multi

ENABLE_ANALYZER = "enable_analyzer"
ENABLE_MATCH = "enable_match"
ANALYZER_PARAMS = "analyzer_params"
MULTI_ANALYZER_PARAMS = "multi_analyzer_params"


def _param(field: schema_pb2.FieldSchema, key: str) -> str | None:
    return next((kv.value for kv in field.type_params if kv.key == key), None)


def _flag(field: schema_pb2.FieldSchema, key: str) -> bool:
    return (_param(field, key) or "").strip().lower() in ("true", "1", "t")


def enable_analyzer(field: schema_pb2.FieldSchema) -> bool:
    return _flag(field, ENABLE_ANALYZER)


def enable_match(field: schema_pb2.FieldSchema) -> bool:
    return _flag(field, ENABLE_MATCH)


def analyzer_params(field: schema_pb2.FieldSchema) -> str | None:
    return _param(field, ANALYZER_PARAMS)


def multi_analyzer_params(field: schema_pb2.FieldSchema) -> str | None:
    return _param(field, MULTI_ANALYZER_PARAMS)


def analyzer_of(field: schema_pb2.FieldSchema, schema: schema_pb2.CollectionSchema) -> Analyzer | MultiAnalyzer:
    """The field's analyzer (params checked at create time: errors here are not expected)."""
    params = multi_analyzer_params(field)
    if params is not None:
        return multi(params, {f.name: f.data_type for f in schema.fields})
    return build(analyzer_params(field))
