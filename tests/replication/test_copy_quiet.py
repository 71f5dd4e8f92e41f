"""Quiet partitions (`replication/copy_quiet.py`, issue 19): which partitions of a continuous copy share one Spark
task. On real brokers: the newest timestamps come from ListOffsets on both clusters, and a copy keeps them."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import a_to_b, copy_all, create_copy_topics

from mirrorflow.airflow.spark_sizing import CopyLoad, copy_partitions, submit_conf
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_quiet import quiet_partitions

HOUR_MS = 3_600_000


def produce(producer: Producer, topic: str, partition: int, timestamp_ms: int, n: int = 5) -> None:
    for i in range(n):
        producer.produce(topic, value=b"v%d" % i, partition=partition, timestamp=timestamp_ms)
    assert producer.flush(30) == 0


@pytest.mark.integration
def test_quiet_means_empty_or_copied_long_ago(
    write_config: WriteConfig,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("quiet")
    create_copy_topics(kafka_admin, topic, 4)
    flow = a_to_b(write_config, topics=topic)
    producer = kafka_producer("A")
    now_ms = int(time.time() * 1000)
    produce(producer, topic, 0, now_ms - HOUR_MS)  # old, copied below: quiet (partition 1 stays empty: quiet)
    produce(producer, topic, 2, now_ms - HOUR_MS)  # old, copied below, then a backlog: busy
    produce(producer, topic, 3, now_ms + HOUR_MS)  # copied below, but stamped after the cutoff: busy
    assert copy_all(flow, topic, 4) == 15
    time.sleep(1.0)  # the backlog's timestamps come after the copy's commit markers
    produce(producer, topic, 2, int(time.time() * 1000))
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 4)], interval=False, run_seconds=300)
    # A cutoff of now: the copy above is older than a run that would have ended now.
    assert quiet_partitions(flow, tasks, quiet_after_s=0.0) == {(topic, 0), (topic, 1)}
    # With the run's real length the copy above wrote during "the last run": nothing is quiet but the empty one.
    assert quiet_partitions(flow, tasks, quiet_after_s=300) == {(topic, 1)}


@pytest.mark.integration
def test_an_idle_continuous_flow_asks_a_standalone_cluster_for_one_core(
    write_config: WriteConfig,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
) -> None:
    """The copy task's `spark.cores.max` (`airflow/spark_sizing`) counts quiet partitions once, read from the
    brokers the way the Airflow task reads them before spark-submit: an idle flow asks for one core."""
    quiet_topic, busy_topic = unique_topic("idle"), unique_topic("busy")
    create_copy_topics(kafka_admin, quiet_topic, 12)  # empty: quiet
    create_copy_topics(kafka_admin, busy_topic, 10)
    # Heartbeats stay out: the session's clusters carry other tests' heartbeats, which the flow would copy too.
    flow = a_to_b(
        write_config,
        "heartbeats.replication.enabled = false\n",
        **{"topics": f"{quiet_topic},{busy_topic}", "mirrorflow.copy.partitions.per.task": "4"},
    )
    assert copy_partitions(flow, quiet_after_s=300) == CopyLoad(22, 22)
    idle = submit_conf(flow, "spark://m:7077", quiet_after_s=300)
    assert idle["spark.cores.max"] == "1", "12 + 10 idle partitions share one Spark task"
    producer = kafka_producer("A")
    now_ms = int(time.time() * 1000)
    for partition in range(10):
        producer.produce(busy_topic, value=b"v", partition=partition, timestamp=now_ms)
    assert producer.flush(30) == 0
    assert copy_all(flow, busy_topic, 10) == 10  # copied now: busy during "the last run"
    assert copy_partitions(flow, quiet_after_s=300) == CopyLoad(22, 12)
    busy = submit_conf(flow, "spark://m:7077", quiet_after_s=300)
    assert busy["spark.cores.max"] == "4", "10 busy partitions at 4 a task, and one task for the 12 quiet ones"
    interval = submit_conf(flow, "spark://m:7077")
    assert interval["spark.cores.max"] == "6", "an interval copy spreads every partition (22 at 4 a task)"
