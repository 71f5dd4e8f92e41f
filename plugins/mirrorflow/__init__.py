"""Mirrorflow: MirrorMaker 2's semantics, orchestrated by Airflow, with the record copy on Spark.

Layers, top to bottom: cli, airflow, spark, local, replication, kafka, config, core (see docs/architecture.md).
Import what you need by its full path; the package root stays small.
"""

__version__ = "0.1.0"
