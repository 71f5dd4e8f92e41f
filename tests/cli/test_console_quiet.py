"""The console holds no noise (issue 20): no raw librdkafka line, no deprecation warning, no Spark log4j banner.

`make demo` checks its whole output itself (`mirrorflow.cli.demo.run_checked`; the demo takes ~4 minutes, too
long for `make test`). These tests run the demo's noisy paths in child processes and read their file descriptors
1 and 2, where librdkafka and the JVM write without passing through Python.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mirrorflow.core.console_noise import noise_kind, noise_lines
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.spark.quiet import quiet_driver_conf

pytestmark = pytest.mark.integration
PROBE = Path(__file__).with_name("console_probe.py")
REPO = Path(__file__).resolve().parents[2]


def run_probe(*args: str, env: dict[str, str] | None = None, submit: list[str] | None = None) -> list[str]:
    """The probe's merged stdout and stderr lines; with `submit`, run under spark-submit with those options."""
    bin_dir = Path(sys.executable).parent
    base = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)]),
    }
    command = [sys.executable, str(PROBE), *args]
    if submit is not None:
        command = [str(bin_dir / "spark-submit"), "--master", "local[1]", *submit, str(PROBE), *args]
    done = subprocess.run(
        command,
        env={**base, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout.splitlines()


def dead_address() -> str:
    with socket.socket() as s:  # a port nobody listens on once this closes
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_noise_patterns() -> None:
    assert noise_kind("%3|1795577784.268|FAIL|rdkafka#producer-1| [thrd:x]: Connect failed") == "raw librdkafka line"
    assert noise_kind("x [warning] GitWildMatchPattern ('gitwildmatch') is deprecated. Use 'gitignore'")
    assert noise_kind("foo.py:3: DeprecationWarning: bar") == "deprecation warning"
    assert noise_kind("Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties")
    assert noise_kind("25/11/25 03:36:40 INFO SparkContext: Running Spark version 4.0.1") == "Spark INFO line"
    assert noise_kind("│ primary->backup │ success │ 8/8 ok │ 1001 │") is None
    assert noise_kind("ROUTED ERROR FAIL [rdkafka#producer-1] [thrd:x]: Connect to ipv4#127.0.0.1:1 failed") is None


def test_clients_log_through_python_logging_only(kafka_clusters: LocalClusters) -> None:
    lines = run_probe("clients", kafka_clusters.bootstrap("A"), dead_address())
    assert "PROBE clients done" in lines
    assert noise_lines(lines) == []
    # The dead admin's lines were served to the logger (not dropped with it), librdkafka's syslog level 3 (FAIL)
    # arriving as logging.ERROR.
    admin_part = lines[lines.index("PROBE live done") : lines.index("PROBE admin done")]
    assert any(line.startswith("ROUTED ERROR FAIL [rdkafka#") for line in admin_part), lines[-30:]


def test_spark_session_hides_the_log4j_banner_unless_asked() -> None:
    quiet = run_probe("session")
    assert "PROBE session done" in quiet
    assert noise_lines(quiet) == []
    loud = run_probe("session", env={"MIRRORFLOW_SPARK_LOG_LEVEL": "INFO"})
    assert any(noise_kind(line) == "Spark INFO line" for line in loud), loud[:20]


def submit_options(conf: dict[str, str]) -> list[str]:
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def test_spark_submit_with_the_copy_tasks_options_is_quiet() -> None:
    """The Airflow copy task adds `quiet_driver_conf()` to its spark-submit (`MirrorflowCopyOperator`)."""
    quiet = run_probe("session", submit=submit_options(quiet_driver_conf()))
    assert "PROBE session done" in quiet
    assert noise_lines(quiet) == []


def test_a_flow_dag_run_with_its_spark_submit_copy_is_quiet(
    kafka_clusters: LocalClusters, kafka_producer: Callable[..., Any], unique_topic: Callable[..., str], tmp_path: Path
) -> None:
    """What `make demo` does per flow, on the demo's console set-up: Airflow's own warnings included."""
    topic = unique_topic()
    producer = kafka_producer("A")
    for i in range(5):
        producer.produce(topic, key=b"k", value=str(i).encode())
    assert producer.flush(30) == 0
    config = tmp_path / "mm2.properties"
    config.write_text(
        mm2_config_text({a: kafka_clusters.bootstrap(a) for a in ("A", "B")}) + "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        "A->B.heartbeats.replication.enabled = false\n"
        "A->B.emit.checkpoints.enabled = false\n"
        "A->B.mirrorflow.copy.mode = interval\n"
        "A->B.mirrorflow.spark.master = local[1]\n"
        "mirrorflow.schedule = 10m\n"
    )
    lines = run_probe("dag", str(config), str(tmp_path / "home"))
    assert "PROBE dag done" in lines
    assert noise_lines(lines) == []
