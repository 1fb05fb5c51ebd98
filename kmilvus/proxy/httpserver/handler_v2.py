"""The RESTful API v2's handlers (Milvus' httpserver/handler_v2.go): each route translates its
JSON body into the Milvus API's request proto and calls the Proxy's own handler for it — the one
the gRPC service runs — after the same authentication and privilege check (`ProxySecurity.admit`),
so every check, privilege and error exists once. Answers are Milvus' JSON: `{"code": 0, "data":
...}`, or `{"code": <merr code>, "message": ...}`.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import orjson
from pymilvus.grpc_gen import common_pb2, milvus_pb2, schema_pb2

from kmilvus.log import get_logger
from kmilvus.proto import internal_pb2
from kmilvus.proxy.httpserver import request_v2 as r
from kmilvus.proxy.httpserver import utils
from kmilvus.proxy.httpserver.constant import (
    ANNS_FIELD,
    COLLECTION_TTL,
    CONSISTENCY_LEVELS,
    DEFAULT_METRIC_TYPE,
    DEFAULT_PARTITIONS_WITH_KEY,
    DEFAULT_PRIMARY_FIELD,
    DEFAULT_VECTOR_FIELD,
    DIM,
    GROUP_BY_FIELD,
    GROUP_SIZE,
    INDEX_PARAMS,
    INDEX_TYPE,
    LIMIT,
    MAX_LENGTH,
    METRIC_TYPE,
    OFFSET,
    PARTITION_KEY_ISOLATION,
    RANK_PARAMS,
    RANK_TYPE,
    ROUND_DECIMAL,
    SHARDS_DEFAULT,
    STRICT_GROUP_SIZE,
    TOPK,
    RestError,
    invalid,
    invalid_value,
    ok,
)
from kmilvus.proxy.privilege import Denied, ProxySecurity
from kmilvus.util import grpcutil, merr
from kmilvus.util.privileges import name_for_api

log = get_logger(__name__)
DT = schema_pb2.DataType
CL = common_pb2.ConsistencyLevel
LoadState = common_pb2.LoadState


class RestContext:
    """What a Proxy handler may read of its gRPC context: the call's metadata (`authorization`,
    `dbname`), as the gRPC interceptors see it."""

    def __init__(self, md: dict[str, str]):
        self._md = tuple(md.items())

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._md


@dataclass
class Call:
    """One HTTP request: its database, the caller's metadata, whether int64 goes out as numbers."""

    db: str
    md: dict[str, str]
    allow_int64: bool = True


def metadata(db: str, user: str = "", password: str = "") -> dict[str, str]:
    md = {"dbname": db}
    if user:
        md["authorization"] = base64.b64encode(f"{user}:{password}".encode()).decode()
    return md


def denied(d: Denied) -> RestError:
    """A refusal of the shared security check, as Milvus' RESTful API answers it."""
    if d.code == grpc.StatusCode.UNAUTHENTICATED:
        return RestError(merr.NEED_AUTHENTICATE, "user hasn't authenticated", 401)
    if d.code == grpc.StatusCode.PERMISSION_DENIED:
        return RestError(merr.UNEXPECTED, d.message, 403)
    return RestError(merr.UNEXPECTED, d.message)


def _kvs(pairs) -> list[dict[str, str]]:
    """KeyValuePairs as Go's encoding/json prints the proto structs (empty members omitted)."""
    out = []
    for p in pairs:
        item = {}
        if p.key:
            item["key"] = p.key
        if p.value:
            item["value"] = p.value
        out.append(item)
    return out


def _properties(props: dict[str, Any]) -> list[common_pb2.KeyValuePair]:
    return [utils.kv(k, v) for k, v in props.items()]


_VALUE_KINDS = {
    "bool_data": "BoolData",
    "int_data": "IntData",
    "long_data": "LongData",
    "float_data": "FloatData",
    "double_data": "DoubleData",
    "string_data": "StringData",
    "bytes_data": "BytesData",
}


def _field_json(f: schema_pb2.FieldSchema) -> dict[str, Any]:
    """One field of collections/describe (Milvus' printFieldDetail, v2 form)."""
    out: dict[str, Any] = {
        "name": f.name,
        "primaryKey": f.is_primary_key,
        "partitionKey": f.is_partition_key,
        "clusteringKey": f.is_clustering_key,
        "autoId": f.autoID,
        "description": f.description,
        "nullable": f.nullable,
    }
    which = f.default_value.WhichOneof("data") if f.HasField("default_value") else None
    if which:
        out["defaultValue"] = {"Data": {_VALUE_KINDS[which]: getattr(f.default_value, which)}}
    if getattr(f, "is_function_output", False):
        out["isFunctionOutput"] = True
    out["type"] = schema_pb2.DataType.Name(f.data_type)
    out["id"] = f.fieldID
    if f.type_params:
        out["params"] = _kvs(f.type_params)
    if f.data_type == DT.Array:
        out["elementType"] = schema_pb2.DataType.Name(f.element_type)
    return out


def _consistency(level: str) -> tuple[int, bool]:
    """`consistencyLevel` → (level, use the collection's default)."""
    if not level:
        return CL.Bounded, True
    if level not in CL.DESCRIPTOR.values_by_name:
        raise RestError(
            merr.PARAMETER_INVALID,
            f"consistencyLevel can only be {CONSISTENCY_LEVELS}, default: Bounded, "
            f"err:parameter:'{level}' is incorrect, please check it: invalid parameter",
        )
    return CL.Value(level), False


def _data_type(name: str, what: str) -> int:
    if name not in schema_pb2.DataType.DESCRIPTOR.values_by_name:
        raise RestError(merr.PARAMETER_INVALID, f"invalid parameter, {what} {name} is invalid(case sensitive).")
    return int(schema_pb2.DataType.Value(name))


def _default_value(value: Any, dt: int) -> schema_pb2.ValueField | None:
    """Milvus' convertDefaultValue: JSON numbers for numeric types, a string for VarChar."""
    if value is None:
        return None
    if dt == DT.Bool and isinstance(value, bool):
        return schema_pb2.ValueField(bool_data=value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if dt in (DT.Int8, DT.Int16, DT.Int32) and number:
        return schema_pb2.ValueField(int_data=int(value))
    if dt == DT.Int64 and number:
        return schema_pb2.ValueField(long_data=int(value))
    if dt == DT.Float and number:
        return schema_pb2.ValueField(float_data=float(value))
    if dt == DT.Double and number:
        return schema_pb2.ValueField(double_data=float(value))
    if dt in (DT.VarChar, DT.String) and isinstance(value, str):
        return schema_pb2.ValueField(string_data=value)
    expected = {DT.Bool: "bool", DT.VarChar: "string", DT.String: "string"}.get(dt, "number")
    raise RestError(
        merr.PARAMETER_INVALID,
        "convert defaultValue fail, err:Wrong defaultValue type: "
        f"invalid parameter[expected={expected}][actual={value}]",
    )


def _index_extra_params(p: r.IndexParam) -> list[common_pb2.KeyValuePair]:
    """Milvus' convertToExtraParams."""
    out = []
    if p.indexType:
        out.append(utils.kv(INDEX_TYPE, p.indexType))
    elif INDEX_TYPE in p.params:
        out.append(utils.kv(INDEX_TYPE, p.params[INDEX_TYPE]))
    if p.metricType:
        out.append(utils.kv(METRIC_TYPE, p.metricType))
    if p.params:
        out.append(common_pb2.KeyValuePair(key=INDEX_PARAMS, value=orjson.dumps(p.params).decode()))
    return out


class HandlersV2:
    """The routes' bodies. `invoke` is the one way to the Proxy."""

    def __init__(self, proxy, security: ProxySecurity):
        self.proxy = proxy
        self.security = security

    async def invoke(self, call: Call, method: str, request) -> Any:
        """Run Proxy handler `method` as the gRPC stack runs it: the privilege check and audit of
        the security interceptor, then the handler; a failed status is raised as Milvus' body."""
        if not grpcutil.implements(self.proxy, method):
            raise RestError(
                merr.UNEXPECTED, f"rpc error: code = Unimplemented desc = kmilvus does not implement {method} yet"
            )
        user = ""
        if self.security.cfg.auth:
            try:
                user = await self.security.admit(method, request, call.md)
            except Denied as d:
                raise denied(d) from None
        resp = await getattr(self.proxy, method)(request, RestContext(call.md))
        self.security.audit_call(method, request, user, resp)
        status = resp if isinstance(resp, common_pb2.Status) else resp.status
        if not merr.ok(status):
            raise RestError(status.code or merr.UNEXPECTED[0], status.reason)
        return resp

    async def _try(self, call: Call, method: str, request) -> tuple[Any, str]:
        """`invoke` whose failure is reported in the answer's message, not as the answer."""
        try:
            return await self.invoke(call, method, request), ""
        except RestError as e:
            return None, e.message

    async def schema(self, call: Call, collection: str) -> schema_pb2.CollectionSchema:
        """The collection's schema as the client sees it (Milvus' GetCollectionSchema)."""
        resp = await self.invoke(
            call,
            "DescribeCollection",
            milvus_pb2.DescribeCollectionRequest(db_name=call.db, collection_name=collection),
        )
        return resp.schema

    async def _done(self, call: Call, method: str, request) -> dict[str, Any]:
        """`invoke` for an operation that answers nothing but success."""
        await self.invoke(call, method, request)
        return ok()

    async def _on_collection(self, call: Call, name: str, method: str, cls) -> dict[str, Any]:
        return await self._done(call, method, cls(db_name=call.db, collection_name=name))

    async def _on_partition(self, call: Call, req: r.PartitionReq, method: str, cls):
        request = cls(db_name=call.db, collection_name=req.collectionName, partition_name=req.partitionName)
        return await self.invoke(call, method, request)

    async def _on_partitions(self, call: Call, req: r.PartitionsReq, method: str, cls) -> dict[str, Any]:
        request = cls(db_name=call.db, collection_name=req.collectionName, partition_names=req.partitionNames)
        return await self._done(call, method, request)

    # ------------------------------------------------------------------------ collections
    async def list_collections(self, call: Call, req: r.DatabaseReq):
        resp = await self.invoke(call, "ShowCollections", milvus_pb2.ShowCollectionsRequest(db_name=call.db))
        return ok(list(resp.collection_names))

    async def has_collection(self, call: Call, req: r.CollectionNameReq):
        resp = await self.invoke(
            call, "HasCollection", milvus_pb2.HasCollectionRequest(db_name=call.db, collection_name=req.collectionName)
        )
        return ok({"has": resp.value})

    async def describe_collection(self, call: Call, req: r.CollectionNameReq):
        name = req.collectionName
        coll = await self.invoke(
            call, "DescribeCollection", milvus_pb2.DescribeCollectionRequest(db_name=call.db, collection_name=name)
        )
        errors = ""
        pk = next((f for f in coll.schema.fields if f.is_primary_key), None)
        state, msg = await self._try(
            call, "GetLoadState", milvus_pb2.GetLoadStateRequest(db_name=call.db, collection_name=name)
        )
        errors += msg + ";" if msg else ""
        vector = next((f.name for f in coll.schema.fields if f.data_type in utils.typeutil.VECTORS), "")
        indexes, msg = await self._try(
            call,
            "DescribeIndex",
            milvus_pb2.DescribeIndexRequest(db_name=call.db, collection_name=name, field_name=vector),
        )
        errors += msg + ";" if msg else ""
        aliases, msg = await self._try(
            call, "ListAliases", milvus_pb2.ListAliasesRequest(db_name=call.db, collection_name=name)
        )
        errors += msg + "." if msg else ""
        index_rows = []
        for d in indexes.index_descriptions if indexes is not None else ():
            metric = next((p.value for p in d.params if p.key == METRIC_TYPE), DEFAULT_METRIC_TYPE)
            index_rows.append({"indexName": d.index_name, "fieldName": d.field_name, "metricType": metric})
        data = {
            "collectionName": coll.collection_name,
            "collectionID": coll.collectionID,
            "description": coll.schema.description,
            "autoId": bool(pk and pk.autoID),
            "fields": [_field_json(f) for f in coll.schema.fields if not f.is_dynamic],
            "functions": [
                {
                    "name": fn.name,
                    "description": fn.description,
                    "type": fn.type,
                    "id": fn.id,
                    "inputFieldNames": list(fn.input_field_names),
                    "outputFieldNames": list(fn.output_field_names),
                    "params": _kvs(fn.params),
                }
                for fn in getattr(coll.schema, "functions", ())
            ],
            "aliases": list(aliases.aliases) if aliases is not None else [],
            "indexes": index_rows,
            "load": LoadState.Name(state.state) if state is not None else "",
            "shardsNum": coll.shards_num,
            "partitionsNum": coll.num_partitions,
            "consistencyLevel": CL.Name(coll.consistency_level),
            "enableDynamicField": coll.schema.enable_dynamic_field,
            "properties": _kvs(coll.properties),
        }
        return ok(data, message=errors)

    async def collection_stats(self, call: Call, req: r.CollectionNameReq):
        resp = await self.invoke(
            call,
            "GetCollectionStatistics",
            milvus_pb2.GetCollectionStatisticsRequest(db_name=call.db, collection_name=req.collectionName),
        )
        return _row_count(resp.stats)

    async def load_state(self, call: Call, req: r.CollectionNameReq):
        name = req.collectionName
        resp = await self.invoke(
            call,
            "GetLoadState",
            milvus_pb2.GetLoadStateRequest(db_name=call.db, collection_name=name, partition_names=req.partitionNames),
        )
        if resp.state == LoadState.LoadStateNotExist:
            raise RestError(merr.COLLECTION_NOT_FOUND, f"collection not found[collection={name}]")
        if resp.state == LoadState.LoadStateNotLoad:
            return ok({"loadState": LoadState.Name(resp.state)})
        progress_resp, errors = await self._try(
            call,
            "GetLoadingProgress",
            milvus_pb2.GetLoadingProgressRequest(
                db_name=call.db, collection_name=name, partition_names=req.partitionNames
            ),
        )
        progress = progress_resp.progress if progress_resp is not None else -1
        state = LoadState.LoadStateLoaded if progress >= 100 else LoadState.LoadStateLoading
        return ok(
            {"loadState": LoadState.Name(state), "loadProgress": progress}, message=errors + "." if errors else ""
        )

    async def create_collection(self, call: Call, req: r.CollectionReq):
        name = req.collectionName
        quick = not req.schema_.fields
        num_partitions = 0
        if quick:
            schema = self._quick_schema(req)
        else:
            schema, num_partitions = self._custom_schema(req)
        create = milvus_pb2.CreateCollectionRequest(
            db_name=call.db, collection_name=name, schema=schema.SerializeToString()
        )
        shards = req.params.get("shardsNum")
        create.shards_num = SHARDS_DEFAULT
        if shards is not None:
            with contextlib.suppress(ValueError):  # Milvus keeps the default when it does not parse
                create.shards_num = int(str(shards))
        level = req.params.get("consistencyLevel")
        create.consistency_level = CL.Bounded
        if level is not None:
            if str(level) not in CL.DESCRIPTOR.values_by_name:
                raise invalid_value(
                    "Strong, Session, Bounded, Eventually, Customized",
                    level,
                    f"consistencyLevel can only be {CONSISTENCY_LEVELS}, default: Bounded",
                )
            create.consistency_level = CL.Value(str(level))
        if num_partitions > 0:
            create.num_partitions = num_partitions
        if "ttlSeconds" in req.params:
            create.properties.append(utils.kv(COLLECTION_TTL, req.params["ttlSeconds"]))
        if "partitionKeyIsolation" in req.params:
            create.properties.append(utils.kv(PARTITION_KEY_ISOLATION, req.params["partitionKeyIsolation"]))
        await self.invoke(call, "CreateCollection", create)
        if quick:
            metric = req.metricType or DEFAULT_METRIC_TYPE
            vector = req.vectorFieldName or DEFAULT_VECTOR_FIELD
            await self.invoke(
                call,
                "CreateIndex",
                milvus_pb2.CreateIndexRequest(
                    db_name=call.db,
                    collection_name=name,
                    field_name=vector,
                    index_name=vector,
                    extra_params=[utils.kv(METRIC_TYPE, metric)],
                ),
            )
        else:
            if not req.indexParams:
                return ok()
            fields = {f.fieldName for f in req.schema_.fields}
            for p in req.indexParams:
                if p.fieldName not in fields:
                    raise RestError(
                        merr.MISSING_REQUIRED_PARAMETERS,
                        f"missing required parameters, error: `{p.fieldName}` hasn't defined in schema",
                    )
                await self.invoke(call, "CreateIndex", self._index_request(call, name, p))
        return await self._on_collection(call, name, "LoadCollection", milvus_pb2.LoadCollectionRequest)

    @staticmethod
    def _quick_schema(req: r.CollectionReq) -> schema_pb2.CollectionSchema:
        if req.schema_.functions:
            raise invalid_value("schema", "functions", "functions are not supported for quickly create collection")
        if req.dimension == 0:
            raise invalid_value(
                "collectionName & dimension",
                "collectionName",
                f"dimension is required for quickly create collection(default metric type: {DEFAULT_METRIC_TYPE})",
            )
        pk = schema_pb2.FieldSchema(
            name=req.primaryFieldName or DEFAULT_PRIMARY_FIELD, is_primary_key=True, autoID=req.autoID
        )
        if req.idType in ("VarChar", "Varchar"):
            pk.data_type = DT.VarChar
            pk.type_params.append(utils.kv(MAX_LENGTH, req.params.get(MAX_LENGTH, "<nil>")))
        elif req.idType in ("", "Int64", "int64"):
            pk.data_type = DT.Int64
        else:
            raise invalid_value("Int64, Varchar", req.idType, "idType can only be [Int64, VarChar], default: Int64")
        enable_dynamic = True
        if "enableDynamicField" in req.params:
            text = utils._text(req.params["enableDynamicField"]).lower()
            if text not in ("1", "t", "true", "0", "f", "false"):
                raise RestError(
                    merr.UNEXPECTED,
                    f'parse enableDynamicField fail, err:strconv.ParseBool: parsing "{text}": invalid syntax',
                )
            enable_dynamic = text in ("1", "t", "true")
        vector = schema_pb2.FieldSchema(name=req.vectorFieldName or DEFAULT_VECTOR_FIELD, data_type=DT.FloatVector)
        vector.type_params.append(utils.kv(DIM, req.dimension))
        return schema_pb2.CollectionSchema(
            name=req.collectionName,
            description=req.description,
            fields=[pk, vector],
            enable_dynamic_field=enable_dynamic,
        )

    @staticmethod
    def _custom_schema(req: r.CollectionReq) -> tuple[schema_pb2.CollectionSchema, int]:
        s = req.schema_
        schema = schema_pb2.CollectionSchema(
            name=req.collectionName,
            description=req.description,
            autoID=s.autoID,
            enable_dynamic_field=s.enableDynamicField,
        )
        outputs: set[str] = set()
        for fn in s.functions:
            if fn.type not in schema_pb2.FunctionType.DESCRIPTOR.values_by_name:
                raise invalid_value("FunctionType", fn.type, "function data type is invalid(case sensitive)")
            schema.functions.add(
                name=fn.name,
                description=fn.description,
                type=schema_pb2.FunctionType.Value(fn.type),
                input_field_names=fn.inputFieldNames,
                output_field_names=fn.outputFieldNames,
                params=_properties(fn.params),
            )
            outputs.update(fn.outputFieldNames)
        num_partitions = 0
        for field in s.fields:
            dt = _data_type(field.dataType, "data type")
            f = schema.fields.add(
                name=field.fieldName,
                is_primary_key=field.isPrimary,
                is_partition_key=field.isPartitionKey,
                is_clustering_key=field.isClusteringKey,
                data_type=dt,
                nullable=field.nullable,
            )
            default = _default_value(field.defaultValue, dt)
            if default is not None:
                f.default_value.CopyFrom(default)
            if dt == DT.Array:
                f.element_type = _data_type(field.elementDataType, "element data type")
            if field.isPrimary:
                f.autoID = s.autoID
            if field.isPartitionKey:
                num_partitions = DEFAULT_PARTITIONS_WITH_KEY
                with contextlib.suppress(ValueError):  # Milvus keeps 64 when it does not parse
                    num_partitions = int(str(req.params.get("partitionsNum", num_partitions)))
            for key, value in field.elementTypeParams.items():
                f.type_params.append(
                    common_pb2.KeyValuePair(
                        key=key, value=value if isinstance(value, str) else orjson.dumps(value).decode()
                    )
                )
            if field.fieldName in outputs:
                f.is_function_output = True
        return schema, num_partitions

    @staticmethod
    def _index_request(call: Call, collection: str, p: r.IndexParam) -> milvus_pb2.CreateIndexRequest:
        return milvus_pb2.CreateIndexRequest(
            db_name=call.db,
            collection_name=collection,
            field_name=p.fieldName,
            index_name=p.indexName,
            extra_params=_index_extra_params(p),
        )

    async def drop_collection(self, call: Call, req: r.CollectionNameReq):
        return await self._on_collection(call, req.collectionName, "DropCollection", milvus_pb2.DropCollectionRequest)

    async def rename_collection(self, call: Call, req: r.RenameCollectionReq):
        return await self._done(
            call,
            "RenameCollection",
            milvus_pb2.RenameCollectionRequest(
                db_name=call.db,
                oldName=req.collectionName,
                newName=req.newCollectionName,
                newDBName=req.newDbName or call.db,
            ),
        )

    async def load_collection(self, call: Call, req: r.CollectionNameReq):
        return await self._on_collection(call, req.collectionName, "LoadCollection", milvus_pb2.LoadCollectionRequest)

    async def release_collection(self, call: Call, req: r.CollectionNameReq):
        cls = milvus_pb2.ReleaseCollectionRequest
        return await self._on_collection(call, req.collectionName, "ReleaseCollection", cls)

    async def flush(self, call: Call, req: r.CollectionNameReq):
        """Flush, then wait until flushed (Milvus' waitForFlush: GetFlushState on the segments
        and flush timestamp the Flush answered; kmilvus' GetFlushState waits server-side)."""
        name = req.collectionName
        resp = await self.invoke(call, "Flush", milvus_pb2.FlushRequest(db_name=call.db, collection_names=[name]))
        if name not in resp.coll_flush_ts:
            raise RestError(merr.SERVICE_INTERNAL, f"failed to get flush timestamp for collection {name}")
        state = milvus_pb2.GetFlushStateRequest(
            db_name=call.db,
            collection_name=name,
            segmentIDs=resp.coll_segIDs[name].data,
            flush_ts=resp.coll_flush_ts[name],
        )
        while not (await self.invoke(call, "GetFlushState", state)).flushed:
            pass
        return ok()

    async def compact(self, call: Call, req: r.CompactReq):
        request = milvus_pb2.ManualCompactionRequest(
            db_name=call.db, collection_name=req.collectionName, majorCompaction=req.isClustering
        )
        resp = await self.invoke(call, "ManualCompaction", request)
        return ok({"compactionID": resp.compactionID})

    async def compaction_state(self, call: Call, req: r.CompactionStateReq):
        request = milvus_pb2.GetCompactionStateRequest(compactionID=req.jobID)
        resp = await self.invoke(call, "GetCompactionState", request)
        return ok(
            {
                "compactionID": req.jobID,
                "state": common_pb2.CompactionState.Name(resp.state),
                "executingPlanNumber": resp.executingPlanNo,
                "timeoutPlanNumber": resp.timeoutPlanNo,
                "completedPlanNumber": resp.completedPlanNo,
            }
        )

    # ------------------------------------------------------------------------ entities
    async def query(self, call: Call, req: r.QueryReqV2):
        q = milvus_pb2.QueryRequest(
            db_name=call.db,
            collection_name=req.collectionName,
            expr=req.filter,
            output_fields=req.outputFields,
            partition_names=req.partitionNames,
            use_default_consistency=True,
        )
        for name, value in utils.expr_template(req.exprParams).items():
            q.expr_template_values[name].CopyFrom(value)
        if req.offset > 0:
            q.query_params.append(utils.kv(OFFSET, req.offset))
        count = len(req.outputFields) == 1 and req.outputFields[0].strip().lower() == "count(*)"
        if req.limit > 0 and not count:
            q.query_params.append(utils.kv(LIMIT, req.limit))
        return await self._query_rows(call, q)

    async def _query_rows(self, call: Call, q: milvus_pb2.QueryRequest):
        resp = await self.invoke(call, "Query", q)
        rows = utils.result_rows(resp.output_fields, resp.fields_data, allow_int64=call.allow_int64)
        return ok(rows, cost=0)

    async def get(self, call: Call, req: r.CollectionIDReq):
        schema = await self.schema(call, req.collectionName)
        q = milvus_pb2.QueryRequest(
            db_name=call.db,
            collection_name=req.collectionName,
            output_fields=req.outputFields,
            partition_names=req.partitionNames,
            expr=utils.primary_filter(schema, req.id),
            use_default_consistency=True,
        )
        return await self._query_rows(call, q)

    async def delete(self, call: Call, req: r.CollectionFilterReq):
        d = milvus_pb2.DeleteRequest(
            db_name=call.db, collection_name=req.collectionName, partition_name=req.partitionName, expr=req.filter
        )
        for name, value in utils.expr_template(req.exprParams).items():
            d.expr_template_values[name].CopyFrom(value)
        resp = await self.invoke(call, "Delete", d)
        return ok({"deleteCount": resp.delete_cnt})

    async def insert(self, call: Call, req: r.CollectionDataReq):
        return await self._write(call, req, "Insert")

    async def upsert(self, call: Call, req: r.CollectionDataReq):
        return await self._write(call, req, "Upsert")

    async def _write(self, call: Call, req: r.CollectionDataReq, method: str):
        schema = await self.schema(call, req.collectionName)
        insert = method == "Insert"
        fields = utils.rows_to_fields_data(schema, req.data, in_insert=insert)
        cls = milvus_pb2.InsertRequest if insert else milvus_pb2.UpsertRequest
        resp = await self.invoke(
            call,
            method,
            cls(
                db_name=call.db,
                collection_name=req.collectionName,
                partition_name=req.partitionName,
                fields_data=fields,
                num_rows=len(req.data),
            ),
        )
        which = resp.IDs.WhichOneof("id_field")
        if which == "int_id":
            ids: list[Any] = list(resp.IDs.int_id.data)
            if not call.allow_int64:
                ids = [str(i) for i in ids]
        elif which == "str_id":
            ids = list(resp.IDs.str_id.data)
        else:
            raise RestError(
                merr.CHECK_PRIMARY_KEY, f"{utils.merr_check_pk()}, error: unsupported primary key data type"
            )
        prefix = "insert" if insert else "upsert"
        count = resp.insert_cnt if insert else resp.upsert_cnt
        return ok({f"{prefix}Count": count, f"{prefix}Ids": ids}, cost=0)

    async def search(self, call: Call, req: r.SearchReqV2):
        if req.params:
            raise invalid("params is not used any more, put search parameters in searchParams")
        level, default_level = _consistency(req.consistencyLevel)
        schema = await self.schema(call, req.collectionName)
        s = milvus_pb2.SearchRequest(
            db_name=call.db,
            collection_name=req.collectionName,
            dsl=req.filter,
            dsl_type=common_pb2.BoolExprV1,
            output_fields=req.outputFields,
            partition_names=req.partitionNames,
            consistency_level=level,
            use_default_consistency=default_level,
        )
        _fill_search(s, schema, req.searchParams, req.limit, req.offset, req.annsField, req.data, req.exprParams)
        s.search_params.extend(_grouping(req.groupingField, req.groupSize, req.strictGroupSize))
        return await self._search_rows(call, "Search", s)

    async def _search_rows(self, call: Call, method: str, request):
        resp = await self.invoke(call, method, request)
        res = resp.results
        if res.top_k == 0:
            return ok([], cost=0)
        rows = utils.result_rows(res.output_fields, res.fields_data, res.ids, res.scores, call.allow_int64)
        return ok(rows, cost=0)

    async def hybrid_search(self, call: Call, req: r.HybridSearchReq):
        level, default_level = _consistency(req.consistencyLevel)
        schema = await self.schema(call, req.collectionName)
        h = milvus_pb2.HybridSearchRequest(
            db_name=call.db,
            collection_name=req.collectionName,
            partition_names=req.partitionNames,
            output_fields=req.outputFields,
            consistency_level=level,
            use_default_consistency=default_level,
        )
        for sub in req.search:
            s = h.requests.add(
                db_name=call.db,
                collection_name=req.collectionName,
                dsl=sub.filter,
                dsl_type=common_pb2.BoolExprV1,
                output_fields=req.outputFields,
                partition_names=req.partitionNames,
            )
            _fill_search(s, schema, sub.params, sub.limit, sub.offset, sub.annsField, sub.data, sub.exprParams)
            if sub.metricType:
                s.search_params.append(utils.kv(METRIC_TYPE, sub.metricType))
        h.rank_params.extend(
            [
                utils.kv(RANK_TYPE, req.rerank.strategy),
                common_pb2.KeyValuePair(key=RANK_PARAMS, value=orjson.dumps(req.rerank.params).decode()),
                utils.kv(LIMIT, req.limit),
                utils.kv(ROUND_DECIMAL, -1),
            ]
        )
        h.rank_params.extend(_grouping(req.groupingField, req.groupSize, req.strictGroupSize))
        return await self._search_rows(call, "HybridSearch", h)

    # ------------------------------------------------------------------------ partitions
    async def list_partitions(self, call: Call, req: r.CollectionNameReq):
        resp = await self.invoke(
            call,
            "ShowPartitions",
            milvus_pb2.ShowPartitionsRequest(db_name=call.db, collection_name=req.collectionName),
        )
        return ok(list(resp.partition_names))

    async def has_partition(self, call: Call, req: r.PartitionReq):
        resp = await self._on_partition(call, req, "HasPartition", milvus_pb2.HasPartitionRequest)
        return ok({"has": resp.value})

    async def partition_stats(self, call: Call, req: r.PartitionReq):
        cls = milvus_pb2.GetPartitionStatisticsRequest
        return _row_count((await self._on_partition(call, req, "GetPartitionStatistics", cls)).stats)

    async def create_partition(self, call: Call, req: r.PartitionReq):
        await self._on_partition(call, req, "CreatePartition", milvus_pb2.CreatePartitionRequest)
        return ok()

    async def drop_partition(self, call: Call, req: r.PartitionReq):
        await self._on_partition(call, req, "DropPartition", milvus_pb2.DropPartitionRequest)
        return ok()

    async def load_partitions(self, call: Call, req: r.PartitionsReq):
        return await self._on_partitions(call, req, "LoadPartitions", milvus_pb2.LoadPartitionsRequest)

    async def release_partitions(self, call: Call, req: r.PartitionsReq):
        return await self._on_partitions(call, req, "ReleasePartitions", milvus_pb2.ReleasePartitionsRequest)

    # ------------------------------------------------------------------------ indexes
    async def list_indexes(self, call: Call, req: r.CollectionNameReq):
        try:
            resp = await self.invoke(
                call,
                "DescribeIndex",
                milvus_pb2.DescribeIndexRequest(db_name=call.db, collection_name=req.collectionName),
            )
        except RestError as e:
            if e.code == merr.INDEX_NOT_FOUND[0]:
                return ok([])
            raise
        return ok([d.index_name for d in resp.index_descriptions])

    async def describe_index(self, call: Call, req: r.IndexReq):
        resp = await self.invoke(
            call,
            "DescribeIndex",
            milvus_pb2.DescribeIndexRequest(
                db_name=call.db, collection_name=req.collectionName, index_name=req.indexName
            ),
        )
        out = []
        for d in resp.index_descriptions:
            params = {p.key: p.value for p in d.params}
            out.append(
                {
                    "indexName": d.index_name,
                    "fieldName": d.field_name,
                    "indexType": params.get(INDEX_TYPE, ""),
                    "metricType": params.get(METRIC_TYPE, ""),
                    "totalRows": d.total_rows,
                    "pendingRows": d.pending_index_rows,
                    "indexedRows": d.indexed_rows,
                    "indexState": common_pb2.IndexState.Name(d.state),
                    "failReason": d.index_state_fail_reason,
                }
            )
        return ok(out)

    async def create_index(self, call: Call, req: r.IndexParamReq):
        for p in req.indexParams:
            await self.invoke(call, "CreateIndex", self._index_request(call, req.collectionName, p))
        return ok()

    async def drop_index(self, call: Call, req: r.IndexReq):
        return await self._done(
            call,
            "DropIndex",
            milvus_pb2.DropIndexRequest(db_name=call.db, collection_name=req.collectionName, index_name=req.indexName),
        )

    # ------------------------------------------------------------------------ aliases
    async def list_aliases(self, call: Call, req: r.OptionalCollectionNameReq):
        resp = await self.invoke(
            call, "ListAliases", milvus_pb2.ListAliasesRequest(db_name=call.db, collection_name=req.collectionName)
        )
        return ok(list(resp.aliases))

    async def describe_alias(self, call: Call, req: r.AliasReq):
        resp = await self.invoke(
            call, "DescribeAlias", milvus_pb2.DescribeAliasRequest(db_name=call.db, alias=req.aliasName)
        )
        return ok({"dbName": resp.db_name, "collectionName": resp.collection, "aliasName": resp.alias})

    async def create_alias(self, call: Call, req: r.AliasCollectionReq):
        return await self._done(
            call,
            "CreateAlias",
            milvus_pb2.CreateAliasRequest(db_name=call.db, collection_name=req.collectionName, alias=req.aliasName),
        )

    async def drop_alias(self, call: Call, req: r.AliasReq):
        return await self._done(call, "DropAlias", milvus_pb2.DropAliasRequest(db_name=call.db, alias=req.aliasName))

    async def alter_alias(self, call: Call, req: r.AliasCollectionReq):
        return await self._done(
            call,
            "AlterAlias",
            milvus_pb2.AlterAliasRequest(db_name=call.db, collection_name=req.collectionName, alias=req.aliasName),
        )

    # ------------------------------------------------------------------------ databases
    async def create_database(self, call: Call, req: r.DatabaseReqWithProperties):
        return await self._done(
            call,
            "CreateDatabase",
            milvus_pb2.CreateDatabaseRequest(db_name=call.db, properties=_properties(req.properties)),
        )

    async def drop_database(self, call: Call, req: r.DatabaseReqRequiredName):
        return await self._done(call, "DropDatabase", milvus_pb2.DropDatabaseRequest(db_name=call.db))

    async def list_databases(self, call: Call, req: r.EmptyReq):
        resp = await self.invoke(call, "ListDatabases", milvus_pb2.ListDatabasesRequest())
        return ok(list(resp.db_names))

    async def describe_database(self, call: Call, req: r.DatabaseReqRequiredName):
        resp = await self.invoke(call, "DescribeDatabase", milvus_pb2.DescribeDatabaseRequest(db_name=call.db))
        return ok({"dbName": resp.db_name, "dbID": resp.dbID, "properties": _kvs(resp.properties)})

    async def alter_database(self, call: Call, req: r.DatabaseReqWithProperties):
        return await self._done(
            call,
            "AlterDatabase",
            milvus_pb2.AlterDatabaseRequest(db_name=call.db, properties=_properties(req.properties)),
        )

    # ------------------------------------------------------------------------ users
    async def list_users(self, call: Call, req: r.DatabaseReq):
        resp = await self.invoke(call, "ListCredUsers", milvus_pb2.ListCredUsersRequest())
        return ok(list(resp.usernames))

    async def describe_user(self, call: Call, req: r.UserReq):
        resp = await self.invoke(
            call,
            "SelectUser",
            milvus_pb2.SelectUserRequest(user=milvus_pb2.UserEntity(name=req.userName), include_role_info=True),
        )
        roles = [role.name for res in resp.results if res.user.name == req.userName for role in res.roles]
        return ok(roles)

    async def create_user(self, call: Call, req: r.PasswordReq):
        return await self._done(
            call,
            "CreateCredential",
            milvus_pb2.CreateCredentialRequest(username=req.userName, password=_b64(req.password)),
        )

    async def update_password(self, call: Call, req: r.NewPasswordReq):
        return await self._done(
            call,
            "UpdateCredential",
            milvus_pb2.UpdateCredentialRequest(
                username=req.userName, oldPassword=_b64(req.password), newPassword=_b64(req.newPassword)
            ),
        )

    async def drop_user(self, call: Call, req: r.UserReq):
        return await self._done(call, "DeleteCredential", milvus_pb2.DeleteCredentialRequest(username=req.userName))

    async def grant_role(self, call: Call, req: r.UserRoleReq):
        return await self._user_role(call, req, milvus_pb2.AddUserToRole)

    async def revoke_role(self, call: Call, req: r.UserRoleReq):
        return await self._user_role(call, req, milvus_pb2.RemoveUserFromRole)

    async def _user_role(self, call: Call, req: r.UserRoleReq, kind: int):
        return await self._done(
            call,
            "OperateUserRole",
            milvus_pb2.OperateUserRoleRequest(username=req.userName, role_name=req.roleName, type=kind),
        )

    # ------------------------------------------------------------------------ roles
    async def list_roles(self, call: Call, req: r.DatabaseReq):
        resp = await self.invoke(call, "SelectRole", milvus_pb2.SelectRoleRequest())
        return ok([res.role.name for res in resp.results])

    async def describe_role(self, call: Call, req: r.RoleReq):
        resp = await self.invoke(
            call,
            "SelectGrant",
            milvus_pb2.SelectGrantRequest(
                entity=milvus_pb2.GrantEntity(role=milvus_pb2.RoleEntity(name=req.roleName), db_name=call.db)
            ),
        )
        return ok(
            [
                {
                    "objectType": g.object.name,
                    "objectName": g.object_name,
                    "privilege": name_for_api(g.grantor.privilege.name),
                    "dbName": g.db_name,
                    "grantor": g.grantor.user.name,
                }
                for g in resp.entities
            ]
        )

    async def create_role(self, call: Call, req: r.RoleReq):
        return await self._done(
            call, "CreateRole", milvus_pb2.CreateRoleRequest(entity=milvus_pb2.RoleEntity(name=req.roleName))
        )

    async def drop_role(self, call: Call, req: r.RoleReq):
        return await self._done(call, "DropRole", milvus_pb2.DropRoleRequest(role_name=req.roleName))

    async def grant_privilege(self, call: Call, req: r.GrantReq):
        return await self._privilege(call, req, milvus_pb2.Grant)

    async def revoke_privilege(self, call: Call, req: r.GrantReq):
        return await self._privilege(call, req, milvus_pb2.Revoke)

    async def _privilege(self, call: Call, req: r.GrantReq, kind: int):
        entity = milvus_pb2.GrantEntity(
            role=milvus_pb2.RoleEntity(name=req.roleName),
            object=milvus_pb2.ObjectEntity(name=req.objectType),
            object_name=req.objectName,
            db_name=call.db,
            grantor=milvus_pb2.GrantorEntity(privilege=milvus_pb2.PrivilegeEntity(name=req.privilege)),
        )
        return await self._done(call, "OperatePrivilege", milvus_pb2.OperatePrivilegeRequest(entity=entity, type=kind))

    async def grant_privilege_v2(self, call: Call, req: r.GrantV2Req):
        return await self._privilege_v2(call, req, milvus_pb2.Grant)

    async def revoke_privilege_v2(self, call: Call, req: r.GrantV2Req):
        return await self._privilege_v2(call, req, milvus_pb2.Revoke)

    async def _privilege_v2(self, call: Call, req: r.GrantV2Req, kind: int):
        return await self._done(
            call,
            "OperatePrivilegeV2",
            milvus_pb2.OperatePrivilegeV2Request(
                role=milvus_pb2.RoleEntity(name=req.roleName),
                grantor=milvus_pb2.GrantorEntity(privilege=milvus_pb2.PrivilegeEntity(name=req.privilege)),
                type=kind,
                db_name=req.dbName,
                collection_name=req.collectionName,
            ),
        )

    # ------------------------------------------------------------------------ jobs/import
    async def list_import_jobs(self, call: Call, req: r.OptionalCollectionNameReq):
        resp = await self.invoke(
            call, "ListImports", internal_pb2.ListImportsRequest(db_name=call.db, collection_name=req.collectionName)
        )
        records = []
        for i, job in enumerate(resp.jobIDs):
            rec: dict[str, Any] = {
                "jobId": job,
                "collectionName": resp.collection_names[i],
                "state": internal_pb2.ImportJobState.Name(resp.states[i]),
                "progress": resp.progresses[i],
            }
            if resp.reasons[i]:
                rec["reason"] = resp.reasons[i]
            records.append(rec)
        return ok({"records": records})

    async def create_import_job(self, call: Call, req: r.ImportReq):
        resp = await self.invoke(
            call,
            "ImportV2",
            internal_pb2.ImportRequest(
                db_name=call.db,
                collection_name=req.collectionName,
                partition_name=req.partitionName,
                files=[internal_pb2.ImportFile(paths=paths) for paths in req.files],
                options=[common_pb2.KeyValuePair(key=k, value=v) for k, v in req.options.items()],
            ),
        )
        return ok({"jobId": resp.jobID})

    async def import_job_progress(self, call: Call, req: r.JobIDReq):
        resp = await self.invoke(
            call, "GetImportProgress", internal_pb2.GetImportProgressRequest(db_name=call.db, jobID=req.jobId)
        )
        data: dict[str, Any] = {
            "jobId": req.jobId,
            "collectionName": resp.collection_name,
            "completeTime": resp.complete_time,
            "state": internal_pb2.ImportJobState.Name(resp.state),
            "progress": resp.progress,
            "importedRows": resp.imported_rows,
            "totalRows": resp.total_rows,
        }
        if resp.reason:
            data["reason"] = resp.reason
        details = []
        for t in resp.task_progresses:
            d: dict[str, Any] = {
                "fileName": t.file_name,
                "fileSize": t.file_size,
                "progress": t.progress,
                "completeTime": t.complete_time,
                "state": t.state,
                "importedRows": t.imported_rows,
                "totalRows": t.total_rows,
            }
            if t.reason:
                d["reason"] = t.reason
            details.append(d)
        data["fileSize"] = sum(t.file_size for t in resp.task_progresses)
        data["details"] = details
        return ok(data)


def _fill_search(
    s: milvus_pb2.SearchRequest, schema, params: dict, limit: int, offset: int, anns: str, data: list, exprs: dict
) -> None:
    """A (sub-)search's parameters, query vectors and expression values (Milvus' search and
    advancedSearch build each SearchRequest the same way)."""
    s.search_params.extend(utils.search_params(params))
    s.search_params.extend([utils.kv(TOPK, limit), utils.kv(OFFSET, offset), utils.kv(ANNS_FIELD, anns)])
    s.placeholder_group = utils.placeholder_group(schema, anns, data)
    for name, value in utils.expr_template(exprs).items():
        s.expr_template_values[name].CopyFrom(value)


def _grouping(field: str, size: int, strict: bool) -> list[common_pb2.KeyValuePair]:
    """`groupingField` (and `groupSize`, `strictGroupSize` with it) as search / rank params."""
    if not field:
        return []
    out = [utils.kv(GROUP_BY_FIELD, field)]
    if size > 0:
        out += [utils.kv(GROUP_SIZE, size), utils.kv(STRICT_GROUP_SIZE, strict)]
    return out


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _row_count(stats) -> dict[str, Any]:
    """Milvus' wrapperReturnRowCount: `row_count` as a number (as text when it is not one)."""
    raw = next((kv.value for kv in stats if kv.key == "row_count"), "0")
    try:
        return ok({"rowCount": int(raw)})
    except ValueError:
        return ok({"rowCount": raw})


Handler = Callable[[HandlersV2, Call, Any], Awaitable[dict[str, Any]]]
