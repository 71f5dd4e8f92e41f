"""Records above librdkafka's 1 MB producer default, on real brokers: the copy follows the remote topic's
`max.message.bytes` (synced from the source topic by the control plane), and when the operator caps the producer
below a record the error names the key to raise."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.kafka_helpers import KafkaKit, Topics, create_topic, read_partition
from tests.replication.helpers import KEEP_FOREVER, a_to_b, copy_all, copy_tasks, create_copy_topics

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.copy_range import copy_range
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


def remote_limit(kafka: KafkaKit, topic: str, limit: int) -> None:
    """Set `max.message.bytes` of `A.<topic>` on B."""
    Topics(kafka.clusters).alter("B", f"A.{topic}", {"max.message.bytes": str(limit)})


def test_a_record_the_source_took_compressed_names_the_writer_settings(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """300 KB of zeros, gzip'd by its producer, fit the source topic's 100000 bytes: the copy must compress too,
    and raising the remote topic's limit (which config sync would revert) is not the advice."""
    topic = kafka.topic("gz")
    create_copy_topics(kafka.admin, topic, 1, {**KEEP_FOREVER, "max.message.bytes": "100000"})
    remote_limit(kafka, topic, 100000)
    producer = kafka.producer("A", {"compression.type": "gzip"})
    producer.produce(topic, value=b"\0" * 300_000, partition=0)
    assert producer.flush(30) == 0
    with pytest.raises(MirrorflowError) as raised:
        copy_all(a_to_b(write_config), topic)
    message = str(raised.value)
    assert "source topic's max.message.bytes is 100000" in message, message
    assert "`B.producer.compression.type`" in message and "`B.producer.max.request.size`" in message, message
    assert "raise the topic's max.message.bytes" not in message, message


def test_a_remote_limit_raised_after_planning_is_followed(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """A Spark retry keeps the planned task: after the operator raises the remote topic's limit, the copy reads
    it again instead of failing with the stale one. The header counts in the size it reports."""
    topic = kafka.topic("raised")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    remote_limit(kafka, topic, 100000)
    producer = kafka.producer("A")
    producer.produce(topic, key=b"k", value=b"x" * 150_000, headers=[("h", b"y" * 1000)], partition=0)
    assert producer.flush(30) == 0
    [task] = copy_tasks(a_to_b(write_config), topic)
    assert task.max_message_bytes == 100000
    with pytest.raises(MirrorflowError, match=r"a record of 151002 bytes .* max\.message\.bytes is 100000"):
        copy_range(task)

    remote_limit(kafka, topic, 200000)
    assert copy_range(task).records == 1
