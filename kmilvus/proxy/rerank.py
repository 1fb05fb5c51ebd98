"""Rerankers (Milvus' internal/util/function/rerank): RRF, weighted (with Milvus' per-metric
score normalisation) and decay (gauss / exp / linear on a numeric field), from a rerank
`FunctionScore` or a hybrid search's legacy rank params (`strategy` / `params`, what pymilvus'
RRFRanker and WeightedRanker send). A model reranker calls an external service: refused.

Inputs are the per-request result tables of the searches (columns "nq", "score", "pk", output
fields by ID, "group" for a group-by search), each per query best first; the fusion is numpy and
Arrow over whole columns: a contribution per hit, a group-by (query, pk) aggregation, one sort.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.index.params import larger_is_closer
from kmilvus.reduce import groupby
from kmilvus.util import merr

DT = schema_pb2.DataType
RERANK = schema_pb2.FunctionType.Rerank
RRF_DEFAULT_K = 60.0
RRF_MAX_K = 16384
NUMERIC = (DT.Int8, DT.Int16, DT.Int32, DT.Int64, DT.Float, DT.Double)
SUPPORTED = "decay,model,rrf,weighted"  # the list Milvus' message names
GROUP_SCORERS = ("max", "sum", "avg")


def _plain(message: str) -> merr.MilvusError:
    """Milvus answers the reranker's own (unwrapped) errors with its unexpected-error code."""
    return merr.MilvusError(merr.UNEXPECTED, message)


def _to_greater(score: np.ndarray, metric: str) -> np.ndarray:
    """Milvus' toGreaterScore: larger is better for every metric (L2: 1 - 2·atan(d)/π)."""
    if larger_is_closer(metric):
        return score
    greater: np.ndarray = 1.0 - 2.0 * np.arctan(score) / np.pi
    return greater


def _normalize(score: np.ndarray, metric: str, norm: bool, mixed: bool) -> np.ndarray:
    """Milvus' getNormalizeFunc."""
    if not norm:
        return _to_greater(score, metric) if mixed else score
    normalized: np.ndarray
    if metric == "COSINE":
        normalized = (1.0 + score) * 0.5
    elif metric == "IP":
        normalized = 0.5 + np.arctan(score) / np.pi
    elif metric == "BM25":
        normalized = 2.0 * np.arctan(score) / np.pi
    else:
        normalized = 1.0 - 2.0 * np.arctan(score) / np.pi
    return normalized


@dataclass
class Fusion:
    """What a reranker does with one hit per search request: a per-row contribution, how the
    contributions of one primary key add up, and whether the fused score sorts descending."""

    contribution: Callable[[pa.Table, list[str]], np.ndarray]
    aggregate: str  # "sum" or "max"
    descending: Callable[[list[str]], bool]
    input_fields: tuple[int, ...] = ()  # fields the searches must return for the reranker
    finish: Callable[[pa.Table, np.ndarray], np.ndarray] | None = None  # fused → final score
    supports_group: bool = True
    name: str = ""


def rrf(k: float) -> Fusion:
    def contribution(t: pa.Table, metrics: list[str]) -> np.ndarray:
        reciprocal: np.ndarray = 1.0 / (k + t.column("_rank").to_numpy() + 1.0)
        return reciprocal

    return Fusion(contribution, "sum", lambda m: True, name="rrf")


def weighted(weights: list[float], norm: bool) -> Fusion:
    def contribution(t: pa.Table, metrics: list[str]) -> np.ndarray:
        if len(metrics) != len(weights):
            raise merr.invalid(
                "the length of weights param mismatch with ann search requests: "
                f"invalid parameter[expected={len(metrics)}][actual={len(weights)}]"
            )
        req = t.column("_req").to_numpy()
        score = t.column("score").to_numpy().astype(np.float64)
        mixed = len({larger_is_closer(m) for m in metrics}) > 1
        out = np.empty(len(score))
        for i, m in enumerate(metrics):  # one vector op per search request, not per row
            sel = req == i
            out[sel] = weights[i] * _normalize(score[sel], m, norm, mixed)
        return out

    def descending(metrics: list[str]) -> bool:
        kinds = {larger_is_closer(m) for m in metrics}
        return norm or len(kinds) > 1 or kinds == {True}

    return Fusion(contribution, "sum", descending, name="weighted")


_DECAY = {
    "gauss": lambda d, scale, decay: np.exp(d**2 / (scale**2 / math.log(decay))),
    "exp": lambda d, scale, decay: np.exp(math.log(decay) / scale * d),
    "linear": lambda d, scale, decay: np.maximum(decay, 1.0 - (1.0 - decay) / scale * d),
}


def decay(
    field: schema_pb2.FieldSchema, function: str, origin: float, scale: float, offset: float, rate: float
) -> Fusion:
    """Milvus' decay reranker: score = decay(|value - origin| - offset) × max over the requests
    of the hit's score made larger-is-better."""
    curve = _DECAY[function]

    def contribution(t: pa.Table, metrics: list[str]) -> np.ndarray:
        req = t.column("_req").to_numpy()
        score = t.column("score").to_numpy().astype(np.float64)
        out = np.empty(len(score))
        for i, m in enumerate(metrics):
            sel = req == i
            out[sel] = _to_greater(score[sel], m)
        return out

    def finish(t: pa.Table, fused: np.ndarray) -> np.ndarray:
        col = t.column(str(field.fieldID))
        value = col.to_numpy(zero_copy_only=False).astype(np.float64)
        dist = np.maximum(0.0, np.abs(value - origin) - offset)
        decayed: np.ndarray = curve(dist, scale, rate) * fused
        return decayed

    return Fusion(contribution, "max", lambda m: True, (field.fieldID,), finish, supports_group=False, name="decay")


def _params(fn: schema_pb2.FunctionSchema) -> dict[str, str]:
    return {p.key.lower(): p.value for p in fn.params}


def _rrf_from(fn: schema_pb2.FunctionSchema) -> Fusion:
    if fn.input_field_names:
        raise _plain(f"The rrf function does not support input parameters, but got [{' '.join(fn.input_field_names)}]")
    k = RRF_DEFAULT_K
    raw = _params(fn).get("k")
    if raw is not None:
        try:
            k = float(raw)
        except ValueError:
            raise _plain(f"Param k:{raw} is not a number") from None
    if k <= 0 or k >= RRF_MAX_K:
        raise _plain(f"The rank params k should be in range (0, {RRF_MAX_K})")
    return rrf(k)


def _weighted_from(fn: schema_pb2.FunctionSchema) -> Fusion:
    if fn.input_field_names:
        raise _plain(
            f"The weighted function does not support input parameters, but got [{' '.join(fn.input_field_names)}]"
        )
    weights: list[float] = []
    norm = False
    for key, raw in _params(fn).items():
        if key == "weights":
            try:
                weights = [float(w) for w in json.loads(raw)]
            except (ValueError, TypeError):
                raise _plain(f"Parse weights param failed, weight should be []float, bug got: {raw}") from None
            if any(w < 0 or w > 1 for w in weights):
                raise _plain("rank param weight should be in range [0, 1]")
        elif key == "norm_score":
            if raw.lower() not in ("1", "t", "true", "0", "f", "false"):
                raise _plain(f"norm_score params must be true/false, bug got {raw}")
            norm = raw.lower() in ("1", "t", "true")
    if not weights:
        raise _plain("weights not found")
    return weighted(weights, norm)


def _decay_from(fn: schema_pb2.FunctionSchema, schema: schema_pb2.CollectionSchema) -> Fusion:
    names = list(fn.input_field_names)
    if len(names) != 1:
        raise _plain(f"Decay function only supoorts single input, but gets [{' '.join(names)}] input")
    field = next(f for f in schema.fields if f.name == names[0])
    if field.data_type not in NUMERIC:
        raise _plain(
            f"Decay rerank: unsupported input field type:{DT.Name(field.data_type)}, only support numberic field"
        )
    p = _params(fn)
    values: dict[str, float] = {"offset": 0.0, "decay": 0.5}
    for key in ("origin", "scale", "offset", "decay"):
        if key in p:
            try:
                values[key] = float(p[key])
            except ValueError:
                raise _plain(f"Param {key}:{p[key]} is not a number") from None
    for key in ("origin", "scale"):
        if key not in values:
            raise _plain(f"Decay function lost param: {key}")
    if values["scale"] <= 0:
        raise _plain(f"Decay function param: scale must > 0, but got {values['scale']:f}")
    if values["offset"] < 0:
        raise _plain(f"Decay function param: offset must >= 0, but got {values['offset']:f}")
    if not 0 < values["decay"] < 1:
        raise _plain(f"Decay function param: decay must 0 < decay < 1, but got {values['offset']:f}")
    function = p.get("function", "")
    if function not in _DECAY:
        raise _plain("Invaild decay function: decay, only support [gauss,linear,exp]")
    return decay(field, function, values["origin"], values["scale"], values["offset"], values["decay"])


def from_function_score(score: schema_pb2.FunctionScore, schema: schema_pb2.CollectionSchema) -> Fusion:
    """A FunctionScore as Milvus' NewFunctionScore reads it (one rerank function)."""
    if score.params:
        raise merr.MilvusError(
            merr.SERVICE_UNIMPLEMENTED, "function score params is not supported by kmilvus: service unimplemented"
        )
    if len(score.functions) != 1:
        raise _plain(f"Currently only supports one rerank, but got {len(score.functions)}")
    fn = score.functions[0]
    if fn.type != RERANK:
        raise _plain(f"{schema_pb2.FunctionType.Name(fn.type)} is not rerank function.")
    if fn.output_field_names:
        raise _plain(f"Rerank function should not have output field, but now is {len(fn.output_field_names)}")
    by_name = {f.name: f for f in schema.fields}
    for name in fn.input_field_names:
        if name == "":
            raise merr.invalid("rerank input field cannot be empty string: invalid parameter")
        if list(fn.input_field_names).count(name) > 1:
            raise merr.invalid(
                f"each function input field should be used exactly once in the same function, input field: {name}"
                ": invalid parameter"
            )
        if name not in by_name:
            raise merr.invalid(f"function input field not found: {name}: invalid parameter")
        if by_name[name].nullable:
            raise merr.invalid(f"function input field cannot be nullable: field {name}: invalid parameter")
    name = _params(fn).get("reranker", "").lower()
    if name == "rrf":
        return _rrf_from(fn)
    if name == "weighted":
        return _weighted_from(fn)
    if name == "decay":
        return _decay_from(fn, schema)
    # "model" calls an external rerank service (TEI, vLLM, Cohere, ...): not reachable from here.
    raise _plain(f"Unsupported rerank function: [{name}] , list of supported [{SUPPORTED}]".replace("model,", "", 1))


def from_rank_params(params: dict[str, str]) -> Fusion:
    """A hybrid search's legacy rank params (Milvus' NewFunctionScoreWithlegacy)."""
    if "strategy" not in params:
        return rrf(RRF_DEFAULT_K)
    strategy = _load(params["strategy"])
    if strategy not in ("rrf", "weighted"):
        raise _plain(f"unsupported rank type {strategy}")
    if "params" not in params:
        raise _plain("params not found in rank_params")
    try:
        inner = json.loads(params["params"])
    except ValueError as exc:
        raise _plain(f"Parse rerank params failed, err: {exc}") from None
    fn = schema_pb2.FunctionSchema(type=RERANK)
    fn.params.add(key="reranker", value=strategy)
    if strategy == "rrf":
        if "k" in inner:
            if isinstance(inner["k"], bool) or not isinstance(inner["k"], int | float):
                raise _plain("The type of rank param k should be float")
            fn.params.add(key="k", value=repr(float(inner["k"])))
        return _rrf_from(fn)
    if "weights" in inner:
        fn.params.add(key="weights", value=json.dumps(inner["weights"]))
    if "norm_score" in inner:
        if not isinstance(inner["norm_score"], bool):
            raise _plain(
                "Weighted rerank err, norm_score should been bool type, but "
                f"[norm_score:{inner['norm_score']}]'s type is {type(inner['norm_score']).__name__}"
            )
        fn.params.add(key="norm_score", value=str(inner["norm_score"]).lower())
    return _weighted_from(fn)


def _load(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def group_scorer(params: dict[str, str]) -> str:
    """A hybrid group-by's group score (rank_group_scorer: max, sum or avg)."""
    name = params.get("rank_group_scorer", "max")
    if name not in GROUP_SCORERS:
        raise merr.invalid(f"input group scorer type: {name} is not supported!: invalid parameter")
    return name


def _ranked(tables: Sequence[pa.Table]) -> pa.Table:
    """The requests' hits in one table with "_req" (request index), "_rank" (rank within the
    request's answer to the query, 0 = best) and "_row" (position in this table)."""
    parts = []
    for i, t in enumerate(tables):
        nq = t.column("nq").to_numpy()
        rank = np.arange(len(nq)) - np.searchsorted(nq, nq, side="left")
        parts.append(
            t.append_column("_req", pa.array(np.full(len(nq), i, np.int32))).append_column(
                "_rank", pa.array(rank.astype(np.int64))
            )
        )
    out = pa.concat_tables(parts, promote_options="default")
    return out.append_column("_row", pa.array(np.arange(out.num_rows, dtype=np.int64)))


def _round(score: np.ndarray, decimals: int) -> np.ndarray:
    if decimals < 0:
        return score
    m = 10.0**decimals
    return np.floor(score * m + 0.5) / m


@dataclass
class Window:
    """What the fused answer keeps: `limit` after `offset` (hits, or groups for a group-by)."""

    limit: int
    offset: int = 0
    round_decimal: int = -1
    group_size: int = 1
    strict_group_size: bool = False
    group_scorer: str = "max"
    grouped: bool = False


def fuse(fusion: Fusion, tables: Sequence[pa.Table], metrics: list[str], window: Window) -> pa.Table:
    """The reranked answer: one row per (query, primary key), best first, with its fused score
    and the output fields of its first hit. Columns as a search result's."""
    hits = _ranked(tables)
    if hits.num_rows == 0:
        return tables[0].slice(0, 0) if tables else pa.table({"nq": pa.array([], pa.int32())})
    hits = hits.append_column("_c", pa.array(fusion.contribution(hits, metrics)))
    agg = hits.group_by(["nq", "pk"], use_threads=False).aggregate([("_c", fusion.aggregate), ("_row", "min")])
    fused = agg.column(f"_c_{fusion.aggregate}").to_numpy().astype(np.float64)
    first = hits.take(agg.column("_row_min"))
    if fusion.finish is not None:
        fused = fusion.finish(first, fused)
    descending = fusion.descending(metrics)
    first = first.set_column(first.schema.get_field_index("score"), "score", pa.array(fused, pa.float64()))
    order = pc.sort_indices(
        first,
        sort_keys=[("nq", "ascending"), ("score", "descending" if descending else "ascending"), ("pk", "ascending")],
    )
    first = first.take(order)
    if window.grouped:
        first = _group_window(first, window, descending)
    else:
        nq = first.column("nq").to_numpy()
        rank = np.arange(len(nq)) - np.searchsorted(nq, nq, side="left")
        first = first.filter(pa.array((rank >= window.offset) & (rank < window.offset + window.limit)))
    score = _round(first.column("score").to_numpy(), window.round_decimal).astype(np.float32)
    first = first.set_column(first.schema.get_field_index("score"), "score", pa.array(score))
    return first.drop_columns([c for c in ("_req", "_rank", "_row", "_c") if c in first.column_names])


def _group_window(t: pa.Table, w: Window, descending: bool) -> pa.Table:
    """Milvus' newGroupingIDScores: per query, each group's best `group_size` hits; groups by
    their score (max, sum or avg of those hits), larger groups first on a tie, then the smaller
    first primary key; groups [offset, offset + limit), strict groups only when asked."""
    if t.num_rows == 0:
        return t
    nq = t.column("nq").to_numpy().astype(np.int64)
    score = t.column("score").to_numpy().astype(np.float64)
    code, ngroups = groupby.codes(t.column(groupby.GROUP))
    keys = nq * max(ngroups, 1) + code
    order = np.argsort(keys, kind="stable")  # rows of a group together, in score order
    sk = keys[order]
    start = np.searchsorted(sk, sk, side="left")
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - start
    keep = rank < w.group_size
    # per group (over its kept rows): size, max, sum, position of its first (best) row
    kept_keys = keys[keep]
    uniq, inv = np.unique(kept_keys, return_inverse=True)
    size = np.bincount(inv)
    total = np.bincount(inv, weights=score[keep])
    best = np.full(len(uniq), -np.inf)
    np.maximum.at(best, inv, score[keep] if descending else -score[keep])
    gscore = {"max": best if descending else -best, "sum": total, "avg": total / size}[w.group_scorer]
    pos = np.flatnonzero(keep)
    first_row = np.full(len(uniq), len(keys), dtype=np.int64)
    np.minimum.at(first_row, inv, pos)
    first_pk = t.column("pk").take(pa.array(first_row))
    gq = uniq // max(ngroups, 1)
    sort_score = -gscore if descending else gscore
    pk_rank = pc.rank(first_pk, sort_keys="ascending", tiebreaker="dense").to_numpy()
    gorder = np.lexsort((pk_rank, -size, sort_score, gq))
    gq_sorted = gq[gorder]
    ordinal = np.empty(len(uniq), dtype=np.int64)
    ordinal[gorder] = np.arange(len(uniq)) - np.searchsorted(gq_sorted, gq_sorted, side="left")
    chosen = (ordinal >= w.offset) & (ordinal < w.offset + w.limit)
    if w.strict_group_size:
        chosen &= size >= w.group_size
    row_group = np.full(len(keys), -1, dtype=np.int64)
    row_group[pos] = inv
    sel = pos[chosen[inv]]
    out_order = sel[np.lexsort((sel, ordinal[row_group[sel]], nq[sel]))]
    return t.take(pa.array(out_order))
