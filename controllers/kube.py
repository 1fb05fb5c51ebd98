"""A small asyncio Kubernetes API client for what kopf's handler patches cannot do.

kopf applies a handler's `patch` when the handler returns; daemons (segment mirror, flush
progress) write status while they run and create / delete child objects (Segments, mirrored
Collections), so they need a client of their own. It speaks plain JSON over aiohttp with the
credentials kopf logged in with (`kopf.ConnectionInfo`: token, client certificate, CA) and counts
every request (Prometheus, and `KubeClient.requests` for benchmarks). It retries only what the API
server asks it to, as client-go does: a 429 or 5xx answer with a Retry-After header (flow control
throttling a busy client, a resource's watch cache initializing) is sent again after that wait,
up to MAX_RETRIES times; anything else is the caller's, a reconciler that runs again.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from controllers import metrics

MAX_RETRIES = 10  # client-go's
MAX_RETRY_AFTER = 10.0  # seconds: a longer Retry-After is cut to this


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str):
        self.status = status
        self.body = body
        msg = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {msg}")


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


def _error(status: int, body: Any, method: str, path: str) -> ApiError:
    cls = NotFound if status == 404 else Conflict if status == 409 else ApiError
    return cls(status, body, method, path)


def retry_after(status: int, header: str | None) -> float | None:
    """Seconds to wait before sending a request again, when the API server asked for it (429 or
    5xx with Retry-After in whole seconds, as it sends it), else None."""
    if (status != 429 and status < 500) or not header or not header.strip().isdigit():
        return None
    return min(float(header.strip()), MAX_RETRY_AFTER)


class KubeClient:
    """`login` returns a `kopf.ConnectionInfo` (or None); it is called on first use and on 401."""

    def __init__(
        self, login: Callable[[], Awaitable[Any]], *, user_agent: str = "kmilvus-operator", max_connections: int = 16
    ):
        self._login = login
        self.user_agent = user_agent
        self.max_connections = max_connections  # a pool, reused (keep-alive): no connection storms
        self._session: aiohttp.ClientSession | None = None
        self._server = ""
        self._lock = asyncio.Lock()
        self.requests = 0  # total requests sent (bench / tests)

    async def _ensure(self, force: bool = False) -> aiohttp.ClientSession:
        async with self._lock:
            if self._session is not None and not force:
                return self._session
            info = await self._login()
            if info is None:
                raise RuntimeError("no Kubernetes credentials: the login returned nothing")
            if self._session is not None:
                await self._session.close()
            ssl = info.as_ssl_context()
            self._server = info.server.rstrip("/")
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections, ssl=ssl),
                headers={**info.as_http_headers(), "User-Agent": self.user_agent},
                timeout=aiohttp.ClientTimeout(total=60, sock_connect=10),
            )
            return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body)
        relogin, retries = False, 0
        while True:
            session = await self._ensure(force=relogin)
            url = self._server + path
            if params:
                url += "?" + urllib.parse.urlencode(params)
            self.requests += 1
            metrics.API_REQUESTS.labels(method.lower()).inc()
            async with session.request(
                method, url, data=data, headers={"Content-Type": content_type} if data else None
            ) as rsp:
                text = await rsp.text()
                try:
                    payload = json.loads(text) if text else None
                except ValueError:
                    payload = text
                status, wait = rsp.status, retry_after(rsp.status, rsp.headers.get("Retry-After"))
            if status == 401 and not relogin:
                relogin = True  # credentials rotated (projected service-account tokens): log in again
                continue
            if wait is not None and retries < MAX_RETRIES:
                retries += 1
                await asyncio.sleep(wait)
                continue
            if status >= 400:
                raise _error(status, payload, method, path)
            return payload

    # Verbs -----------------------------------------------------------------------------------
    async def get(self, res: Resource, namespace: str | None, name: str) -> dict:
        result: dict[str, Any] = await self.request("GET", res.path(namespace, name))
        return result

    async def list(
        self, res: Resource, namespace: str | None = None, *, labels: dict[str, str] | None = None
    ) -> list[dict]:
        params = {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else None
        rsp = await self.request("GET", res.path(namespace), params=params)
        result: list[dict[str, Any]] = (rsp or {}).get("items", [])
        return result

    async def create(self, res: Resource, namespace: str | None, body: dict) -> dict:
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        result: dict[str, Any] = await self.request("POST", res.path(namespace), body=body)
        return result

    async def patch(
        self, res: Resource, namespace: str | None, name: str, patch: dict, *, status: bool = False
    ) -> dict:
        patched: dict[str, Any] = await self.request(
            "PATCH",
            res.path(namespace, name, "status" if status else None),
            body=patch,
            content_type="application/merge-patch+json",
        )
        return patched

    async def delete(self, res: Resource, namespace: str | None, name: str, *, missing_ok: bool = True) -> None:
        try:
            await self.request(
                "DELETE",
                res.path(namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        except NotFound:
            if not missing_ok:
                raise
