"""Records above librdkafka's 1 MB producer default, on real brokers: the copy follows the remote topic's
`max.message.bytes` (synced from the source topic by the control plane), and when the operator caps the producer
below a record the error names the key to raise."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.kafka_helpers import KafkaKit, create_topic, read_partition
from tests.replication.helpers import KEEP_FOREVER, a_to_b, copy_all, create_copy_topics

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane

pytestmark = pytest.mark.integration

TOPIC_LIMIT = 3 * 1024 * 1024
RECORD = b"x" * (2 * 1024 * 1024)


def produce_big_record(kafka: KafkaKit, topic: str) -> None:
    producer = kafka.producer("A", {"message.max.bytes": TOPIC_LIMIT + 65536})
    producer.produce(topic, key=b"big", value=RECORD, partition=0)
    assert producer.flush(30) == 0


def big_record_flow(write_config: Callable[..., MirrorConfig], kafka: KafkaKit, body: str = "") -> tuple[str, Flow]:
    """A source topic allowing 3 MiB records holding one of 2 MiB, and its remote topic created by the control
    plane (which syncs `max.message.bytes`)."""
    topic = kafka.topic("big")
    create_topic(kafka.admin("A"), topic, 1, {**KEEP_FOREVER, "max.message.bytes": str(TOPIC_LIMIT)})
    produce_big_record(kafka, topic)
    flow = write_config(f"A->B.enabled = true\nA->B.topics = {topic}\n{body}").flow("A->B")
    run_control_plane(flow, steps={TOPICS})
    return topic, flow


def test_a_record_above_one_megabyte_is_copied(write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> None:
    topic, flow = big_record_flow(write_config, kafka)
    assert copy_all(flow, topic) == 1
    [copied] = read_partition(kafka.consumer("B"), f"A.{topic}", 0)
    assert copied.value() == RECORD


def test_an_operator_cap_below_the_record_names_the_key_to_raise(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic, flow = big_record_flow(write_config, kafka, "B.producer.max.request.size = 1048576\n")
    size = len(b"big") + len(RECORD)
    with pytest.raises(MirrorflowError, match=rf"`B\.producer\.max\.request\.size`.*raise it above {size}"):
        copy_all(flow, topic)


def test_a_remote_topic_below_the_record_names_its_max_message_bytes(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """The remote topic was made by hand with the broker's default limit (config sync did not copy the source's):
    the error says which topic setting to raise."""
    topic = kafka.topic("small")
    create_copy_topics(kafka.admin, topic, 1, {**KEEP_FOREVER, "max.message.bytes": str(TOPIC_LIMIT)})
    produce_big_record(kafka, topic)
    with pytest.raises(MirrorflowError, match=r"remote topic's max\.message\.bytes is \d+: .*raise the topic's"):
        copy_all(a_to_b(write_config), topic)
