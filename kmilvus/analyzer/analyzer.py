"""An analyzer (Milvus' `analyzer_params`): a tokenizer and filters, built from the JSON a field
carries; a multi-analyzer (`multi_analyzer_params`) picks one per row by another field's value.

Built-in analyzers, as Milvus (tantivy-binding's build_in_analyzer):
- `standard`: standard tokenizer, lowercase (and `stop_words` if given) — also the default;
- `english`: standard tokenizer, lowercase, English stemmer, English stop words (then `stop_words`);
- `chinese`: jieba tokenizer (search mode), `cnalphanumonly` (then `stop_words`).
A custom analyzer is `{"tokenizer": ..., "filter": [...]}`; its tokenizer is `standard`,
`whitespace` or `jieba` (`{"type": "jieba", "dict": [...], "mode": "exact"|"search", "hmm": bool}`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kmilvus.analyzer import tokenizers as T
from kmilvus.analyzer.filters import AnalyzerError, FilterChain, Stage, stages, stop_words

ENGLISH_STOP_WORDS = [("stopword", ("english",))]


class Analyzer:
    def __init__(self, tokenize: Callable[[pa.Array], T.Tokens], chain: list[Stage]):
        self.tokenize = tokenize
        self.filters = FilterChain(chain)

    def analyze(self, texts: pa.Array) -> T.Tokens:
        """Every token of every text (a null text has none), filtered."""
        raw = self.tokenize(texts)
        if not len(raw) or not self.filters.chain:
            return raw
        enc = pc.dictionary_encode(raw.text)
        idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        outs = self.filters.cached(enc.dictionary.to_pylist())
        counts = np.fromiter((len(o) for o in outs), np.int64, len(outs))
        first_out = np.zeros(len(outs) + 1, np.int64)
        np.cumsum(counts, out=first_out[1:])
        k = counts[idx]
        rep = np.repeat(np.arange(len(raw), dtype=np.int64), k)
        group_start = np.repeat(np.cumsum(k) - k, k)
        which = first_out[idx[rep]] + (np.arange(len(rep), dtype=np.int64) - group_start)
        flat = pa.array([t for o in outs for t in o], pa.large_string())
        return T.Tokens(
            raw.row[rep],
            raw.position[rep],
            raw.start[rep],
            raw.end[rep],
            flat.take(pa.array(which)),
            None if raw.position_length is None else raw.position_length[rep],
        )


def _tokenizer(spec: Any) -> Callable[[pa.Array], T.Tokens]:
    name: object
    if isinstance(spec, str):
        name, params = spec, None
    elif isinstance(spec, dict):
        name = spec.get("type")
        if name is None:
            raise AnalyzerError("costum tokenizer must set type")
        if not isinstance(name, str):
            raise AnalyzerError("tokenizer type should be string")
        params = spec
    else:
        raise AnalyzerError("tokenizer name should be string or dict")
    if name == "standard":
        return T.standard
    if name == "whitespace":
        return T.whitespace
    if name == "jieba":
        return _jieba(params or {})
    raise AnalyzerError(f"unsupported tokenizer: {name}")


def _jieba(params: dict[str, Any]) -> T.Jieba:
    words, default = None, True
    if "dict" in params:
        d = params["dict"]
        if not isinstance(d, list):
            raise AnalyzerError("jieba tokenizer dict must be array")
        if not all(isinstance(w, str) for w in d):
            raise AnalyzerError("jieba tokenizer dict item must be string")
        default = "_default_" in d
        words = [w for w in d if w != "_default_"]
    mode = params.get("mode", "search")
    if not isinstance(mode, str):
        raise AnalyzerError("jieba tokenizer mode must be string")
    if mode not in ("exact", "search"):
        raise AnalyzerError('jieba tokenizer mode must be "exact" or "search"')
    hmm = params.get("hmm", True)
    if not isinstance(hmm, bool):
        raise AnalyzerError("jieba tokenizer mode must be boolean")
    return T.Jieba(mode, hmm, words, default)


def _extra_stop_words(params: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    if "stop_words" not in params:
        return []
    words = params["stop_words"]
    if not isinstance(words, list):
        raise AnalyzerError("filter stop_words should be array")
    if not all(isinstance(w, str) for w in words):
        raise AnalyzerError("filter stop_words list item should be string")
    return stop_words(words)


def _build(params: dict[str, Any]) -> Analyzer:
    if not params:
        return Analyzer(T.standard, stages(["lowercase"]))
    if "type" in params:
        kind = params["type"]
        if not isinstance(kind, str):
            raise AnalyzerError("analyzer type shoud be string")
        extra = _extra_stop_words(params)
        if kind == "standard":
            return Analyzer(T.standard, stages(["lowercase"], extra))
        if kind == "english":
            steps = [*ENGLISH_STOP_WORDS, *extra]
            return Analyzer(T.standard, stages(["lowercase", {"type": "stemmer", "language": "english"}], steps))
        if kind == "chinese":
            return Analyzer(_jieba({}), stages(["cnalphanumonly"], extra))
        raise AnalyzerError(f"unknown build-in analyzer type: {kind}")
    if "tokenizer" not in params:
        raise AnalyzerError("tokenizer name or type must be set")
    tokenize = _tokenizer(params["tokenizer"])
    for key in params:
        if key not in ("tokenizer", "filter"):
            raise AnalyzerError(f"unknown analyzer option key: {key}")
    filters = params.get("filter", [])
    if not isinstance(filters, list):
        raise AnalyzerError("filter params should be array")
    return Analyzer(tokenize, stages(filters))


def parse_params(params: str | dict[str, Any] | None) -> dict[str, Any]:
    if params is None or params == "":
        return {}
    if isinstance(params, dict):
        return params
    try:
        value = json.loads(params)
    except ValueError as exc:
        raise AnalyzerError(f"analyzer params is not valid json: {exc}") from None
    if not isinstance(value, dict):
        raise AnalyzerError("params should be a json map")
    return value


@functools.lru_cache(maxsize=256)
def _cached(canonical: str) -> Analyzer:
    return _build(json.loads(canonical))


def build(params: str | dict[str, Any] | None) -> Analyzer:
    """The analyzer of `analyzer_params` (JSON text or a dict; empty: `standard`), shared by
    every caller with the same params (its filter cache too). AnalyzerError: Milvus refuses."""
    return _cached(json.dumps(parse_params(params), sort_keys=True))


class MultiAnalyzer:
    """Milvus' multi-language analyzer: `by_field` names the VarChar field whose value picks the
    analyzer of each row (`alias` maps values to names, an unknown one takes `default`)."""

    def __init__(self, by_field: str, analyzers: dict[str, Analyzer], alias: dict[str, str]):
        self.by_field, self.analyzers, self.alias = by_field, analyzers, alias

    def resolve(self, name: str | None) -> str:
        name = self.alias.get(name or "", name or "")
        return name if name in self.analyzers else "default"

    def analyze(self, texts: pa.Array, names: pa.Array | list[str | None] | None = None) -> T.Tokens:
        if names is None:
            return self.analyzers["default"].analyze(texts)
        values = names.to_pylist() if isinstance(names, (pa.Array, pa.ChunkedArray)) else list(names)
        chosen = np.array([self.resolve(v) for v in values], dtype=object)
        parts = []
        for name in dict.fromkeys(chosen.tolist()):
            rows = np.flatnonzero(chosen == name)
            toks = self.analyzers[name].analyze(texts.take(pa.array(rows)))
            toks.row = rows[toks.row]
            parts.append(toks)
        return concat(parts)


def concat(parts: list[T.Tokens]) -> T.Tokens:
    """Tokens of several batches over the same rows, back in row order."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return T.Tokens.empty()
    if len(parts) == 1:
        return parts[0]
    row = np.concatenate([p.row for p in parts])
    order = np.argsort(row, kind="stable")
    cat = np.concatenate
    lengths = cat([p.lengths() for p in parts])
    text = pa.concat_arrays([p.text.cast(pa.large_string()) for p in parts])
    return T.Tokens(
        row[order],
        cat([p.position for p in parts])[order],
        cat([p.start for p in parts])[order],
        cat([p.end for p in parts])[order],
        text.take(pa.array(order)),
        lengths[order],
    )


def multi(params: str | dict[str, Any], field_types: dict[str, int] | None = None) -> MultiAnalyzer:
    """`multi_analyzer_params` → MultiAnalyzer, checked as Milvus' validateMultiAnalyzerParams
    (`field_types`: the collection's field name → data type, to check `by_field`)."""
    from pymilvus.grpc_gen import schema_pb2

    p = parse_params(params)
    if "by_field" not in p:
        raise AnalyzerError("multi analyzer params now must set by_field to specify with field decide analyzer")
    by = p["by_field"]
    if not isinstance(by, str):
        raise AnalyzerError(f"multi analyzer params by_field must be string but now: {json.dumps(by)}")
    if field_types is not None:
        if by not in field_types:
            raise AnalyzerError(f'multi analyzer dependent field "{by}" not exist in collection')
        if field_types[by] != schema_pb2.DataType.VarChar:
            raise AnalyzerError(f"multi analyzer params now only support by string field, but field {by} is not string")
    alias = p.get("alias", {})
    if not isinstance(alias, dict) or not all(isinstance(v, str) for v in alias.values()):
        raise AnalyzerError(f"multi analyzer alias must be string map but now: {json.dumps(alias)}")
    if "analyzers" not in p:
        raise AnalyzerError("multi analyzer params must set analyzers ")
    specs = p["analyzers"]
    if not isinstance(specs, dict):
        raise AnalyzerError(f"unmarshal analyzers failed: {json.dumps(specs)}")
    analyzers = {}
    for name, spec in specs.items():
        try:
            analyzers[name] = build(spec if isinstance(spec, dict) else parse_params(spec))
        except AnalyzerError as exc:
            raise AnalyzerError(f"analyzer {name} params invalid: {exc}") from None
    if "default" not in analyzers:
        raise AnalyzerError("multi analyzer must set default analyzer for all unknown value")
    return MultiAnalyzer(by, analyzers, alias)
