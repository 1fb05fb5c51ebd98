"""A node of this machine for the test control plane (tests/controlplane.py): what a kubelet does
for the pods the scheduler binds here, with local processes instead of containers.

Why not the real kubelet: it needs a container runtime and images; this machine has no registry
and no image of kmilvus (building one means a Debian root file system with Python, Java and every
wheel, a few GB, on each fresh CI machine). So the agent runs each container's `command`/`args`
as processes of this machine's files (the image's own environment, read from
images/kmilvus/Dockerfile, maps onto this checkout's virtualenv), and gives a pod exactly what its
spec says, no more:

- its own mount namespace: each volume (Secret, ConfigMap, projected service-account token with
  the cluster CA and namespace, downward API, emptyDir) bind-mounted at its `mountPath`
  (read-only when the mount or the volume says so), the root file system read-only when the
  container's securityContext says `readOnlyRootFilesystem`;
- the user and group of `runAsUser`/`runAsGroup` (volumes owned by `fsGroup`), no capabilities;
- env from `envFrom` and `env` (values with $(VAR), fieldRef, secretKeyRef, configMapKeyRef), over
  the image's environment, plus the `kubernetes` Service's KUBERNETES_SERVICE_HOST/PORT; the
  image's passwd/group entries and the kubelet's /etc/hosts (naming kubernetes.default.svc);
- the `kubernetes` Service itself: a loopback address of its own on port 443 that the agent
  forwards to the API server, as kube-proxy forwards the ClusterIP;
- Secrets, ConfigMaps and tokens read with the node's own credentials (system:node:<name>), so
  the Node authorizer lets the agent read only what pods bound to it name;
- startup, liveness and readiness probes (httpGet, tcpSocket, exec) on their periods, restarts
  by restartPolicy with the kubelet's back-off, graceful stop (SIGTERM, then SIGKILL after the
  grace period) when the pod is deleted, and status (phase, conditions, containerStatuses,
  podIP) patched back.

What it does not give: container images (the host's files, read-only where the spec says so),
network namespaces (every pod shares the host's loopback, so two pods may not listen on one
port, and other Services' ClusterIPs do not route, nor does cluster DNS exist: clients use the
pods' ports on 127.0.0.1), resource limits (cgroups), the Service environment variables other
than `kubernetes`'s, port-forward / exec / logs through the API server (no kubelet API), and
images other than the project's own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.controlplane import ControlPlane, Credentials

ROOT = Path(__file__).resolve().parents[1]
BACKOFF = (10, 20, 40, 80, 160, 300)  # the kubelet's CrashLoopBackOff, in seconds
SPARK_JOBS_IN_IMAGE = "/opt/kmilvus/spark-operator"  # images/spark/Dockerfile


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_env(image: str) -> tuple[dict[str, str], list[str]]:
    """The environment and CMD of an image of this project, mapped onto this checkout: what its
    Dockerfile's ENV lines give a container (the virtualenv's bin on PATH)."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOSTNAME": "",
        "LANG": "C.UTF-8",
    }
    if java := os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = java
    if "kmilvus-spark" in image:  # images/spark/Dockerfile, on apache/spark's image
        env |= {
            "HOME": "/nonexistent",  # the image's user, spark (185)
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "KMILVUS_SPARK_OPERATOR_DIR": SPARK_JOBS_IN_IMAGE,
        }
        return env, [sys.executable, str(ROOT / "tests" / "sparkimage.py")]  # apache/spark's entrypoint
    if "kmilvus" in image:  # images/kmilvus/Dockerfile
        env |= {
            "HOME": "/nonexistent",  # the image's user, kmilvus (10001)
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "KMILVUS_SPARK_OPERATOR_DIR": str(ROOT / "spark-operator"),
        }
        return env, ["kmilvus-operator"]
    raise ValueError(f"no image {image!r} on this node: only the project's own images run here")


def image_files(image: str) -> dict[str, Path]:
    """Directories an image of this project has at paths of its own (bound there, read-only,
    from this checkout): the Spark image's jobs at the path the SparkApplications name."""
    if "kmilvus-spark" in image:
        return {SPARK_JOBS_IN_IMAGE: ROOT / "spark-operator"}
    return {}


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in env values, command and args ($$ escapes; unknown stay)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        value,
    )


class Api:
    """The node's HTTP client of the API server (its client certificate: system:node:<name>)."""

    def __init__(self, cp: ControlPlane, creds: Credentials):
        self.url, self.ssl = cp.url, cp.ssl_context(creds)
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json") -> Any:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl))
        data = json.dumps(body) if body is not None else None
        async with self.session.request(method, self.url + path, data=data, headers={"Content-Type": ctype}) as r:
            text = await r.text()
            if r.status >= 400:
                raise ApiError(r.status, f"{method} {path}: {r.status} {text[:500]}")
            return json.loads(text) if text else None

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


class ApiError(Exception):
    def __init__(self, status: int, msg: str):
        super().__init__(msg)
        self.status = status


@dataclass
class Container:
    spec: dict
    proc: subprocess.Popen | None = None
    restarts: int = 0
    started_at: str = ""
    ready: bool = False
    started: bool = False
    last_exit: dict | None = None
    terminated: dict | None = None
    next_start: float = 0.0
    probes: list[asyncio.Task] = field(default_factory=list)


class Pod:
    """One pod on this node: its volumes, its containers as process groups, its status."""

    def __init__(self, agent: NodeAgent, pod: dict):
        self.agent, self.obj = agent, pod
        self.uid = pod["metadata"]["uid"]
        self.ns, self.name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.dir = agent.dir / "pods" / self.uid
        self.containers = {c["name"]: Container(c) for c in pod["spec"]["containers"]}
        self.task: asyncio.Task | None = None
        self.stopping = False
        self.init_done = not pod["spec"].get("initContainers")

    # -------------------------------------------------------------------------- volumes
    async def _get(self, kind: str, name: str) -> dict:
        return await self.agent.api("GET", f"/api/v1/namespaces/{self.ns}/{kind}/{name}")

    async def _keys(self, kind: str, src: dict) -> dict[str, bytes] | None:
        try:
            o = await self._get(kind, src["name"])
        except ApiError as e:
            if e.status == 404 and src.get("optional"):
                return None
            if e.status == 404:  # the kubelet's words (CreateContainerConfigError)
                raise ValueError(f'{kind.removesuffix("s")} "{src["name"]}" not found') from None
            raise
        if kind == "secrets":
            data = {k: base64.b64decode(v) for k, v in (o.get("data") or {}).items()}
        else:
            data = {k: v.encode() for k, v in (o.get("data") or {}).items()}
            data |= {k: base64.b64decode(v) for k, v in (o.get("binaryData") or {}).items()}
        if items := src.get("items"):
            return {i["path"]: data[i["key"]] for i in items}
        return data

    def _field(self, path: str) -> str:
        m, s = self.obj["metadata"], self.obj["spec"]
        fields = {
            "metadata.name": m["name"],
            "metadata.namespace": m["namespace"],
            "metadata.uid": m["uid"],
            "spec.nodeName": s.get("nodeName", ""),
            "spec.serviceAccountName": s.get("serviceAccountName", ""),
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
            "status.podIPs": "127.0.0.1",
        }
        if mm := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path):
            return (m.get(mm.group(1)) or {}).get(mm.group(2), "")
        return fields[path]

    async def _token(self, src: dict) -> bytes:
        sa = self.obj["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": src.get("expirationSeconds", 3600),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid},
        }
        if aud := src.get("audience"):
            spec["audiences"] = [aud]
        tr = await self.agent.api(
            "POST",
            f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return tr["status"]["token"].encode()

    async def _volume(self, v: dict) -> tuple[Path, bool]:
        """Write one volume's files; (its directory, read-only)."""
        d = self.dir / "volumes" / v["name"]
        d.mkdir(parents=True, exist_ok=True)
        files: dict[str, bytes] | None = None
        mode = 0o644
        if "emptyDir" in v:
            return d, False
        if src := v.get("secret"):
            files = await self._keys("secrets", {**src, "name": src["secretName"]}) or {}
            mode = src.get("defaultMode", mode)
        elif src := v.get("configMap"):
            files = await self._keys("configmaps", src) or {}
            mode = src.get("defaultMode", mode)
        elif src := v.get("downwardAPI"):
            files = {i["path"]: self._field(i["fieldRef"]["fieldPath"]).encode() for i in src["items"]}
        elif src := v.get("projected"):
            files, mode = {}, src.get("defaultMode", mode)
            for s in src["sources"]:
                if t := s.get("serviceAccountToken"):
                    files[t["path"]] = await self._token(t)
                elif c := s.get("configMap"):
                    files |= await self._keys("configmaps", c) or {}
                elif c := s.get("secret"):
                    files |= await self._keys("secrets", c) or {}
                elif c := s.get("downwardAPI"):
                    files |= {i["path"]: self._field(i["fieldRef"]["fieldPath"]).encode() for i in c["items"]}
        else:
            raise ValueError(f"volume {v['name']}: only emptyDir, secret, configMap, downwardAPI, projected here")
        for path, content in files.items():
            p = d / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content)
            p.chmod(mode)
        return d, True

    async def prepare(self) -> None:
        sc = self.obj["spec"].get("securityContext") or {}
        self.volumes = {}
        (self.dir / "volumes").mkdir(parents=True, exist_ok=True)
        for v in self.obj["spec"].get("volumes") or []:
            d, ro = await self._volume(v)
            if (g := sc.get("fsGroup")) is not None:
                for p in [d, *d.rglob("*")]:
                    os.chown(p, -1, g)
                    if p.is_dir() and not ro:
                        p.chmod(0o2775)
            self.volumes[v["name"]] = (d, ro)

    # -------------------------------------------------------------------------- processes
    async def env_of(self, c: dict) -> dict[str, str]:
        env, _ = image_env(c["image"])
        env["HOSTNAME"] = (self.obj["spec"].get("hostname") or self.name)[:63]
        # The `kubernetes` Service, as the kubelet gives it (tests/nodeagent.py forwards it).
        env["KUBERNETES_SERVICE_HOST"] = self.agent.cp.service_ip
        env["KUBERNETES_SERVICE_PORT"] = env["KUBERNETES_SERVICE_PORT_HTTPS"] = "443"
        env["KUBERNETES_PORT"] = f"tcp://{self.agent.cp.service_ip}:443"
        for src in c.get("envFrom") or []:
            kind, ref = ("configmaps", src["configMapRef"]) if "configMapRef" in src else ("secrets", src["secretRef"])
            data = await self._keys(kind, ref) or {}
            env |= {src.get("prefix", "") + k: v.decode() for k, v in data.items()}
        for e in c.get("env") or []:
            if "valueFrom" not in e:
                env[e["name"]] = expand(str(e.get("value", "")), env)
            elif ref := e["valueFrom"].get("fieldRef"):
                env[e["name"]] = self._field(ref["fieldPath"])
            elif ref := e["valueFrom"].get("secretKeyRef"):
                data = await self._keys("secrets", {"name": ref["name"], "optional": ref.get("optional")})
                if data is not None and ref["key"] in data:
                    env[e["name"]] = data[ref["key"]].decode()
                elif not ref.get("optional"):
                    raise ValueError(f"couldn't find key {ref['key']} in Secret {self.ns}/{ref['name']}")
            elif ref := e["valueFrom"].get("configMapKeyRef"):
                data = await self._keys("configmaps", {"name": ref["name"], "optional": ref.get("optional")})
                if data is not None and ref["key"] in data:
                    env[e["name"]] = data[ref["key"]].decode()
                elif not ref.get("optional"):
                    raise ValueError(f"couldn't find key {ref['key']} in ConfigMap {self.ns}/{ref['name']}")
            else:
                raise ValueError(f"env {e['name']}: valueFrom {list(e['valueFrom'])} is not supported here")
        return env

    def argv_of(self, c: dict, env: dict[str, str]) -> list[str]:
        _, cmd = image_env(c["image"])
        command = [expand(a, env) for a in c.get("command") or []]
        args = [expand(a, env) for a in c.get("args") or []]
        if not command:
            command, args = cmd, args  # the image's CMD is replaced by args when given
        exe = shutil.which(command[0], path=env["PATH"]) or command[0]
        return [exe, *command[1:], *args]

    def launcher(self, c: dict) -> list[str]:
        """The process's context as a shell prelude run in a new mount namespace: bind mounts,
        the read-only root, then the user of the securityContext."""
        psc = self.obj["spec"].get("securityContext") or {}
        csc = c.get("securityContext") or {}
        pre: list[str] = []
        # The image's user (images/kmilvus/Dockerfile: useradd kmilvus, 10001): its passwd and
        # group entries are the image's files, here bound over the host's.
        for name, line in (
            ("passwd", "kmilvus:x:10001:10001::/nonexistent:/usr/sbin/nologin\n"),
            ("group", "kmilvus:x:10001:\n"),
        ):
            f = self.agent.dir / "image" / name
            if not f.exists():
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(Path(f"/etc/{name}").read_text() + line)
            pre.append(f"mount --bind {shlex.quote(str(f))} /etc/{name}")
        # The pod's own host name (a UTS namespace: spec.hostname, else its name, as a runtime
        # sets it; Spark's driver resolves it) and the kubelet's /etc/hosts for the pod, which
        # names it; cluster DNS would name the `kubernetes` Service.
        host = (self.obj["spec"].get("hostname") or self.name)[:63]
        pre.append(f"hostname {shlex.quote(host)}")
        hosts = self.dir / "etc-hosts"
        svc = " ".join(f"kubernetes{s}" for s in ("", ".default", ".default.svc", ".default.svc.cluster.local"))
        hosts.write_text(
            f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            f"127.0.0.1\t{host}\n{self.agent.cp.service_ip}\t{svc}\n"
        )
        pre.append(f"mount --bind {shlex.quote(str(hosts))} /etc/hosts")
        for dst, src in image_files(c["image"]).items():
            self._made(Path(dst))
            q = shlex.quote(dst)
            pre += [f"mkdir -p {q}", f"mount --bind {shlex.quote(str(src))} {q}", f"mount -o remount,bind,ro {q}"]
        # The volumes are reached through a descriptor (/proc/self/fd/3): a mount over one of
        # their parent directories (an emptyDir at /tmp) does not hide them from the next mount.
        lines = ["set -e", *pre, f"exec 3<{shlex.quote(str(self.dir / 'volumes'))}"]
        mounts = sorted(c.get("volumeMounts") or [], key=lambda m: m["mountPath"].count("/"))
        for m in mounts:
            _, ro = self.volumes[m["name"]]
            src = Path("/proc/self/fd/3") / m["name"]
            if sub := m.get("subPath"):
                src = src / sub
            dst = shlex.quote(m["mountPath"])
            self._made(Path(m["mountPath"]))
            lines.append(f"[ -e {dst} ] || mkdir -p {dst}")
            lines.append(f"mount --bind {shlex.quote(str(src))} {dst}")
            if m.get("readOnly") or ro:
                lines.append(f"mount -o remount,bind,ro {dst}")
        if csc.get("readOnlyRootFilesystem"):  # after the mounts: they stay as they are
            lines.append("mount -o remount,bind,ro /")
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup"))
        if (csc.get("runAsNonRoot") or psc.get("runAsNonRoot")) and not uid:
            raise ValueError("runAsNonRoot without runAsUser: the image's user is not known here")
        priv = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]
        if uid is not None:
            priv += [f"--reuid={uid}", f"--regid={gid if gid is not None else uid}"]
            groups = [str(g) for g in [psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])] if g is not None]
            priv += [f"--groups={','.join(groups)}"] if groups else ["--clear-groups"]
        if csc.get("allowPrivilegeEscalation") is False:
            priv.append("--no-new-privs")
        workdir = c.get("workingDir") or "/"  # the image's WORKDIR (/var/lib/kmilvus) is not here
        lines.append(f"cd {shlex.quote(workdir)}")
        lines.append("exec 3<&-; unset OLDPWD PWD")
        lines.append(f'exec {" ".join(priv)} -- "$@"')
        script = self.dir / f"{c['name']}.sh"
        script.write_text("\n".join(lines) + "\n")
        return ["unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", str(script)]

    def _made(self, path: Path) -> None:
        """A mount point the host lacks is made (empty, on the host) as a runtime would in the
        image's root file system; the agent removes it again when it stops."""
        missing = path
        while not missing.parent.exists():
            missing = missing.parent
        if not missing.exists():
            self.agent.made_dirs.add(missing)

    async def start(self, c: Container) -> None:
        env = await self.env_of(c.spec)
        argv = self.argv_of(c.spec, env)
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        with open(self.dir / f"{c.spec['name']}.log", "ab") as log:
            c.proc = subprocess.Popen(
                [*self.launcher(c.spec), *argv],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        c.started_at, c.ready, c.started, c.terminated = now(), False, False, None
        for p in c.probes:
            p.cancel()
        c.probes = [asyncio.create_task(self.probe_loop(c, c.proc))]

    async def probe(self, c: Container, probe: dict) -> bool:
        timeout = probe.get("timeoutSeconds", 1)

        def port(p: int | str) -> int:
            if isinstance(p, int) or p.isdigit():
                return int(p)
            return next(x["containerPort"] for x in c.spec.get("ports") or [] if x.get("name") == p)

        try:
            if h := probe.get("httpGet"):
                scheme = h.get("scheme", "HTTP").lower()
                url = f"{scheme}://127.0.0.1:{port(h['port'])}{h.get('path', '/')}"
                async with (
                    aiohttp.ClientSession() as s,
                    s.get(url, ssl=False, timeout=aiohttp.ClientTimeout(total=timeout)) as r,
                ):
                    return 200 <= r.status < 400
            if t := probe.get("tcpSocket"):
                _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port(t["port"])), timeout)
                w.close()
                return True
            if e := probe.get("exec"):
                assert c.proc is not None
                p = await asyncio.create_subprocess_exec(
                    "nsenter", f"--mount=/proc/{c.proc.pid}/ns/mnt", "--", *e["command"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                return await asyncio.wait_for(p.wait(), timeout) == 0
        except (OSError, TimeoutError, aiohttp.ClientError, StopIteration):
            return False
        raise ValueError(f"probe {probe}: only httpGet, tcpSocket, exec here")

    async def probe_loop(self, c: Container, proc: subprocess.Popen) -> None:
        """Startup, then liveness and readiness, each on its own period, while `proc` lives."""
        s = c.spec

        async def run(kind: str, probe: dict | None) -> None:
            if probe is None:
                if kind == "startup":
                    c.started = True
                elif kind == "readiness":
                    while not c.started:
                        await asyncio.sleep(0.1)
                    c.ready = True
                    self.agent.poke()
                return
            if kind != "startup":
                while not c.started:
                    await asyncio.sleep(0.1)
            await asyncio.sleep(probe.get("initialDelaySeconds", 0))
            fails = oks = 0
            while proc.poll() is None:
                ok = await self.probe(c, probe)
                fails, oks = (0, oks + 1) if ok else (fails + 1, 0)
                if kind == "startup":
                    if ok:
                        c.started = True
                        self.agent.poke()
                        return
                    if fails >= probe.get("failureThreshold", 3):
                        os.killpg(proc.pid, signal.SIGKILL)
                        return
                elif kind == "liveness" and fails >= probe.get("failureThreshold", 3):
                    os.killpg(proc.pid, signal.SIGTERM)
                    return
                elif kind == "readiness":
                    ready = (oks >= probe.get("successThreshold", 1)) or (
                        c.ready and fails < probe.get("failureThreshold", 3)
                    )
                    if ready != c.ready:
                        c.ready = ready
                        self.agent.poke()
                await asyncio.sleep(probe.get("periodSeconds", 10))

        await asyncio.gather(
            run("startup", s.get("startupProbe")),
            run("liveness", s.get("livenessProbe")),
            run("readiness", s.get("readinessProbe")),
        )

    async def run(self) -> None:
        """The pod's life: volumes, init containers in order, then containers kept running as
        restartPolicy says, until the pod is deleted."""
        try:
            await self.prepare()
            policy = self.obj["spec"].get("restartPolicy", "Always")
            for ic in self.obj["spec"].get("initContainers") or []:
                c = Container(ic)
                while True:
                    await self.start(c)
                    assert c.proc is not None
                    code = await asyncio.to_thread(c.proc.wait)
                    if code == 0 or policy == "Never":
                        break
                if code != 0:
                    await self.report(phase="Failed", reason=f"init container {ic['name']} exited {code}")
                    return
            self.init_done = True
            for c in self.containers.values():
                await self.start(c)
            await self.report()
            loop = asyncio.get_running_loop()
            while not self.stopping:
                for c in self.containers.values():
                    if c.proc is not None and (code := c.proc.poll()) is not None:
                        c.terminated = {"exitCode": code, "startedAt": c.started_at, "finishedAt": now(),
                                        "reason": "Completed" if code == 0 else "Error"}  # fmt: skip
                        c.ready = False
                        c.proc = None
                        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
                        if restart:
                            c.last_exit = {"terminated": c.terminated}
                            c.next_start = loop.time() + BACKOFF[min(c.restarts, len(BACKOFF) - 1)]
                        await self.report()
                    if c.proc is None and c.terminated is not None and c.next_start and loop.time() >= c.next_start:
                        c.restarts += 1
                        c.next_start = 0.0
                        await self.start(c)
                        await self.report()
                if all(c.proc is None and not c.next_start for c in self.containers.values()):
                    await self.report()
                    return  # Succeeded or Failed: nothing restarts
                await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a pod that cannot start is reported, as a kubelet does
            self.agent.errors.append(f"{self.ns}/{self.name}: {exc!r}")
            with contextlib.suppress(Exception):
                await self.report(phase="Failed", reason=str(exc)[:500])

    async def stop(self, grace: int) -> None:
        self.stopping = True
        procs = [c.proc for c in self.containers.values() if c.proc is not None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = asyncio.get_running_loop().time() + grace
        while any(p.poll() is None for p in procs) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                await asyncio.to_thread(p.wait)
        for c in self.containers.values():
            for t in c.probes:
                t.cancel()
        if self.task is not None:
            self.task.cancel()

    # -------------------------------------------------------------------------- status
    async def report(self, phase: str | None = None, reason: str = "") -> None:
        statuses = []
        for name, c in self.containers.items():
            if c.proc is not None:
                state = {"running": {"startedAt": c.started_at}}
            elif c.terminated is not None:
                state = {"waiting": {"reason": "CrashLoopBackOff"}} if c.next_start else {"terminated": c.terminated}
            else:
                state = {"waiting": {"reason": "ContainerCreating"}}
            st = {
                "name": name,
                "image": c.spec["image"],
                "imageID": "",
                "containerID": f"kmilvus-node://{self.uid}/{name}/{c.restarts}",
                "ready": c.ready,
                "started": c.started and c.proc is not None,
                "restartCount": c.restarts,
                "state": state,
            }
            if c.last_exit:
                st["lastState"] = c.last_exit
            statuses.append(st)
        cs = self.containers.values()
        if phase is None:
            if any(c.proc is not None or c.next_start for c in cs):
                phase = "Running"
            elif all(c.terminated and c.terminated["exitCode"] == 0 for c in cs):
                phase = "Succeeded"
            elif all(c.terminated for c in cs):
                phase = "Failed"
            else:
                phase = "Pending"
        ready = phase == "Running" and all(c.ready for c in cs)
        t = now()

        def cond(type_: str, ok: bool) -> dict:
            return {"type": type_, "status": "True" if ok else "False", "lastTransitionTime": t}

        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.obj["status"].get("startTime") or t,
            "containerStatuses": statuses,
            "conditions": [
                cond("PodReadyToStartContainers", True),
                cond("Initialized", self.init_done),
                cond("ContainersReady", ready),
                cond("Ready", ready),
                cond("PodScheduled", True),
            ],
        }
        if reason:
            status["message"] = reason
        key = json.dumps(status, sort_keys=True, default=str).replace(t, "")
        if key == getattr(self, "_last", None):
            return
        with contextlib.suppress(ApiError):  # a pod deleted meanwhile
            await self.agent.api(
                "PATCH",
                f"/api/v1/namespaces/{self.ns}/pods/{self.name}/status",
                {"status": status},
                ctype="application/strategic-merge-patch+json",
            )
            self._last = key


class NodeAgent:
    """Registers Node `name`, keeps it Ready (status and Lease heartbeats), and runs the pods
    bound to it. Runs in a thread of its own with its own event loop, for a whole test session."""

    def __init__(self, cp: ControlPlane, name: str, workdir: Path):
        self.cp, self.name, self.dir = cp, name, workdir
        self.api_port = int(cp.url.rsplit(":", 1)[1])
        self.creds = cp.credentials(f"system:node:{name}", ("system:nodes",))
        self.pods: dict[str, Pod] = {}
        self.departed: list[Pod] = []  # deleted pods: their logs stay for failure messages
        self.errors: list[str] = []
        self.made_dirs: set[Path] = set()  # mount points made on the host, removed at the end
        self._stop = threading.Event()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._main, name=f"node-{name}", daemon=True)
        self._started = threading.Event()

    def start(self) -> NodeAgent:
        self._thread.start()
        self._started.wait(60)
        if self.errors:
            raise RuntimeError(f"node {self.name} did not start: {self.errors}")
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)
        self._thread.join(60)
        for top in self.made_dirs:  # empty directories only: nothing of the host goes
            for d in sorted((p for p in [top, *top.rglob("*")] if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    d.rmdir()

    def poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _register(self) -> None:
        cpus = os.cpu_count() or 1
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        capacity = {"cpu": str(cpus), "memory": f"{mem // 1024}Ki", "pods": "110", "ephemeral-storage": "50Gi"}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }
        with contextlib.suppress(ApiError):
            await self.api("POST", "/api/v1/nodes", node)
        await self._heartbeat(capacity)

    async def _heartbeat(self, capacity: dict | None = None) -> None:
        t = now()
        status: dict[str, Any] = {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kmilvus test node",
                 "lastHeartbeatTime": t, "lastTransitionTime": t},
                *[{"type": k, "status": "False", "reason": f"KubeletHas{r}", "lastHeartbeatTime": t,
                   "lastTransitionTime": t}
                  for k, r in (("MemoryPressure", "SufficientMemory"), ("DiskPressure", "NoDiskPressure"),
                               ("PIDPressure", "SufficientPID"))],
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.name}],
            "nodeInfo": {"kubeletVersion": "kmilvus-node", "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "processes://", "kernelVersion": os.uname().release,
                         "osImage": "", "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        }  # fmt: skip
        if capacity:
            status["capacity"] = status["allocatable"] = capacity
        await self.api(
            "PATCH", f"/api/v1/nodes/{self.name}/status", {"status": status},
            ctype="application/strategic-merge-patch+json",
        )  # fmt: skip
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": 40,
                "renewTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        try:
            await self.api("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}",
                           {"spec": lease["spec"]}, ctype="application/merge-patch+json")  # fmt: skip
        except ApiError as e:
            if e.status != 404:
                raise
            await self.api("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """kube-proxy's part for the `kubernetes` Service: its address:443 to the API server."""
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.api_port)
        except OSError:
            writer.close()
            return

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            with contextlib.suppress(OSError):
                w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self.api = Api(self.cp, self.creds)
        try:
            await self._register()
            proxy = await asyncio.start_server(self._forward, self.cp.service_ip, 443)
        except Exception as exc:  # noqa: BLE001 - handed to start(), which raises it
            self.errors.append(repr(exc))
            self._started.set()
            await self.api.close()
            return
        self._started.set()
        last_beat = self._loop.time()
        try:
            while not self._stop.is_set():
                if self._loop.time() - last_beat > 10:
                    with contextlib.suppress(ApiError, aiohttp.ClientError):
                        await self._heartbeat()
                    last_beat = self._loop.time()
                with contextlib.suppress(ApiError, aiohttp.ClientError):
                    await self._sync()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 0.5)
                self._wake.clear()
        finally:
            await asyncio.gather(*(p.stop(2) for p in self.pods.values()), return_exceptions=True)
            proxy.close()
            await self.api.close()

    async def _sync(self) -> None:
        listed = await self.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")
        seen = set()
        for o in listed["items"]:
            uid = o["metadata"]["uid"]
            seen.add(uid)
            pod = self.pods.get(uid)
            if o["metadata"].get("deletionTimestamp"):
                if pod is not None and not pod.stopping:
                    grace = o["metadata"].get("deletionGracePeriodSeconds", 30)
                    asyncio.create_task(self._finish(pod, grace))  # noqa: RUF006 - kept in self.pods
                elif pod is None:
                    await self._delete(o)
                continue
            if pod is None and o["status"].get("phase") not in ("Succeeded", "Failed"):
                pod = self.pods[uid] = Pod(self, o)
                pod.task = asyncio.create_task(pod.run())
            elif pod is not None:
                pod.obj = o
                if pod.init_done and not pod.stopping:
                    await pod.report()  # readiness changes since the last round
        for uid in set(self.pods) - seen:  # deleted at once (grace period 0)
            pod = self.pods.pop(uid)
            self.departed.append(pod)
            await pod.stop(0)

    async def _finish(self, pod: Pod, grace: int) -> None:
        await pod.stop(grace)
        await self._delete(pod.obj)
        if self.pods.pop(pod.uid, None) is not None:
            self.departed.append(pod)

    async def _delete(self, o: dict) -> None:
        """The kubelet's last word on a pod: delete it for good once its processes are gone."""
        m = o["metadata"]
        with contextlib.suppress(ApiError):
            await self.api(
                "DELETE",
                f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                 "preconditions": {"uid": m["uid"]}},
            )  # fmt: skip


def pod_logs(agent: NodeAgent, ns: str, prefix: str, tail: int = 3000) -> str:
    """The logs of this node's pods whose names start with `prefix`, deleted ones too (for
    failure messages)."""
    out = []
    for p in [*agent.departed, *agent.pods.values()]:
        if p.ns == ns and p.name.startswith(prefix):
            for f in sorted(p.dir.glob("*.log")):
                out.append(f"--- {p.name}/{f.name}\n{f.read_text(errors='replace')[-tail:]}")
    return "\n".join(out)
