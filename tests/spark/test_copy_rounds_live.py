"""Rounds inside one Spark application (issue 19, `mirrorflow.copy.round.seconds`), on real Spark and brokers:
the copy job as Airflow runs it (`spark-submit spark_jobs/mirrorflow_copy.py`), a steady producer, and the
source topic grown by one partition five times while the run copies. Each growth changes the plan, so the next
round starts Spark tasks for the changed groups inside the same application; their ranges fence the running
ones of the same partitions (the handover), the unchanged tasks copy on. The audit then finds every record
once: 0 lost, 0 duplicated (about 70 s on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from tests.replication.helpers import FAULT_KEYS, start_feeder
from tests.spark.test_copy_job import spark_env, spark_submit_command, write_config

from mirrorflow.config.loader import load_config
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration
GROWTHS = 5
ROUND_S = 4
RUN_S = 50  # rounds start up to RUN_S - ROUND_MARGIN_S (15 s) into the run


def grow(admin: AdminClient, topic: str, count: int) -> None:
    admin.create_partitions([NewPartitions(topic, count)])[topic].result()


def remote_records(clusters: LocalClusters, remote: str, kafka_admin: Callable[..., AdminClient]) -> int:
    from confluent_kafka import Consumer, TopicPartition

    from mirrorflow.kafka.client_logs import with_logger

    meta = kafka_admin("B").list_topics(remote, timeout=10).topics[remote]
    probe = Consumer(with_logger({"bootstrap.servers": clusters.bootstrap("B"), "group.id": "rounds-probe"}))
    try:
        return sum(probe.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1] for p in meta.partitions)
    finally:
        probe.close()


@pytest.mark.timeout(600)
def test_five_rounds_hand_over_inside_one_application_and_lose_nothing(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic, partitions = unique_topic("rounds"), [2]
    kafka_admin("A").create_topics([NewTopic(topic, partitions[0], 1)])[topic].result()
    config = tmp_path / "mm2.properties"
    config.write_text(
        write_config(tmp_path, kafka_clusters, topic).read_text().replace("interval", "continuous")
        + f"A->B.mirrorflow.copy.round.seconds = {ROUND_S}\nA->B.heartbeats.replication.enabled = false\n"
    )
    flow = load_config(config).flow("A->B")
    run_control_plane(flow)
    remote = f"A.{topic}"
    summary_file = tmp_path / "summary.json"
    job = subprocess.Popen(
        spark_submit_command(
            str(config), "--flow", "A->B", "--run-seconds", str(RUN_S), "--summary-file", str(summary_file)
        ),
        env=spark_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    producing, sent, feeder = start_feeder(kafka_producer, topic, 0.003, lambda: partitions[0])
    try:
        deadline = time.monotonic() + 120
        while remote_records(kafka_clusters, remote, kafka_admin) == 0:
            assert job.poll() is None and time.monotonic() < deadline, "the copy wrote nothing"
            time.sleep(0.5)
        for _ in range(GROWTHS):
            time.sleep(ROUND_S + 0.5)
            grow(kafka_admin("B"), remote, partitions[0] + 1)  # the remote first: copyable once both have it
            grow(kafka_admin("A"), topic, partitions[0] + 1)
            partitions[0] += 1
        time.sleep(ROUND_S)
    finally:
        producing.clear()
        feeder.join(60)
    output, _ = job.communicate(timeout=300)
    assert job.returncode == 0, output[-3000:]
    summary = json.loads(summary_file.read_text())
    # a growth may land in the same round as the next one
    assert summary["round_handovers"] >= 3, (summary, output[-3000:])
    assert len(summary["ranges"]) > partitions[0], "ranges handed over within the run are in its results"
    report = audit_flow(flow, topics=topic, timeout_s=60)
    assert report["checked"] == len(sent), report
    assert {k: report[k] for k in FAULT_KEYS} == dict.fromkeys(FAULT_KEYS, 0), report
