"""Every etcd key kmilvus writes, in one place.

Keys are relative to the cluster's meta root (`{cluster}/meta`). Everything a collection owns is
reachable from its collection ID — that is what lets DropCollection remove all of it and a test
prove nothing is left.
"""

from __future__ import annotations

# RootCoord ------------------------------------------------------------------------------
TSO_KEY = "tso/timestamp"
ID_KEY = "id/allocator"


def collection_key(coll_id: int) -> str:
    return f"root-coord/collection/{coll_id}"


COLLECTION_PREFIX = "root-coord/collection/"


def collection_name_key(db: str, name: str) -> str:
    return f"root-coord/collection-name/{db}/{name}"


def drop_task_key(coll_id: int) -> str:
    """A DropCollection in progress: its steps are resumed from here after a crash."""
    return f"root-coord/drop-task/{coll_id}"


DROP_TASK_PREFIX = "root-coord/drop-task/"


def alias_key(db: str, alias: str) -> str:
    """An alias of a collection: the value is the collection ID."""
    return f"{ALIAS_PREFIX}{db}/{alias}"


ALIAS_PREFIX = "root-coord/aliases/"


def database_key(name: str) -> str:
    """A database (DatabaseInfo); `default` is written on RootCoord's first start."""
    return f"{DATABASE_PREFIX}{name}"


DATABASE_PREFIX = "root-coord/database/"


def drop_partition_task_key(coll_id: int, part_id: int) -> str:
    """A DropPartition in progress: its steps are resumed from here after a crash."""
    return f"{DROP_PARTITION_TASK_PREFIX}{coll_id}/{part_id}"


DROP_PARTITION_TASK_PREFIX = "root-coord/drop-partition-task/"


def truncate_task_key(coll_id: int) -> str:
    """A TruncateCollection in progress (TruncateTask): its steps are resumed from here."""
    return f"{TRUNCATE_TASK_PREFIX}{coll_id}"


TRUNCATE_TASK_PREFIX = "root-coord/truncate-task/"

# DataCoord ------------------------------------------------------------------------------


def segment_key(coll_id: int, part_id: int, seg_id: int) -> str:
    return f"datacoord-meta/s/{coll_id}/{part_id}/{seg_id}"


def segment_prefix(coll_id: int | None = None) -> str:
    return "datacoord-meta/s/" if coll_id is None else f"datacoord-meta/s/{coll_id}/"


def partition_segment_prefix(coll_id: int, part_id: int) -> str:
    """Every segment key of one partition."""
    return f"datacoord-meta/s/{coll_id}/{part_id}/"


def dropped_partition_key(coll_id: int, part_id: int) -> str:
    """A partition DataCoord dropped (or is dropping): commits into it compare this key missing,
    so an import or compaction that finishes after DropPartition registers nothing. Partition
    IDs are never reused; the key goes with its collection."""
    return f"{DROPPED_PARTITION_PREFIX}{coll_id}/{part_id}"


DROPPED_PARTITION_PREFIX = "datacoord-meta/dropped-partition/"


def dropped_partition_prefix(coll_id: int) -> str:
    return f"{DROPPED_PARTITION_PREFIX}{coll_id}/"


def binlog_key(coll_id: int, seg_id: int, log_id: int) -> str:
    """`{prefix}/{collectionID}/{segmentID}/{idx}` (docs/architecture/storage.md)."""
    return f"datacoord-meta/binlog/{coll_id}/{seg_id}/{log_id}"


def binlog_prefix(coll_id: int, seg_id: int | None = None) -> str:
    base = f"datacoord-meta/binlog/{coll_id}/"
    return base if seg_id is None else f"{base}{seg_id}/"


def ddl_binlog_key(coll_id: int, seg_id: int, idx: int) -> str:
    return f"datacoord-meta/ddl-binlog/{coll_id}/{seg_id}/{idx}"


def ddl_binlog_prefix(coll_id: int, seg_id: int | None = None) -> str:
    base = f"datacoord-meta/ddl-binlog/{coll_id}/"
    return base if seg_id is None else f"{base}{seg_id}/"


def deltalog_key(coll_id: int, seg_id: int, log_id: int) -> str:
    """A segment's delta log (Binlog proto), keyed like its insert binlogs."""
    return f"datacoord-meta/deltalog/{coll_id}/{seg_id}/{log_id}"


def deltalog_prefix(coll_id: int, seg_id: int | None = None) -> str:
    base = f"datacoord-meta/deltalog/{coll_id}/"
    return base if seg_id is None else f"{base}{seg_id}/"


def statslog_key(coll_id: int, seg_id: int, log_id: int) -> str:
    """A segment's primary-key stats log (Binlog proto)."""
    return f"datacoord-meta/statslog/{coll_id}/{seg_id}/{log_id}"


def statslog_prefix(coll_id: int, seg_id: int | None = None) -> str:
    base = f"datacoord-meta/statslog/{coll_id}/"
    return base if seg_id is None else f"{base}{seg_id}/"


def segment_log_prefixes(coll_id: int, seg_id: int | None = None) -> list[str]:
    """Every per-segment log meta prefix (insert, DDL, delta, stats) of a collection or segment."""
    return [
        binlog_prefix(coll_id, seg_id),
        ddl_binlog_prefix(coll_id, seg_id),
        deltalog_prefix(coll_id, seg_id),
        statslog_prefix(coll_id, seg_id),
    ]


def l0_deltalog_key(coll_id: int, log_id: int) -> str:
    """One L0 delta log of a collection (L0Deltalog proto: its channel, partition and file)."""
    return f"{l0_deltalog_prefix(coll_id)}{log_id}"


def l0_deltalog_prefix(coll_id: int | None = None) -> str:
    return "datacoord-meta/l0-deltalog/" if coll_id is None else f"datacoord-meta/l0-deltalog/{coll_id}/"


def l0_position_key(vchannel: str) -> str:
    """The last Delete of a vchannel its committed L0 delta logs cover (MsgPosition)."""
    return f"{L0_POSITION_PREFIX}{vchannel}"


L0_POSITION_PREFIX = "datacoord-meta/l0-position/"


def channel_checkpoint_key(vchannel: str) -> str:
    return f"datacoord-meta/channel-cp/{vchannel}"


def channel_watch_key(vchannel: str) -> str:
    """Which DataNode runs a vchannel's flowgraph (ChannelWatchInfo + node id)."""
    return f"datacoord-meta/channel-watch/{vchannel}"


CHANNEL_WATCH_PREFIX = "datacoord-meta/channel-watch/"


def import_job_key(coll_id: int, job_id: int) -> str:
    """A bulk-import job (ImportJob proto), owned by its collection."""
    return f"datacoord-meta/import-job/{coll_id}/{job_id}"


def import_job_prefix(coll_id: int | None = None) -> str:
    return "datacoord-meta/import-job/" if coll_id is None else f"datacoord-meta/import-job/{coll_id}/"


def compaction_job_key(coll_id: int, compaction_id: int) -> str:
    """A compaction job (CompactionJob proto), owned by its collection."""
    return f"datacoord-meta/compaction-job/{coll_id}/{compaction_id}"


def compaction_job_prefix(coll_id: int | None = None) -> str:
    return "datacoord-meta/compaction-job/" if coll_id is None else f"datacoord-meta/compaction-job/{coll_id}/"


def field_index_key(coll_id: int, index_id: int) -> str:
    """A field's index (FieldIndex proto), owned by its collection."""
    return f"datacoord-meta/field-index/{coll_id}/{index_id}"


def field_index_prefix(coll_id: int | None = None) -> str:
    return "datacoord-meta/field-index/" if coll_id is None else f"datacoord-meta/field-index/{coll_id}/"


def segment_index_key(coll_id: int, part_id: int, seg_id: int, index_id: int) -> str:
    """One segment's build of one index (SegmentIndex proto)."""
    return f"datacoord-meta/segment-index/{coll_id}/{part_id}/{seg_id}/{index_id}"


def segment_index_prefix(coll_id: int | None = None) -> str:
    return "datacoord-meta/segment-index/" if coll_id is None else f"datacoord-meta/segment-index/{coll_id}/"


# QueryCoord -----------------------------------------------------------------------------


def loaded_collection_key(coll_id: int) -> str:
    return f"querycoord-meta/loaded/{coll_id}"


def collection_owned_prefixes(coll_id: int, vchannels: list[str]) -> list[str]:
    """Every key prefix that belongs to one collection (used by drop and by its checks)."""
    return [
        collection_key(coll_id),
        drop_task_key(coll_id),
        f"{DROP_PARTITION_TASK_PREFIX}{coll_id}/",
        truncate_task_key(coll_id),
        segment_prefix(coll_id),
        binlog_prefix(coll_id),
        ddl_binlog_prefix(coll_id),
        deltalog_prefix(coll_id),
        statslog_prefix(coll_id),
        l0_deltalog_prefix(coll_id),
        loaded_collection_key(coll_id),
        import_job_prefix(coll_id),
        compaction_job_prefix(coll_id),
        dropped_partition_prefix(coll_id),
        field_index_prefix(coll_id),
        segment_index_prefix(coll_id),
        *[channel_checkpoint_key(v) for v in vchannels],
        *[channel_watch_key(v) for v in vchannels],
        *[l0_position_key(v) for v in vchannels],
    ]


# RootCoord: credentials and RBAC (Milvus' root-coord/credential/...) ----------------------
CREDENTIAL_USER_PREFIX = "root-coord/credential/users/"
ROLE_PREFIX = "root-coord/credential/roles/"
USER_ROLE_PREFIX = "root-coord/credential/user-role-mapping/"
GRANT_PREFIX = "root-coord/credential/grantee-privileges/"
PRIVILEGE_GROUP_PREFIX = "root-coord/credential/privilege-groups/"  # name → JSON list of privileges


def credential_user_key(username: str) -> str:
    """A user's CredentialInfo (the password only as a salted bcrypt hash)."""
    return CREDENTIAL_USER_PREFIX + username


def role_key(role: str) -> str:
    return ROLE_PREFIX + role


def user_role_key(username: str, role: str) -> str:
    return f"{USER_ROLE_PREFIX}{username}/{role}"


def grant_key(role: str, object_type: str, db: str, object_name: str, privilege: str) -> str:
    """One granted privilege; the value is the grantor's name."""
    return f"{GRANT_PREFIX}{role}/{object_type}/{db}/{object_name}/{privilege}"


def grant_prefix(role: str) -> str:
    return f"{GRANT_PREFIX}{role}/"


def privilege_group_key(name: str) -> str:
    return PRIVILEGE_GROUP_PREFIX + name
