"""`./dev compat`'s run and classification logic (bench/compat.py), on a tiny example program of
our own (never pymilvus' examples) and on tracebacks of each kind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import compat

from kmilvus.util.embedded import free_port

TINY = Path(__file__).resolve().parent / "compat_example" / "tiny_example.py"


def test_tiny_example_fails_at_an_rpc_not_built():
    # A port of its own: another standalone on this machine may hold Milvus' 19530 (the example's
    # address is edited to it, as `./dev compat` does when 19530 is taken).
    outcome = compat.run_one(TINY, timeout=120, port=free_port())
    assert not outcome.passed
    assert outcome.category == "not built", outcome
    assert outcome.call.startswith("tiny_example.py:14 get_replicate_configuration"), outcome
    assert "UNIMPLEMENTED" in outcome.code + outcome.why or "not implemented" in outcome.why.lower(), outcome
    text = compat.table([outcome, compat.Outcome("ok.py", True, 0.1)])
    assert "| tiny_example.py | FAIL" in text and "| ok.py | pass |" in text
    assert text.endswith("1 of 2 pass.")


def _tb(frames: list[tuple[str, int, str, str]], exc: str) -> str:
    lines = ["noise before", "Traceback (most recent call last):"]
    for file, line, func, src in frames:
        lines += [f'  File "{file}", line {line}, in {func}', f"    {src}"]
    return "\n".join([*lines, exc, ""])


EX = "/tmp/x/simple.py"
LIB = "/v/site-packages/pymilvus/milvus_client/milvus_client.py"


@pytest.mark.parametrize(
    "stderr,want",
    [
        (
            _tb(
                [
                    (EX, 16, "<module>", "client.create_collection(name, dim)"),
                    (LIB, 300, "create_collection", "x"),
                    (LIB, 900, "_create_index", "y"),
                ],
                "pymilvus.exceptions.MilvusException: <MilvusException: (code=1100, message=bad dim)>",
            ),
            ("simple.py:16 create_collection", "1100", "bad dim", "bug"),
        ),
        (
            _tb(
                [(EX, 3, "<module>", "c.load_collection('a')"), (LIB, 10, "load_collection", "x")],
                "pymilvus.exceptions.MilvusException: <MilvusException: (code=StatusCode.UNIMPLEMENTED, "
                "message=Method not implemented!)>",
            ),
            ("simple.py:3 load_collection", "StatusCode.UNIMPLEMENTED", "Method not implemented!", "not built"),
        ),
        (
            _tb(
                [(EX, 7, "<module>", "bulk_import(...)"), (LIB, 10, "bulk_import", "x")],
                "urllib3.exceptions.NewConnectionError: Failed to establish a connection to localhost:9000 (minio)",
            ),
            ("simple.py:7 bulk_import", "", "Failed to establish a connection to localhost:9000 (minio)", "external"),
        ),
        (
            _tb([(EX, 1, "<module>", "import pandas")], "ModuleNotFoundError: No module named 'pandas'"),
            ("simple.py:1 import pandas", "", "No module named 'pandas'", "example"),
        ),
    ],
)
def test_classify(stderr, want):
    assert compat.classify(stderr, Path(EX)) == want


def test_classify_reports_the_original_failure_of_a_chained_traceback():
    first = _tb(
        [(EX, 5, "<module>", "c.create_collection(n, dimension=8)"), (LIB, 10, "create_collection", "x")],
        "pymilvus.exceptions.MilvusException: <MilvusException: (code=1100, message=first)>",
    )
    later = _tb(
        [(EX, 9, "<module>", "c.release_collection(n)"), (LIB, 20, "release_collection", "y")],
        "pymilvus.exceptions.MilvusException: <MilvusException: (code=1, message=in finally)>",
    )
    stderr = first + "\nDuring handling of the above exception, another exception occurred:\n\n" + later
    assert compat.classify(stderr, Path(EX)) == ("simple.py:5 create_collection", "1100", "first", "bug")


def test_classify_prefers_the_first_rpc_error_pymilvus_logged():
    log = (
        "2026-11-22 17:42:31,912 [ERROR][_log_rpc_error]: grpc RpcError: [create_index], <AioRpcError: "
        "StatusCode.UNIMPLEMENTED, kmilvus does not implement CreateIndex yet>, <elapsed:1.6ms>\n"
    )
    final = _tb(
        [(EX, 93, "main", "await c.release_collection(n)"), (LIB, 20, "release_collection", "y")],
        "grpc.aio._call.AioRpcError: <AioRpcError of RPC that terminated with:",
    )
    call, code, why, category = compat.classify(log + final, Path(EX))
    assert call.startswith("create_index (first RPC error pymilvus logged") and "simple.py:93" in call
    assert (code, why, category) == (
        "StatusCode.UNIMPLEMENTED",
        "kmilvus does not implement CreateIndex yet",
        "not built",
    )


def test_classify_timeout_and_no_traceback():
    assert compat.classify("", Path(EX), timed_out=True)[3] == "timeout"
    assert compat.classify("Segmentation fault\n", Path(EX)) == ("", "", "Segmentation fault", "bug")
