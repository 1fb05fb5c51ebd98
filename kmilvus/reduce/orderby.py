"""Query ORDER BY (Milvus 2.6's `order_by_fields` query param; its `orderby` package): the
Proxy parses and checks the fields, each QueryNode keeps the first `offset + limit` rows of every
segment in that order and of their union, and the Proxy merges the nodes' rows and cuts the page
(docs/architecture/read-path.md).

A spec is `field[:asc|desc[:nulls_first|nulls_last]]`, several joined by commas; nulls go last
ascending and first descending unless said (PostgreSQL's convention, as Milvus). Rows whose keys
are all equal stay in primary-key order, so pages of one order never overlap. Sorting is Arrow's
over whole columns: a nullable key is preceded by its null mask, which places its nulls.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pymilvus.grpc_gen import schema_pb2

from kmilvus.proto import query_node_pb2
from kmilvus.util import merr

DT = schema_pb2.DataType
# Milvus' orderby.IsSortableType
SORTABLE = frozenset({DT.Bool, DT.Int8, DT.Int16, DT.Int32, DT.Int64, DT.Float, DT.Double, DT.String, DT.VarChar})
PK = "pk"  # the primary key column of retrieve results (kmilvus.querynode.reduce)


@dataclass(frozen=True)
class OrderByField:
    field_id: int
    ascending: bool = True
    nulls_first: bool = False

    def to_proto(self) -> query_node_pb2.OrderByField:
        return query_node_pb2.OrderByField(
            fieldID=self.field_id, ascending=self.ascending, nulls_first=self.nulls_first
        )

    @classmethod
    def from_proto(cls, f: query_node_pb2.OrderByField) -> OrderByField:
        return cls(f.fieldID, f.ascending, f.nulls_first)


def _invalid(message: str) -> merr.MilvusError:
    return merr.invalid(f"{message}: invalid parameter")


def parse(spec: str, schema: schema_pb2.CollectionSchema) -> list[OrderByField]:
    """The fields of an `order_by_fields` value, checked against the schema with Milvus' texts."""
    by_name = {f.name: f for f in schema.fields}
    out = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        parts = item.split(":")
        name = parts[0].strip()
        ascending = True
        if len(parts) > 1:
            direction = parts[1].strip().lower()
            if direction in ("desc", "descending"):
                ascending = False
            elif direction not in ("asc", "ascending", ""):
                raise _invalid(f"invalid order direction '{direction}' for field '{name}', must be 'asc' or 'desc'")
        nulls_first = not ascending
        if len(parts) > 2:
            nulls = parts[2].strip().lower()
            if nulls not in ("nulls_first", "nulls_last"):
                raise _invalid(f"invalid null ordering '{nulls}', must be 'nulls_first' or 'nulls_last'")
            nulls_first = nulls == "nulls_first"
        field = by_name.get(name)
        if field is None:
            raise _invalid(f"order_by field '{name}' does not exist in collection schema")
        if field.data_type not in SORTABLE:
            raise _invalid(f"order_by field '{name}' has type {DT.Name(field.data_type)} which is not sortable")
        out.append(OrderByField(field.fieldID, ascending, nulls_first))
    return out


def sort_indices(table: pa.Table, fields: list[OrderByField], limit: int | None = None) -> pa.Array:
    """Row indices of `table` (its "pk" column and a column per field, named by field ID) in
    the order `fields` give, ties by primary key; the first `limit` only when given."""
    keys: dict[str, pa.ChunkedArray | pa.Array] = {}
    order: list[tuple[str, str]] = []
    for i, f in enumerate(fields):
        col = table.column(str(f.field_id))
        if col.null_count:
            keys[f"n{i}"] = pc.is_null(col)
            order.append((f"n{i}", "descending" if f.nulls_first else "ascending"))
        keys[f"k{i}"] = col
        order.append((f"k{i}", "ascending" if f.ascending else "descending"))
    keys[PK] = table.column(PK)
    order.append((PK, "ascending"))
    idx = pc.sort_indices(pa.table(keys), sort_keys=order)
    return idx if limit is None or limit >= len(idx) else idx.slice(0, limit)
