"""Milvus' analyzers (tokenizer + filters) for full-text search and text match: see
analyzer.py (params, built-ins, multi-language), tokenizers.py, filters.py, fields.py."""

from kmilvus.analyzer.analyzer import Analyzer, MultiAnalyzer, build, multi
from kmilvus.analyzer.filters import AnalyzerError
from kmilvus.analyzer.tokenizers import Tokens

__all__ = ["Analyzer", "AnalyzerError", "MultiAnalyzer", "Tokens", "build", "multi"]
