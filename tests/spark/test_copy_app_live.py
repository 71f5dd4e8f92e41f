"""The leased copy application (issue 19, `replication/copy_app.py`) on real brokers and Spark: four DAG runs'
copy tasks one after the other, each supervising as Airflow's does (`airflow/copy_app_task.supervise`, a detached
`spark-submit`), under a steady producer. The first submits the application; the next adopt it, so three DAG-run
boundaries start no application. Then its driver is SIGKILLed (process group and all) at a boundary: the next
run sees the driver gone, submits a new application whose ranges fence the dead one's, and copies on. Once the
last run stops supervising, the lease runs out and the application ends by itself, saying so in its last
heartbeat. The audit finds every record once (0 lost, 0 duplicated). About 3 minutes on 2 cores."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.replication.helpers import FAULT_KEYS, start_feeder
from tests.spark.test_copy_job import spark_env, spark_submit_command
from tests.spark.test_copy_rounds_live import continuous_flow

from mirrorflow.airflow.copy_app_task import supervise
from mirrorflow.config.model import Flow
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_app import AppState, config_id, read_state
from mirrorflow.replication.flow_clients import FlowClients

pytestmark = pytest.mark.integration
ROUND_S = 4
RUN_S = 20  # each "DAG run" supervises this long
HANDOVER_S = 5
KILLED_BEFORE = 3  # the run before which the application's driver is SIGKILLed
LEASED_CONFIG = (
    f"A->B.mirrorflow.copy.round.seconds = {ROUND_S}\n"
    f"A->B.mirrorflow.copy.handover.seconds = {HANDOVER_S}\n"
    f"A->B.mirrorflow.copy.run.seconds = {RUN_S}\n"
    "A->B.heartbeats.replication.enabled = false\n"
)
log = logging.getLogger(__name__)


def state(flow: Flow) -> AppState:
    with FlowClients(flow) as clients:
        return read_state(flow, clients)


def supervise_run(flow: Flow, config: Path, index: int) -> dict[str, Any]:
    """One DAG run's copy task: supervise until RUN_S from now, submitting with this run's start."""
    started_ms = int(time.time() * 1000)
    cid = config_id(str(config), flow, None, {})

    def command(app: str, seconds: float, where: Path, claims_ms: int) -> list[str]:
        args = ("--flow", "A->B", "--mode", "continuous", "--run-seconds", f"{seconds:.0f}")
        ids = ("--app-id", app, "--config-id", cid, "--run-started-ms", str(claims_ms))
        return spark_submit_command(str(config), *args, *ids)

    env = {k: v for k, v in spark_env().items() if k in ("PATH", "PYSPARK_PYTHON")}
    return supervise(
        flow,
        config=cid,
        run_end_ms=started_ms + RUN_S * 1000,
        by=f"run {index}",
        command=command,
        env=env,
        mask=str,
        log=log,
    )


def wait_for_end(flow: Flow, app: str, within_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        beat = state(flow).beat or {}
        if beat.get("app") == app and beat.get("ended"):
            return beat
        time.sleep(2)
    raise AssertionError(f"application {app} did not end within {within_s:.0f} s: {state(flow)}")


@pytest.mark.timeout(900)
def test_dag_runs_adopt_one_application_and_a_killed_one_is_replaced_without_loss(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("leased")
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    config, flow = continuous_flow(tmp_path, kafka_clusters, topic, LEASED_CONFIG)
    producing, sent, feeder = start_feeder(kafka_producer, topic, 0.003, lambda: 2)
    runs: list[dict[str, Any]] = []
    try:
        for index in range(5):
            if index == KILLED_BEFORE:
                pid = int((state(flow).beat or {})["pid"])
                os.killpg(os.getpgid(pid), signal.SIGKILL)  # the driver, its JVM and Python workers
            runs.append(supervise_run(flow, config, index))
    finally:
        producing.clear()
        feeder.join(60)
    apps = [r["app"] for r in runs]
    assert [r["adopted"] for r in runs] == [False, True, True, False, True], runs
    assert len(set(apps[:KILLED_BEFORE])) == 1 and apps[KILLED_BEFORE] == apps[-1] != apps[0], runs
    last = wait_for_end(flow, apps[-1], HANDOVER_S + 2 * ROUND_S + 30 + 60)
    assert last["ended"] == "its lease ran out", last
    report = audit_flow(flow, topics=topic, timeout_s=60)
    assert report["checked"] == len(sent), (report, runs)
    assert {k: report[k] for k in FAULT_KEYS} == dict.fromkeys(FAULT_KEYS, 0), report
