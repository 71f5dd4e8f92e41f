"""Continuous copies on real brokers: a caught-up range commits at once instead of holding records for the
transaction limit, and a failing range stops the ranges copied beside it in the same Spark task."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.replication.conftest import WriteConfig

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.errors import KafkaOperationError
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_group import copy_ranges
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.flow_cycle import run_control_plane

pytestmark = pytest.mark.integration


def continuous_tasks(write_config: WriteConfig, topic: str, partitions: int, **keys: str) -> list[CopyTask]:
    extra = "".join(f"A->B.{k} = {v}\n" for k, v in keys.items())
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {topic}\n{extra}").flow("A->B")
    run_control_plane(flow)  # remote topic and internal topics, as the flow DAG's sync tasks create them
    return plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", partitions)], interval=False, run_seconds=300)


def committed_count(clusters: LocalClusters, topic: str, partition: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": clusters.bootstrap("B"),
            "group.id": "copy-group-check",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    seen = 0
    try:
        while True:
            m = consumer.poll(5)
            if m is None or m.error() is not None:
                return seen
            seen += 1
    finally:
        consumer.close()


@pytest.mark.timeout(300)
def test_a_caught_up_continuous_copy_commits_without_waiting_for_the_transaction_limit(
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    write_config: WriteConfig,
) -> None:
    topic = unique_topic("caughtup")
    kafka_admin("A").create_topics([NewTopic(topic, 1, 1)])[topic].result()
    # A transaction could stay open for ten minutes: only the caught-up rule can make the records visible soon.
    (task,) = continuous_tasks(write_config, topic, 1, **{"mirrorflow.copy.transaction.max.ms": "600000"})
    assert task.batch_ms == 600000
    stop = threading.Event()
    commits: list[CopyResult] = []
    outcome: list[CopyResult | BaseException] = []

    def run() -> None:
        try:
            outcome.append(copy_range(task, on_batch=lambda r: commits.append(replace(r)), stop=stop.is_set))
        except BaseException as err:
            outcome.append(err)

    copier = threading.Thread(target=run)
    copier.start()
    try:
        producer = kafka_producer("A")
        for i in range(5):
            producer.produce(topic, key=b"k%d" % i, value=b"v", partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while committed_count(kafka_clusters, f"A.{topic}", 0) < 5:
            assert time.monotonic() < deadline, "records still uncommitted a minute after they were read"
            assert not outcome, f"the copy ended early: {outcome}"
    finally:
        stop.set()
        copier.join(60)
    assert not copier.is_alive(), "the copy did not stop when asked"
    (result,) = outcome
    assert isinstance(result, CopyResult)
    assert result.records == 5 and result.next_upstream == 5
    assert commits and commits[-1].records == 5


@pytest.mark.timeout(300)
def test_a_failing_range_stops_its_siblings_and_fails_the_group(
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    unique_topic: Callable[..., str],
    write_config: WriteConfig,
) -> None:
    topic = unique_topic("group")
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = kafka_producer("A")
    for i in range(100):
        producer.produce(topic, key=b"k%d" % i, value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    good = continuous_tasks(write_config, topic, 2)
    # A range whose source partition does not exist fails at once; the two good ones would run for 300 s.
    bad = replace(good[0], partition=7, transactional_id=good[0].transactional_id + "-missing")
    started = time.monotonic()
    with pytest.raises((KafkaOperationError, MirrorflowError)) as failure:
        copy_ranges([*good, bad])
    assert "7" in str(failure.value)
    assert time.monotonic() - started < 200, "the sibling ranges kept running after one failed"
