"""A real Kubernetes control plane on this machine, for tests: the pinned etcd, kube-apiserver,
kube-controller-manager and kube-scheduler (tools/versions.env, built by `./dev setup`) on free
loopback ports, with certificates and service-account keys made for the run.

What envtest gives Go operators, and more: the controller-manager collects garbage by
ownerReference, runs Deployments, StatefulSets, Jobs, namespaces and service-account tokens, and
the scheduler binds pods to a node (tests/nodeagent.py runs them). Authorization is Node,RBAC: the
test is a client-certificate cluster admin (O=system:masters), a pod gets only what its
ServiceAccount's token is bound to.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from kmilvus.util.embedded import ChildServer, _spawn, _wait, find_binary, free_port, start_etcd

SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"


# ------------------------------------------------------------------------------ certificates
def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class CA:
    """A certificate authority made for one run: signs the API server's serving certificate
    and the clients' certificates (admin, node)."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def new(cls, name: str) -> CA:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def issue(
        self, cn: str, *, orgs: tuple[str, ...] = (), dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()
    ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM): a server certificate when it names hosts, else a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        name += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        now = datetime.datetime.now(datetime.UTC)
        usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if dns or ips else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if dns or ips:
            alt = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        return b.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), _pem_key(key)


# ------------------------------------------------------------------------------ the control plane
@dataclass
class Credentials:
    """A client identity of the run: its certificate files and a kubeconfig naming them."""

    name: str
    cert: Path
    key: Path
    kubeconfig: Path


@dataclass
class ControlPlane:
    dir: Path
    url: str
    ca_file: Path
    admin: Credentials
    servers: list[ChildServer] = field(default_factory=list)
    _ca: CA | None = None
    # The `kubernetes` Service's address as pods reach it (tests/nodeagent.py forwards it to the
    # API server, as kube-proxy forwards the ClusterIP): a loopback address of its own, port 443.
    service_ip: str = ""

    @property
    def env(self) -> dict[str, str]:
        """The environment for kubectl and helm as the cluster admin."""
        return {**os.environ, "KUBECONFIG": str(self.admin.kubeconfig)}

    def credentials(self, cn: str, orgs: tuple[str, ...] = ()) -> Credentials:
        """A client certificate signed by the run's CA, and its kubeconfig."""
        assert self._ca is not None
        cert, key = self._ca.issue(cn, orgs=orgs)
        d = self.dir / "pki"
        safe = cn.replace(":", "-")
        (d / f"{safe}.crt").write_bytes(cert)
        (d / f"{safe}.key").write_bytes(key)
        kc = self.dir / f"{safe}.kubeconfig"
        kc.write_text(kubeconfig(self.url, self.ca_file, d / f"{safe}.crt", d / f"{safe}.key", cn))
        return Credentials(cn, d / f"{safe}.crt", d / f"{safe}.key", kc)

    def ssl_context(self, creds: Credentials | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        creds = creds or self.admin
        ctx.load_cert_chain(str(creds.cert), str(creds.key))
        return ctx

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """The real kubectl as the cluster admin (the user at a terminal)."""
        out = subprocess.run([find_binary("kubectl"), *args], input=input, capture_output=True, text=True, env=self.env)
        if check and out.returncode:
            raise AssertionError(f"kubectl {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
        return out

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The real helm as the cluster admin, with its own cache and config dirs."""
        env = {
            **self.env,
            "HELM_CACHE_HOME": str(self.dir / "helm/cache"),
            "HELM_CONFIG_HOME": str(self.dir / "helm/config"),
            "HELM_DATA_HOME": str(self.dir / "helm/data"),
        }
        return subprocess.run([find_binary("helm"), *args], capture_output=True, text=True, env=env, check=check)

    # ------------------------------------------------------------------ the API, as a client
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ctype: str = "application/json",
        creds=None,
        retry: bool = True,
    ) -> tuple[int, Any]:
        """One request as the cluster admin (or `creds`): (HTTP status, decoded body). Blocking
        and short: what tests poll in `eventually` while the operator runs on its own loop.
        A 429 with Retry-After (a resource's watch cache initializing, or flow control) is sent
        again after that wait, as kubectl does (unless `retry` is False)."""
        data = json.dumps(body).encode() if body is not None else None
        for _ in range(10 if retry else 1):
            req = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": ctype})
            try:
                with urllib.request.urlopen(req, timeout=30, context=self.ssl_context(creds)) as r:
                    status, text, wait = r.status, r.read(), None
            except urllib.error.HTTPError as e:
                status, text, wait = e.code, e.read(), e.headers.get("Retry-After")
            if status != 429 or not wait or not wait.isdigit():
                break
            time.sleep(int(wait))
        try:
            return status, json.loads(text) if text else None
        except ValueError:  # flow control's 429 is plain text
            return status, text.decode(errors="replace")

    def get(self, path: str) -> dict | None:
        """The object at `path`, or None when there is none."""
        status, body = self.request("GET", path)
        if status == 404:
            return None
        assert status == 200, (path, status, body)
        return body

    def login(self, creds: Credentials | None = None, token: str | None = None):
        """A `login` for controllers.kube.KubeClient / controllers.runtime.Options: the cluster
        admin's client certificate, `creds`' certificate, or a bearer `token`."""
        import kopf

        async def login():
            if token is not None:
                return kopf.ConnectionInfo(server=self.url, ca_path=str(self.ca_file), token=token)
            c = creds or self.admin
            return kopf.ConnectionInfo(
                server=self.url, ca_path=str(self.ca_file), certificate_path=str(c.cert), private_key_path=str(c.key)
            )

        return login

    def token(self, namespace: str, account: str, seconds: int = 3600) -> str:
        """A token of ServiceAccount `namespace/account` (TokenRequest), as a pod would mount."""
        status, body = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        assert status == 201, body
        return body["status"]["token"]

    def kubeconfig_for(self, path: Path, *, token: str | None = None, creds: Credentials | None = None) -> Path:
        """A kubeconfig naming this API server and a token or a client certificate."""
        user: dict[str, str] = {"token": token} if token else {}
        if not token:
            c = creds or self.admin
            user = {"client-certificate": str(c.cert), "client-key": str(c.key)}
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "local",
                    "clusters": [
                        {"name": "local", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}
                    ],
                    "users": [{"name": "user", "user": user}],
                    "contexts": [{"name": "local", "context": {"cluster": "local", "user": "user"}}],
                }
            )
        )
        return path

    def stop(self) -> None:
        for s in reversed(self.servers):
            s.stop(timeout=10)


@dataclass
class Namespace:
    """One test's own namespace on the session's control plane: the test (cluster admin) reads
    synchronously, for `eventually`, and writes through the operator's own client."""

    cp: ControlPlane
    name: str
    client: Any  # controllers.kube.KubeClient as the cluster admin, on the test's event loop

    def obj(self, res, name: str, ns: str | None = None) -> dict | None:
        """The object, or None when it does not exist (a deleted one being finalized exists)."""
        return self.cp.get(res.path(ns or self.name, name))

    def items(self, res, labels: dict[str, str] | None = None, ns: str | None = None) -> list[dict]:
        q = (
            "?" + urllib.parse.urlencode({"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())})
            if labels
            else ""
        )
        got = self.cp.get(res.path(ns or self.name) + q)
        return (got or {}).get("items") or []

    def events(self, reason: str | None = None, involved: str | None = None) -> list[dict]:
        """Events in the namespace, oldest first: of `reason`, about the object named `involved`."""
        got = self.cp.get(f"/api/v1/namespaces/{self.name}/events") or {}
        return [
            e
            for e in got.get("items") or []
            if (reason is None or e.get("reason") == reason)
            and (involved is None or e.get("involvedObject", {}).get("name") == involved)
        ]

    async def create(self, res, body: dict) -> dict:
        body = {**body, "metadata": {**(body.get("metadata") or {}), "namespace": self.name}}
        return await self.client.create(res, self.name, body)

    async def patch(self, res, name: str, patch: dict, *, status: bool = False) -> dict:
        return await self.client.patch(res, self.name, name, patch, status=status)

    async def delete(self, res, name: str) -> None:
        await self.client.delete(res, self.name, name)

    def release(self, resources) -> None:
        """Strip the finalizers of what is left of `resources` (controllers.kube.Resource), so
        the namespace can go once the operator that put them there has stopped."""
        for res in resources:
            for o in self.items(res):
                if o["metadata"].get("finalizers"):
                    self.cp.request(
                        "PATCH",
                        res.path(self.name, o["metadata"]["name"]),
                        {"metadata": {"finalizers": None}},
                        ctype="application/merge-patch+json",
                    )


def kubeconfig(url: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "local",
            "clusters": [{"name": "local", "cluster": {"server": url, "certificate-authority": str(ca)}}],
            "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        }
    )


def _https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
        return r.status == 200


def start_control_plane(d: Path, timeout: float = 120.0, audit_users: tuple[str, ...] = ()) -> ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler; returns when the API
    server is ready and both controllers answer their health checks. The requests of
    `audit_users` are written to `d/audit.log` (the API server's audit log, JSON lines, one event
    when a request's response starts and one when it completes): what bench/bench_operator.py
    counts."""
    pki = d / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    ca = CA.new("kmilvus-test-ca")
    (pki / "ca.crt").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    (pki / "ca.key").write_bytes(_pem_key(ca.key))
    service_ip = f"127.{secrets.randbelow(254) + 1}.{secrets.randbelow(254) + 1}.{secrets.randbelow(254) + 1}"
    cert, key = ca.issue(
        "kube-apiserver",
        dns=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ips=("127.0.0.1", "10.0.0.1", service_ip),
    )
    (pki / "apiserver.crt").write_bytes(cert)
    (pki / "apiserver.key").write_bytes(key)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # service-account token signing
    (pki / "sa.key").write_bytes(_pem_key(sa))
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )

    servers: list[ChildServer] = []
    try:
        etcd = start_etcd(d / "etcd")
        servers.append(etcd)
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        cp = ControlPlane(d, url, pki / "ca.crt", None, servers, ca, service_ip)  # type: ignore[arg-type]
        cp.admin = cp.credentials("kmilvus-admin", ("system:masters",))
        log = d / "kube-apiserver.log"
        audit: list[str] = []
        if audit_users:
            policy = {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "users": list(audit_users)}, {"level": "None"}],
            }
            (d / "audit-policy.yaml").write_text(yaml.safe_dump(policy))
            audit = [
                f"--audit-policy-file={d / 'audit-policy.yaml'}",
                f"--audit-log-path={d / 'audit.log'}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",  # written before the response: counted when answered
            ]
        proc = _spawn(
            "kube-apiserver",
            [
                find_binary("kube-apiserver"),
                f"--etcd-servers=http://{etcd.endpoint}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *audit,
            ],
            log,
        )
        cp.servers.append(ChildServer("kube-apiserver", proc, url, log))
        ctx = cp.ssl_context()
        _wait(lambda: _https_ok(f"{url}/readyz", ctx), proc, "kube-apiserver", log, timeout)

        cm_port, sched_port = free_port(), free_port()
        for name, argv, health in (
            (
                "kube-controller-manager",
                [
                    f"--kubeconfig={cp.admin.kubeconfig}",
                    f"--authentication-kubeconfig={cp.admin.kubeconfig}",
                    f"--authorization-kubeconfig={cp.admin.kubeconfig}",
                    # Each controller acts with its own ServiceAccount (RBAC's system:controller:*).
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={pki / 'ca.crt'}",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={cm_port}",
                    "--controllers=*",
                    "--v=1",
                ],
                f"https://127.0.0.1:{cm_port}/healthz",
            ),
            (
                "kube-scheduler",
                [
                    f"--kubeconfig={cp.admin.kubeconfig}",
                    f"--authentication-kubeconfig={cp.admin.kubeconfig}",
                    f"--authorization-kubeconfig={cp.admin.kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={sched_port}",
                    "--v=1",
                ],
                f"https://127.0.0.1:{sched_port}/healthz",
            ),
        ):
            log = d / f"{name}.log"
            proc = _spawn(name, [find_binary(name), *argv], log)
            cp.servers.append(ChildServer(name, proc, health, log))
        # Their serving certificates are self-signed: health is all we ask of them.
        insecure = ssl._create_unverified_context()
        for s in cp.servers[2:]:
            _wait(lambda s=s: _https_ok(s.endpoint, insecure), s.proc, s.name, s.log_path, timeout)
        # The namespace controller and the service-account controller are running once `default`
        # has its ServiceAccount (and its root CA ConfigMap): pods can be admitted from here on.
        deadline = time.monotonic() + timeout
        while cp.kubectl("get", "serviceaccount/default", "configmap/kube-root-ca.crt", check=False).returncode:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the default ServiceAccount never appeared; logs in {d}")
            time.sleep(0.1)
        return cp
    except BaseException:
        for s in reversed(servers):
            with contextlib.suppress(Exception):
                s.stop()
        raise
