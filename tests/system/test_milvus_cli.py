"""milvus-cli (PyPI `milvus-cli`, Milvus' command line) runs its common commands against kmilvus
unchanged, typed into its interactive prompt (tests/milvus_cli.py): connect, list / create /
show / delete collection, insert from CSV, flush, create / list / show index, load, query,
search. What it prints is checked against what pymilvus sees on the same server."""

from __future__ import annotations

import csv
import json

import pytest

from tests.milvus_cli import MilvusCli

SCHEMA = {
    "collection_name": "cli_coll",
    "description": "made by milvus-cli",
    "auto_id": False,
    "enable_dynamic_field": False,
    "consistency_level": 0,  # Strong: what the CLI inserts is searched at once
    "shards_num": 1,
    "fields": [
        {"name": "id", "type": "INT64", "is_primary": True},
        {"name": "vec", "type": "FLOAT_VECTOR", "dim": 4},
        {"name": "color", "type": "VARCHAR", "max_length": 16},
    ],
}


@pytest.fixture
def cli(tmp_path):
    c = MilvusCli(tmp_path)
    yield c
    c.close()


def test_common_commands(node, client, cli, tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    rows = tmp_path / "rows.csv"
    with rows.open("w", newline="") as f:  # the CLI reads every CSV cell as JSON
        w = csv.writer(f)
        w.writerow(["id", "vec", "color"])
        for i in range(20):
            w.writerow([i, json.dumps([float(i), 1.0, 2.0, 3.0]), json.dumps("red" if i % 2 else "blue")])

    assert "Connect Milvus successfully." in cli.run(f"connect -uri {node.uri}")
    assert "No items found." in cli.run("list collections")
    out = cli.run(f"create collection --schema-file {schema}")
    assert "Create collection successfully!" in out and "made by milvus-cli" in out
    assert client.describe_collection("cli_coll")["description"] == "made by milvus-cli"
    assert "cli_coll" in cli.run("list collections")
    out = cli.run("show collection -c cli_coll")
    assert "*id" in out and "vec 101 dim: 4" in out and "color 21 max_length: 16" in out

    out = cli.run(f"insert file -c cli_coll {rows}")
    assert "Inserted successfully." in out and "'insert_count': 20" in out
    assert "Flush collection cli_coll successfully!" in cli.run("flush -c cli_coll")
    assert client.get_collection_stats("cli_coll")["row_count"] == 20

    out = cli.run(
        "create index",
        ("Collection name", "cli_coll"),
        ("The name of the field", "vec"),
        ("Index name", "vec_idx"),  # milvus-cli 1.2.1 does not pass it on: the index is named after the field
        ("Index type", "IVF_FLAT"),
        ("metric type", "L2"),
        ("Index params nlist", "4"),
    )
    assert "Create index successfully!" in out
    out = cli.run("list indexes -c cli_coll")
    assert "IVF_FLAT" in out and "{'nlist': 4}" in out
    out = cli.run("show index -c cli_coll -in vec")
    assert "IVF_FLAT" in out and "L2" in out
    assert client.describe_index("cli_coll", "vec")["index_type"] == "IVF_FLAT"

    assert "Load collection cli_coll successfully!" in cli.run("load collection -c cli_coll")
    assert "Loaded" in cli.run("show load_state -c cli_coll")
    out = cli.run(
        "query",
        ("Collection name", "cli_coll"),
        ("The query expression", "id in [1, 2, 3]"),
        ("partitions to query", ""),
        ("Fields to return", "id,color"),
        ("timeout", ""),
        ("Guarantee timestamp", ""),
        ("Graceful time", ""),
    )
    table = [line.replace(" ", "") for line in out.splitlines() if line.startswith("|")]
    assert table == ["|id|color|", "|1|red|", "|2|blue|", "|3|red|"]
    out = cli.run(
        "search",
        ("Collection name", "cli_coll"),
        ("vector field", "vec"),
        ("Vector data", "[3.0, 1.0, 2.0, 3.0]"),
        ("nprobe's value", "4"),
        ("Groups search by Field", ""),
        ("decimal places", ""),
        ("topk", "3"),
        ("boolean expression", ""),
        ("partitions to search", ""),
        ("Fields to return", "color"),
        ("Guarantee timestamp", ""),
    )
    ids = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("|") and "{'entity'" in line]
    hits = client.search("cli_coll", [[3.0, 1.0, 2.0, 3.0]], anns_field="vec", limit=3, output_fields=["color"])[0]
    assert ids[0] == "3" and set(ids) == {str(h["id"]) for h in hits}  # 2 and 4 tie at distance 1

    out = cli.run("delete collection -c cli_coll -y")
    assert not client.has_collection("cli_coll"), out
    assert "No items found." in cli.run("list collections")
