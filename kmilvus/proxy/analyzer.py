"""RunAnalyzer (MilvusService.RunAnalyzer; pymilvus' `run_analyzer`): what a text becomes under
an analyzer — given by its params, or a collection field's (with `analyzer_names` choosing among
a multi-analyzer's). Each token with its byte offsets, position and position length (with
`with_detail`) and its BM25 dimension (with `with_hash`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pyarrow as pa
from pymilvus.grpc_gen import milvus_pb2

from kmilvus.analyzer import Analyzer, AnalyzerError, MultiAnalyzer, Tokens, build
from kmilvus.analyzer import fields as af
from kmilvus.function.bm25 import token_hash
from kmilvus.util import merr

if TYPE_CHECKING:
    from kmilvus.proxy.host import ProxyHost
else:
    ProxyHost = object


def _decode(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise merr.invalid("analyzer input text is not valid UTF-8") from None


def analyze_texts(analyzer: Analyzer | MultiAnalyzer, texts: list[str], names: list[str] | None) -> Tokens:
    arr = pa.array(texts, pa.large_string())
    if isinstance(analyzer, MultiAnalyzer):
        return analyzer.analyze(arr, names)
    return analyzer.analyze(arr)


def results(tokens: Tokens, n: int, with_hash: bool, with_detail: bool) -> list[milvus_pb2.AnalyzerResult]:
    out = [milvus_pb2.AnalyzerResult() for _ in range(n)]
    words = tokens.text.to_pylist()
    lengths = tokens.lengths()
    for i, row in enumerate(tokens.row.tolist()):
        t = out[row].tokens.add(token=words[i])
        if with_detail:
            t.start_offset = int(tokens.start[i])
            t.end_offset = int(tokens.end[i])
            t.position = int(tokens.position[i])
            t.position_length = int(lengths[i])
        if with_hash:
            t.hash = token_hash(words[i])
    return out


class ProxyAnalyzerMixin(ProxyHost):
    @merr.rpc(milvus_pb2.RunAnalyzerResponse)
    async def RunAnalyzer(self, req: milvus_pb2.RunAnalyzerRequest, context=None):
        texts = [_decode(p) for p in req.placeholder]
        names = list(req.analyzer_names) or None
        if req.collection_name:
            meta = await self.meta_cache.get(req.db_name, req.collection_name)
            field = next((f for f in meta.schema.fields if f.name == req.field_name), None)
            if field is None:
                raise merr.MilvusError(merr.FIELD_NOT_FOUND, f"field not found[field={req.field_name}]")
            if not af.enable_analyzer(field):
                raise merr.invalid(f"field {req.field_name} does not enable analyzer")
            analyzer: Analyzer | MultiAnalyzer = af.analyzer_of(field, meta.schema)
        else:
            try:
                analyzer = build(req.analyzer_params)
            except AnalyzerError as exc:
                raise merr.invalid(f"create analyzer failed: {exc}") from None
        if names is not None:
            if not isinstance(analyzer, MultiAnalyzer):
                raise merr.invalid("analyzer names are set but the analyzer is not a multi analyzer")
            if len(names) == 1:
                names = names * len(texts)
            elif len(names) != len(texts):
                raise merr.invalid(
                    f"analyzer names length not equal to input text length: {len(names)} != {len(texts)}"
                )
        tokens = await asyncio.to_thread(analyze_texts, analyzer, texts, names)
        resp = milvus_pb2.RunAnalyzerResponse(status=merr.success())
        resp.results.extend(results(tokens, len(texts), req.with_hash, req.with_detail))
        return resp
