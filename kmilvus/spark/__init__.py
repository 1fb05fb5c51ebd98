"""Spark jobs for kmilvus: SparkApplication specs, runners, and the import file checks.

- `application.build_application(kind, job_spec, ...)`: a `sparkoperator.k8s.io/v1beta2`
  SparkApplication from the package's `templates/` (import, compact).
- `runner.JobRunner`: submit(app) → handle, state(handle), cancel(handle). `LocalSparkRunner`
  runs an application with `spark-submit --master local[N]` and the spark-operator states.
- `files`: import input files (Parquet / JSON / CSV, local or S3) and their footer/header checks.

Nothing here imports the Kubernetes client: a runner that creates SparkApplication CRs lives
with the operator and implements `JobRunner`.
"""

from kmilvus.spark.runner import JobRunner, JobState, JobStatus, LocalSparkRunner

__all__ = ["JobRunner", "JobState", "JobStatus", "LocalSparkRunner"]
