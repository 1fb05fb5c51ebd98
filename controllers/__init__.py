"""kopf controllers: thin, level-triggered adapters between the kmilvus.io custom resources and
the coordinators (RootCoord, DataCoord, QueryCoord) running in the same process. They reach the
coordinators only through `kmilvus.coordinator.CoordinatorClient` (public RPCs and the segment
change feed); the core (`kmilvus/`) never imports this package.

- `controllers.collection` — Collection: create / adopt / refuse schema edits / drop; the
  monitor daemon mirrors Segments and row counts.
- `controllers.flush` — FlushRequest: DataCoord Flush + GetFlushState, progress and TTL.
- `controllers.segments` — Segment resources (read-only mirrors owned by their Collection).
- `controllers.sdk` — collections created through pymilvus show up as Collection resources.
- `controllers.leader` — one active replica (kopf peering) holds the coordinators.
- `controllers.spark_runner` — DataCoord's job runner on Kubernetes: creates and follows the
  SparkApplications of bulk imports and compactions.
- `controllers.app` — assembles the registry and settings and runs kopf.
- `controllers.main` — the `kmilvus-operator` command.
"""

from controllers.runtime import Options, Runtime

__all__ = ["Options", "Runtime"]
