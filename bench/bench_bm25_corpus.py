"""BM25 full-text search on a real text corpus: recall of the top-10 against a reference BM25
ranking, and query latency, beside Milvus Lite where it runs.

    .venv/bin/python bench/bench_bm25_corpus.py                      # kmilvus (own standalone)
    .venv/bin/python bench/bench_bm25_corpus.py --uri http://127.0.0.1:19530 --label milvus-lite

The corpus is the English part of the chatterbot-corpus package (PyPI, BSD licence: public
dialog statements, one document each; `pip install chatterbot-corpus` in the running Python).
Documents go into a collection with an `english` analyzer, a BM25 function and a
SPARSE_INVERTED_INDEX (BM25); they are flushed and loaded. Queries are `--queries` statements'
first words. The reference ranking is Milvus' BM25 formula computed here, on tokens of tantivy's
own analyzer (tantivy-py: the tokenizer and filters Milvus' `english` analyzer runs), so it is
independent of the server. Recall@10 counts a returned row as right when its reference score is
at least the reference's 10th best (ties at the cut are right either way).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

NAME = "bench_bm25_corpus"
K = 10


def corpus() -> list[str]:
    import chatterbot_corpus  # the package ships its data
    import yaml

    root = Path(chatterbot_corpus.__file__).parent / "data" / "english"
    docs: list[str] = []
    for f in sorted(root.glob("*.yml")):
        data = yaml.safe_load(f.read_text())
        for conv in data.get("conversations", []):
            docs += [str(s) for s in conv if isinstance(s, (str, int, float)) and str(s).strip()]
    return list(dict.fromkeys(docs))


def reference_tokens(texts: list[str]) -> list[list[str]]:
    from tantivy import Filter, TextAnalyzerBuilder, Tokenizer

    english = (
        TextAnalyzerBuilder(Tokenizer.simple())
        .filter(Filter.lowercase())
        .filter(Filter.stemmer("english"))
        .filter(Filter.stopword("english"))
        .build()
    )
    return [english.analyze(t) for t in texts]


def dim(token: str) -> int:
    return zlib.crc32(token.encode()[:100]) % 0xFFFFFFFF


def reference_scores(docs_tokens, query_tokens, k1=1.2, b=0.75) -> list[list[float]]:
    n = len(docs_tokens)
    tfs = [Counter(dim(t) for t in d) for d in docs_tokens]
    lens = [sum(c.values()) for c in tfs]
    avgdl = max(sum(lens) / n, 1.0)
    df = Counter(h for c in tfs for h in c)
    postings: dict[int, list[int]] = {}
    for i, c in enumerate(tfs):
        for h in c:
            postings.setdefault(h, []).append(i)
    out = []
    for q in query_tokens:
        scores = [0.0] * n
        for h, qtf in Counter(dim(t) for t in q).items():
            if h not in df:
                continue
            idf = math.log(1 + (n - df[h] + 0.5) / (df[h] + 0.5))
            for i in postings[h]:
                tf = tfs[i][h]
                scores[i] += qtf * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lens[i] / avgdl))
        out.append(scores)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri", default="")
    ap.add_argument("--label", default="kmilvus")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "bm25_corpus"))
    args = ap.parse_args()
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    docs = corpus()
    step = max(1, len(docs) // args.queries)
    queries = [" ".join(d.split()[:4]) for d in docs[::step][: args.queries]]
    ref = reference_scores(reference_tokens(docs), reference_tokens(queries))

    server = None
    if not args.uri:
        from standalone_proc import Standalone

        server = Standalone("--http-port", "0").start()
    uri = args.uri or server.uri
    try:
        client = MilvusClient(uri=uri)
        if client.has_collection(NAME):
            client.drop_collection(NAME)
        schema = client.create_schema()
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field(
            "text", DataType.VARCHAR, max_length=4096, enable_analyzer=True, analyzer_params={"type": "english"}
        )
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name="bm25", function_type=FunctionType.BM25, input_field_names=["text"], output_field_names="sparse"
            )
        )
        ip = client.prepare_index_params()
        ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        client.create_collection(NAME, schema=schema, index_params=ip, consistency_level="Strong")
        t = time.perf_counter()
        for start in range(0, len(docs), 1000):
            client.insert(NAME, [{"id": i, "text": docs[i]} for i in range(start, min(len(docs), start + 1000))])
        client.flush(NAME)
        client.load_collection(NAME)
        load_s = time.perf_counter() - t
        recalls, seconds = [], []
        for q, scores in zip(queries, ref, strict=True):
            t = time.perf_counter()
            res = client.search(NAME, [q], anns_field="sparse", limit=K, output_fields=["id"])
            seconds.append(time.perf_counter() - t)
            got = [h["id"] for h in res[0]]
            best = sorted(scores, reverse=True)
            positive = [s for s in best[:K] if s > 0]
            if not positive:
                continue
            cut = positive[-1]
            right = sum(1 for i in got if scores[i] >= cut - 1e-6 * max(1.0, cut))
            recalls.append(right / len(positive))
        client.drop_collection(NAME)
    finally:
        if server is not None:
            server.stop()
    ms = sorted(s * 1000 for s in seconds)
    out = {
        "label": args.label,
        "docs": len(docs),
        "queries": len(recalls),
        "recall_at_10": round(statistics.mean(recalls), 4),
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
        "insert_flush_load_s": round(load_s, 2),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    path = Path(args.out + ".jsonl")
    with path.open("a") as f:
        f.write(json.dumps(out) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
