"""Object storage on pyarrow filesystems: a local directory or an S3-compatible bucket.

Keys are '/'-separated and relative to the store's root (`file:///abs/dir` or
`s3://bucket/prefix?endpoint=http://host:port&region=us-east-1`). The async API runs pyarrow's
blocking calls in worker threads; `filesystem` / `path()` / `uri()` let writers (Parquet) and
Spark address the same objects directly.

Writes are atomic for readers: locally a temp file (dot-prefixed, so pyarrow datasets and Spark
ignore it) in the same directory is renamed over the key; on S3 an object only becomes visible
once its (multipart) upload completes. Local writes are durable when they return: the file is
fsynced before the rename and its directories after it, so etcd meta committed next never
points at data the OS has not written. Local deletes prune the directories they leave empty, up
to the root, so dropping everything a collection owns returns the tree to its earlier state.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import posixpath
import uuid
from collections.abc import Callable
from urllib.parse import ParseResult, parse_qs, unquote, urlparse

import pyarrow.fs as pafs

from kmilvus.log import get_logger

log = get_logger(__name__)


def _clean_key(key: str) -> str:
    key = key.strip("/")
    if not key:
        raise ValueError("empty object key")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}")
    return key


def _clean_prefix(prefix: str) -> str:
    prefix = prefix.strip("/")
    if prefix and any(p in ("", ".", "..") for p in prefix.split("/")):
        raise ValueError(f"invalid object prefix {prefix!r}")
    return prefix


def temp_name(path: str) -> str:
    """A sibling of `path` that directory readers skip (leading dot)."""
    head, tail = posixpath.split(path)
    return posixpath.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:12]}")


class ObjectStore:
    """A root on a pyarrow FileSystem. Build one with `ObjectStore.from_uri`."""

    def __init__(
        self, filesystem: pafs.FileSystem, root: str, *, local: bool, root_uri: str, bucket: str | None = None
    ):
        self.filesystem = filesystem
        self.root = root.rstrip("/")  # filesystem path of the root
        self.local = local
        self.bucket = bucket
        self.root_uri = root_uri.rstrip("/")

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_uri(cls, uri: str) -> ObjectStore:
        if uri.startswith("/"):
            uri = "file://" + uri
        u = urlparse(uri)
        if u.scheme == "file":
            if u.netloc not in ("", "localhost"):
                raise ValueError(f"file URI must be absolute (file:///path): {uri}")
            root = os.path.abspath(unquote(u.path))
            try:
                os.makedirs(root, exist_ok=True)
            except OSError as exc:  # storage away (a failed mount...): writes fail and are retried
                log.warning("local storage root unavailable; going on", root=root, error=str(exc))
            return cls(pafs.LocalFileSystem(), root, local=True, root_uri="file://" + root)
        if u.scheme in ("s3", "s3a"):
            return cls._from_s3(u)
        raise ValueError(f"unsupported storage URI {uri!r} (use file:///abs/path or s3://bucket/prefix)")

    @classmethod
    def _from_s3(cls, u: ParseResult) -> ObjectStore:
        bucket = u.netloc
        if not bucket:
            raise ValueError("s3 URI needs a bucket: s3://bucket/prefix")
        prefix = u.path.strip("/")
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        kw: dict[str, object] = {"allow_bucket_creation": True, "allow_bucket_deletion": False}
        endpoint = q.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            e = urlparse(endpoint if "://" in endpoint else "http://" + endpoint)
            kw["endpoint_override"] = e.netloc
            kw["scheme"] = e.scheme or "http"
        region = q.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            kw["region"] = region
        access = os.environ.get("AWS_ACCESS_KEY_ID")
        secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
        if access and secret:
            kw["access_key"] = access
            kw["secret_key"] = secret
            if os.environ.get("AWS_SESSION_TOKEN"):
                kw["session_token"] = os.environ["AWS_SESSION_TOKEN"]
        if q.get("virtual_addressing") == "true":  # default: path-style (MinIO, moto)
            kw["force_virtual_addressing"] = True
        fs = pafs.S3FileSystem(**kw)
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            fs.create_dir(bucket)
        root = bucket + ("/" + prefix if prefix else "")
        return cls(fs, root, local=False, bucket=bucket, root_uri=f"s3a://{root}")

    # ---------------------------------------------------------------- addressing (sync)

    def path(self, key: str) -> str:
        """The filesystem path of `key` (for pyarrow calls with `filesystem=self.filesystem`)."""
        return f"{self.root}/{_clean_key(key)}"

    def uri(self, key: str = "") -> str:
        """`file:///...` or `s3a://bucket/...` (what Spark reads)."""
        key = _clean_prefix(key)
        return f"{self.root_uri}/{key}" if key else self.root_uri

    def key_of(self, path: str) -> str:
        """Inverse of `path()`."""
        if not path.startswith(self.root + "/"):
            raise ValueError(f"{path} is outside the store root {self.root}")
        return path[len(self.root) + 1 :]

    def _dir(self, prefix: str) -> str:
        prefix = _clean_prefix(prefix)
        return f"{self.root}/{prefix}" if prefix else self.root

    # ---------------------------------------------------------------- blocking implementations

    def write_sync(self, key: str, data: bytes) -> None:
        path = self.path(key)
        if not self.local:
            with self.filesystem.open_output_stream(path) as out:
                out.write(data)
            return
        self.atomic_local(path, lambda tmp: self._write_local(tmp, data))

    @staticmethod
    def _write_local(tmp: str, data: bytes) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    def atomic_local(self, path: str, produce: Callable[[str], object]) -> None:
        """Run `produce(tmp_path)` then rename tmp → path (local stores only).

        The parent directory is created first; should a concurrent prune remove it in between,
        the attempt is repeated.
        """
        for attempt in range(5):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = temp_name(path)
            try:
                produce(tmp)
                _fsync_file(tmp)
                os.replace(tmp, path)
                self._fsync_dirs(os.path.dirname(path))
                return
            except FileNotFoundError:
                _unlink_quiet(tmp)
                if attempt == 4:
                    raise
            except BaseException:
                _unlink_quiet(tmp)
                raise

    def _fsync_dirs(self, directory: str) -> None:
        """fsync `directory` and its parents up to the root: the rename and any directory
        created for it are then on disk."""
        root = os.path.abspath(self.root)
        d = os.path.abspath(directory)
        while True:
            _fsync_file(d)
            if d == root or len(d) <= len(root) or d == os.path.dirname(d):
                return
            d = os.path.dirname(d)

    def read_sync(self, key: str) -> bytes:
        with self.filesystem.open_input_file(self.path(key)) as f:
            data: bytes = f.read()
            return data

    def info_sync(self, key: str) -> pafs.FileInfo:
        return self.filesystem.get_file_info(self.path(key))

    def list_sync(self, prefix: str = "") -> list[tuple[str, int]]:
        base = self._dir(prefix)
        sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        try:
            infos = self.filesystem.get_file_info(sel)
        except (FileNotFoundError, NotADirectoryError):
            infos = []
        out = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            key = self.key_of(info.path)
            if any(part.startswith(".") and ".tmp-" in part for part in key.split("/")):
                continue  # an in-flight local write
            out.append((key, info.size))
        if not infos and prefix:
            # `prefix` may name a single object rather than a directory
            info = self.filesystem.get_file_info(base)
            if info.type == pafs.FileType.File:
                out.append((self.key_of(info.path), info.size))
        out.sort()
        return out

    def delete_sync(self, key: str) -> None:
        path = self.path(key)
        try:
            self.filesystem.delete_file(path)
        except FileNotFoundError:
            self._check_local_root()
        except OSError:
            if self.filesystem.get_file_info(path).type != pafs.FileType.NotFound:
                raise
            self._check_local_root()
        if self.local:
            self._prune_local(os.path.dirname(path))

    def _check_local_root(self) -> None:
        """A local root that is not a directory (a failed mount, storage away) makes every key
        look absent: a deletion that found nothing is done only while the root is there, else
        the caller would believe the files gone and never try again."""
        if self.local and not os.path.isdir(self.root):
            raise OSError(f"local storage root {self.root} is unavailable")

    def delete_prefix_sync(self, prefix: str) -> None:
        prefix = _clean_prefix(prefix)
        if not prefix:
            raise ValueError("refusing to delete the whole store; name a prefix")
        base = self._dir(prefix)
        info = self.filesystem.get_file_info(base)
        if info.type == pafs.FileType.Directory:
            self._delete_dir(base)
        elif info.type == pafs.FileType.File:
            self.filesystem.delete_file(base)
        elif not self.local:
            # S3 "directories" without a marker object still hold keys under them
            for key, _ in self.list_sync(prefix):
                self.filesystem.delete_file(self.path(key))
        else:
            self._check_local_root()
        if self.local:
            self._prune_local(os.path.dirname(base))

    def _delete_dir(self, base: str) -> None:
        """`delete_dir`, whole: pyarrow's recursive delete stops with "not found" where an entry
        it listed went meanwhile (a concurrent delete under it), before what it had not reached."""
        while True:
            try:
                self.filesystem.delete_dir(base)
                return
            except FileNotFoundError:
                if self.filesystem.get_file_info(base).type != pafs.FileType.Directory:
                    return

    def _prune_local(self, directory: str) -> None:
        """Remove now-empty directories from `directory` up to (not including) the root."""
        root = self.root
        d = directory
        while d.startswith(root + "/"):
            try:
                os.rmdir(d)
            except OSError:
                return  # not empty (or gone / raced): stop
            d = os.path.dirname(d)

    def walk_sync(self) -> list[str]:
        return [k for k, _ in self.list_sync("")]

    # ---------------------------------------------------------------- async API

    async def write(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self.write_sync, key, data)

    async def read(self, key: str) -> bytes:
        return await asyncio.to_thread(self.read_sync, key)

    async def exists(self, key: str) -> bool:
        info = await asyncio.to_thread(self.info_sync, key)
        return bool(info.type == pafs.FileType.File)

    async def size(self, key: str) -> int:
        info = await asyncio.to_thread(self.info_sync, key)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(key)
        return int(info.size)

    async def list(self, prefix: str = "") -> list[tuple[str, int]]:
        return await asyncio.to_thread(self.list_sync, prefix)

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self.delete_sync, key)

    async def delete_prefix(self, prefix: str) -> None:
        await asyncio.to_thread(self.delete_prefix_sync, prefix)

    async def walk(self) -> builtins.list[str]:  # `list` here is the method above
        return await asyncio.to_thread(self.walk_sync)

    def __repr__(self) -> str:
        return f"ObjectStore({self.root_uri})"


def _fsync_file(path: str) -> None:
    """fsync a file or directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quiet(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
