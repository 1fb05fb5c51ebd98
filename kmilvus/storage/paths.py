"""Object keys of everything a collection owns (docs/architecture/storage.md).

    insert_log/{collectionID}/{partitionID}/{segmentID}/{logID}   Parquet, all fields of a flush chunk
    data_definition_log/{collectionID}/ts/{idx}                   Parquet: ts
    data_definition_log/{collectionID}/ddl/{idx}                  Parquet: ts, type, payload
    index_files/{collectionID}/{partitionID}/{segmentID}/{buildID}/{version}/index   one segment's index
    stats_log/{collectionID}/{partitionID}/{segmentID}/{logID}    Parquet: pk (sorted, unique) per insert binlog
    delta_log/{collectionID}/{partitionID}/{segmentID}/{logID}    Parquet: pk, ts (deletes)
    delta_log/{collectionID}/{partitionID}/l0/{logID}             a channel's deletes (L0; partition -1: all)

Keys are relative to the ObjectStore root; prefixes end with '/'.
"""

from __future__ import annotations

INSERT_LOG = "insert_log"
DDL_LOG = "data_definition_log"
STATS_LOG = "stats_log"
DELTA_LOG = "delta_log"
INDEX_FILES = "index_files"


def insert_log_prefix(coll: int) -> str:
    return f"{INSERT_LOG}/{int(coll)}/"


def partition_prefix(coll: int, part: int) -> str:
    return f"{INSERT_LOG}/{int(coll)}/{int(part)}/"


def segment_prefix(coll: int, part: int, seg: int) -> str:
    return f"{INSERT_LOG}/{int(coll)}/{int(part)}/{int(seg)}/"


def insert_log_key(coll: int, part: int, seg: int, log_id: int) -> str:
    return f"{INSERT_LOG}/{int(coll)}/{int(part)}/{int(seg)}/{int(log_id)}"


def parse_insert_log_key(key: str) -> tuple[int, int, int, int]:
    """`insert_log/c/p/s/l` → (c, p, s, l); ValueError for anything else."""
    parts = key.strip("/").split("/")
    if len(parts) != 5 or parts[0] != INSERT_LOG:
        raise ValueError(f"not an insert binlog key: {key!r}")
    c, p, s, log = (int(x) for x in parts[1:])
    return c, p, s, log


def ddl_prefix(coll: int) -> str:
    return f"{DDL_LOG}/{int(coll)}/"


def ddl_ts_key(coll: int, idx: int) -> str:
    return f"{DDL_LOG}/{int(coll)}/ts/{int(idx)}"


def ddl_key(coll: int, idx: int) -> str:
    return f"{DDL_LOG}/{int(coll)}/ddl/{int(idx)}"


def stats_log_prefix(coll: int) -> str:
    return f"{STATS_LOG}/{int(coll)}/"


def delta_log_prefix(coll: int) -> str:
    return f"{DELTA_LOG}/{int(coll)}/"


def index_files_prefix(coll: int, part: int | None = None, seg: int | None = None) -> str:
    """A collection's (or a partition's, or a segment's) index files."""
    out = f"{INDEX_FILES}/{int(coll)}/"
    if part is not None:
        out += f"{int(part)}/"
        if seg is not None:
            out += f"{int(seg)}/"
    return out


def index_build_prefix(coll: int, part: int, seg: int, build_id: int) -> str:
    return f"{INDEX_FILES}/{int(coll)}/{int(part)}/{int(seg)}/{int(build_id)}/"


def index_file_key(coll: int, part: int, seg: int, build_id: int, version: int, name: str = "index") -> str:
    """A build's file as one attempt (`version`, an IndexNode's job) writes it: attempts never
    share a file, so an old one still running cannot overwrite what a newer one wrote."""
    return f"{index_build_prefix(coll, part, seg, build_id)}{int(version)}/{name}"


def parse_index_file_key(key: str) -> tuple[int, int] | None:
    """(buildID, version) of a key under `index_files/{coll}/{part}/{seg}/{buildID}/`; version 0
    for a file directly under the build (the layout before versions); None for any other key."""
    parts = key.split("/")
    if len(parts) < 6 or parts[0] != INDEX_FILES or not parts[4].isdigit():
        return None
    version = int(parts[5]) if len(parts) >= 7 and parts[5].isdigit() else 0
    return int(parts[4]), version


def stats_log_key(coll: int, part: int, seg: int, log_id: int) -> str:
    return f"{STATS_LOG}/{int(coll)}/{int(part)}/{int(seg)}/{int(log_id)}"


def delta_log_key(coll: int, part: int, seg: int, log_id: int) -> str:
    return f"{DELTA_LOG}/{int(coll)}/{int(part)}/{int(seg)}/{int(log_id)}"


L0_DIR = "l0"


def l0_delta_log_key(coll: int, part: int, log_id: int) -> str:
    """A channel's deletes of one partition (-1: every partition) as one delta log (Milvus' L0)."""
    return f"{DELTA_LOG}/{int(coll)}/{int(part)}/{L0_DIR}/{int(log_id)}"


def parse_l0_delta_log_key(key: str) -> tuple[int, int, int] | None:
    """`delta_log/c/p/l0/l` → (c, p, l); None for any other key."""
    parts = key.strip("/").split("/")
    if len(parts) != 5 or parts[0] != DELTA_LOG or parts[3] != L0_DIR:
        return None
    try:
        return int(parts[1]), int(parts[2]), int(parts[4])
    except ValueError:
        return None


def segment_stats_prefix(coll: int, part: int, seg: int) -> str:
    return f"{STATS_LOG}/{int(coll)}/{int(part)}/{int(seg)}/"


def segment_delta_prefix(coll: int, part: int, seg: int) -> str:
    return f"{DELTA_LOG}/{int(coll)}/{int(part)}/{int(seg)}/"


def segment_file_prefixes(coll: int, part: int, seg: int) -> list[str]:
    """Every prefix under which one segment's files live (insert, stats and delta logs, index
    files): delete these and nothing of the segment is left."""
    return [
        segment_prefix(coll, part, seg),
        segment_stats_prefix(coll, part, seg),
        segment_delta_prefix(coll, part, seg),
        index_files_prefix(coll, part, seg),
    ]


def parse_segment_file_key(key: str) -> tuple[str, int, int, int] | None:
    """`{root}/{coll}/{part}/{seg}/...` of a segment's file → (root, coll, part, seg); None for
    any other key (a job's manifest under `stats_log/{coll}/_jobs/`, a DDL binlog)."""
    parts = key.split("/")
    if len(parts) < 5 or parts[0] not in (INSERT_LOG, STATS_LOG, DELTA_LOG, INDEX_FILES):
        return None
    if not (parts[1].isdigit() and parts[2].isdigit() and parts[3].isdigit()):
        return None
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])


def collection_prefixes(coll: int) -> list[str]:
    """Every prefix under which a collection's files live: delete these and nothing is left."""
    return [
        insert_log_prefix(coll),
        ddl_prefix(coll),
        stats_log_prefix(coll),
        delta_log_prefix(coll),
        index_files_prefix(coll),
    ]


def partition_prefixes(coll: int, part: int) -> list[str]:
    """Every prefix under which a partition's files live (insert, delta and stats logs; DDL
    binlogs belong to the collection): delete these and nothing of the partition is left."""
    return [
        partition_prefix(coll, part),
        f"{DELTA_LOG}/{int(coll)}/{int(part)}/",
        f"{STATS_LOG}/{int(coll)}/{int(part)}/",
        index_files_prefix(coll, part),
    ]
