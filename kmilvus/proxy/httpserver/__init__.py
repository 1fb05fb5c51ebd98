"""Milvus' RESTful API v2 on the Proxy (Milvus: internal/distributed/proxy/httpserver)."""

from kmilvus.proxy.httpserver.server import RestfulServer

__all__ = ["RestfulServer"]
