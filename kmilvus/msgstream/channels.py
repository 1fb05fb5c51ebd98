"""Channel naming: physical channels (pchannels), virtual channels (vchannels) and the JetStream
stream/subjects they map to.

Pure functions so every component derives the same names from (cluster, collection, shard)
without asking anyone. Each pchannel is one JetStream stream (Milvus' pchannel is one topic), and
each vchannel one subject of it: `{cluster}.dml.{pchannel}.{vchannel}`; RootCoord's time ticks
are per pchannel, on `{cluster}.dml.{pchannel}.tt`. A node consumes a pchannel's stream once and
dispatches to its vchannels (Milvus' msgdispatcher): what a node pays for idle channels grows
with the pchannels, not with the collections.

A stream per pchannel makes a consumer's stream sequences contiguous: a message it did not get
shows as a jump, which the consumer checks (see `jetstream.Consumer`), and trimming one pchannel
never touches another's consumers.
"""

from __future__ import annotations

import re

_VCHANNEL_RE = re.compile(r"^(?P<pchannel>.+)_(?P<collection>\d+)v(?P<shard>\d+)$")
# NATS subject tokens may not contain '.', '*', '>' or whitespace; stream names are stricter.
_BAD_TOKEN_RE = re.compile(r"[.*>\s]")
_BAD_STREAM_RE = re.compile(r"[^A-Za-z0-9_-]")


def pchannel_names(cluster: str, n: int) -> list[str]:
    """The cluster's `n` physical DML channels (Milvus' `rootcoord-dml_i`)."""
    return [f"{cluster}-dml_{i}" for i in range(n)]


def vchannel_name(pchannel: str, collection_id: int, shard: int) -> str:
    """Milvus' vchannel scheme: `{pchannel}_{collectionID}v{shard}`."""
    return f"{pchannel}_{collection_id}v{shard}"


def _parse(vchannel: str) -> re.Match[str]:
    m = _VCHANNEL_RE.match(vchannel)
    if m is None:
        raise ValueError(f"not a vchannel name: {vchannel!r}")
    return m


def pchannel_of(vchannel: str) -> str:
    """Inverse of `vchannel_name`: strip the trailing `_{id}v{shard}`."""
    return _parse(vchannel)["pchannel"]


def collection_of(vchannel: str) -> int:
    """The collection ID encoded in a vchannel name."""
    return int(_parse(vchannel)["collection"])


def shard_of(vchannel: str) -> int:
    """The shard index encoded in a vchannel name."""
    return int(_parse(vchannel)["shard"])


def token(s: str) -> str:
    """`s` made usable as one NATS subject token (or consumer name)."""
    return _BAD_TOKEN_RE.sub("_", s) or "_"


def stream_name(cluster: str, pchannel: str) -> str:
    """The JetStream stream of one pchannel: its vchannels' messages and its time ticks."""
    return _BAD_STREAM_RE.sub("_", f"KMILVUS_{cluster}_DML_{pchannel}")


def pchannel_or_self(channel: str) -> str:
    """The pchannel a vchannel is on; a pchannel itself."""
    m = _VCHANNEL_RE.match(channel)
    return channel if m is None else m["pchannel"]


def is_vchannel(channel: str) -> bool:
    return _VCHANNEL_RE.match(channel) is not None


def subject_of(cluster: str, channel: str) -> str:
    """The JetStream subject of one vchannel, or of a pchannel's time ticks (`channel` is a
    pchannel name)."""
    m = _VCHANNEL_RE.match(channel)
    if m is None:
        return f"{token(cluster)}.dml.{token(channel)}.tt"
    return f"{token(cluster)}.dml.{token(m['pchannel'])}.{token(channel)}"


def pchannel_filter(cluster: str, pchannel: str) -> str:
    """The subjects of a pchannel: its vchannels and its time ticks."""
    return f"{token(cluster)}.dml.{token(pchannel)}.>"


def stream_subjects(cluster: str, pchannel: str) -> list[str]:
    """Subjects bound to `stream_name(cluster, pchannel)`."""
    return [pchannel_filter(cluster, pchannel)]


def cluster_subjects_prefix(cluster: str) -> str:
    """What every subject of the cluster's streams starts with (to find its streams)."""
    return f"{token(cluster)}.dml."


def datanode_tt_subject(cluster: str) -> str:
    """Core NATS (not JetStream) subject of DataNodeTtMsg reports: losing one is harmless, the
    next report supersedes it."""
    return f"{token(cluster)}.datanode-tt"
