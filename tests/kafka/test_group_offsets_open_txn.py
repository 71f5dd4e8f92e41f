"""Group offsets read while an exactly-once application holds a transaction open with the group's offsets
(review of `fetch_committed`): the read answers at once with the last committed offsets instead of waiting for
stable offsets until its deadline, and reads only the partitions its caller asks about."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from tests.kafka_helpers import KafkaKit, create_topic

from mirrorflow.kafka.consumer_groups import list_committed_offsets
from mirrorflow.kafka.group_coordinator import committed_offsets

pytestmark = pytest.mark.integration


@pytest.fixture
def open_offsets_transaction(kafka: KafkaKit) -> Iterator[tuple[str, str, str]]:
    """(topic, other topic, group): the group committed 10 on topic-0 and 3 on the other topic, then an
    application's transaction holding its offset 20 on topic-0 stays open during the test."""
    topic, other = kafka.topic("eos"), kafka.topic("eos-other")
    for name in (topic, other):
        create_topic(kafka.admin("A"), name, 1)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    consumer = kafka.consumer("A", {"group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(other, 0, 3)], asynchronous=False)
    producer: Producer = kafka.producer("A", {"transactional.id": f"{group}-app"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"in flight", partition=0)
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 20)], consumer.consumer_group_metadata(), 30)
    yield topic, other, group
    producer.abort_transaction(30)


def test_offsets_are_read_at_once_while_a_transaction_holds_new_ones(
    kafka: KafkaKit, open_offsets_transaction: tuple[str, str, str]
) -> None:
    topic, other, group = open_offsets_transaction
    started = time.monotonic()
    found = list_committed_offsets(kafka.admin("A"), "A", [group], 8)
    assert {tp: o.offset for tp, o in found[group].items()} == {(topic, 0): 10, (other, 0): 3}
    assert {tp: o.offset for tp, o in committed_offsets(kafka.admin("A"), "A", group, 8).items()} == {
        (topic, 0): 10,
        (other, 0): 3,
    }
    assert time.monotonic() - started < 4  # not the 8 s deadline of a read waiting for stable offsets


def test_only_the_topics_the_caller_needs_are_read(
    kafka: KafkaKit, open_offsets_transaction: tuple[str, str, str]
) -> None:
    _topic, other, group = open_offsets_transaction
    found = list_committed_offsets(kafka.admin("A"), "A", [group], 8, topics=lambda name: name == other)
    assert {tp: o.offset for tp, o in found[group].items()} == {(other, 0): 3}


def test_each_group_gets_the_whole_timeout_however_many_groups_wait(
    kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: one deadline for the whole call left the groups read last (thousands of groups, a few readers at a
    time) with no time at all, so the call failed for all of them. Each group's read now starts its own clock."""
    from mirrorflow.kafka import consumer_groups

    real = consumer_groups.fetch_committed
    slack: list[float] = []

    def slow(settings: Any, cluster: str, group: str, partitions: Any, deadline: float) -> Any:
        slack.append(deadline - time.monotonic())
        time.sleep(0.3)  # a slow coordinator: readers of later groups start well after the call began
        return real(settings, cluster, group, partitions, deadline)

    monkeypatch.setattr(consumer_groups, "fetch_committed", slow)
    groups = [f"many-{uuid.uuid4().hex[:6]}-{i}" for i in range(24)]
    list_committed_offsets(kafka.admin("A"), "A", groups, 2.0)
    assert len(slack) == len(groups)
    assert min(slack) > 1.9, f"a group started with only {min(slack):.2f} s of its 2 s"
