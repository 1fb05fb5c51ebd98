"""The chart's Grafana dashboard (charts/kmilvus/dashboards/kmilvus.json) has data for every
panel against a busy standalone, and Milvus' metric names come out with Milvus' labels.

No PromQL engine runs here (none is on PyPI; Prometheus from its Go module is not cheap to
build): each expression's vector selectors are parsed (name and label matchers, dashboard
variables as `.*`), and each must match a series of the standalone's /metrics — a range
selector (under rate()) one that moved since the start. A panel with a selector that matches
nothing fails the test.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymilvus import MilvusClient
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

from kmilvus.util.embedded import free_port
from tests.deploy.test_chart import render
from tests.system.test_standalone import start_standalone, stop_and_check_clean

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "kmilvus" / "dashboards" / "kmilvus.json"
_SELECTOR = re.compile(r"\b((?:k?milvus)_[a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*(\[[^\]]+\])?")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[tuple[str, str, str], ...]
    ranged: bool  # a range vector (rate, increase): the series must have moved

    def matches(self, labels: dict[str, str]) -> bool:
        for label, op, value in self.matchers:
            have = labels.get(label, "")
            if (op == "=" and have != value) or (op == "!=" and have == value):
                return False
            if (op == "=~" and not re.fullmatch(value, have)) or (op == "!~" and re.fullmatch(value, have)):
                return False
        return True


def selectors(expr: str) -> list[Selector]:
    out = []
    for name, body, rng in _SELECTOR.findall(expr):
        body = re.sub(r"\$\{?\w+\}?", ".*", body)  # a dashboard variable: every value ("All")
        out.append(Selector(name, tuple(_MATCHER.findall(body)), bool(rng)))
    return out


def panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p.get("type") != "row"]


def test_dashboard_ships_in_a_configmap_for_grafanas_sidecar(pinned_helm):
    assert not [d for d in render({}) if d["metadata"]["name"].endswith("grafana-dashboard")]  # off by default
    docs = render({"metrics": {"grafanaDashboard": {"enabled": True}}})
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("grafana-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["kmilvus.json"]) == json.loads(DASHBOARD.read_text())
    for p in panels():
        assert p["targets"] and all(selectors(t["expr"]) for t in p["targets"]), p["title"]


def _busy(port: int) -> None:
    """Every kind of call the panels count: DDL, inserts, upserts, deletes, a flush, searches,
    queries, one refused call and one RPC kmilvus has not built."""
    c = MilvusClient(uri=f"http://127.0.0.1:{port}")
    c.create_collection("busy", dimension=4)  # quick setup: indexed and loaded
    for start in range(0, 300, 100):
        c.insert("busy", [{"id": i, "vector": [float(i), 1.0, 2.0, 3.0]} for i in range(start, start + 100)])
    c.upsert("busy", [{"id": 1, "vector": [0.0, 0.0, 0.0, 0.0]}])
    c.delete("busy", ids=[2, 3])
    c.flush("busy")
    for _ in range(3):
        c.search("busy", [[1.0, 1.0, 2.0, 3.0]], limit=5)
        c.query("busy", filter="id < 10", output_fields=["id"])
    c.list_collections()
    with pytest.raises(Exception, match="collection not found"):
        c.describe_collection("no_such_collection")
    c.close()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch, pytest.raises(grpc.RpcError):
        milvus_pb2_grpc.MilvusServiceStub(ch).CreateResourceGroup(milvus_pb2.CreateResourceGroupRequest())


def test_every_panel_has_data_against_a_busy_standalone(tmp_path):
    mport = free_port()
    proc, port, _ = start_standalone(tmp_path, "--metrics-port", str(mport))
    try:
        _busy(port)
        text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
    finally:
        stop_and_check_clean(proc)
    samples = [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]
    empty = []
    for p in panels():
        for t in p["targets"]:
            for sel in selectors(t["expr"]):
                found = [v for name, labels, v in samples if name == sel.name and sel.matches(labels)]
                if not found or (sel.ranged and not any(v > 0 for v in found)):
                    empty.append((p["title"], sel))
    assert not empty, empty
    # Milvus' names with Milvus' labels.
    by_name = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((labels, value))
    search = [lv for lv in by_name["milvus_proxy_req_count"] if lv[0]["function_name"] == "Search"]
    assert {lv[0]["status"]: lv[1] for lv in search} == {"total": 3.0, "success": 3.0}
    assert set(search[0][0]) == {"node_id", "function_name", "status"}
    assert [v for lv, v in by_name["milvus_proxy_insert_vectors_count"]] == [300.0]  # what Insert acknowledged
    assert [v for lv, v in by_name["milvus_proxy_search_vectors_count"]] == [3.0]
    assert {lv["db_name"]: v for lv, v in by_name["milvus_rootcoord_collection_num"]} == {"default": 1.0}
    assert sum(v for lv, v in by_name["milvus_datanode_flushed_data_rows"] if lv["data_source"] == "streaming") >= 300
    flushed = {lv["segment_state"]: v for lv, v in by_name["milvus_datacoord_segment_num"]}
    assert flushed["Flushed"] >= 1
    fails = [lv for lv, v in by_name["milvus_proxy_req_count"] if lv["status"] == "fail" and v > 0]
    assert [lv["function_name"] for lv in fails] == ["DescribeCollection"]
