"""Topic identity on real brokers: a source topic deleted and re-created (a new topic ID) is never resumed
mid-topic. The copy stops with the recovery command, `mirrorflow reset` makes the next copy start afresh, and the
audit then finds every record of the new topic copied once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from tests.kafka_helpers import KafkaKit, recreate_topic
from tests.replication.helpers import KEEP_FOREVER, a_to_b, copy_all, create_copy_topics

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.errors import MirrorflowError

pytestmark = pytest.mark.integration


def produce(producer: Producer, topic: str, count: int, tag: str) -> None:
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"{tag}-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def test_a_source_topic_recreated_with_more_records_stops_the_copy(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("recreated")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config)
    produce(kafka.producer("A"), topic, 100, "old")
    assert copy_all(flow, topic) == 100

    recreate_topic(kafka.admin("A"), topic, 1, KEEP_FOREVER)
    produce(kafka.producer("A"), topic, 300, "new")
    with pytest.raises(MirrorflowError) as stopped:
        copy_all(flow, topic)
    message = str(stopped.value)
    assert topic in message and "re-created" in message
    assert f"mirrorflow reset" in message and f"--topic {topic}" in message
