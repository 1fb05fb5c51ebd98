"""Structured logging: one logfmt line per event, quiet (WARNING) by default.

`KMILVUS_LOG_LEVEL=info` (or `--log-level`) turns the component logs up.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import MutableMapping
from typing import Any


class _LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_q(record.getMessage())}",
        ]
        for k, v in getattr(record, "kv", {}).items():
            parts.append(f"{k}={_q(v)}")
        if record.exc_info:
            parts.append(f"exc={_q(self.formatException(record.exc_info))}")
        return " ".join(parts)


def _q(v: object) -> str:
    s = str(v)
    if not s or any(c in s for c in ' "=\n'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return s


class Logger(logging.LoggerAdapter[logging.Logger]):
    """`log.info("flushed", segment=1, rows=10)` → logfmt with key/values."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kv = {k: kwargs.pop(k) for k in list(kwargs) if k not in ("exc_info", "stack_info", "stacklevel", "extra")}
        kwargs["extra"] = {"kv": kv}
        return msg, kwargs


def get_logger(name: str) -> Logger:
    return Logger(logging.getLogger(name), {})


AUDIT_LOGGER = "kmilvus.audit"
_audit = Logger(logging.getLogger(AUDIT_LOGGER), {})


def audit(event: str, **kv: Any) -> None:
    """One structured audit event (who, what, object, result) on the `kmilvus.audit` logger."""
    _audit.info(event, **kv)


def enable_audit() -> None:
    """Log audit events whatever the process' log level (auth on, or KMILVUS_AUDIT_LOG)."""
    logging.getLogger(AUDIT_LOGGER).setLevel(logging.INFO)


def setup(level: str | None = None) -> None:
    level = (level or os.environ.get("KMILVUS_LOG_LEVEL") or "warning").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("aetcd", "nats", "grpc", "asyncio", "botocore", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
