"""The offset map forgets history below the source log start: after `delete_records` on the source, stored
segments wholly below the new log start become tombstones, at the next run or during a running copy, while
translation stays exact for every offset at or above the log start."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.kafka_helpers import KafkaKit, read_partition
from tests.replication.helpers import (
    KEEP_FOREVER,
    a_to_b,
    copy_tasks,
    create_copy_topics,
    live_segments,
    stored_map,
    translate_by_hand,
)

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_task import CopyResult, CopyTask

pytestmark = pytest.mark.integration


def make_flow(write_config: Callable[..., MirrorConfig], delivery: str) -> Flow:
    return a_to_b(write_config, **{"mirrorflow.delivery": delivery})


def produce_in_transactions(producer: Producer, topic: str, first: int, count: int, per_txn: int) -> None:
    """Source transactions: each commit marker is an upstream gap, so the map has one segment per
    transaction in both delivery modes."""
    txn: Producer = producer
    txn.init_transactions(30)
    for start in range(first, first + count, per_txn):
        txn.begin_transaction()
        for i in range(start, min(start + per_txn, first + count)):
            txn.produce(topic, key=f"k{i}".encode(), value=f"r{i}".encode(), partition=0)
        txn.commit_transaction(30)


def task_of(flow: Flow, topic: str, **changes: Any) -> CopyTask:
    [task] = copy_tasks(flow, topic, **changes)
    return task


def committed(consumer: Consumer, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every committed record of partition 0 from its log start."""
    return [(m.offset(), m.value()) for m in read_partition(consumer, topic)]


def delete_below(admin: AdminClient, topic: str, offset: int) -> None:
    for f in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
        f.result(30)


def assert_exact_from(flow: Flow, topic: str, log_start: int, read: Callable[..., Consumer]) -> None:
    """Every upstream offset >= the log start translates to the copy of the first record at or after it."""
    source = committed(read("A", {"isolation.level": "read_committed"}), topic)
    assert source and source[0][0] >= log_start
    target = dict(
        (value, offset) for offset, value in committed(read("B", {"isolation.level": "read_committed"}), f"A.{topic}")
    )
    pairs = [(u, target[value]) for u, value in source]
    offset_map = stored_map(flow, topic)
    end = offset_map.downstream_end
    assert end is not None
    for upstream in range(log_start, pairs[-1][0] + 2):
        assert offset_map.translate(upstream) == translate_by_hand(pairs, upstream, end), upstream


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_next_run_tombstones_segments_below_the_source_log_start(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, delivery: str
) -> None:
    topic = kafka.topic("prune")
    flow = make_flow(write_config, delivery)
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    produce_in_transactions(kafka.producer("A", {"transactional.id": f"src-{uuid.uuid4()}"}), topic, 0, 1000, 100)
    assert copy_range(task_of(flow, topic)).records == 1000
    before = live_segments(flow, topic)
    assert len(before) >= 10, before

    log_start = before[4].upstream_start + 37  # inside the fifth segment: four lie wholly below
    delete_below(kafka.admin("A"), topic, log_start)
    again = copy_range(task_of(flow, topic))
    assert again.records == 0
    after = live_segments(flow, topic)
    assert all(s.upstream_end > log_start for s in after), after
    assert after == before[4:], "only the segments wholly below the log start are gone"
    assert_exact_from(flow, topic, log_start, kafka.consumer)

    # The pruned map keeps growing and translating exactly.
    produce_in_transactions(kafka.producer("A", {"transactional.id": f"src-{uuid.uuid4()}"}), topic, 1000, 300, 100)
    assert copy_range(task_of(flow, topic)).records == 300
    assert all(s.upstream_end > log_start for s in live_segments(flow, topic))
    assert_exact_from(flow, topic, log_start, kafka.consumer)


def test_running_copy_prunes_when_the_log_start_moves(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("prunelive")
    flow = make_flow(write_config, "exactly-once")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    producer = kafka.producer("A")
    for i in range(3000):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    admin = kafka.admin("A")
    moved: list[int] = []

    def move_log_start(result: CopyResult) -> None:
        # Once a few transactions (one segment each: commit markers split the downstream side) are stored.
        if not moved and result.next_upstream >= 500:
            delete_below(admin, topic, 450)
            moved.append(450)

    # Small fetches, so that the reader fetches (and learns the log start) after the move.
    task = task_of(
        flow,
        topic,
        batch_records=100,
        source_consumer={**flow.source_consumer.librdkafka(), "fetch.message.max.bytes": "2000"},
    )
    result = copy_range(task, on_batch=move_log_start)
    assert result.records == 3000
    assert moved
    assert 0 <= result.max_latency_ms < 120_000, "records produced just now: replication latency is small"
    after = live_segments(flow, topic)
    assert after[0].upstream_start <= 450 < after[0].upstream_end, after[:2]
    assert_exact_from(flow, topic, 450, kafka.consumer)
