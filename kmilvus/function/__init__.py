"""Schema functions (Milvus' internal/util/function): BM25 only — see schema.py and bm25.py."""
