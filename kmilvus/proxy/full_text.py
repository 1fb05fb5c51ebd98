"""A BM25 search's queries in the Proxy (Milvus' function executor on a search request): the
placeholder group carries texts (pymilvus sends `data=["query text"]` as VarChar), which go
through the analyzer of the BM25 function's input field (a multi-analyzer's `analyzer_name`, or
its default) and become term-frequency rows; the QueryNodes weigh them with their statistics."""

from __future__ import annotations

import pyarrow as pa
from pymilvus.grpc_gen import common_pb2, schema_pb2

from kmilvus.analyzer import MultiAnalyzer
from kmilvus.analyzer.fields import analyzer_of
from kmilvus.function.bm25 import term_frequencies
from kmilvus.function.schema import bm25_of_output, field_by_id
from kmilvus.index.vectors import SparseRows
from kmilvus.util import merr, typeutil

PH = common_pb2.PlaceholderType


def query_rows(
    schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema, placeholder_group: bytes, analyzer_name
) -> SparseRows:
    group = common_pb2.PlaceholderGroup.FromString(placeholder_group)
    if not group.placeholders:
        raise merr.invalid("the search request has no query vectors")
    ph = group.placeholders[0]
    if ph.type != PH.VarChar:
        raise merr.invalid(
            f"vector type must be the same, field {field.name} - type {typeutil.type_name(field.data_type)}, "
            f"search info type {PH.Name(ph.type)}"
        )
    try:
        texts = [v.decode() for v in ph.values]
    except UnicodeDecodeError:
        raise merr.invalid("the search text is not valid UTF-8") from None
    fn = bm25_of_output(schema, field.fieldID)
    assert fn is not None
    analyzer = analyzer_of(field_by_id(schema, fn.input_field_ids[0]), schema)
    arr = pa.array(texts, pa.large_string())
    if isinstance(analyzer, MultiAnalyzer):
        tokens = analyzer.analyze(arr, [analyzer_name] * len(texts) if analyzer_name else None)
    else:
        tokens = analyzer.analyze(arr)
    return SparseRows.from_arrow(term_frequencies(tokens, len(texts)))
