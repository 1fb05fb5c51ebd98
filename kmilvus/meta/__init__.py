"""Metadata on etcd: the KV wrapper (transactions, watches, leases) and the typed catalog keys."""

from kmilvus.meta.etcdkv import Cmp, EtcdKV, FencedError, Op, Snapshot, WatchEvent

__all__ = ["Cmp", "EtcdKV", "FencedError", "Op", "Snapshot", "WatchEvent"]
