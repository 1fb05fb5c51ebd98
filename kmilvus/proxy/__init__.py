"""Proxy: the Milvus API (pymilvus works unchanged), task queues, meta cache, inserts to the stream."""

from kmilvus.proxy.proxy import Proxy

__all__ = ["Proxy"]
