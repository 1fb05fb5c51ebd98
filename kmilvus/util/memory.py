"""Handing freed memory back to the operating system after a large, rare piece of work.

Allocators keep freed pages for reuse: pyarrow's (mimalloc) after a bulk import's batches, glibc's
malloc after faiss built an index (its arenas, one per thread). The process then stays hundreds of
MiB larger than what it holds, and what it holds is what a user sizes a pod by. `release()` asks
both to return what is free; it costs a few milliseconds and holds malloc's locks meanwhile, so it
runs after jobs, index builds, segment loads and releases of `RELEASE_AFTER_ROWS` or more rows,
never per request.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

import pyarrow as pa

RELEASE_AFTER_ROWS = 20_000  # smaller builds and loads leave too little behind to be worth a release


@functools.cache
def _malloc_trim() -> Any:
    """glibc's malloc_trim, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    fn = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def release() -> None:
    """Return the free pages of pyarrow's pool and of glibc's malloc to the system."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
