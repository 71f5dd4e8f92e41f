"""The session's clusters are real Kafka brokers: each behaviour below is one a fake would not have."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)
from tests.kafka_helpers import KafkaKit, create_topic, read_partition

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0
Y2K_MS = 946_684_800_000  # 2000-01-01T00:00:00Z: an old CreateTime the broker must keep as given


def delivered(producer: Producer) -> None:
    assert producer.flush(TIMEOUT_S) == 0, "records still queued after flush"


def test_each_alias_is_its_own_cluster_formatted_with_our_id(kafka: KafkaKit) -> None:
    ids = {}
    for alias in ("A", "B"):
        description = kafka.admin(alias).describe_cluster().result(TIMEOUT_S)
        assert [node.port for node in description.nodes] == [int(kafka.bootstrap(alias).split(":")[1])]
        ids[alias] = description.cluster_id
        assert description.cluster_id == kafka.clusters.spec(alias).cluster_id
    assert ids["A"] != ids["B"]


def test_topic_configs_are_stored_and_described(kafka: KafkaKit) -> None:
    admin, topic = kafka.admin("A"), kafka.topic()
    create_topic(
        admin,
        topic,
        2,
        {"cleanup.policy": "compact", "retention.ms": "3600000", "max.message.bytes": "2000000"},
    )
    resource = ConfigResource(ResourceType.TOPIC, topic)
    alter = [ConfigEntry("min.cleanable.dirty.ratio", "0.2", incremental_operation=AlterConfigOpType.SET)]
    admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=alter)])[
        resource
    ].result(TIMEOUT_S)

    # The controller commits the change; the broker that answers describe_configs applies it a moment later.
    deadline = time.monotonic() + TIMEOUT_S
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    while configs["min.cleanable.dirty.ratio"].value != "0.2" and time.monotonic() < deadline:
        time.sleep(0.1)
        configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)

    for key, value in {
        "cleanup.policy": "compact",
        "retention.ms": "3600000",
        "max.message.bytes": "2000000",
        "min.cleanable.dirty.ratio": "0.2",
    }.items():
        assert configs[key].value == value
        assert configs[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].is_default
    assert len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 2


def test_records_keep_keys_headers_create_times_and_tombstones(kafka: KafkaKit) -> None:
    topic = kafka.topic()
    create_topic(kafka.admin("A"), topic, config={"retention.ms": "-1"})  # keep the year-2000 record
    now_ms = int(time.time() * 1000)
    sent: list[dict[str, Any]] = [
        {
            "key": b"k1",
            "value": b"v1",
            "headers": [("h", b"x"), ("h", b"y"), ("nil", None)],
            "timestamp": Y2K_MS,
        },
        {"key": None, "value": b"no key", "headers": None, "timestamp": now_ms},
        {"key": b"k1", "value": None, "headers": [("reason", b"delete")], "timestamp": now_ms + 1},
    ]
    producer = kafka.producer("A", {"enable.idempotence": True})
    for record in sent:
        producer.produce(topic, partition=0, **record)
    delivered(producer)

    got = read_partition(kafka.consumer("A"), topic)

    assert [m.offset() for m in got] == [0, 1, 2]
    assert [(m.key(), m.value()) for m in got] == [(b"k1", b"v1"), (None, b"no key"), (b"k1", None)]
    assert [m.timestamp() for m in got] == [
        (TIMESTAMP_CREATE_TIME, Y2K_MS),
        (TIMESTAMP_CREATE_TIME, now_ms),
        (TIMESTAMP_CREATE_TIME, now_ms + 1),
    ]
    assert got[0].headers() == [("h", b"x"), ("h", b"y"), ("nil", None)]
    assert got[1].headers() is None
    assert got[2].headers() == [("reason", b"delete")]


def test_acls_are_created_and_described_by_the_standard_authorizer(kafka: KafkaKit) -> None:
    admin, topic = kafka.admin("A"), kafka.topic()
    principal = f"User:{kafka.topic('alice')}"
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.GROUP,
            "team-",
            ResourcePatternType.PREFIXED,
            principal,
            "10.0.0.1",
            AclOperation.DESCRIBE,
            AclPermissionType.DENY,
        ),
    ]
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    mine = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        principal,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    try:
        described = admin.describe_acls(mine, request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        assert sorted(described, key=str) == sorted(bindings, key=str)
    finally:
        for future in admin.delete_acls([mine], request_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)
    assert admin.describe_acls(mine, request_timeout=TIMEOUT_S).result(TIMEOUT_S) == []


def test_partitions_grow_but_never_shrink(kafka: KafkaKit) -> None:
    admin, topic = kafka.admin("A"), kafka.topic()
    create_topic(admin, topic, 1)

    admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) != 3:
        assert time.monotonic() < deadline, "the new partitions never showed up in the metadata"
        time.sleep(0.1)

    with pytest.raises(KafkaException) as shrink:
        admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert shrink.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_committed_group_offsets_are_read_back_and_resumed_from(kafka: KafkaKit) -> None:
    admin, topic, group = kafka.admin("A"), kafka.topic(), kafka.topic("group")
    create_topic(admin, topic)
    producer = kafka.producer("A")
    for index in range(10):
        producer.produce(topic, value=b"%d" % index, partition=0)
    delivered(producer)

    committer = kafka.consumer("A", {"group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 5, metadata="checkpoint")], asynchronous=False)
    committer.close()

    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request)[group].result(TIMEOUT_S)
    [committed] = [tp for tp in result.topic_partitions if tp.topic == topic]
    assert (committed.partition, committed.offset, committed.metadata) == (0, 5, "checkpoint")

    resumer = kafka.consumer("A", {"group.id": group})
    resumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT_S
    first = None
    while first is None or first.error() is not None:
        assert time.monotonic() < deadline, "the group never resumed"
        first = resumer.poll(0.5)
    assert (first.offset(), first.value()) == (5, b"5")


def test_read_committed_hides_aborted_transactions(kafka: KafkaKit) -> None:
    topic = kafka.topic()
    create_topic(kafka.admin("A"), topic)
    producer = kafka.producer("A", {"transactional.id": kafka.topic("tx")})
    producer.init_transactions(TIMEOUT_S)
    for values, commit in ((["c0", "c1", "c2"], True), (["a0", "a1"], False), (["c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value.encode(), partition=0)
        delivered(producer)  # abort_transaction would otherwise purge records not yet sent
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)

    committed = read_partition(kafka.consumer("A", {"isolation.level": "read_committed"}), topic)
    everything = read_partition(kafka.consumer("A", {"isolation.level": "read_uncommitted"}), topic)

    assert [m.value() for m in committed] == [b"c0", b"c1", b"c2", b"c3"]
    assert [m.value() for m in everything] == [b"c0", b"c1", b"c2", b"a0", b"a1", b"c3"]
    # Each commit or abort wrote a control record, which takes an offset but is never delivered.
    assert [m.offset() for m in everything] == [0, 1, 2, 4, 5, 7]
    low, high = kafka.consumer("A").get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT_S)
    assert (low, high) == (0, 9)
