"""The heartbeats DAG of a target cluster under `dag.test()`: one task per heartbeat-only pair writing into it,
each beating into the target's real `heartbeats` topic, each failing on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from mirrorflow.airflow.dag_ids import heartbeat_dag_id, heartbeat_task_id
from mirrorflow.core.heartbeat import Heartbeat
from mirrorflow.local.properties import mm2_config_text

from .conftest import LiveFlow


@pytest.mark.integration
def test_one_dag_beats_for_every_source_into_its_target_and_a_broken_pair_fails_alone(
    airflow_db: None, live_flow: LiveFlow, tmp_path: Path
) -> None:
    # A->B is the only flow, so B->A, C->A (into A) and A->C, B->C (into C) and C->B run heartbeats only.
    # C->A's producer points at a port nobody listens on: its task must fail and B->A's must not.
    bootstraps = {alias: live_flow.clusters.bootstrap(alias) for alias in ("A", "B")}
    body = (
        "C.bootstrap.servers = 127.0.0.1:9\n"
        "A->B.enabled = true\nA->B.topics = nothing-matches-this\n"
        "mirrorflow.copy.mode = interval\nmirrorflow.airflow.retries = 0\n"
        "C->A.target.producer.bootstrap.servers = 127.0.0.1:9\nC->A.target.producer.message.timeout.ms = 3000\n"
    )
    config = tmp_path / "mm2.properties"
    config.write_text(mm2_config_text(bootstraps, body).replace("clusters = A, B\n", "clusters = A, B, C\n", 1))
    bag = live_flow.dag_bag(config)
    assert bag.import_errors == {}
    assert {d for d in bag.dags if d.startswith("mirrorflow__heartbeats__")} == {
        heartbeat_dag_id(t) for t in ("A", "B", "C")
    }
    dag = bag.dags[heartbeat_dag_id("A")]
    assert {t.task_id for t in dag.tasks} == {heartbeat_task_id("B"), heartbeat_task_id("C")}
    before = _beats_from(live_flow, "B")

    dag_run = dag.test()

    states = live_flow.states(dag_run)
    assert states == {heartbeat_task_id("B"): "success", heartbeat_task_id("C"): "failed"}, states
    report: dict[str, Any] = live_flow.return_value(dag_run, heartbeat_task_id("B"))
    assert (report["last"]["source"], report["last"]["target"]) == ("B", "A")
    assert _beats_from(live_flow, "B") > before


def _beats_from(live_flow: LiveFlow, source: str) -> int:
    """Heartbeats from `source` in A's `heartbeats` topic (0 while the topic does not exist)."""
    admin = live_flow.admin("A")
    if "heartbeats" not in admin.list_topics(timeout=10).topics:
        return 0
    consumer = Consumer(
        {
            "bootstrap.servers": live_flow.clusters.bootstrap("A"),
            "group.id": "hb-dag-check",
            "enable.auto.commit": False,
        }
    )
    try:
        count = 0
        for partition in admin.list_topics("heartbeats", timeout=10).topics["heartbeats"].partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition("heartbeats", partition), timeout=10)
            consumer.assign([TopicPartition("heartbeats", partition, 0)])
            for message in _read(consumer, high):
                count += Heartbeat.from_record(message.key(), message.value()).source_cluster_alias == source
        return count
    finally:
        consumer.close()


def _read(consumer: Consumer, high: int) -> list[Any]:
    """The assigned partition's records up to offset `high` (exclusive)."""
    messages: list[Any] = []
    while high > 0 and (not messages or messages[-1].offset() < high - 1):
        message = consumer.poll(10)
        assert message is not None, f"heartbeats ended before offset {high}"
        if message.error() is None:
            messages.append(message)
    return messages
