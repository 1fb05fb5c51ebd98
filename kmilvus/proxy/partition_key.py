"""Partition key mode in the Proxy (Milvus' `isPartitionKeyMode` paths): a collection whose schema
has an `is_partition_key` field gets `num_partitions` partitions `_default_0` … `_default_{n-1}`
(RootCoord creates them); each row goes to partition `hash(key) % n` with Milvus' own hashes
(Hash32Int64 / HashString2Uint32, kmilvus/util/hashing.py), so rows land where Milvus puts them; a
search or query whose filter pins the key (`key == v`, `key in [...]`, under `and`, or an `or` of
such) reads only the partitions those values hash to; and naming partitions is refused, with
Milvus' codes and texts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pymilvus.grpc_gen import schema_pb2

from kmilvus.parser import parse, template_values
from kmilvus.parser import plan as P
from kmilvus.util import merr
from kmilvus.util.constants import DEFAULT_PARTITION
from kmilvus.util.hashing import hash32_int64, hash_string2uint32

DT = schema_pb2.DataType
NAMED_PARTITIONS = "not support manually specifying the partition names if partition key mode is used"


def key_field(schema: schema_pb2.CollectionSchema) -> schema_pb2.FieldSchema | None:
    return next((f for f in schema.fields if f.is_partition_key), None)


def refuse_ddl(meta: Any, what: str) -> None:
    """CreatePartition / DropPartition / LoadPartitions / ReleasePartitions on a partition key
    collection: Milvus' plain error (code 65535), e.g. "disable create partition if partition
    key mode is used"."""
    if key_field(meta.schema) is not None:
        raise merr.MilvusError(merr.UNEXPECTED, f"disable {what} if partition key mode is used")


def refuse_named(meta: Any, names: Any, code: tuple[int, int] = merr.PARAMETER_INVALID) -> None:
    """A DML/DQL request naming partitions on a partition key collection: insert, search and
    query answer 1100 ("...: invalid parameter"), delete and upsert a plain error (65535)."""
    if names and key_field(meta.schema) is not None:
        suffix = ": invalid parameter" if code == merr.PARAMETER_INVALID else ""
        raise merr.MilvusError(code, NAMED_PARTITIONS + suffix)


def ordered_partitions(meta: Any) -> list[int]:
    """The key's partition IDs by index (Milvus' RearrangePartitionsForPartitionKey): hash % n = i
    goes to `_default_i`."""
    prefix = DEFAULT_PARTITION + "_"
    by_index = {int(name[len(prefix) :]): pid for name, pid in meta.partitions.items() if name.startswith(prefix)}
    return [by_index[i] for i in range(len(by_index))]


def hash_slots(keys: pa.Array | pa.ChunkedArray, n: int) -> np.ndarray:
    """Each key's partition index (0..n-1), columnar."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_integer(keys.type):
        h = hash32_int64(keys.to_numpy(zero_copy_only=False).astype(np.int64, copy=False))
    else:
        h = hash_string2uint32(keys)
    return (h % np.uint32(n)).astype(np.int64)


def route(meta: Any, columns: dict[int, Any]) -> np.ndarray | None:
    """The partition ID of each inserted row (None: not partition key mode)."""
    key = key_field(meta.schema)
    if key is None:
        return None
    parts = np.asarray(ordered_partitions(meta), dtype=np.int64)
    routed: np.ndarray = parts[hash_slots(columns[key.fieldID], len(parts))]
    return routed


def _key_values(node: P.Predicate, key_id: int) -> set | None:
    """The key values a row matching `node` can have (None: any)."""
    if isinstance(node, P.Term) and not node.negate and isinstance(node.value, P.Column):
        col = node.value
        return set(node.values) if col.field_id == key_id and not col.path else None
    if isinstance(node, P.Compare) and node.op == "==":
        left, lit = node.left, node.right
        if isinstance(left, P.Column) and left.field_id == key_id and not left.path and isinstance(lit, P.Literal):
            return {lit.value}
        return None
    if isinstance(node, P.And):
        found = [v for v in (_key_values(c, key_id) for c in node.children) if v is not None]
        if not found:
            return None
        both = set.intersection(*found)
        return both or found[0]  # nothing can match: any one child's partitions answer (empty)
    if isinstance(node, P.Or):
        out: set = set()
        for c in node.children:
            part = _key_values(c, key_id)
            if part is None:
                return None
            out |= part
        return out
    return None


def prune(meta: Any, expr: str, loaded: list[int], templates: Any = None) -> list[int]:
    """The loaded partitions a filter on the key can match (all of them when it does not pin
    the key). Never empty when `loaded` is not: an empty list means "every partition" below.
    `templates`: the request's expr_template_values (`k in {keys}`)."""
    key = key_field(meta.schema)
    if key is None or not expr.strip():
        return loaded
    try:
        plan = parse(expr, meta.schema, template_values(templates) if templates else None)
    except merr.MilvusError:
        return loaded  # the read path refuses it with Milvus' text (read_path.check_expr)
    values = _key_values(plan.predicate, key.fieldID)
    if not values:
        return loaded
    parts = ordered_partitions(meta)
    typ = pa.int64() if key.data_type == DT.Int64 else pa.string()
    wanted = {parts[i] for i in hash_slots(pa.array(sorted(values), typ), len(parts))}
    kept = [p for p in loaded if p in wanted] if loaded else sorted(wanted)
    return kept or loaded
