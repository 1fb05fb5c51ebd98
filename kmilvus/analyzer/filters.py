"""Milvus' token filters (analyzer `filter` lists), applied to the distinct tokens of a batch.

Every filter Milvus offers maps one token to zero or more tokens by itself (none looks at its
neighbours), so a batch's tokens are filtered through their distinct values only, each once, and
the answer is kept for the next batch. tantivy's filters run in tantivy (tantivy-py: a raw
tokenizer that passes the token through unchanged, then the filters, exactly as in Milvus'
analyzer); Milvus' own (`cncharonly`, `cnalphanumonly`, `removepunct`) are regular expressions
over the distinct tokens (RE2, whose `\\p{Han}` / `\\p{P}` classes are the Unicode ones Rust's
regex uses).

Names, parameters and error texts are Milvus' (tantivy-binding's filter builders).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Milvus' stemmer languages (tantivy's Language; "arabig" is Milvus' accepted typo).
STEMMER_LANGUAGES = {
    "arabic": "arabic",
    "arabig": "arabic",
    "danish": "danish",
    "dutch": "dutch",
    "english": "english",
    "finnish": "finnish",
    "french": "french",
    "german": "german",
    "greek": "greek",
    "hungarian": "hungarian",
    "italian": "italian",
    "norwegian": "norwegian",
    "portuguese": "portuguese",
    "romanian": "romanian",
    "russian": "russian",
    "spanish": "spanish",
    "swedish": "swedish",
    "tamil": "tamil",
    "turkish": "turkish",
}
# `_language_` stop word lists: Snowball's, as tantivy ships them (Milvus' lists are the same).
STOP_WORD_LANGUAGES = (
    "danish",
    "dutch",
    "english",
    "finnish",
    "french",
    "german",
    "hungarian",
    "italian",
    "norwegian",
    "portuguese",
    "russian",
    "spanish",
    "swedish",
)
_REGEX_KEEP = {"cncharonly": r"\p{Han}", "cnalphanumonly": r"[\p{Han}a-zA-Z0-9]"}
_REGEX_DROP = {"removepunct": r"[\p{P}\s]"}


class AnalyzerError(ValueError):
    """Analyzer params Milvus refuses (its tantivy-binding's message)."""


@dataclass
class _Tantivy:
    """A run of tantivy filters: (name, args) pairs for tantivy.Filter."""

    steps: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def build(self) -> Callable[[str], list[str]]:
        from tantivy import Filter, TextAnalyzerBuilder, Tokenizer

        builder = TextAnalyzerBuilder(Tokenizer.raw())
        for name, args in self.steps:
            builder = builder.filter(getattr(Filter, name)(*args))
        return builder.build().analyze


@dataclass
class _Regex:
    pattern: str
    keep: bool  # keep tokens that contain a match (else drop them)


Stage = _Tantivy | _Regex


def _string_list(value: Any, label: str) -> list[str]:
    if not isinstance(value, list):
        raise AnalyzerError(f"{label} should be array")
    if not all(isinstance(v, str) for v in value):
        raise AnalyzerError(f"{label} list item should be string")
    return value


def stop_words(words: list[str]) -> list[tuple[str, tuple[Any, ...]]]:
    """tantivy stop word filters for Milvus' `stop_words` (`_english_` names a language list)."""
    own = [w for w in words if not (w.startswith("_") and w.endswith("_") and len(w) > 2)]
    steps: list[tuple[str, tuple[Any, ...]]] = []
    for w in words:
        if w not in own:
            lang = w[1:-1]
            if lang not in STOP_WORD_LANGUAGES:
                raise AnalyzerError(
                    f"stop words language {w} is not supported here (supported: "
                    + ", ".join(f"_{x}_" for x in STOP_WORD_LANGUAGES)
                    + ")"
                )
            steps.append(("stopword", (lang,)))
    if own:
        steps.append(("custom_stopword", (own,)))
    return steps


def _filter_steps(spec: Any) -> _Regex | list[tuple[str, tuple[Any, ...]]]:
    """One entry of a `filter` list → regex stage, or tantivy steps."""
    if isinstance(spec, str):
        simple = {
            "lowercase": "lowercase",
            "asciifolding": "ascii_fold",
            "alphanumonly": "alphanum_only",
        }
        if spec in simple:
            return [(simple[spec], ())]
        if spec in _REGEX_KEEP:
            return _Regex(_REGEX_KEEP[spec], keep=True)
        if spec in _REGEX_DROP:
            return _Regex(_REGEX_DROP[spec], keep=False)
        raise AnalyzerError(f"build analyzer failed, filter not found :{spec}")
    if not isinstance(spec, dict):
        raise AnalyzerError("filter params should be string or dict")
    kind = spec.get("type")
    if kind is None:
        raise AnalyzerError("no type field in filter params")
    if not isinstance(kind, str):
        raise AnalyzerError("filter type should be string")
    if kind == "length":
        limit = spec.get("max")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise AnalyzerError("lenth max param was none or not uint")
        return [("remove_long", (limit + 1,))]  # tantivy drops tokens of limit bytes or more
    if kind == "stop":
        return stop_words(_string_list(spec.get("stop_words", []), "stop_words"))
    if kind == "decompounder":
        words = spec.get("word_list")
        if not isinstance(words, list):
            raise AnalyzerError("decompounder word list should be array")
        if not all(isinstance(w, str) for w in words):
            raise AnalyzerError("decompounder word list item should be string")
        return [("split_compound", (words,))]
    if kind == "stemmer":
        lang = spec.get("language")
        if not isinstance(lang, str):
            raise AnalyzerError("stemmer language field should be string")
        if lang.lower() not in STEMMER_LANGUAGES:
            raise AnalyzerError(f"create stemmer failed : unsupport language: {lang.lower()}")
        return [("stemmer", (STEMMER_LANGUAGES[lang.lower()],))]
    raise AnalyzerError(f"unsupport filter type: {kind}")


def stages(filters: list[Any] | None, extra: list[tuple[str, tuple[Any, ...]]] = ()) -> list[Stage]:  # type: ignore[assignment]
    """A `filter` list (then `extra` tantivy steps) → stages, adjacent tantivy filters in one."""
    out: list[Stage] = []
    for spec in filters or []:
        step = _filter_steps(spec)
        if isinstance(step, _Regex):
            out.append(step)
        elif out and isinstance(out[-1], _Tantivy):
            out[-1].steps.extend(step)
        else:
            out.append(_Tantivy(list(step)))
    if extra:
        if out and isinstance(out[-1], _Tantivy):
            out[-1].steps.extend(extra)
        else:
            out.append(_Tantivy(list(extra)))
    return out


class FilterChain:
    """The analyzer's filters over distinct tokens, with the answers kept (bounded)."""

    MAX_CACHED = 1 << 20

    def __init__(self, chain: list[Stage]):
        self.chain = chain
        self._fns = [s.build() if isinstance(s, _Tantivy) else s for s in chain]
        self._cache: dict[str, tuple[str, ...]] = {}

    def apply(self, tokens: pa.Array) -> tuple[pa.Array, np.ndarray]:
        """Distinct `tokens` → (every output token, the index of the input token it came from)."""
        if not self.chain or len(tokens) == 0:
            return tokens, np.arange(len(tokens), dtype=np.int64)
        cur, parent = tokens, np.arange(len(tokens), dtype=np.int64)
        for fn in self._fns:
            if isinstance(fn, _Regex):
                hit = pc.fill_null(pc.match_substring_regex(cur, fn.pattern), False)
                keep = hit if fn.keep else pc.invert(hit)
                mask = keep.to_numpy(zero_copy_only=False)
                cur, parent = cur.filter(keep), parent[mask]
            else:
                outs, counts = [], np.zeros(len(cur), np.int64)
                for i, t in enumerate(cur.to_pylist()):
                    r = fn(t)
                    counts[i] = len(r)
                    outs.extend(r)
                cur, parent = pa.array(outs, pa.large_string()), np.repeat(parent, counts)
        return cur, parent

    def cached(self, tokens: list[str]) -> list[tuple[str, ...]]:
        """The outputs of each distinct token, remembered across batches."""
        cache, missing = self._cache, [t for t in tokens if t not in self._cache]
        if missing:
            if len(cache) + len(missing) > self.MAX_CACHED:
                cache.clear()
            outs, parent = self.apply(pa.array(missing, pa.large_string()))
            per: list[list[str]] = [[] for _ in missing]
            for p, o in zip(parent.tolist(), outs.to_pylist(), strict=True):
                per[p].append(o)
            for t, o in zip(missing, per, strict=True):
                cache[t] = tuple(o)
        return [cache[t] for t in tokens]
