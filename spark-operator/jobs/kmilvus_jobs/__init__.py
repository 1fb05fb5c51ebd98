"""kmilvus' PySpark jobs: bulk import (`importer`) and compaction (`compactor`).

Run through `import_job.py SPEC` / `compact_job.py SPEC` (spark-submit or a SparkApplication);
`importer.run(spark, spec)` / `compactor.run(spark, spec)` run them on a given SparkSession.
The Spark image carries kmilvus itself, so the jobs reuse its schema and binlog code
(`kmilvus.util.typeutil`, `kmilvus.storage`).
"""
