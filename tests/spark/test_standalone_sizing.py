"""Two flows share one Spark standalone cluster (4 cores): each copy is capped at its own cores, so both run at
once, and an interval copy that cannot get cores ends at its timeout with a message that says why.

Without a cap an application takes every free core of a standalone master and the next one waits, first in,
first out: the second flow's copy would sit WAITING for the first one's whole run. A-to-B sets its cores
(`mirrorflow.spark.total.executor.cores = 2`); B-to-A derives them (4 partitions, 2 per Spark task: 2 cores).
Each copy runs as an Airflow task does, in a process of its own (tests/spark/copy_probe.py).

Cost on 2 cores: ~90 s (two continuous copies of 60 s started together, the starved copy's 30 s timeout
inside that window).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit
from tests.spark.standalone import Standalone

from mirrorflow.config.loader import load_config
from mirrorflow.local.properties import mm2_config_text
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
RUN_SECONDS = 60
STARVED_TIMEOUT_S = 30
APP_WAIT_S = 240.0


def flows_config(path: Path, kafka: KafkaKit, a_topic: str, b_topic: str, mode: str) -> Path:
    path.write_text(
        mm2_config_text({a: kafka.bootstrap(a) for a in ("A", "B")})
        + f"""A->B.enabled = true
A->B.topics = {a_topic}
A->B.mirrorflow.spark.total.executor.cores = 2
B->A.enabled = true
B->A.topics = {b_topic}
B->A.mirrorflow.copy.partitions.per.task = 2
heartbeats.replication.enabled = false
emit.checkpoints.enabled = false
sync.group.offsets.enabled = false
mirrorflow.copy.mode = {mode}
mirrorflow.spark.executor.memory = 512m
mirrorflow.spark.driver.memory = 512m
"""
    )
    return path


def start_copy(
    tmp: Path, config: Path, flow: str, mode: str, timeout_s: float, master: str
) -> tuple[subprocess.Popen[str], Path]:
    out = tmp / f"{flow.replace('->', '-')}-{mode}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["AIRFLOW_CONN_MIRRORFLOW_SPARK"] = json.dumps({"conn_type": "spark", "host": master})
    args = [str(config), flow, mode, str(RUN_SECONDS), str(timeout_s), str(out)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.copy_probe", *args],
        env=env,
        cwd=tmp,
        stdout=out.with_suffix(".log").open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    return process, out


def finished(process: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    process.wait(timeout=600)
    output = out.with_suffix(".log").read_text()
    assert out.is_file(), output[-5000:]
    report: dict[str, Any] = json.loads(out.read_text())
    report["output"] = output
    return report


def apps_named(state: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [app for app in state.get("activeapps", []) if app.get("name") == name]


def waiting(standalone: Standalone, name: str) -> bool:
    return any(app["state"] == "WAITING" for app in apps_named(standalone.state(), name))


def both_running(standalone: Standalone, names: tuple[str, str]) -> dict[str, dict[str, Any]]:
    """The two applications' entries at the first moment the master lists both RUNNING with cores."""
    deadline = time.monotonic() + APP_WAIT_S
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = standalone.state()
        apps = {name: apps_named(seen, name) for name in names}
        if all(len(a) == 1 and a[0]["state"] == "RUNNING" and a[0]["cores"] > 0 for a in apps.values()):
            return {name: a[0] for name, a in apps.items()}
        time.sleep(0.5)
    raise AssertionError(f"the two copies were never RUNNING together: {json.dumps(seen.get('activeapps'))}")


def produce(kafka: KafkaKit, alias: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    kafka.admin(alias).create_topics([NewTopic(topic, partitions, 1)])[topic].result()
    producer = kafka.producer(alias)
    for i in range(partitions * 50):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def test_two_flows_copy_at_once_within_their_cores_and_a_starved_copy_times_out_clearly(
    tmp_path: Path, standalone: Standalone, kafka: KafkaKit
) -> None:
    a_topic, b_topic, late_topic = kafka.topic("sized-a"), kafka.topic("sized-b"), kafka.topic("starved")
    produce(kafka, "A", a_topic, 2)
    produce(kafka, "B", b_topic, 4)
    produce(kafka, "A", late_topic, 1)
    config = flows_config(tmp_path / "mm2.properties", kafka, a_topic, b_topic, "continuous")
    for flow in load_config(config).flows:
        run_control_plane(flow)

    copies = [
        start_copy(tmp_path, config, name, "continuous", RUN_SECONDS + 300, standalone.master)
        for name in ("A->B", "B->A")
    ]
    try:
        running = both_running(standalone, ("mirrorflow-copy A->B", "mirrorflow-copy B->A"))
        assert {name: app["cores"] for name, app in running.items()} == {
            "mirrorflow-copy A->B": 2,  # mirrorflow.spark.total.executor.cores
            "mirrorflow-copy B->A": 2,  # 4 copyable partitions / 2 per task
        }, running
        assert {app["memoryperexecutor"] for app in running.values()} == {512}, running

        # The cluster is full: a third copy (an interval copy of another topic of A->B) waits for cores.
        late = tmp_path / "late.properties"
        late.write_text(
            config.read_text()
            .replace(f"A->B.topics = {a_topic}", f"A->B.topics = {late_topic}")
            .replace("mirrorflow.copy.mode = continuous", "mirrorflow.copy.mode = interval")
        )
        run_control_plane(load_config(late).flow("A->B"))
        starved, starved_out = start_copy(tmp_path, late, "A->B", "interval", STARVED_TIMEOUT_S, standalone.master)
        waited = False
        while starved.poll() is None:
            waited |= waiting(standalone, "mirrorflow-copy A->B")
            time.sleep(0.5)
        report = finished(starved, starved_out)
        # spark-submit was killed with the task: its application no longer waits for cores (the continuous
        # copy of the same flow name is still RUNNING).
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and waiting(standalone, "mirrorflow-copy A->B"):
            time.sleep(0.5)
        assert not waiting(standalone, "mirrorflow-copy A->B"), standalone.state().get("activeapps")
    finally:
        results = [finished(process, out) for process, out in copies]

    error = report.get("error", "")
    assert error.startswith("AirflowTaskTimeout: flow A->B: the interval copy did not finish within 30 s"), report
    assert "mirrorflow.copy.interval.timeout.seconds" in error and "WAITING" in error, error
    assert waited, "the master never listed the starved copy as WAITING"

    for result in results:
        assert "result" in result, result.get("error", result["output"][-5000:])
    copied = {r["result"]["flow"]: r["result"]["records"] for r in results}
    assert copied == {"A->B": 2 * 50, "B->A": 4 * 50}, copied


def test_a_continuous_copy_runs_no_more_spark_tasks_than_its_cores(
    tmp_path: Path, standalone: Standalone, kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (issue 22): the copy spread its ranges over Spark's default parallelism, at least 2 on a standalone
    master, while the task capped the application at one core for a flow of up to
    `mirrorflow.copy.partitions.per.task` partitions. In continuous mode a Spark task waiting for a core copies
    nothing until the first one's whole run has ended: half the partitions lagged by `run.seconds` every run, and
    the copy took twice as long."""
    from tests.spark.copy_probe import copy_operator

    topic = kafka.topic("onecore")
    produce(kafka, "A", topic, 2)
    config = tmp_path / "mm2.properties"
    config.write_text(
        mm2_config_text({a: kafka.bootstrap(a) for a in ("A", "B")})
        + f"A->B.enabled = true\nA->B.topics = {topic}\nheartbeats.replication.enabled = false\n"
        "mirrorflow.copy.mode = continuous\nmirrorflow.spark.executor.memory = 512m\n"
    )
    run_control_plane(load_config(config).flow("A->B"))
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps({"conn_type": "spark", "host": standalone.master}))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    result = copy_operator(config, "A->B", mode="continuous", run_seconds=5, driver_memory="512m").execute({})
    assert result is not None and result["records"] == 2 * 50, result
    assert result["spark_tasks"] == 1, result  # spark.cores.max = 1: 2 partitions, 8 per Spark task
