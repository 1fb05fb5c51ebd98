"""Full-text search through pymilvus 3.0: analyzers and RunAnalyzer, BM25 functions that fill a
sparse field server-side, and their checks with Milvus' messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pymilvus import DataType, Function, FunctionType, MilvusClient, MilvusException
from tantivy import Filter, TextAnalyzerBuilder, Tokenizer

from kmilvus.analyzer import build
from kmilvus.function.bm25 import token_hash
from tests.util import wait_until

TEXTS = [
    "The 2 QUICK Brown-Foxes dog's 32.3 中文 👩‍🔬 éclair Straße",
    "---abc123---DEF_456---",
    "Running dogs are jumping over the lazy foxes; this was it.",
    "हिन्दी भाषा, русский язык, Ελληνικά, 日本語のテキスト",
    "",
]


def bm25_schema(client: MilvusClient, match: bool = False, **text_kwargs):
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("text", DataType.VARCHAR, max_length=2000, enable_analyzer=True, enable_match=match, **text_kwargs)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["text"], output_field_names="sparse")
    )
    return schema


def _rows_tokens(analyzer_params, texts):
    toks = build(analyzer_params).analyze(pa.array(texts))
    words = toks.text.to_pylist()
    return [[w for w, r in zip(words, toks.row.tolist(), strict=True) if r == i] for i in range(len(texts))]


@pytest.mark.parametrize(
    ("params", "reference"),
    [
        ({"tokenizer": "standard"}, lambda: TextAnalyzerBuilder(Tokenizer.simple())),
        ({"tokenizer": "whitespace"}, lambda: TextAnalyzerBuilder(Tokenizer.whitespace())),
        (None, lambda: TextAnalyzerBuilder(Tokenizer.simple()).filter(Filter.lowercase())),
        (
            {"type": "english"},
            lambda: (
                TextAnalyzerBuilder(Tokenizer.simple())
                .filter(Filter.lowercase())
                .filter(Filter.stemmer("english"))
                .filter(Filter.stopword("english"))
            ),
        ),
        (
            {"tokenizer": "standard", "filter": ["lowercase", "asciifolding", {"type": "length", "max": 5}]},
            lambda: (
                TextAnalyzerBuilder(Tokenizer.simple())
                .filter(Filter.lowercase())
                .filter(Filter.ascii_fold())
                .filter(Filter.remove_long(6))
            ),
        ),
        (
            {"tokenizer": "standard", "filter": [{"type": "stop", "stop_words": ["_english_", "quick"]}]},
            lambda: (
                TextAnalyzerBuilder(Tokenizer.simple())
                .filter(Filter.stopword("english"))
                .filter(Filter.custom_stopword(["quick"]))
            ),
        ),
    ],
)
def test_analyzers_give_tantivys_tokens(params, reference):
    """Milvus runs tantivy's tokenizers and filters; the columnar analyzer gives the same tokens."""
    ref = reference().build()
    assert _rows_tokens(params, TEXTS) == [ref.analyze(t) for t in TEXTS]


def test_run_analyzer_shows_tokens_offsets_positions_and_hashes(client):
    assert client.run_analyzer("Hello, World hello").tokens == ["hello", "world", "hello"]
    res = client.run_analyzer(["The running dogs", "中文 ok"], analyzer_params={"type": "english"}, with_detail=True)
    detail = [(t["token"], t["start_offset"], t["end_offset"], t["position"]) for t in res[0].tokens]
    assert detail == [("run", 4, 11, 1), ("dog", 12, 16, 2)]  # "the" is a stop word; positions keep its gap
    assert [(t["token"], t["start_offset"], t["end_offset"]) for t in res[1].tokens] == [("中文", 0, 6), ("ok", 7, 9)]
    hashed = client.run_analyzer("milvus", with_hash=True)
    assert [(t["token"], t["hash"]) for t in hashed.tokens] == [("milvus", token_hash("milvus"))]
    cn = client.run_analyzer("Milvus是向量数据库", analyzer_params={"type": "chinese"})
    assert cn.tokens == ["Milvus", "是", "向量", "数据", "据库", "数据库"]
    with pytest.raises(MilvusException) as err:
        client.run_analyzer("x", analyzer_params={"tokenizer": "klingon"})
    assert err.value.code == 1100 and "unsupported tokenizer: klingon" in err.value.message


def test_run_analyzer_with_a_collection_fields_analyzer(client):
    client.create_collection("c", schema=bm25_schema(client, analyzer_params={"type": "english"}))
    res = client.run_analyzer(["Jumping foxes"], collection_name="c", field_name="text")
    assert res[0].tokens == ["jump", "fox"]
    with pytest.raises(MilvusException) as err:
        client.run_analyzer(["x"], collection_name="c", field_name="nosuch")
    assert err.value.code == 1700


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"tokenizer": "klingon"}, "unsupported tokenizer: klingon"),
        ({"type": "french"}, "unknown build-in analyzer type: french"),
        ({"tokenizer": "standard", "filter": ["nosuch"]}, "build analyzer failed, filter not found :nosuch"),
        ({"tokenizer": "standard", "filter": [{"type": "stemmer", "language": "x"}]}, "unsupport language: x"),
        ({"tokenizer": "standard", "shiny": 1}, "unknown analyzer option key: shiny"),
        ({"filter": ["lowercase"]}, "tokenizer name or type must be set"),
    ],
)
def test_bad_analyzer_params_are_refused_at_create(client, params, message):
    with pytest.raises(MilvusException) as err:
        client.create_collection("c", schema=bm25_schema(client, analyzer_params=params))
    assert message in err.value.message
    assert not client.has_collection("c")


def test_bm25_function_rules_are_milvus(client):
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("text", DataType.VARCHAR, max_length=100)  # no analyzer
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["text"], output_field_names="sparse")
    )
    with pytest.raises(MilvusException) as err:
        client.create_collection("c", schema=schema)
    assert "BM25 function input field must set enable_analyzer to true" in err.value.message

    # pymilvus checks the output field's type itself: a raw request meets the server's check.
    from pymilvus.grpc_gen import milvus_pb2, schema_pb2

    raw = schema_pb2.CollectionSchema(name="c")
    raw.fields.add(name="id", data_type=DataType.INT64, is_primary_key=True)
    text = raw.fields.add(name="text", data_type=DataType.VARCHAR)
    text.type_params.add(key="max_length", value="100")
    text.type_params.add(key="enable_analyzer", value="true")
    raw.fields.add(name="dense", data_type=DataType.FLOAT_VECTOR).type_params.add(key="dim", value="2")
    raw.functions.add(name="bm25", type=FunctionType.BM25, input_field_names=["text"], output_field_names=["dense"])
    req = milvus_pb2.CreateCollectionRequest(collection_name="c", schema=raw.SerializeToString())
    status = client._get_connection()._stub.CreateCollection(req)
    assert status.code == 65535
    assert status.reason == "BM25 function output field must be a SparseFloatVector field, but got FloatVector"
    assert not client.has_collection("c")


def _stored_column(node, coll_id: int, field_id: int) -> list:
    """A field's values as the flushed Parquet binlogs hold them, in row-ID order."""
    from urllib.parse import urlparse

    import pyarrow.parquet as pq

    root = Path(urlparse(node.cfg.storage_uri).path) / "insert_log" / str(coll_id)
    tables = [pq.read_table(p) for p in sorted(root.rglob("*")) if p.is_file()]
    table = pa.concat_tables(tables).sort_by("0")
    return table.column(str(field_id)).to_pylist()


def test_insert_fills_the_bm25_field_and_refuses_it_given(node, client):
    from pymilvus.grpc_gen import milvus_pb2

    client.create_collection("c", schema=bm25_schema(client), consistency_level="Strong")
    desc = client.describe_collection("c")
    fn = desc["functions"][0]
    assert (fn["name"], fn["type"], fn["input_field_names"], fn["output_field_names"]) == (
        "bm25",
        FunctionType.BM25,
        ["text"],
        ["sparse"],
    )
    sparse = next(f for f in desc["fields"] if f["name"] == "sparse")
    assert sparse.get("is_function_output") is True
    client.insert("c", [{"id": 1, "text": "Hello world, hello!"}, {"id": 2, "text": ""}])
    client.flush("c")
    stored = _stored_column(node, desc["collection_id"], sparse["field_id"])
    assert [dict(r) for r in stored] == [{token_hash("hello"): 2.0, token_hash("world"): 1.0}, {}]

    # pymilvus refuses the output field client-side; a raw request gets the server's refusal.
    req = milvus_pb2.InsertRequest(collection_name="c", num_rows=1)
    req.fields_data.add(field_name="id", type=DataType.INT64).scalars.long_data.data.append(3)
    req.fields_data.add(field_name="text", type=DataType.VARCHAR).scalars.string_data.data.append("x")
    req.fields_data.add(
        field_name="sparse", type=DataType.SPARSE_FLOAT_VECTOR
    ).vectors.sparse_float_vector.SetInParent()
    status = client._get_connection()._stub.Insert(req).status
    assert status.code == 1100 and "the field sparse is the output of a function" in status.reason


def _match_collection(client: MilvusClient, analyzer: dict | None = None):
    schema = client.create_schema()
    schema.add_field("id", DataType.INT64, is_primary=True)
    kwargs = {} if analyzer is None else {"analyzer_params": analyzer}
    schema.add_field("text", DataType.VARCHAR, max_length=1000, enable_analyzer=True, enable_match=True, **kwargs)
    schema.add_field("plain", DataType.VARCHAR, max_length=100)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    client.create_collection("m", schema=schema, consistency_level="Strong")
    ip = client.prepare_index_params()
    ip.add_index("vec", metric_type="L2")
    client.create_index("m", ip)
    client.load_collection("m")


MATCH_ROWS = [
    (1, "the quick brown fox jumps"),
    (2, "a quick dog"),
    (3, "brown quick fox"),
    (4, "Foxes and DOGS"),
]


def _ids(client, expr: str) -> list[int]:
    return sorted(r["id"] for r in client.query("m", expr, output_fields=["id"]))


@pytest.mark.parametrize("flushed", [False, True])
def test_text_match_and_phrase_match_in_query_search_and_delete(client, flushed):
    _match_collection(client)
    client.insert("m", [{"id": i, "text": t, "plain": t, "vec": [float(i), 0.0]} for i, t in MATCH_ROWS])
    if flushed:
        client.flush("m")
    assert _ids(client, "text_match(text, 'fox')") == [1, 3]
    assert _ids(client, "TEXT_MATCH(text, 'FOX dog')") == [1, 2, 3]  # the query is analyzed too
    assert _ids(client, "text_match(text, 'quick brown fox', minimum_should_match=2)") == [1, 3]
    assert _ids(client, "text_match(text, 'quick brown fox', minimum_should_match=3)") == [1, 3]
    assert _ids(client, "text_match(text, 'dogs')") == [4]  # the standard analyzer does not stem
    assert _ids(client, "phrase_match(text, 'quick brown')") == [1]
    assert _ids(client, "phrase_match(text, 'quick fox')") == [3]
    assert _ids(client, "PHRASE_MATCH(text, 'quick fox', 1)") == [1, 3]
    assert _ids(client, "not text_match(text, 'quick') and id > 0") == [4]
    hits = client.search("m", [[0.0, 0.0]], filter="text_match(text, 'quick')", limit=10, output_fields=["id"])
    assert [h["id"] for h in hits[0]] == [1, 2, 3]
    client.delete("m", filter="text_match(text, 'dog')")
    assert _ids(client, "text_match(text, 'quick')") == [1, 3]


def test_text_match_with_an_english_analyzer_stems_the_query(client):
    _match_collection(client, {"type": "english"})
    client.insert("m", [{"id": i, "text": t, "plain": t, "vec": [0.0, 0.0]} for i, t in MATCH_ROWS])
    assert _ids(client, "text_match(text, 'jumping dog')") == [1, 2, 4]
    # "the" is a stop word: dropped, its position kept, so "brown fox" must follow one token.
    assert _ids(client, "phrase_match(text, 'the brown fox', 0)") == [1]
    assert _ids(client, "phrase_match(text, 'brown the fox', 0)") == [3]  # any token in its place


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("text_match(plain, 'x')", 'field "plain" does not enable match'),
        ("text_match(id, 'x')", "text match operation on non-string is unsupported"),
        ("phrase_match(text, 'x', -1)", '"slop" should not be a negative interger'),
        ("phrase_match(text, 'x', 1.5)", '"slop" should be a const integer expression'),
        ("text_match(text, 'x', minimum_should_match=0)", "minimum_should_match should be >= 1, got 0"),
        ("text_match(text, 'x', minimum_should_match=1001)", "minimum_should_match should be <= 1000, got 1001"),
    ],
)
def test_text_match_errors_are_milvus(client, expr, message):
    _match_collection(client)
    with pytest.raises(MilvusException) as err:
        client.query("m", expr)
    assert err.value.code == 1100 and message in err.value.message


DOCS = [
    "The quick brown fox jumps over the lazy dog",
    "A quick brown dog outpaces a quick fox",
    "Lazy dogs sleep all day long",
    "Foxes are quick and clever animals",
    "The dog barks; the fox runs",
    "Vector databases store embeddings",
    "Milvus is a vector database for similarity search",
]


def _reference_scores(query: str, docs: list[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Milvus' BM25 written out over `docs` (english analyzer): idf from document frequencies,
    knowhere's tf normalisation with avgdl."""
    import math
    from collections import Counter

    an = build({"type": "english"})
    toks = [an.analyze(pa.array([d])).text.to_pylist() for d in docs]
    n, avgdl = len(docs), max(sum(len(t) for t in toks) / len(docs), 1.0)
    df = Counter(h for t in toks for h in {token_hash(x) for x in t})
    q = Counter(token_hash(t) for t in an.analyze(pa.array([query])).text.to_pylist())
    out = []
    for t in toks:
        tf = Counter(token_hash(x) for x in t)
        out.append(
            sum(
                qtf
                * math.log(1 + (n - df[h] + 0.5) / (df[h] + 0.5))
                * tf[h]
                * (k1 + 1)
                / (tf[h] + k1 * (1 - b + b * len(t) / avgdl))
                for h, qtf in q.items()
                if h in tf
            )
        )
    return out


def _bm25_collection(client, index_params: dict | None = None, dense: bool = False):
    schema = bm25_schema(client, analyzer_params={"type": "english"})
    if dense:
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
    ip = client.prepare_index_params()
    ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params=index_params or {})
    if dense:
        ip.add_index("vec", metric_type="L2")
    client.create_collection("b", schema=schema, index_params=ip, consistency_level="Strong")


def _search(client, query: str, limit: int = 10, **kw):
    res = client.search("b", [query], anns_field="sparse", limit=limit, output_fields=["id"], **kw)
    return [(h["id"], h["distance"]) for h in res[0]]


def _expected(query: str, docs: list[str], ids: list[int], **kw):
    scores = _reference_scores(query, docs, **kw)
    return sorted(((i, s) for i, s in zip(ids, scores, strict=True) if s > 0), key=lambda x: (-x[1], x[0]))


@pytest.mark.parametrize("stage", ["growing", "flushed", "two segments"])
def test_bm25_search_scores_are_milvus_formula(client, stage):
    _bm25_collection(client)
    rows = [{"id": i, "text": t} for i, t in enumerate(DOCS)]
    if stage == "two segments":
        client.insert("b", rows[:3])
        client.flush("b")
        client.insert("b", rows[3:])
    else:
        client.insert("b", rows)
        if stage == "flushed":
            client.flush("b")
    for query in ["quick fox", "lazy dogs sleeping", "vector database search", "nothing matches zzz"]:
        got = _search(client, query)
        want = _expected(query, DOCS, list(range(len(DOCS))))
        assert [i for i, _ in got] == [i for i, _ in want], query
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=2e-6)


def test_bm25_k1_b_from_the_index_and_the_search(client):
    _bm25_collection(client, {"bm25_k1": 1.8, "bm25_b": 0.3})
    client.insert("b", [{"id": i, "text": t} for i, t in enumerate(DOCS)])
    ids = list(range(len(DOCS)))
    got = _search(client, "quick brown fox")
    want = _expected("quick brown fox", DOCS, ids, k1=1.8, b=0.3)
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=2e-6)
    got = _search(client, "quick brown fox", search_params={"params": {"bm25_k1": 1.2, "bm25_b": 1.0}})
    want = _expected("quick brown fox", DOCS, ids, k1=1.2, b=1.0)
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=2e-6)
    desc = client.describe_index("b", "sparse")
    assert desc["index_type"] == "SPARSE_INVERTED_INDEX" and desc["metric_type"] == "BM25"
    with pytest.raises(MilvusException) as err:
        client.search("b", ["fox"], anns_field="sparse", limit=3, search_params={"metric_type": "IP"})
    assert "metric type not match" in err.value.message


def test_bm25_statistics_survive_deletes_compaction_and_restart(node_factory):
    """Deleted rows count in the statistics until compaction drops them (as Milvus' per-segment
    stats logs); compaction and a restart keep the scores."""
    node = node_factory()
    client = MilvusClient(uri=node.uri)
    _bm25_collection(client)
    client.insert("b", [{"id": i, "text": t} for i, t in enumerate(DOCS[:4])])
    client.flush("b")
    client.insert("b", [{"id": i, "text": t} for i, t in enumerate(DOCS[4:], start=4)])
    client.flush("b")
    client.delete("b", ids=[2])
    client.flush("b")  # the delete in a delta log, for compaction to apply
    ids = [0, 1, 3, 4, 5, 6]
    before = _search(client, "lazy quick fox")
    full = dict(_expected("lazy quick fox", DOCS, list(range(7))))
    alive = sorted(((i, full[i]) for i in ids if i in full), key=lambda x: -x[1])
    assert [i for i, _ in before] == [i for i, _ in alive]
    np.testing.assert_allclose([s for _, s in before], [full[i] for i, _ in before], rtol=2e-6)  # 7 rows' stats
    job = client.compact("b")
    wait_until(lambda: client.get_compaction_state(job) == "Completed", 120, what="compaction")
    # The compacted segment replaces its two sources on the QueryNode: one segment, 6 rows.
    wait_until(lambda: [s.num_rows for s in client.list_loaded_segments("b")] == [6], 60, what="handoff")
    want = dict(_expected("lazy quick fox", [DOCS[i] for i in ids], ids))
    got = _search(client, "lazy quick fox")
    np.testing.assert_allclose([s for _, s in got], [want[i] for i, _ in got], rtol=2e-6)
    assert {i for i, _ in got} == set(want)
    client.close()
    node.stop()
    node = node_factory()
    client = MilvusClient(uri=node.uri)
    client.load_collection("b")
    np.testing.assert_allclose([s for _, s in _search(client, "lazy quick fox")], [s for _, s in got], rtol=2e-6)
    client.close()


def test_hybrid_search_of_bm25_and_dense(client):
    from pymilvus import AnnSearchRequest, RRFRanker

    _bm25_collection(client, dense=True)
    client.insert("b", [{"id": i, "text": t, "vec": [float(i), 0.0]} for i, t in enumerate(DOCS)])
    reqs = [
        AnnSearchRequest(["vector database"], "sparse", {"metric_type": "BM25"}, limit=3),
        AnnSearchRequest([[0.0, 0.0]], "vec", {"metric_type": "L2"}, limit=3),
    ]
    res = client.hybrid_search("b", reqs, RRFRanker(60), limit=4, output_fields=["id"])
    got = [h["id"] for h in res[0]]
    text = [i for i, _ in _expected("vector database", DOCS, list(range(len(DOCS))))][:3]  # 6, 5
    dense = [0, 1, 2]
    rrf = {}
    for ranked in (text, dense):
        for r, i in enumerate(ranked):
            rrf[i] = rrf.get(i, 0.0) + 1 / (60 + r + 1)
    assert got == sorted(rrf, key=lambda i: (-rrf[i], i))[:4]
