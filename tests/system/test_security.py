"""Security through pymilvus (docs/operations/security.md): authentication, TLS (one-way and mutual), roles and
privileges, revocation on every Proxy, and the audit trail of refusals."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
import os
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import REGISTRY
from pymilvus import DataType, MilvusClient, MilvusException

from kmilvus.util.embedded import free_port

ROOT_PW = "R00t-secret!"
# pymilvus raises gRPC PERMISSION_DENIED / UNAUTHENTICATED as it gets them (as against Milvus).
REFUSED = (MilvusException, grpc.RpcError)
DIM = 8


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool = False, san: bool = False):
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        b = b.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return b.sign(issuer_key, hashes.SHA256())


def _write(path: Path, key, cert) -> tuple[str, str]:
    key_path, cert_path = path.with_suffix(".key"), path.with_suffix(".crt")
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    """A CA, a server certificate for localhost, a client certificate it signed, and a client
    certificate nobody trusted (self-signed)."""
    d = tmp_path_factory.mktemp("certs")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("kmilvus-test-ca", ca_key, _name("kmilvus-test-ca"), ca_key, ca=True)
    out: dict[str, str] = {}
    out["ca"], _ = _write(d / "ca", ca_key, ca)
    for name, signer in (("server", True), ("client", True), ("rogue", False)):
        key = ec.generate_private_key(ec.SECP256R1())
        if signer:
            cert = _cert(name if name != "server" else "localhost", key, ca.subject, ca_key, san=name == "server")
        else:
            cert = _cert(name, key, _name(name), key, ca=False)
        out[name + "_crt"], out[name + "_key"] = _write(d / name, key, cert)
    return out


def _client(port: int, certs, *, token: str = "", **extra) -> MilvusClient:
    if "client_pem_path" not in extra:  # pymilvus: server_pem_path means one-way TLS
        extra["server_pem_path"] = certs["ca"]
    return MilvusClient(
        uri=f"https://localhost:{port}",
        token=token,
        server_name="localhost",
        timeout=10,
        dedicated=True,
        **extra,
    )


def _mtls(certs, name: str) -> dict[str, str]:
    return {
        "client_pem_path": certs[name + "_crt"],
        "client_key_path": certs[name + "_key"],
        "ca_pem_path": certs["ca"],
    }


def _schema():
    s = MilvusClient.create_schema()
    s.add_field("id", DataType.INT64, is_primary=True)
    s.add_field("vec", DataType.FLOAT_VECTOR, dim=DIM)
    return s


def _rows(n: int, start: int = 0):
    return [{"id": start + i, "vec": np.random.rand(DIM).astype("float32")} for i in range(n)]


def _denied_count(method: str, reason: str) -> float:
    return REGISTRY.get_sample_value("kmilvus_proxy_denied_total", {"method": method, "reason": reason}) or 0.0


@pytest.fixture
def secure(node_factory, certs):
    """A full node and a second Proxy, both with --auth and one-way TLS."""
    opts = {"auth": True, "root_password": ROOT_PW, "tls_cert": certs["server_crt"], "tls_key": certs["server_key"]}
    n1 = node_factory(**opts)
    n2 = node_factory(roles=("proxy",), **opts)
    return n1.node.api_port, n2.node.api_port


def test_auth_tls_roles_and_revoke_on_every_proxy(secure, certs, caplog):
    p1, p2 = secure
    caplog.set_level(logging.INFO, logger="kmilvus.audit")

    # Plaintext is refused by a TLS port.
    with pytest.raises(REFUSED):
        MilvusClient(uri=f"http://127.0.0.1:{p1}", token=f"root:{ROOT_PW}", timeout=3, dedicated=True)
    # No credentials, or a wrong password: refused (Connect already fails).
    with pytest.raises(REFUSED):
        _client(p1, certs)
    with pytest.raises(REFUSED):
        _client(p1, certs, token="root:wrong-password")

    root = _client(p1, certs, token=f"root:{ROOT_PW}")
    root.create_collection("a", schema=_schema())
    root.create_collection("b", schema=_schema())
    root.create_user("alice", "alice-pw-1")
    assert "alice" in root.list_users()

    alice1 = _client(p1, certs, token="alice:alice-pw-1")
    alice2 = _client(p2, certs, token="alice:alice-pw-1")
    before = _denied_count("Insert", "permission")
    with pytest.raises(REFUSED, match="permission deny"):
        alice1.insert("a", _rows(3))
    assert _denied_count("Insert", "permission") == before + 1
    assert any("denied" in r.getMessage() and getattr(r, "kv", {}).get("user") == "alice" for r in caplog.records), (
        "the refusal is an audit event"
    )

    root.create_role("writer")
    root.grant_privilege("writer", "Collection", "Insert", "a")
    root.grant_role("alice", "writer")
    alice1.insert("a", _rows(5))
    alice2.insert("a", _rows(5, start=100))  # proxy 2 has loaded the policy too
    with pytest.raises(REFUSED, match="permission deny"):
        alice1.drop_collection("a")
    with pytest.raises(REFUSED, match="permission deny"):
        alice1.insert("b", _rows(3))
    assert root.has_collection("a")

    grants = root.describe_role("writer")
    assert any(p["privilege"] == "Insert" and p["object_name"] == "a" for p in grants["privileges"])

    # Revoke through proxy 1: proxy 2 refuses the very next call (invalidation, no polling).
    root.revoke_privilege("writer", "Collection", "Insert", "a")
    with pytest.raises(REFUSED, match="permission deny"):
        alice2.insert("a", _rows(3, start=200))
    with pytest.raises(REFUSED, match="permission deny"):
        alice1.insert("a", _rows(3, start=300))

    root.flush("a")
    assert root.get_collection_stats("a")["row_count"] == 10  # only the permitted inserts
    root.drop_collection("a")
    assert not root.has_collection("a")


def test_credentials_cached_and_invalidated_on_every_proxy(secure, certs):
    p1, p2 = secure
    root = _client(p1, certs, token=f"root:{ROOT_PW}")
    root.create_user("bob", "bob-pw-1")
    bob2 = _client(p2, certs, token="bob:bob-pw-1")
    assert bob2.list_collections() == []  # proxy 2 has verified and cached bob's password

    bob1 = _client(p1, certs, token="bob:bob-pw-1")
    bob1.update_password("bob", "bob-pw-1", "bob-pw-2")  # bob may change his own password
    with pytest.raises(REFUSED):
        bob2.list_collections()  # the old password no longer works on proxy 2
    assert _client(p2, certs, token="bob:bob-pw-2").list_collections() == []

    with pytest.raises(REFUSED):
        root.update_password("bob", "wrong-old-pw", "bob-pw-3")  # the old password is checked
    root.drop_user("bob")
    with pytest.raises(REFUSED):
        _client(p2, certs, token="bob:bob-pw-2")
    with pytest.raises(REFUSED, match="root user cannot be deleted"):
        root.drop_user("root")


def test_passwords_are_stored_only_as_bcrypt_hashes(secure, certs, node_factory, etcd_endpoint, root):
    import asyncio

    from kmilvus.meta import EtcdKV

    p1, _ = secure
    c = _client(p1, certs, token=f"root:{ROOT_PW}")
    c.create_user("carol", "carol-pw-1")

    async def dump() -> list[bytes]:
        kv = await EtcdKV.connect([etcd_endpoint], f"{root}/meta")
        try:
            return [v for _, v in await kv.get_prefix("root-coord/credential/users/")]
        finally:
            await kv.close()

    values = asyncio.run(dump())
    blob = b"".join(values)
    assert b"carol-pw-1" not in blob and ROOT_PW.encode() not in blob
    assert blob.count(b"$2b$") == 2  # root and carol, salted bcrypt


def test_mutual_tls_refuses_clients_without_a_ca_signed_certificate(node_factory, certs):
    n = node_factory(tls_cert=certs["server_crt"], tls_key=certs["server_key"], tls_ca=certs["ca"])
    port = n.node.api_port
    with pytest.raises(REFUSED):
        _client(port, certs)  # no client certificate
    with pytest.raises(REFUSED):
        _client(
            port, certs, client_pem_path=certs["rogue_crt"], client_key_path=certs["rogue_key"], ca_pem_path=certs["ca"]
        )
    c = _client(
        port, certs, client_pem_path=certs["client_crt"], client_key_path=certs["client_key"], ca_pem_path=certs["ca"]
    )
    assert c.list_collections() == []


def test_auth_requires_the_root_password(tmp_path):
    exe = Path(sys.executable).with_name("kmilvus")
    env = {k: v for k, v in os.environ.items() if k != "KMILVUS_ROOT_PASSWORD"}
    r = subprocess.run(
        [str(exe), "standalone", "--auth", "--data-dir", str(tmp_path), "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode != 0
    assert "KMILVUS_ROOT_PASSWORD" in r.stderr


async def _enable_etcd_auth(endpoint: str, client_tls: tuple[str, str, str], password: str) -> None:
    """etcd's own authentication: a root user with the root role, then auth on."""
    from aetcd import rpc as etcdrpc

    from kmilvus.meta.etcdkv import _TLSClient

    host, _, port = endpoint.partition(":")
    c = _TLSClient(client_tls, host=host, port=int(port), timeout=5)
    await c.connect()
    try:
        auth = etcdrpc.AuthStub(c.channel)
        await auth.RoleAdd(etcdrpc.AuthRoleAddRequest(name="root"))
        await auth.UserAdd(etcdrpc.AuthUserAddRequest(name="root", password=password))
        await auth.UserGrantRole(etcdrpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await auth.AuthEnable(etcdrpc.AuthEnableRequest())
    finally:
        await c.close()


def test_flush_and_drop_with_etcd_and_nats_over_tls_with_credentials(tmp_path, certs, root):
    """kmilvus' own connections secured: etcd with client-certificate TLS and its own auth, NATS
    with TLS (verified client certificates) and a user/password; Flush and Drop still work, and
    a client without the credentials is refused by both servers."""
    import asyncio

    import nats

    from kmilvus.meta import EtcdKV
    from kmilvus.util.embedded import start_etcd, start_nats
    from tests.harness import NodeThread, make_config

    server_tls = (certs["server_crt"], certs["server_key"], certs["ca"])
    client_tls = (certs["client_crt"], certs["client_key"], certs["ca"])
    etcd = start_etcd(tmp_path / "etcd", tls=server_tls)
    nats_srv = start_nats(tmp_path / "nats", tls=server_tls, user="kmilvus", password="nats-pw-1")
    try:
        asyncio.run(_enable_etcd_auth(etcd.endpoint, client_tls, "etcd-pw-1"))

        async def etcd_without_credentials() -> None:
            kv = await EtcdKV.connect([etcd.endpoint], "x", timeout=3, tls=client_tls)
            try:
                await kv.get("k")
            finally:
                await kv.close()

        with pytest.raises(Exception):  # noqa: B017 - aetcd's error type for a refused token varies
            asyncio.run(asyncio.wait_for(etcd_without_credentials(), 15))

        async def nats_without_credentials() -> None:
            nc = await nats.connect(
                nats_srv.endpoint, allow_reconnect=False, connect_timeout=3, max_reconnect_attempts=0
            )
            await nc.close()

        with pytest.raises(Exception):  # noqa: B017 - plaintext and no user: refused
            asyncio.run(asyncio.wait_for(nats_without_credentials(), 15))

        cfg = make_config(
            root,
            etcd.endpoint,
            nats_srv.endpoint,
            tmp_path / "storage",
            etcd_user="root",
            etcd_password="etcd-pw-1",
            etcd_tls_cert=client_tls[0],
            etcd_tls_key=client_tls[1],
            etcd_tls_ca=client_tls[2],
            nats_user="kmilvus",
            nats_password="nats-pw-1",
            nats_tls_cert=client_tls[0],
            nats_tls_key=client_tls[1],
            nats_tls_ca=client_tls[2],
        )
        node = NodeThread(cfg).start()
        try:
            c = MilvusClient(uri=node.uri, dedicated=True)
            c.create_collection("secured", schema=_schema())
            c.insert("secured", _rows(100))
            c.flush("secured")
            assert c.get_collection_stats("secured")["row_count"] == 100
            c.drop_collection("secured")
            assert not c.has_collection("secured")
            c.close()
        finally:
            node.stop()

        async def lease_renewed_on_its_own_thread() -> int:
            """Session and leader leases are renewed over a blocking channel of their own: it
            must use the same TLS and etcd credentials."""
            kv = await EtcdKV.connect(
                [etcd.endpoint], "x", timeout=5, user="root", password="etcd-pw-1", tls=client_tls
            )
            conn = kv.blocking_lease()
            try:
                return await asyncio.to_thread(conn.refresh, await kv.grant(5))
            finally:
                conn.close()
                await kv.close()

        assert asyncio.run(lease_renewed_on_its_own_thread()) > 0
    finally:
        nats_srv.stop()
        etcd.stop()


def test_internal_grpc_over_mutual_tls(node_factory, certs):
    """Coordinators and DataNode in one node, a Proxy in another: every call between them
    (allocation, inserts' segment quotas, flush, RootCoord's cache invalidations) goes over
    mutual TLS; an internal port refuses plaintext and certificates the CA did not sign."""
    internal = {
        "internal_tls_cert": certs["server_crt"],
        "internal_tls_key": certs["server_key"],
        "internal_tls_ca": certs["ca"],
        "internal_tls_server_name": "localhost",
    }
    core = node_factory(roles=("rootcoord", "datacoord", "querycoord", "datanode", "indexnode"), **internal)
    proxy = node_factory(roles=("proxy",), **internal)
    c = MilvusClient(uri=proxy.uri, dedicated=True)
    c.create_collection("internal_tls", schema=_schema())
    c.insert("internal_tls", _rows(50))
    c.flush("internal_tls")
    assert c.get_collection_stats("internal_tls")["row_count"] == 50
    c.drop_collection("internal_tls")  # RootCoord → Proxy invalidation over TLS
    assert not c.has_collection("internal_tls")
    c.close()

    from pymilvus.grpc_gen import milvus_pb2

    from kmilvus.proto import root_coord_pb2_grpc

    address = f"127.0.0.1:{core.node.internal_port}"
    req = milvus_pb2.GetComponentStatesRequest()
    with grpc.insecure_channel(address) as ch, pytest.raises(grpc.RpcError):
        root_coord_pb2_grpc.RootCoordStub(ch).GetComponentStates(req, timeout=5)
    rogue = grpc.ssl_channel_credentials(
        root_certificates=Path(certs["ca"]).read_bytes(),
        private_key=Path(certs["rogue_key"]).read_bytes(),
        certificate_chain=Path(certs["rogue_crt"]).read_bytes(),
    )
    opts = [("grpc.ssl_target_name_override", "localhost")]
    with grpc.secure_channel(address, rogue, options=opts) as ch, pytest.raises(grpc.RpcError):
        root_coord_pb2_grpc.RootCoordStub(ch).GetComponentStates(req, timeout=5)


def test_privilege_table_comes_from_milvus_proto():
    from kmilvus.util.privileges import AUTHENTICATED_ONLY, PRIVILEGE_TABLE, Rule

    assert PRIVILEGE_TABLE["Insert"] == Rule("Collection", "PrivilegeInsert", name_field="collection_name")
    assert PRIVILEGE_TABLE["Flush"] == Rule("Collection", "PrivilegeFlush", names_field="collection_names")
    assert PRIVILEGE_TABLE["DropCollection"] == Rule("Global", "PrivilegeDropCollection")
    assert PRIVILEGE_TABLE["UpdateCredential"] == Rule("User", "PrivilegeUpdateUser", name_field="username")
    for rpc in ("Search", "Query", "Delete", "Upsert", "CreateIndex", "LoadCollection", "CreatePartition"):
        assert rpc in PRIVILEGE_TABLE  # the RPCs others are building are covered already
    assert not AUTHENTICATED_ONLY & set(PRIVILEGE_TABLE)


def test_unlisted_rpcs_are_refused_to_non_admins_and_admins_may_do_anything(secure, certs, caplog):
    """Fail closed: an RPC in neither the privilege table nor the authenticated-only list is
    refused to a user without admin; a member of `admin` may call anything."""
    from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

    p1, _ = secure
    caplog.set_level(logging.INFO, logger="kmilvus.audit")
    root = _client(p1, certs, token=f"root:{ROOT_PW}")
    root.create_user("dave", "dave-pw-1")
    creds = grpc.ssl_channel_credentials(root_certificates=Path(certs["ca"]).read_bytes())
    opts = [("grpc.ssl_target_name_override", "localhost")]

    def get_replicate_info(token: str) -> grpc.RpcError:
        with grpc.secure_channel(f"127.0.0.1:{p1}", creds, options=opts) as ch:
            md = (("authorization", base64.b64encode(token.encode()).decode()),)
            with pytest.raises(grpc.RpcError) as err:
                milvus_pb2_grpc.MilvusServiceStub(ch).GetReplicateInfo(
                    milvus_pb2.GetReplicateInfoRequest(), metadata=md, timeout=10
                )
            return err.value

    assert get_replicate_info("dave:dave-pw-1").code() == grpc.StatusCode.PERMISSION_DENIED
    root.grant_role("dave", "admin")
    assert get_replicate_info("dave:dave-pw-1").code() == grpc.StatusCode.UNIMPLEMENTED  # allowed; not built
    dave = _client(p1, certs, token="dave:dave-pw-1")
    dave.create_collection("by_admin", schema=_schema())
    dave.drop_collection("by_admin")
    events = [getattr(r, "kv", {}) for r in caplog.records if r.name == "kmilvus.audit"]
    assert {"user": "dave", "rpc": "DropCollection", "object": "by_admin", "result": "ok"}.items() <= next(
        e for e in events if e.get("rpc") == "DropCollection"
    ).items()
    assert any(e.get("rpc") == "OperateUserRole" and e.get("user") == "root" for e in events)


def test_security_settings_are_checked_before_anything_starts():
    from kmilvus.config import Config

    Config(auth=True).check_security(runs_rootcoord=False)  # a Proxy alone needs no root password
    with pytest.raises(ValueError, match="KMILVUS_ROOT_PASSWORD"):
        Config(auth=True).check_security(runs_rootcoord=True)
    with pytest.raises(ValueError, match="--tls-key"):
        Config(tls_cert="server.crt").check_security()
    with pytest.raises(ValueError, match="--tls-cert"):
        Config(tls_ca="ca.crt").check_security()
    with pytest.raises(ValueError, match="internal TLS"):
        Config(internal_tls_ca="ca.crt").check_security()
