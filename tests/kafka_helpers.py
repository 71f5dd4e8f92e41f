"""Helpers shared by the tests that talk to the session's real Kafka clusters (fixtures in `tests/conftest.py`).

Importable as `tests.kafka_helpers` (pytest's importlib mode resolves the `tests` namespace package), so the
types below can annotate fixtures in any test module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.group_coordinator import remember_settings
from mirrorflow.local.cluster import LocalClusters

Headers = list[tuple[str, bytes | None]]
Content = tuple[bytes | None, bytes | None, Headers]


@dataclass(frozen=True)
class KafkaKit:
    """The session clusters and the per-test client factories as one fixture (`kafka`), so a test that uses
    most of them takes one argument instead of repeating the same five."""

    clusters: LocalClusters
    admin: Callable[..., AdminClient]
    producer: Callable[..., Producer]
    consumer: Callable[..., Consumer]
    topic: Callable[..., str]

    def bootstrap(self, alias: str) -> str:
        return self.clusters.bootstrap(alias)


def read_partition(
    consumer: Consumer, topic: str, partition: int = 0, offset: int = OFFSET_BEGINNING, idle_s: float = 30.0
) -> list[Message]:
    """Every record of one partition from `offset` (default: its log start) to its end; a read_committed
    consumer ends at the last stable offset. The end is the partition-EOF event, so the consumer must have
    `enable.partition.eof` (the `kafka_consumer` fixture's default). Fails after `idle_s` without progress."""
    consumer.assign([TopicPartition(topic, partition, offset)])
    records: list[Message] = []
    deadline = time.monotonic() + idle_s
    try:
        while True:
            batch = consumer.consume(1000, timeout=0.5)
            for msg in batch:
                error = msg.error()
                if error is None:
                    records.append(msg)
                elif error.code() == KafkaError._PARTITION_EOF:
                    return records
                else:
                    raise KafkaException(error)
            if batch:
                deadline = time.monotonic() + idle_s
            assert time.monotonic() < deadline, f"no end of {topic}-{partition} within {idle_s}s; {len(records)} read"
    finally:
        consumer.unassign()


def read_contents(consumer: Consumer, topic: str, partition: int, offset: int = OFFSET_BEGINNING) -> list[Content]:
    """(key, value, headers) of each record `read_partition` returns, absent headers as an empty list: what a
    consumer resuming at `offset` would read."""
    return [(m.key(), m.value(), list(m.headers() or [])) for m in read_partition(consumer, topic, partition, offset)]


def create_topic(admin: AdminClient, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """A topic with replication factor 1 (single-broker clusters), waited for up to 30 s."""
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=30)
    futures[name].result(30)


class Topics:
    """Plain confluent-kafka admin calls for arranging and checking topics, independent of the code under test."""

    def __init__(self, clusters: LocalClusters) -> None:
        self._clusters = clusters
        self._admins: dict[str, AdminClient] = {}

    def admin(self, alias: str) -> AdminClient:
        if alias not in self._admins:
            settings = {"bootstrap.servers": self._clusters.bootstrap(alias)}
            self._admins[alias] = remember_settings(admin_client(settings), settings)
        return self._admins[alias]

    def create(self, alias: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        create_topic(self.admin(alias), name, partitions, config)

    def names(self, alias: str) -> set[str]:
        return set(self.admin(alias).list_topics(timeout=30).topics)

    def partitions(self, alias: str, name: str) -> int:
        topic = self.admin(alias).list_topics(name, timeout=30).topics[name]
        if topic.error is not None:
            raise AssertionError(f"{alias}:{name}: {topic.error}")
        return len(topic.partitions)

    def add_partitions(self, alias: str, name: str, total: int) -> None:
        self.admin(alias).create_partitions([NewPartitions(name, total)])[name].result(30)

    def configs(self, alias: str, name: str) -> dict[str, tuple[str | None, str]]:
        """`{key: (value, ConfigSource name)}` of a topic."""
        resource = ConfigResource(ResourceType.TOPIC, name)
        entries = self.admin(alias).describe_configs([resource])[resource].result(30)
        return {k: (e.value, ConfigSource(e.source).name) for k, e in entries.items()}

    def alter(self, alias: str, name: str, set_: dict[str, str] | None = None, delete: Sequence[str] = ()) -> None:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (set_ or {}).items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        self.admin(alias).incremental_alter_configs([resource])[resource].result(30)


def delete_topic(admin: AdminClient, name: str, timeout_s: float = 30.0) -> None:
    """Delete a topic and wait until the cluster no longer lists it (deletion is asynchronous)."""
    admin.delete_topics([name], operation_timeout=timeout_s)[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while name in admin.list_topics(timeout=timeout_s).topics:
        assert time.monotonic() < deadline, f"topic {name} still listed {timeout_s:g} s after its deletion"
        time.sleep(0.1)


def recreate_topic(admin: AdminClient, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Delete `name` and create it again (a new topic ID), retrying while the broker still finishes the deletion."""
    delete_topic(admin, name)
    deadline = time.monotonic() + 30
    while True:
        try:
            create_topic(admin, name, partitions, config)
            return
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


COORDINATOR_NOT_READY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def commit_when_ready(conf: Mapping[str, str], group: str, position: TopicPartition) -> None:
    """Commit `position` for `group`; a fresh cluster answers NOT_COORDINATOR until its offsets topic is up."""
    committer = Consumer(with_logger({**conf, "group.id": group}))
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                committer.commit(offsets=[position], asynchronous=False)
                return
            except KafkaException as err:
                transient = err.args[0].retriable() or err.args[0].code() in COORDINATOR_NOT_READY
                if time.monotonic() > deadline or not transient:
                    raise
                time.sleep(0.5)
    finally:
        committer.close()
