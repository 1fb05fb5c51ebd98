"""Extension point: SparkApplication children of a Collection (bulk import, compaction).

Not implemented yet. The plan (DESIGN.md "Spark jobs"):

- DataCoord decides that a job is needed (an import request, a compaction plan); the operator
  creates a `SparkApplication` (`sparkoperator.k8s.io/v1beta2`) owned by the Collection
  (ownerReferences + the `kmilvus.io/collection` label, like Segments), from the templates in
  spark-operator/.
- A kopf handler on sparkapplications with that label follows `status.applicationState.state`
  (SUBMITTED, RUNNING, COMPLETED, FAILED, ...) and reports back to DataCoord (commit the import's
  or compaction's segments in one transaction, or abandon the plan), and mirrors progress into the
  Collection's conditions.

`controllers.spark_runner.SparkApplicationRunner` (DataCoord's JobRunner on Kubernetes) already
creates such SparkApplications and reads their state; what is left for here is the Collection-side
view (conditions, cleanup on deletion). Hook points already in place:

- `register(registry)` below is called by `controllers.app.build_registry` — add the
  `@kopf.on.field / @kopf.on.event('sparkoperator.k8s.io', 'v1beta2', 'sparkapplications', ...)`
  handlers here.
- `Runtime.child_reconcilers`: coroutines `(runtime, collection_body, describe_response)` run at
  the end of every Collection reconcile — where a Collection would create or adopt its children.
"""

from __future__ import annotations

import kopf

SPARK_APPLICATIONS = ("sparkoperator.k8s.io", "v1beta2", "sparkapplications")


def register(registry: kopf.OperatorRegistry) -> None:
    """No SparkApplication handlers yet (see the module docstring)."""
    return
