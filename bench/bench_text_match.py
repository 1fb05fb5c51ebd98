"""text_match / phrase_match on flushed rows, answered from the per-segment text index, beside
the column scan a `like` filter needs, through pymilvus.

    .venv/bin/python bench/bench_text_match.py                    # 100k rows, 30 runs per filter
    .venv/bin/python bench/bench_text_match.py --rows 20000 --runs 10

Starts `kmilvus standalone` (temp data dir, free port) unless `--uri` is given; inserts `--rows`
rows of 12-word texts (words drawn Zipf-like from 5000, the word "needle" in 0.1 % of the rows,
"red needle" in 0.05 %) with `enable_match`, flushes, builds a FLAT index on the 4-dim vector
and loads. Then the latency (p50 / p90 over `--runs`, consistency Eventually) of:
`text_match(text, 'needle')`, `phrase_match(text, 'red needle')`, a top-10 search filtered by
the text match, and the scan a user would write without it, `text like "%needle%"` — the first
text_match is timed apart (a segment's index is read or built once). Answers are checked equal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pymilvus import DataType, MilvusClient
from standalone_proc import Standalone

NAME = "bench_text_match"
FILTERS = {
    "query text_match(text, 'needle') (0.1 %)": ("query", "text_match(text, 'needle')"),
    "query phrase_match(text, 'red needle') (0.05 %)": ("query", "phrase_match(text, 'red needle')"),
    "search top-10, filter text_match": ("search", "text_match(text, 'needle')"),
    "query text like '%needle%' (scan)": ("query", 'text like "%needle%"'),
}


def fill(client: MilvusClient, rows: int, batch: int = 20_000) -> None:
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("text", DataType.VARCHAR, max_length=512, enable_analyzer=True, enable_match=True)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=4)
    client.create_collection(NAME, schema=schema)
    rng = np.random.default_rng(19530)
    words = np.array([f"w{i}" for i in range(5000)], dtype="<U16")  # room for "needle"
    weights = 1.0 / np.arange(1, 5001)
    weights /= weights.sum()
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        ids = np.arange(start, start + n)
        drawn = words[rng.choice(5000, size=(n, 12), p=weights)]
        drawn[ids % 1000 == 7, 5] = "needle"
        drawn[ids % 2000 == 7, 4] = "red"
        texts = [" ".join(r) for r in drawn]
        vecs = rng.random((n, 4), dtype=np.float32)
        client.insert(NAME, [{"id": int(i), "text": t, "vec": v} for i, t, v in zip(ids, texts, vecs, strict=True)])
    client.flush(NAME)
    ip = client.prepare_index_params()
    ip.add_index("vec", index_type="FLAT", metric_type="L2")
    client.create_index(NAME, ip)
    client.load_collection(NAME)


def run(client: MilvusClient, kind: str, expr: str) -> list[int]:
    if kind == "query":
        res = client.query(NAME, expr, output_fields=["id"], consistency_level="Eventually")
        return sorted(r["id"] for r in res)
    res = client.search(NAME, [[0.5] * 4], filter=expr, limit=10, consistency_level="Eventually")
    return sorted(h["id"] for h in res[0])


def timed(client: MilvusClient, kind: str, expr: str, runs: int) -> tuple[list[float], list[int]]:
    seconds, answer = [], []
    for _ in range(runs):
        t = time.perf_counter()
        answer = run(client, kind, expr)
        seconds.append(time.perf_counter() - t)
    return seconds, answer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--uri", default="")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "text_match"))
    args = ap.parse_args()
    server = None if args.uri else Standalone().start()
    uri = args.uri or server.uri
    try:
        client = MilvusClient(uri=uri)
        if client.has_collection(NAME):
            client.drop_collection(NAME)
        t = time.perf_counter()
        fill(client, args.rows)
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        first = run(client, "query", "text_match(text, 'needle')")
        first_s = time.perf_counter() - t
        results = {}
        answers = {}
        for label, (kind, expr) in FILTERS.items():
            secs, ans = timed(client, kind, expr, args.runs)
            answers[label] = ans
            ms = sorted(s * 1000 for s in secs)
            results[label] = {
                "p50_ms": round(statistics.median(ms), 2),
                "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
                "hits": len(ans),
                "runs": [round(x, 3) for x in ms],
            }
        want = [i for i in range(args.rows) if i % 1000 == 7]
        assert first == want, "text_match answered other rows than the ones holding the word"
        assert answers["query text like '%needle%' (scan)"] == want, "the scan disagrees"
        assert answers["query phrase_match(text, 'red needle') (0.05 %)"] == [i for i in want if i % 2000 == 7]
        client.drop_collection(NAME)
    finally:
        if server is not None:
            server.stop()
    out = {
        "rows": args.rows,
        "runs": args.runs,
        "insert_flush_index_load_s": round(load_s, 2),
        "first_text_match_ms": round(first_s * 1000, 1),
        "filters": results,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(out, f, indent=2)
    lines = [
        f"# text_match on {args.rows:,} flushed rows ({args.runs} runs each)",
        "",
        f"First text_match (the segment's index read or built once): {out['first_text_match_ms']} ms",
        "",
        "| filter | p50 ms | p90 ms | hits |",
        "|---|---|---|---|",
    ]
    lines += [f"| {k} | {v['p50_ms']} | {v['p90_ms']} | {v['hits']} |" for k, v in results.items()]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
