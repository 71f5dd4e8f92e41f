"""Spark's console output: warnings and errors only, unless asked for more.

Spark's default log4j2 profile prints a banner ("Using Spark's default log4j profile ...") and its scheduler's
INFO lines on the driver's stderr, which is the Airflow task log or the terminal of `mirrorflow run`. The driver
JVM is pointed at `log4j2-quiet.properties` here, before it starts (a `setLogLevel` after start-up comes too
late for the banner). `MIRRORFLOW_SPARK_LOG_LEVEL` (a log4j level: INFO, DEBUG, ...) shows more.

No pyspark import here: the Airflow operator builds its spark-submit options from this module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mirrorflow.core.errors import UsageError

LEVEL_ENV = "MIRRORFLOW_SPARK_LOG_LEVEL"
LOG4J2_FILE = Path(__file__).with_name("log4j2-quiet.properties")
_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"


def spark_log_level(environ: Mapping[str, str] | None = None) -> str:
    """The driver's log4j level: MIRRORFLOW_SPARK_LOG_LEVEL, else WARN (`--verbose` CLI flags set INFO). A value
    log4j does not know is an error rather than a silent fallback, so a typo does not hide the logs asked for."""
    raw = (environ if environ is not None else os.environ).get(LEVEL_ENV, "").strip().upper() or "WARN"
    level = "WARN" if raw == "WARNING" else raw
    if level not in _LEVELS:
        raise UsageError(f"{LEVEL_ENV}={raw!r} is not a log4j level; use one of {', '.join(_LEVELS)}")
    return level


def quiet_driver_conf(
    conf: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`conf` (Spark settings) with the driver JVM's log4j2 configuration added to its extraJavaOptions; a
    deployment that names its own log4j2 configuration there keeps it."""
    out = dict(conf or {})
    options = out.get(DRIVER_OPTIONS, "")
    if "log4j2.configurationFile" in options or "log4j.configuration" in options:
        return out
    ours = f"-Dlog4j2.configurationFile={LOG4J2_FILE.as_uri()} -Dmirrorflow.spark.log.level={spark_log_level(environ)}"
    out[DRIVER_OPTIONS] = f"{options} {ours}".strip()
    return out
