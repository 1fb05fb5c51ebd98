"""A fuzzed API surface: malformed and hostile requests to every MilvusService RPC kmilvus
implements, through the real server with raw gRPC stubs. Every call must come back (per-call
deadline), as a Milvus status or a gRPC status, never with a traceback, and a rejected request
must leave the collection, segment and security meta in etcd exactly as it was."""

from __future__ import annotations

import base64
import os

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor as FD
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from kmilvus.meta import EtcdKV
from kmilvus.proxy import Proxy
from kmilvus.util.privileges import AUTHENTICATED_ONLY, DEFAULT_PUBLIC_GRANTS, PRIVILEGE_TABLE

SERVICE = milvus_pb2.DESCRIPTOR.services_by_name["MilvusService"]
IMPLEMENTED = sorted(
    m.name
    for m in SERVICE.methods
    if getattr(Proxy, m.name, None) is not getattr(milvus_pb2_grpc.MilvusServiceServicer, m.name, None)
)
# Meta a rejected request must not touch (time ticks, sessions and checkpoints move on their own).
WATCHED = (
    "root-coord/",
    "datacoord-meta/s/",
    "datacoord-meta/binlog/",
    "datacoord-meta/import-job/",
    "datacoord-meta/compaction-job/",
)
HOSTILE = [
    "",
    " ",
    "a" * 70_000,
    "coll'; DROP TABLE x; --",
    "id in [1,2] || 1==1",
    '$meta["x"] like "%"',
    "../../etc/passwd",
    "root-coord/collection/1",
    "\x00\x01\x02",
    "名字",
    "{{7*7}}",
    "%s%s%s%n",
    "collection\nname",
    "*",
]
DEADLINE = 15
# The suite replays the same examples every run (stable); KMILVUS_FUZZ_RANDOM=1 explores new ones.
DERANDOMIZE = not os.environ.get("KMILVUS_FUZZ_RANDOM")
# What any authenticated user may call: RPCs without a privilege, and those Milvus' built-in
# public role is granted (DescribeCollection, ShowCollections, index details).
PUBLIC_METHODS = AUTHENTICATED_ONLY | {
    m for m, rule in PRIVILEGE_TABLE.items() if rule.privilege in {p for _, _, p in DEFAULT_PUBLIC_GRANTS}
}


def _scalar(field) -> st.SearchStrategy:
    t = field.type
    if t == FD.TYPE_STRING:
        return st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40))
    if t == FD.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(b"\xff\xfe\xfd"), st.just(b"\x80" * 1000))
    if t == FD.TYPE_BOOL:
        return st.booleans()
    if t in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return st.floats(allow_nan=True, allow_infinity=True, width=32 if t == FD.TYPE_FLOAT else 64)
    if t == FD.TYPE_ENUM:
        return st.integers(-(2**31), 2**31 - 1)  # unknown enum values included
    if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return st.one_of(st.sampled_from([0, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1))
    if t in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if t in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return st.one_of(st.sampled_from([0, 2**64 - 1]), st.integers(0, 2**64 - 1))
    return st.one_of(st.sampled_from([0, -1, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))


def _message(desc, depth: int = 0) -> st.SearchStrategy:
    """A request of type `desc` with a random subset of its fields set (missing fields too)."""
    strategies = {}
    for f in desc.fields:
        if f.type == FD.TYPE_MESSAGE:
            if depth >= 2 or f.message_type.GetOptions().map_entry:
                continue
            inner = _message(f.message_type, depth + 1)
        else:
            inner = _scalar(f)
        strategies[f.name] = st.lists(inner, max_size=3) if f.is_repeated else inner
    cls = _class(desc)

    @st.composite
    def build(draw):
        msg = cls()
        names = draw(st.sets(st.sampled_from(sorted(strategies)), max_size=len(strategies))) if strategies else set()
        for name in names:
            value = draw(strategies[name])
            field = desc.fields_by_name[name]
            try:
                if field.is_repeated:
                    if field.type == FD.TYPE_MESSAGE:
                        for v in value:
                            getattr(msg, name).add().CopyFrom(v)
                    else:
                        getattr(msg, name).extend(value)
                elif field.type == FD.TYPE_MESSAGE:
                    getattr(msg, name).CopyFrom(value)
                else:
                    setattr(msg, name, value)
            except (ValueError, TypeError):
                continue  # a value protobuf itself refuses (e.g. bad UTF-8 in a string): not sendable
        return msg

    return build()


def _class(desc):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(desc)


def _status(resp):
    from pymilvus.grpc_gen import common_pb2

    return resp if isinstance(resp, common_pb2.Status) else getattr(resp, "status", None)


async def _snapshot(kv: EtcdKV) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for p in WATCHED:
        out.update(dict(await kv.get_prefix(p)))
    return out


@pytest.fixture
def api(node, etcd_endpoint, root):
    channel = grpc.insecure_channel(f"127.0.0.1:{node.node.api_port}")
    kv = node.call(EtcdKV.connect([etcd_endpoint], f"{root}/meta"))
    yield node, channel, kv
    node.call(kv.close())
    channel.close()


def _check_call(node, channel, kv, method: str, payload: bytes, failures: list[str], strict: bool = True) -> None:
    """`strict`: the payload is a well-formed request, so the answer must be a Milvus status
    (a gRPC-level error is acceptable only for bytes that do not parse)."""
    m = SERVICE.methods_by_name[method]
    out_cls = _class(m.output_type)
    call = channel.unary_unary(
        f"/{SERVICE.full_name}/{method}", request_serializer=lambda b: b, response_deserializer=out_cls.FromString
    )
    before = node.call(_snapshot(kv))
    try:
        resp = call(payload, timeout=DEADLINE)
    except grpc.RpcError as err:
        assert err.code() != grpc.StatusCode.DEADLINE_EXCEEDED, f"{method} hung"
        assert "Traceback" not in (err.details() or ""), f"{method} leaked a traceback"
        if strict:
            failures.append(f"{method}: gRPC {err.code().name} instead of a Milvus status: {err.details()}")
        rejected = True
    else:
        status = _status(resp)
        rejected = status is not None and (status.code != 0 or status.error_code != 0)
        if status is not None:
            assert "Traceback" not in status.reason and 'File "' not in status.reason, f"{method}: {status.reason}"
            if rejected:
                assert status.code != 0, f"{method}: a failure without a Milvus code: {status}"
                if status.code == 5 and status.reason.split(":")[0].endswith(("Error", "Exception")):
                    failures.append(f"{method}: internal error: {status.reason[:200]}")
    if rejected:
        after = node.call(_snapshot(kv))
        assert after == before, f"{method}: a rejected request changed etcd"


def _fuzz_one(node, channel, kv, method: str, failures: list[str]) -> None:
    @settings(
        max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=DERANDOMIZE
    )
    @given(req=_message(SERVICE.methods_by_name[method].input_type))
    def run(req):
        _check_call(node, channel, kv, method, req.SerializeToString(), failures)

    run()


@pytest.mark.timeout(600)
def test_fuzzed_requests_to_every_implemented_rpc(api):
    node, channel, kv = api
    assert "Insert" in IMPLEMENTED and "CreateCollection" in IMPLEMENTED
    failures: list[str] = []
    for method in IMPLEMENTED:
        _fuzz_one(node, channel, kv, method, failures)
    assert not failures, "\n".join(failures)
    health = milvus_pb2_grpc.MilvusServiceStub(channel).CheckHealth(milvus_pb2.CheckHealthRequest(), timeout=DEADLINE)
    assert health.isHealthy


@pytest.mark.timeout(300)
def test_malformed_wire_bytes_and_oversized_messages(api):
    """Bytes that are not the request type (wrong wire types, truncated varints), and a message
    past the server's limit: refused, the server stays up."""
    node, channel, kv = api
    failures: list[str] = []

    @settings(
        max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=DERANDOMIZE
    )
    @given(method=st.sampled_from(IMPLEMENTED), payload=st.binary(max_size=256))
    def run(method, payload):
        _check_call(node, channel, kv, method, payload, failures, strict=False)

    run()
    # Oversized (20 MB names and schema, far past every limit but under gRPC's message limit).
    big = "x" * (20 * 1024 * 1024)
    for method, req in (
        ("CreateCollection", milvus_pb2.CreateCollectionRequest(collection_name=big, schema=b"\x0a" * len(big))),
        ("DropCollection", milvus_pb2.DropCollectionRequest(collection_name=big)),
        ("Insert", milvus_pb2.InsertRequest(collection_name="c", partition_name=big, num_rows=2**31 - 1)),
    ):
        _check_call(node, channel, kv, method, req.SerializeToString(), failures)
    assert not failures, "\n".join(failures)
    health = milvus_pb2_grpc.MilvusServiceStub(channel).CheckHealth(milvus_pb2.CheckHealthRequest(), timeout=DEADLINE)
    assert health.isHealthy


@pytest.fixture
def secured_api(node_factory, etcd_endpoint, root):
    """A node with auth on and a user `fuzz` that has no role (only `public`)."""
    n = node_factory(auth=True, root_password="fuzz-root-pw")
    channel = grpc.insecure_channel(f"127.0.0.1:{n.node.api_port}")
    md = (("authorization", base64.b64encode(b"root:fuzz-root-pw").decode()),)
    req = milvus_pb2.CreateCredentialRequest(username="fuzz", password=base64.b64encode(b"fuzz-pw-1").decode())
    assert milvus_pb2_grpc.MilvusServiceStub(channel).CreateCredential(req, metadata=md, timeout=DEADLINE).code == 0
    kv = n.call(EtcdKV.connect([etcd_endpoint], f"{root}/meta"))
    yield n, channel, kv
    n.call(kv.close())
    channel.close()


AUTH_HEADERS = [
    None,
    "",
    "not base64 !!",
    base64.b64encode(b"no-colon").decode(),
    base64.b64encode(b"fuzz:wrong-password").decode(),
    base64.b64encode(b"root:").decode(),
    base64.b64encode(b":\xff\xfe").decode(),
    base64.b64encode(b"fuzz:fuzz-pw-1").decode(),  # valid, but a user without privileges
    base64.b64encode(("x" * 3000 + ":y").encode()).decode(),  # long, under gRPC's 8 KB header limit
]


@pytest.mark.timeout(300)
def test_fuzzed_calls_with_hostile_credentials_change_nothing(secured_api):
    """With auth on, every call without valid root credentials is refused (gRPC UNAUTHENTICATED
    or PERMISSION_DENIED, never a traceback) or answered by an RPC open to any authenticated
    user; a refused call leaves etcd as it was."""
    node, channel, kv = secured_api
    stub_codes = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)

    @settings(
        max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=DERANDOMIZE
    )
    @given(method=st.sampled_from(IMPLEMENTED), header=st.sampled_from(AUTH_HEADERS), data=st.data())
    def run(method, header, data):
        m = SERVICE.methods_by_name[method]
        req = data.draw(_message(m.input_type))
        call = channel.unary_unary(
            f"/{SERVICE.full_name}/{method}",
            request_serializer=lambda b: b,
            response_deserializer=_class(m.output_type).FromString,
        )
        before = node.call(_snapshot(kv))
        md = None if header is None else (("authorization", header),)
        try:
            resp = call(req.SerializeToString(), metadata=md, timeout=DEADLINE)
        except grpc.RpcError as err:
            assert err.code() in stub_codes, f"{method}: {err.code()} {err.details()}"
            assert "Traceback" not in (err.details() or "")
            assert node.call(_snapshot(kv)) == before, f"{method}: a refused call changed etcd"
            return
        valid_user = header == AUTH_HEADERS[-2]
        assert valid_user and method in PUBLIC_METHODS, f"{method} answered {header!r} without a refusal"
        status = _status(resp)
        assert status is None or "Traceback" not in status.reason

    # Found by this test: a refusal quoted the 70 KB db_name whole, past gRPC's 16 KB limit on
    # status details, so the client got RESOURCE_EXHAUSTED instead of PERMISSION_DENIED.
    huge_db = milvus_pb2.DescribeAliasRequest(db_name="a" * 70_000, alias="x")
    md = (("authorization", AUTH_HEADERS[-2]),)
    with pytest.raises(grpc.RpcError) as err:
        milvus_pb2_grpc.MilvusServiceStub(channel).DescribeAlias(huge_db, metadata=md, timeout=DEADLINE)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    run()
