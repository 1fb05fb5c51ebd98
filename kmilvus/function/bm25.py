"""The BM25 function (Milvus' BM25FunctionRunner): a text becomes a sparse vector of term
frequencies — each token's dimension is Milvus' hash of it (CRC-32 of its first 100 bytes, modulo
2^32-1: typeutil.HashString2LessUint32), its value how often it occurs in the text. The IDF and
the document-length normalisation happen at search time (querynode/bm25.py), from statistics of
the segments searched.

Columnar: the analyzer tokenizes the whole batch, the distinct tokens are hashed once, and the
(row, dimension) counts come from one numpy sort."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.analyzer import MultiAnalyzer, Tokens
from kmilvus.analyzer.fields import analyzer_of
from kmilvus.function.schema import bm25_functions, field_by_id

__all__ = ["bm25_functions", "fill_outputs", "run", "term_frequencies", "token_hash"]
from kmilvus.util import fieldtypes

_HASHED_BYTES = 100  # Milvus' substringLengthForCRC
_MOD = 0xFFFFFFFF


def token_hash(token: str) -> int:
    return zlib.crc32(token.encode()[:_HASHED_BYTES]) % _MOD


def token_hashes(tokens: pa.Array) -> np.ndarray:
    """The dimension of every token (each distinct token hashed once)."""
    if len(tokens) == 0:
        return np.zeros(0, np.uint32)
    enc = pc.dictionary_encode(tokens)
    uniq = np.fromiter((token_hash(t) for t in enc.dictionary.to_pylist()), np.uint32, len(enc.dictionary))
    result: np.ndarray = uniq[enc.indices.to_numpy(zero_copy_only=False)]
    return result


def term_frequencies(tokens: Tokens, num_rows: int) -> pa.Array:
    """Tokens of `num_rows` texts → `map<uint32, float32>`: per row, dimension → count."""
    dims = token_hashes(tokens.text).astype(np.uint64)
    key = (tokens.row.astype(np.uint64) << np.uint64(32)) | dims
    uniq, counts = np.unique(key, return_counts=True)
    rows = (uniq >> np.uint64(32)).astype(np.int64)
    per_row = np.bincount(rows, minlength=num_rows)
    return fieldtypes.sparse_pairs_to_arrow(
        (uniq & np.uint64(_MOD)).astype(np.uint32), counts.astype(np.float32), per_row, "bm25"
    )


def analyze_column(
    schema: schema_pb2.CollectionSchema, input_field: schema_pb2.FieldSchema, texts: pa.Array, by: pa.Array | None
) -> Tokens:
    analyzer = analyzer_of(input_field, schema)
    if isinstance(analyzer, MultiAnalyzer):
        return analyzer.analyze(texts, by)
    return analyzer.analyze(texts)


def run(
    schema: schema_pb2.CollectionSchema, fn: schema_pb2.FunctionSchema, columns: Mapping[int, pa.Array]
) -> pa.Array:
    """The output column of one BM25 function over the batch's `columns` (by field ID)."""
    field = field_by_id(schema, fn.input_field_ids[0])
    texts = columns[field.fieldID]
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    analyzer = analyzer_of(field, schema)
    by = None
    if isinstance(analyzer, MultiAnalyzer):
        by_field = next(f for f in schema.fields if f.name == analyzer.by_field)
        by = columns.get(by_field.fieldID)
    return term_frequencies(analyze_column(schema, field, texts, by), len(texts))


def fill_outputs(schema: schema_pb2.CollectionSchema, columns: dict[int, pa.Array]) -> None:
    """Run every BM25 function of `schema` over `columns` and put its output column in."""
    for fn in bm25_functions(schema):
        columns[fn.output_field_ids[0]] = run(schema, fn, columns)
