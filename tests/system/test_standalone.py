"""`kmilvus standalone` as a user runs it: the ready line, pymilvus against it, S3 storage,
and SIGTERM stopping every component and child process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from pymilvus import MilvusClient

from kmilvus.util.embedded import MissingBinaryError, find_binary, free_port
from tests.flushutil import batch, bench_schema


def start_standalone(
    tmp_path: Path, *args: str, env: dict | None = None, port: int | None = None
) -> tuple[subprocess.Popen, int, Path]:
    """`kmilvus standalone` on `tmp_path / "data"`; given the `port` of an earlier run there, it
    restarts that standalone (same cluster, same data). The log is appended to."""
    port = port or free_port()
    log = tmp_path / "standalone.log"
    exe = Path(sys.executable).with_name("kmilvus")
    ready = f"kmilvus standalone ready on 127.0.0.1:{port}"
    seen = log.read_text(errors="replace").count(ready) if log.exists() else 0
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                str(exe),
                "standalone",
                "--data-dir",
                str(tmp_path / "data"),
                "--port",
                str(port),
                "--http-port",
                str(free_port()),
                "--cluster",
                "sa" + str(port),
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    deadline = time.monotonic() + 60
    while log.read_text(errors="replace").count(ready) <= seen:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("standalone did not become ready:\n" + log.read_text()[-3000:])
        time.sleep(0.05)
    return proc, port, log


def stop_and_check_clean(proc: subprocess.Popen) -> None:
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    # It exits cleanly; the bound only keeps a hang from holding the suite (no speed is checked).
    assert proc.wait(60) == 0
    _, left = psutil.wait_procs(children, timeout=5)  # its children end with it
    alive = [c for c in left if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {[c.name() for c in alive]}"


def _nats_memory_limit(pid: int) -> str:
    nats = next(c for c in psutil.Process(pid).children(recursive=True) if c.name() == "nats-server")
    return nats.environ().get("GOMEMLIMIT", "")


def test_standalone_serves_pymilvus_and_stops_cleanly_on_sigterm(tmp_path):
    proc, port, log = start_standalone(tmp_path)
    try:
        names = {c.name() for c in psutil.Process(proc.pid).children(recursive=True)}
        assert {"etcd", "nats-server"} <= names
        # The embedded nats-server's soft memory limit (Config.embedded_nats_memory_mb).
        assert _nats_memory_limit(proc.pid) == "512MiB"
        c = MilvusClient(uri=f"http://127.0.0.1:{port}")
        c.create_collection("sa", schema=bench_schema())
        ids, vecs, tags = batch(0, 100)
        c.insert("sa", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
        c.flush("sa")
        assert c.list_collections() == ["sa"] and c.get_collection_stats("sa")["row_count"] == 100
        c.close()
        # The RESTful API v2 is served too, on its own port (the ready line names it).
        http_port = int(re.search(r"RESTful API on 127\.0\.0\.1:(\d+)", log.read_text()).group(1))
        resp = httpx.post(f"http://127.0.0.1:{http_port}/v2/vectordb/collections/list", json={})
        assert resp.json() == {"code": 0, "data": ["sa"]}
        assert list((tmp_path / "data" / "storage" / "insert_log").iterdir())
        # Quiet by default: only the ready line (and nothing at info level) on the console.
        assert "level=info" not in log.read_text()
    finally:
        stop_and_check_clean(proc)


def test_standalone_with_external_servers_and_s3_storage(tmp_path, etcd_endpoint, nats_url, moto_endpoint):
    bucket = "kmilvus-" + str(free_port())
    proc, port, _ = start_standalone(
        tmp_path,
        "--etcd-endpoint",
        etcd_endpoint,
        "--nats-url",
        nats_url,
        "--storage-uri",
        f"s3://{bucket}/root?endpoint={moto_endpoint}",
    )
    try:
        assert not psutil.Process(proc.pid).children(recursive=True)  # started no servers of its own
        c = MilvusClient(uri=f"http://127.0.0.1:{port}")
        c.create_collection("s3c", schema=bench_schema())
        ids, vecs, tags = batch(0, 1000)
        c.insert("s3c", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
        c.flush("s3c")
        assert c.get_collection_stats("s3c")["row_count"] == 1000
        c.close()
        from kmilvus.storage import ObjectStore

        store = ObjectStore.from_uri(f"s3://{bucket}/root?endpoint={moto_endpoint}")
        assert any(k.startswith("insert_log/") for k in store.walk_sync())
    finally:
        stop_and_check_clean(proc)


def test_the_embedded_nats_servers_memory_limit_is_configurable(tmp_path):
    proc, _port, _log = start_standalone(tmp_path, env={"KMILVUS_EMBEDDED_NATS_MEMORY_MB": "384"})
    try:
        assert _nats_memory_limit(proc.pid) == "384MiB"
    finally:
        stop_and_check_clean(proc)


def test_missing_binary_is_a_one_line_error_naming_the_debian_package(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from kmilvus import cli
    from kmilvus.util import embedded

    monkeypatch.setattr(embedded, "SEARCH_DIRS", [])
    monkeypatch.setattr(embedded, "pinned_dir", lambda: tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingBinaryError) as err:
        find_binary("nats-server")
    assert str(err.value) == (
        "nats-server not found: run `./dev setup` or install it with `apt-get install nats-server`"
    )
    result = CliRunner().invoke(cli.main, ["standalone", "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: etcd not found: run `./dev setup` or install it with `apt-get install etcd-server`"
    )


def test_the_pinned_build_comes_before_the_path(monkeypatch, tmp_path):
    """`./dev setup` links the pinned etcd / nats-server next to the virtualenv's Python; a
    Debian package on PATH (older: etcd 3.4, nats-server 2.9) is only the fallback."""
    from kmilvus.util import embedded

    pinned, on_path = tmp_path / "venv-bin", tmp_path / "usr-bin"
    for d in (pinned, on_path):
        d.mkdir()
    for name in ("etcd", "nats-server"):
        (on_path / name).write_text("#!/bin/sh\n")
        (on_path / name).chmod(0o755)
    monkeypatch.setattr(embedded, "pinned_dir", lambda: pinned)
    monkeypatch.setenv("PATH", str(on_path))
    assert find_binary("etcd") == str(on_path / "etcd")
    (pinned / "etcd").write_text("#!/bin/sh\n")
    (pinned / "etcd").chmod(0o755)
    assert find_binary("etcd") == str(pinned / "etcd")
    assert find_binary("nats-server") == str(on_path / "nats-server")


def test_the_embedded_servers_are_the_pinned_versions():
    """The set-up built the pinned etcd and nats-server (tools/versions.env) and they are the
    ones kmilvus starts."""
    from kmilvus.util import embedded

    pins = dict(
        line.split("=", 1)
        for line in (Path(__file__).resolve().parents[2] / "tools/versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    etcd = subprocess.run([find_binary("etcd"), "--version"], capture_output=True, text=True, check=True).stdout
    assert f"etcd Version: {pins['ETCD_VERSION'].lstrip('v')}" in etcd.splitlines()
    nats = subprocess.run([find_binary("nats-server"), "--version"], capture_output=True, text=True, check=True)
    assert nats.stdout.strip() == f"nats-server: {pins['NATS_SERVER_VERSION']}"
    assert find_binary("etcd") == str(embedded.pinned_dir() / "etcd")


def test_prometheus_metrics_are_exposed(tmp_path):
    import urllib.request

    mport = free_port()
    proc, port, _ = start_standalone(tmp_path, "--metrics-port", str(mport))
    try:
        c = MilvusClient(uri=f"http://127.0.0.1:{port}")
        c.create_collection("m", schema=bench_schema())
        ids, vecs, tags = batch(0, 250)
        c.insert("m", [{"id": i, "vec": v, "tag": t} for i, v, t in zip(ids, vecs, tags, strict=True)])
        c.flush("m")
        c.close()
        text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
        assert "kmilvus_proxy_inserted_rows_total 250.0" in text
        assert 'kmilvus_datacoord_segments{state="Flushed"} 1.0' in text
        assert 'kmilvus_rpc_latency_seconds_count{method="Insert",role="proxy"} 1.0' in text
        assert "kmilvus_datanode_flushed_segments_total 1.0" in text
    finally:
        stop_and_check_clean(proc)


def test_sigkilled_standalone_leaves_no_server_behind(tmp_path):
    proc, _, _ = start_standalone(tmp_path)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert {c.name() for c in children} >= {"etcd", "nats-server"}
    proc.kill()
    proc.wait(10)
    _gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"orphaned: {[c.name() for c in alive]}"
