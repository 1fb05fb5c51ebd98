"""kmilvus' PySpark jobs: bulk import (`importer`) and compaction (`compactor`).

A package of the kmilvus distribution, installed with it wherever a job runs — the DataCoord
process (jobs run in process below `inprocess_job_max_mb`), the warm local driver
(`python -m kmilvus_jobs.warm_driver`), the Python workers of a local spark-submit (this
virtualenv's Python) and the Spark image (`pip install .`) — so it is imported by name everywhere,
never found through a path. `spark-operator/jobs/import_job.py SPEC` / `compact_job.py SPEC` are
the spark-submit entries (a SparkApplication's mainApplicationFile); `importer.run(spark, spec)` /
`compactor.run(spark, spec)` run a job on a given SparkSession. The jobs reuse kmilvus' schema
and binlog code (`kmilvus.util.typeutil`, `kmilvus.storage`).
"""
