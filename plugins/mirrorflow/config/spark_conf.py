"""Spark settings a flow hands to spark-submit: `mirrorflow.spark.conf.<spark key> = value` and the sizing keys.

A flow's copy runs as its own Spark application, so each flow sizes its own: on a shared standalone master an
application without `spark.cores.max` takes every free core and the next one waits (first in, first out).

Precedence, decided here and checked at load time rather than resolved silently at submit time:
* `mirrorflow.spark.conf.*` passes any Spark property through as `--conf key=value`;
* the three Spark properties with a Mirrorflow key of their own (cores, executor and driver memory) must be set
  through that key: writing them as `mirrorflow.spark.conf.*` is an error naming the key to use, so there is
  one place to look when a copy's size is wrong;
* properties Mirrorflow sets itself (`RESERVED`) are refused with the reason: they decide where the job runs
  and which Python the executors use, and a different value would break the copy or be overridden unnoticed.
"""

from __future__ import annotations

import re

from mirrorflow.config.values import ValueProblem

SPARK_CONF_PREFIX = "mirrorflow.spark.conf."
TOTAL_CORES_KEY = "mirrorflow.spark.total.executor.cores"
EXECUTOR_MEMORY_KEY = "mirrorflow.spark.executor.memory"
DRIVER_MEMORY_KEY = "mirrorflow.spark.driver.memory"
MEMORY_KEYS = (EXECUTOR_MEMORY_KEY, DRIVER_MEMORY_KEY)

DEDICATED: dict[str, str] = {
    "spark.cores.max": TOTAL_CORES_KEY,
    "spark.executor.memory": EXECUTOR_MEMORY_KEY,
    "spark.driver.memory": DRIVER_MEMORY_KEY,
}
"""Spark property -> the Mirrorflow key that sets it."""

RESERVED: dict[str, str] = {
    "spark.master": "the master comes from the Airflow connection mirrorflow_spark or mirrorflow.spark.master",
    "spark.submit.deployMode": "the deploy mode comes from the Airflow connection mirrorflow_spark",
    "spark.app.name": "the application is named after the flow (mirrorflow-copy-<source>-<target>)",
    "spark.pyspark.python": "on a cluster the executors must run the packed env Mirrorflow ships",
    "spark.pyspark.driver.python": "the driver must run the interpreter Airflow runs (it imports mirrorflow)",
    "spark.submit.pyFiles": "Mirrorflow ships its package zip itself",
    "spark.archives": "Mirrorflow ships the packed executor env itself",
    "spark.task.maxFailures": "the copy job sets its task retries itself (docs/copy.md)",
    "spark.python.worker.reuse": "the copy job sets it itself",
}
"""Spark properties Mirrorflow sets for the copy, with why a flow may not."""

CLUSTER_SETTINGS_VARIABLE = "MIRRORFLOW_CLUSTER_SETTINGS"
"""`config.overrides.CLUSTER_SETTINGS_ENV`: no `mirrorflow.spark.conf.*` may set it as an environment variable of
the driver or executors (`spark.kubernetes.driverEnv.*`, `spark.yarn.appMasterEnv.*`, `spark.executorEnv.*`)."""

# Spark's byte strings (JavaUtils.byteStringAs): a whole number, optionally with a binary unit; no unit is MiB
# for the memory settings.
_MEMORY = re.compile(r"[0-9]+(?:[kmgtp]b?|b)?", re.IGNORECASE)


def conf_key_problem(name: str) -> ValueProblem | None:
    """Why `mirrorflow.spark.conf.<name>` cannot be used, or None when it passes through."""
    if not name:
        return ValueProblem(
            f"{SPARK_CONF_PREFIX} names no Spark property", f"write {SPARK_CONF_PREFIX}<spark property> = value"
        )
    if name in DEDICATED:
        key = DEDICATED[name]
        return ValueProblem(f"{name} has a Mirrorflow key of its own", f"write {key} instead")
    if name in RESERVED:
        return ValueProblem(f"Mirrorflow sets {name} itself: {RESERVED[name]}", "remove the line")
    if name.rsplit(".", 1)[-1] == CLUSTER_SETTINGS_VARIABLE:
        return ValueProblem(
            f"{name} would hand the copy job {CLUSTER_SETTINGS_VARIABLE}, which Mirrorflow sets only from Airflow "
            "connections, after the Kafka provider has vetted them (callbacks against its allowlist); Spark would "
            "also show it as configuration",
            "remove the line; name the connection with <alias>.mirrorflow.connection",
        )
    if not name.startswith("spark."):
        return ValueProblem(
            f"{name} is not a Spark property (spark-submit ignores --conf keys outside spark.*)",
            f"write {SPARK_CONF_PREFIX}spark.<property>",
        )
    return None


def parse_memory(key: str, value: str) -> str:
    """A Spark memory size (`512m`, `2g`, `1024` = MiB), as written; ValueProblem otherwise."""
    trimmed = value.strip()
    if not _MEMORY.fullmatch(trimmed):
        shown = "an empty value" if not trimmed else f"{trimmed!r}"
        raise ValueProblem(
            f"expected a Spark memory size, found {shown}", f"write a size with a unit, e.g. {key} = 2g or 512m"
        )
    return trimmed
