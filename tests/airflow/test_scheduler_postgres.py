"""A flow DAG under a real Airflow scheduler: PostgreSQL metadata DB, LocalExecutor, no `dag.test()`.

The scheduler, its PostgreSQL and its processes are `mirrorflow.airflow.local_scheduler.LocalScheduler`, with
their own environment, so the session-wide Airflow settings of tests/conftest.py stay untouched. The run
is triggered with `airflow dags trigger`, and the records must arrive at B. Then, on the same Airflow, a failover
and a failback run as triggered DAG runs, each task in its own LocalExecutor process: the flow DAG must read
paused in Airflow's REST API after the failover and unpaused after the failback (the runbook reaches the API
through the `mirrorflow_airflow_api` connection, as a deployment does).

Cost on 2 cores: ~3-5 min (PostgreSQL ~5 s, migrate ~20 s, processes ~30 s, one run with spark-submit local[2],
two runbook runs).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.airflow.notify_probe import NOTIFY_FILE_ENV
from tests.kafka_helpers import commit_when_ready

from mirrorflow.airflow.local_scheduler import LocalScheduler
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

pytestmark = pytest.mark.integration
DAG_ID = "mirrorflow__A__B"
REVERSE_DAG_ID = "mirrorflow__B__A"
RECORDS = 90
RUN_TIMEOUT_S = 900.0
DEADLINE_S = 3


def write_config(path: Path, clusters: LocalClusters, topic: str) -> Path:
    path.write_text(
        mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}) + "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        f"A->B.groups = {topic}-.*\n"
        # the failover's way back: its DAG exists and is armed (unpaused) by the runbook
        # B->A's topics are this test's alone: its failback preflight measures the flow's lag, and topics other
        # tests of this process left on B would count in it
        f"B->A.enabled = true\nB->A.topics = {topic}\nB->A.heartbeats.replication.enabled = false\n"
        "B->A.mirrorflow.copy.mode = interval\n"
        "A->B.heartbeats.replication.enabled = false\n"
        "A->B.mirrorflow.copy.mode = interval\n"
        "A->B.mirrorflow.spark.master = local[2]\n"
        "mirrorflow.schedule = none\n"  # runs only when triggered
        # The run takes longer than this: the scheduler must raise the flow's DeadlineAlert and run its callback.
        f"A->B.mirrorflow.airflow.deadline.seconds = {DEADLINE_S}\n"
        "A->B.mirrorflow.airflow.deadline.notifier = tests.airflow.notify_probe.record_deadline\n"
    )
    return path


@pytest.fixture
def airflow_on_postgres(
    tmp_path: Path, kafka_clusters: LocalClusters, unique_topic: Callable[..., str]
) -> Iterator[tuple[LocalScheduler, str]]:
    topic = unique_topic("scheduler")
    config = write_config(tmp_path / "mm2.properties", kafka_clusters, topic)
    # the deadline callback's evidence
    extra = {NOTIFY_FILE_ENV: str(tmp_path / "airflow-home" / "deadline.jsonl")}
    with LocalScheduler.running(tmp_path / "airflow-home", config, extra_env=extra) as airflow:
        yield airflow, topic


def wait_for(what: str, airflow: LocalScheduler, probe: Callable[[], Any], timeout_s: float) -> Any:
    try:
        return airflow.wait_for(what, probe, timeout_s)
    except TimeoutError as err:
        pytest.fail(str(err))


def run_to_end(airflow: LocalScheduler, dag_id: str, conf: dict[str, Any] | None = None) -> dict[str, str]:
    """Trigger `dag_id` (with `conf`) and wait for that run to end; it must succeed with every task. Returns the
    run's task states."""
    try:
        state, tasks = airflow.run_to_end(dag_id, conf, RUN_TIMEOUT_S)
    except TimeoutError as err:
        pytest.fail(str(err))
    assert state == "success", f"{tasks}\n{airflow.diagnostics()}"
    assert set(tasks.values()) <= {"success", "skipped"} and "success" in tasks.values(), tasks
    return tasks


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}"}))
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def test_a_triggered_flow_dag_runs_under_the_scheduler_on_postgres(
    airflow_on_postgres: tuple[LocalScheduler, str],
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
) -> None:
    airflow, topic = airflow_on_postgres
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = kafka_producer("A")
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    # The dag-processor parses dags/ and stores the DAG in PostgreSQL; then the run is triggered.
    try:
        airflow.wait_for_dag(DAG_ID)
    except TimeoutError as err:
        pytest.fail(str(err))
    run_to_end(airflow, DAG_ID)
    jobs = {row[0] for row in airflow.query("SELECT job_type FROM job")}
    assert "SchedulerJob" in jobs, jobs

    [(copy_xcom,)] = airflow.query("SELECT value FROM xcom WHERE dag_id = %s AND task_id = 'copy'", DAG_ID)
    copied = copy_xcom if isinstance(copy_xcom, dict) else json.loads(copy_xcom)
    assert (copied["records"], copied["master"]) == (RECORDS, "local[2]")
    # each partition: its 45 records plus the commit marker of the one transaction that carried them
    assert end_offsets(kafka_clusters.bootstrap("B"), f"A.{topic}", 2) == [RECORDS // 2 + 1] * 2

    # The run outlived its deadline: the scheduler found it missed and the executor ran the flow's callback.
    notified = airflow.home / "deadline.jsonl"
    wait_for("the deadline callback", airflow, lambda: notified.is_file() and notified.read_text(), 180)
    [line] = [json.loads(text) for text in notified.read_text().splitlines()]
    assert line["flow"] == "A->B", line
    assert airflow.query("SELECT missed FROM deadline") == [(True,)]

    # A failover and a failback as an operator triggers them (each task in its own process): the flow DAG reads
    # paused in Airflow's API after the failover, unpaused after the failback; the reverse flow the other way.
    group = f"{topic}-g1"
    a_conf = {"bootstrap.servers": kafka_clusters.bootstrap("A")}
    for partition, offset in ((0, 10), (1, 30)):
        commit_when_ready(a_conf, group, TopicPartition(topic, partition, offset))
    runbook = {"primary": "A", "dr": "B", "groups": group, "dry_run": False, "fence": "none", "max_lag_records": 1000}
    assert not airflow.dag_paused(DAG_ID)
    run_to_end(airflow, "mirrorflow_failover", runbook)
    assert (airflow.dag_paused(DAG_ID), airflow.dag_paused(REVERSE_DAG_ID)) == (True, False)
    assert airflow.query("SELECT is_paused FROM dag WHERE dag_id = %s", DAG_ID) == [(True,)]
    run_to_end(airflow, "mirrorflow_failback", runbook)
    assert (airflow.dag_paused(DAG_ID), airflow.dag_paused(REVERSE_DAG_ID)) == (False, True)
    # ...and in Kafka, where the tasks look (review, issue 22): the original flow's DAG runs again, so the
    # failover's marker is gone (else each run would skip and end green); the failback's own holds.
    from mirrorflow.airflow.tasks import load_flow, pause_check
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.pause_markers import unpause

    config = airflow.env["MIRRORFLOW_CONFIG"]
    assert pause_check(load_flow(config, "A->B")) is None
    reverse = load_flow(config, "B->A")
    assert "paused by a failback" in str(pause_check(reverse))
    with FlowClients(reverse) as clients:
        assert unpause(reverse, clients)  # the session's clusters are shared: no flow left paused on them
    task_logs = "".join(p.read_text(errors="replace") for p in (airflow.home / "logs").rglob("*.log"))
    assert "mirrorflow__A__B" in task_logs and airflow.api_password not in task_logs
