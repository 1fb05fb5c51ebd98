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
import os
import secrets
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

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
        return subprocess.run(
            [find_binary("kubectl"), *args], input=input, capture_output=True, text=True, env=self.env, check=check
        )

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The real helm as the cluster admin, with its own cache and config dirs."""
        env = {
            **self.env,
            "HELM_CACHE_HOME": str(self.dir / "helm/cache"),
            "HELM_CONFIG_HOME": str(self.dir / "helm/config"),
            "HELM_DATA_HOME": str(self.dir / "helm/data"),
        }
        return subprocess.run([find_binary("helm"), *args], capture_output=True, text=True, env=env, check=check)

    def stop(self) -> None:
        for s in reversed(self.servers):
            s.stop(timeout=10)


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


def start_control_plane(d: Path, timeout: float = 120.0) -> ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler; returns when the API
    server is ready and both controllers answer their health checks."""
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
