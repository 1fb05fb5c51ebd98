"""Generate Python code for kmilvus' internal protos.

The Milvus API protos (common, schema, milvus, ...) ship only as generated modules inside
pymilvus, so their descriptors are dumped into a descriptor set that protoc reads instead of
.proto sources; the generated imports of those files are pointed at ``pymilvus.grpc_gen``.
Runs in the set-up step and again on import when a .proto is newer than its output.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROTOS = sorted(HERE.glob("*.proto"))
STAMP = HERE / ".build-stamp"
_PYMILVUS_MODULES = ("common", "schema", "milvus", "msg", "feder", "rg")


def _fingerprint() -> str:
    import grpc_tools
    import pymilvus

    h = hashlib.sha256()
    for p in PROTOS:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update(getattr(pymilvus, "__version__", "").encode())
    h.update(Path(grpc_tools.__file__).parent.name.encode())
    return h.hexdigest()


def _descriptor_set(path: Path) -> None:
    from google.protobuf import descriptor_pb2
    from pymilvus.grpc_gen import milvus_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd) -> None:  # dependencies first, as protoc expects
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            add(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        fds.file.append(proto)

    add(milvus_pb2.DESCRIPTOR)
    path.write_bytes(fds.SerializeToString())


def up_to_date() -> bool:
    return STAMP.exists() and STAMP.read_text() == _fingerprint()


def build(force: bool = False) -> bool:
    """Generate the modules; returns True when anything was (re)generated."""
    if not force and up_to_date():
        return False
    from grpc_tools import protoc

    deps = HERE / "deps.pb"
    _descriptor_set(deps)
    args = [
        "protoc",
        f"--descriptor_set_in={deps}",
        f"-I{ROOT}",
        f"--python_out={ROOT}",
        f"--pyi_out={ROOT}",
        f"--grpc_python_out={ROOT}",
        *[str(p.relative_to(ROOT)) for p in PROTOS],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    pattern = re.compile(rf"^import ({'|'.join(_PYMILVUS_MODULES)})_pb2 as", re.M)
    for out in HERE.glob("*_pb2*.py*"):
        text = out.read_text()
        fixed = pattern.sub(r"from pymilvus.grpc_gen import \1_pb2 as", text)
        if fixed != text:
            out.write_text(fixed)
    STAMP.write_text(_fingerprint())
    return True


if __name__ == "__main__":
    changed = build(force="--force" in sys.argv)
    if os.environ.get("KMILVUS_VERBOSE") or changed:
        print("kmilvus protos " + ("generated" if changed else "up to date"), file=sys.stderr)
