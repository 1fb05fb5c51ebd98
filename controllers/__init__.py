"""kopf controllers: thin, level-triggered adapters between the kmilvus.io custom resources and
the coordinators (RootCoord, DataCoord, QueryCoord) running in the same process.

- `controllers.collection` — Collection: create / adopt / refuse schema edits / drop; the
  monitor daemon mirrors Segments and row counts.
- `controllers.flush` — FlushRequest: DataCoord Flush + GetFlushState, progress and TTL.
- `controllers.segments` — Segment resources (read-only mirrors owned by their Collection).
- `controllers.sdk` — collections created through pymilvus show up as Collection resources.
- `controllers.leader` — one active replica (kopf peering) holds the coordinators.
- `controllers.spark` — extension point for SparkApplication children of a Collection;
  `controllers.spark_runner` (the Spark work) creates and follows those SparkApplications for
  DataCoord's jobs.
- `controllers.app` — assembles the registry and settings and runs kopf (`kmilvus operator`).
"""

from controllers.runtime import Options, Runtime

__all__ = ["Options", "Runtime"]
