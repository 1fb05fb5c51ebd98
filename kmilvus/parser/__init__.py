"""Milvus' boolean expressions (internal/parser/planparserv2): parse once into a `Plan`, evaluate
it column-wise over Arrow data.

    plan = parse('id in [1, 2] and meta["k"] > 3', schema)   # MilvusError 1100 when malformed
    plan.primary_keys()                                     # keys of a pure primary-key term, else None
"""

from kmilvus.parser.parser import parse
from kmilvus.parser.plan import Plan

__all__ = ["Plan", "parse"]
