"""A collection schema's functions (Milvus' `CollectionSchema.functions`): checked at create time
with Milvus' rules and messages (proxy validateFunction / validateAnalyzer), numbered and bound
to their fields' IDs (RootCoord), and looked up by the write and read paths.

Only `BM25` is a function kmilvus runs: a VarChar input field with an analyzer, one
SparseFloatVector output field that inserts, upserts and imports fill server-side. Embedding
and rerank functions in a schema are refused (they call outside services)."""

from __future__ import annotations

from pymilvus.grpc_gen import schema_pb2

from kmilvus.analyzer import AnalyzerError, build, multi
from kmilvus.analyzer import fields as af
from kmilvus.util import merr
from kmilvus.util.merr import MilvusError
from kmilvus.util.typeutil import type_name

DT = schema_pb2.DataType
FT = schema_pb2.FunctionType
START_FUNCTION_ID = 100  # Milvus' common.StartOfUserFunctionID


def _fail(message: str) -> MilvusError:
    # Milvus raises these as plain errors in the proxy's PreExecute: code 65535 on the wire.
    return MilvusError(merr.UNEXPECTED, message)


def _check_basic(fn: schema_pb2.FunctionSchema) -> None:
    if not fn.name:
        raise _fail("function name cannot be empty")
    if not fn.input_field_names:
        raise _fail(f"function input field names cannot be empty, function: {fn.name}")
    if not fn.output_field_names:
        raise _fail(f"function output field names cannot be empty, function: {fn.name}")
    ins, outs = list(fn.input_field_names), list(fn.output_field_names)
    for name in ins:
        if not name:
            raise _fail(f"function input field name cannot be empty string, function: {fn.name}")
        if ins.count(name) > 1:
            raise _fail(
                "each function input field should be used exactly once in the same function, "
                f"function: {fn.name}, input field: {name}"
            )
    for name in outs:
        if not name:
            raise _fail(f"function output field name cannot be empty string, function: {fn.name}")
        if name in ins:
            raise _fail(
                "a single field cannot be both input and output in the same function, "
                f"function: {fn.name}, field: {name}"
            )
        if outs.count(name) > 1:
            raise _fail(
                "each function output field should be used exactly once in the same function, "
                f"function: {fn.name}, output field: {name}"
            )
    if fn.type == FT.BM25:
        if fn.params:
            raise _fail("BM25 function accepts no params")
    else:
        name = FT.Name(fn.type) if fn.type in FT.values() else str(fn.type)
        raise MilvusError(merr.PARAMETER_INVALID, f"function type {name} is not supported by this server")


def validate_functions(schema: schema_pb2.CollectionSchema) -> None:
    """Milvus' validateFunction: names, fields, types; then each analyzer that matters."""
    by_name = {f.name: f for f in schema.fields}
    used_out: set[str] = set()
    used_names: set[str] = set()
    for fn in schema.functions:
        _check_basic(fn)
        if fn.name in used_names:
            raise _fail(f"duplicate function name: {fn.name}")
        used_names.add(fn.name)
        inputs = []
        for name in fn.input_field_names:
            f = by_name.get(name)
            if f is None:
                raise _fail(f"function input field not found: {name}")
            if f.nullable:
                raise _fail(f"function input field cannot be nullable: function {fn.name}, field {f.name}")
            inputs.append(f)
        if len(inputs) != 1 or inputs[0].data_type != DT.VarChar:
            raise _fail(
                f"BM25 function input field must be a VARCHAR field, got {len(inputs)} field with type "
                f"{type_name(inputs[0].data_type)}"
            )
        if not af.enable_analyzer(inputs[0]):
            raise _fail("BM25 function input field must set enable_analyzer to true")
        outputs = []
        for name in fn.output_field_names:
            f = by_name.get(name)
            if f is None:
                raise _fail(f"function output field not found: {name}")
            if f.is_primary_key:
                raise _fail(f"function output field cannot be primary key: function {fn.name}, field {f.name}")
            if f.is_partition_key or f.is_clustering_key:
                raise _fail(
                    "function output field cannot be partition key or clustering key: "
                    f"function {fn.name}, field {f.name}"
                )
            if f.nullable:
                raise _fail(f"function output field cannot be nullable: function {fn.name}, field {f.name}")
            if name in used_out:
                raise _fail(f"duplicate function output field: function {fn.name}, field {name}")
            used_out.add(name)
            outputs.append(f)
        if len(outputs) != 1:
            raise _fail(f"BM25 function only need 1 output field, but got {len(outputs)}")
        if outputs[0].data_type != DT.SparseFloatVector:
            raise _fail(
                "BM25 function output field must be a SparseFloatVector field, "
                f"but got {type_name(outputs[0].data_type)}"
            )
    for f in schema.fields:
        validate_analyzer(schema, f)


def _bm25_input(schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema) -> bool:
    return any(fn.type == FT.BM25 and field.name in fn.input_field_names for fn in schema.functions)


def validate_analyzer(schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema) -> None:
    """Milvus' validateAnalyzer: only a field with `enable_match` or a BM25 input is checked."""
    if not af.enable_match(field) and not _bm25_input(schema, field):
        return
    if not af.enable_analyzer(field):
        raise _fail(f"field {field.name} is set to enable match or bm25 function but not enable analyzer")
    params = af.multi_analyzer_params(field)
    try:
        if params is not None:
            if af.enable_match(field):
                raise _fail(f"multi analyzer now only support for bm25, but now field {field.name} enable match")
            if af.analyzer_params(field) is not None:
                raise _fail(f"field {field.name} analyzer params should be none if has multi analyzer params")
            multi(params, {f.name: f.data_type for f in schema.fields})
        else:
            build(af.analyzer_params(field))
    except AnalyzerError as exc:
        raise _fail(str(exc)) from None


def bind(schema: schema_pb2.CollectionSchema) -> None:
    """RootCoord's part: number the functions, resolve their field IDs, mark output fields."""
    ids = {f.name: f.fieldID for f in schema.fields}
    outputs = set()
    for i, fn in enumerate(schema.functions):
        fn.id = START_FUNCTION_ID + i
        del fn.input_field_ids[:]
        fn.input_field_ids.extend(ids[n] for n in fn.input_field_names)
        del fn.output_field_ids[:]
        fn.output_field_ids.extend(ids[n] for n in fn.output_field_names)
        outputs.update(fn.output_field_names)
    for f in schema.fields:
        f.is_function_output = f.name in outputs


def bm25_functions(schema: schema_pb2.CollectionSchema) -> list[schema_pb2.FunctionSchema]:
    return [fn for fn in schema.functions if fn.type == FT.BM25]


def bm25_of_output(schema: schema_pb2.CollectionSchema, field_id: int) -> schema_pb2.FunctionSchema | None:
    """The BM25 function whose output is `field_id`, or None."""
    return next((fn for fn in bm25_functions(schema) if field_id in fn.output_field_ids), None)


def field_by_id(schema: schema_pb2.CollectionSchema, field_id: int) -> schema_pb2.FieldSchema:
    return next(f for f in schema.fields if f.fieldID == field_id)
