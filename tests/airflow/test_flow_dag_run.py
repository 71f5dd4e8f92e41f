"""End to end: the real `dags/` file, `dag.test()`, real spark-submit (local[2]) and the session's real clusters.

Records produced at A and a consumer group committed at A must come out at B after one run of the flow DAG:
the records in `A.<topic>` (same partitions), a checkpoint for the group, the group's translated offsets
committed at B, and a heartbeat.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.group_coordinator import committed_offsets
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

pytestmark = pytest.mark.integration
RECORDS = 120
COMMITTED = 40  # the group's position on partition 0 at A


def write_flow_config(path: Path, clusters: LocalClusters, topic: str, group: str) -> Path:
    path.write_text(
        mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}) + "A->B.enabled = true\n"
        f"A->B.topics = {topic}\n"
        # The session's clusters are shared: other tests' heartbeats must not add to this run's counts.
        "A->B.heartbeats.replication.enabled = false\n"
        f"A->B.groups = {group}\n"
        "A->B.sync.group.offsets.enabled = true\n"
        "A->B.mirrorflow.copy.mode = interval\n"
        "A->B.mirrorflow.spark.master = local[2]\n"
        "mirrorflow.schedule = 10m\n"
    )
    return path


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}"}))
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def test_one_run_of_the_flow_dag_replicates_records_and_groups(airflow_db: None, live_flow: Any) -> None:
    kafka_clusters: LocalClusters = live_flow.clusters
    topic = live_flow.source_topic("dag")
    group = f"g-{topic}"
    producer = live_flow.producer("A")
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    committer = Consumer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("A"), "group.id": group}))
    committer.commit(offsets=[TopicPartition(topic, 0, COMMITTED)], asynchronous=False)
    committer.close()

    config = write_flow_config(live_flow.tmp_path / "mm2.properties", kafka_clusters, topic, group)
    dag_run = live_flow.dag(config).test()

    states = live_flow.states(dag_run)
    assert dag_run.state == "success", states
    assert set(states.values()) == {"success"}
    results = live_flow.xcoms(dag_run)
    print(json.dumps(results, indent=1, default=str)[:4000])

    assert results["copy"]["records"] == RECORDS
    assert results["copy"]["master"] == "local[2]"
    remote = f"A.{topic}"
    # each partition holds its 60 records plus the commit marker of the one transaction that carried them
    assert end_offsets(kafka_clusters.bootstrap("B"), remote, 2) == [RECORDS // 2 + 1] * 2
    assert results["sync_topics"]["topics"]["created"][0]["name"] == remote

    checkpoints = results["emit_checkpoints"]["last"]
    assert checkpoints["groups"] == [group]
    [emitted] = checkpoints["emitted"]
    assert (emitted["topic"], emitted["partition"], emitted["upstream_offset"]) == (remote, 0, COMMITTED)
    [event] = live_flow.asset_events(dag_run, "mirrorflow://A-to-B/checkpoints")
    assert event["flow"] == "A->B" and event["checkpoints"] == 1 and event["groups"] == 1, event
    assert event["lag_records"] == 0, event  # the interval copy ran before the checkpoints
    assert results["sync_group_offsets"]["last"]["written"], results["sync_group_offsets"]
    committed = committed_offsets(live_flow.admin("B"), "B", group, 30)  # never the admin call (librdkafka 5040)
    assert committed[(remote, 0)].offset == emitted["downstream_offset"]

    assert results["heartbeats"]["runs"] == 1
    assert results["heartbeats"]["last"]["emitted"] is True
    assert end_offsets(kafka_clusters.bootstrap("B"), "heartbeats", 1)[0] >= 1
