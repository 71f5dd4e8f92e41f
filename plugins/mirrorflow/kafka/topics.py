"""Topic, partition and topic-config admin calls, returning plain data for the replication layer."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from confluent_kafka.admin import ConfigEntry as _KafkaConfigEntry

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.progress import topic_id_text
from mirrorflow.kafka.operation_error import KafkaOperationError, error_code

log = logging.getLogger(__name__)

REFUSALS = (
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.POLICY_VIOLATION,
    KafkaError.INVALID_CONFIG,
)
"""How a cluster refuses topic settings that are ours to want, not to require: no permission, or a policy (a
managed cluster that fixes `segment.bytes`)."""

VALUE_REFUSALS = (KafkaError.POLICY_VIOLATION, KafkaError.INVALID_CONFIG)
"""The `REFUSALS` of a value rather than of the request: a caller may still set the other keys one by one."""


@dataclass(frozen=True)
class ConfigValue:
    """One topic config as the broker describes it; `source` is Kafka's ConfigSource name."""

    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


@dataclass(frozen=True)
class NewTopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True)
class ConfigChange:
    """An incrementalAlterConfigs operation: `SET` a value or `DELETE` the override."""

    name: str
    op: str
    value: str | None = None


def list_topic_partitions(admin: AdminClient, cluster: str, timeout_s: float) -> dict[str, int]:
    """Every topic with its partition count (internal ones included; callers filter by policy)."""
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as err:
        raise KafkaOperationError(cluster, "listing topics", err, client=admin) from err
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def topic_ids(admin: AdminClient, cluster: str, topics: Sequence[str], timeout_s: float) -> dict[str, str]:
    """Kafka's topic ID of each topic (KIP-516), as Kafka prints it, in one DescribeTopics request. A topic this
    client may not describe, or whose broker predates topic IDs (the zero UUID), maps to "" (unknown: callers
    must treat it as "cannot check", never as a match); a topic the broker does not know (yet) is left out."""
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout_s)
    found: dict[str, str] = {}
    for name, future in futures.items():
        try:
            description = future.result()
        except KafkaException as err:
            if error_code(err) == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                found[name] = ""
                continue
            if error_code(err) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise KafkaOperationError(cluster, f"describing topic '{name}'", err, client=admin) from err
        topic_id = description.topic_id
        if topic_id is None:
            found[name] = ""
            continue
        # confluent-kafka prints standard base64; Kafka (and the progress record's text form) the URL-safe one.
        raw = b"".join(
            bits.to_bytes(8, "big", signed=True)
            for bits in (topic_id.get_most_significant_bits(), topic_id.get_least_significant_bits())
        )
        found[name] = topic_id_text(raw)  # "" for the zero UUID
    return found


def delete_topic(admin: AdminClient, cluster: str, name: str, timeout_s: float) -> None:
    """Delete one topic and wait for the controller to accept it (the log is removed asynchronously)."""
    future = admin.delete_topics([name], request_timeout=timeout_s, operation_timeout=timeout_s)[name]
    try:
        future.result()
    except KafkaException as err:
        if error_code(err) != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaOperationError(cluster, f"deleting topic '{name}'", err, client=admin) from err


def create_topics(
    admin: AdminClient, cluster: str, specs: Sequence[NewTopicSpec], timeout_s: float
) -> dict[str, str | None]:
    """Create topics; returns per topic None (created), "exists", or raises for any other failure."""
    if not specs:
        return {}
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=s.replication_factor,
            config=dict(s.configs),
        )
        for s in specs
    ]
    futures = admin.create_topics(new, request_timeout=timeout_s, operation_timeout=timeout_s)
    outcome: dict[str, str | None] = {}
    for name, future in futures.items():
        try:
            future.result()
            outcome[name] = None
        except KafkaException as err:
            if error_code(err) == KafkaError.TOPIC_ALREADY_EXISTS:
                outcome[name] = "exists"
            else:
                raise KafkaOperationError(cluster, f"creating topic '{name}'", err) from err
    return outcome


def create_compacted_topic(
    admin: AdminClient,
    cluster: str,
    name: str,
    replication_factor: int,
    timeout_s: float,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
) -> bool:
    """MM2's internal-topic creation: compacted, one partition unless told (Mirrorflow's state topics have one
    per slot, and segment settings in `configs`); exists or not authorised counts as present.

    Returns True when this call created the topic.
    """
    spec = NewTopicSpec(name, partitions, replication_factor, {"cleanup.policy": "compact", **(configs or {})})
    try:
        return create_topics(admin, cluster, [spec], timeout_s)[name] is None
    except KafkaOperationError as err:
        if err.code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
            return False
        if not configs or err.code not in REFUSALS:
            raise
        log.warning(
            "'%s' refused creating topic '%s' with %s (%s): created without them", cluster, name, dict(configs), err
        )
        return create_compacted_topic(admin, cluster, name, replication_factor, timeout_s, partitions)


def await_leaders(
    admin: AdminClient,
    cluster: str,
    counts: Mapping[str, int],
    timeout_s: float,
    first_new: Mapping[str, int] | None = None,
) -> None:
    """Wait until this broker's metadata shows each topic with at least its partition count, every partition with
    a leader. A topic just created or grown is not writable before that, and a producer gives up on a partition
    it does not see within its own 30 s (librdkafka's `topic.metadata.propagation.max.ms`): a cycle that created
    768 state-topic partitions once failed its heartbeat that way on a busy host (bench-flow-scale). Of a grown
    topic only the partitions from `first_new[topic]` on must have a leader: an old partition whose broker is away
    is not this step's to wait for (copies of the other slots go on)."""
    if not counts:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = _without_leaders(admin, cluster, counts, timeout_s, first_new or {})
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise MirrorflowError(
                f"topics created or grown on '{cluster}' have no leader after {timeout_s:.0f} s: "
                f"{', '.join(sorted(waiting)[:5])}{' ...' if len(waiting) > 5 else ''}. Check the cluster's "
                "controller and brokers, then run the flow again (creating and growing is idempotent)"
            )
        time.sleep(0.2)


def _without_leaders(
    admin: AdminClient, cluster: str, counts: Mapping[str, int], timeout_s: float, first_new: Mapping[str, int]
) -> list[str]:
    try:
        topics = admin.list_topics(timeout=timeout_s).topics
    except KafkaException as err:
        raise KafkaOperationError(cluster, "listing topics", err, client=admin) from err
    waiting = []
    for name, count in counts.items():
        found = topics.get(name)
        parts = {} if found is None or found.error is not None else found.partitions
        new = [p for i, p in parts.items() if i >= first_new.get(name, 0)]
        if len(parts) < count or any(p.leader < 0 or p.error is not None for p in new):
            waiting.append(name)
    return waiting


def create_partitions(admin: AdminClient, cluster: str, counts: Mapping[str, int], timeout_s: float) -> None:
    """Grow topics to the given partition counts (Kafka never shrinks; a count already reached is fine)."""
    if not counts:
        return
    futures = admin.create_partitions(
        [NewPartitions(topic, count) for topic, count in counts.items()], request_timeout=timeout_s
    )
    for topic, future in futures.items():
        try:
            future.result()
        except KafkaException as err:
            if error_code(err) != KafkaError.INVALID_PARTITIONS:
                raise KafkaOperationError(cluster, f"adding partitions to '{topic}'", err) from err


def describe_topic_configs(
    admin: AdminClient, cluster: str, topics: Sequence[str], timeout_s: float
) -> dict[str, dict[str, ConfigValue]]:
    if not topics:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    futures = admin.describe_configs(resources, request_timeout=timeout_s)
    described: dict[str, dict[str, ConfigValue]] = {}
    for resource, future in futures.items():
        try:
            entries = future.result()
        except KafkaException as err:
            raise KafkaOperationError(cluster, f"describing configs of topic '{resource.name}'", err) from err
        described[resource.name] = {
            name: ConfigValue(
                name=name,
                value=e.value,
                source=_source_name(e.source),
                is_default=bool(e.is_default),
                read_only=bool(e.is_read_only),
                sensitive=bool(e.is_sensitive),
            )
            for name, e in entries.items()
        }
    return described


def max_message_bytes(admin: AdminClient, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
    """Each topic's effective `max.message.bytes` (its own, else the broker's `message.max.bytes`); a topic
    that cannot be described (not created yet, not authorised) is left out: its writer keeps the default."""
    if not topics:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics], request_timeout=timeout_s)
    found: dict[str, int] = {}
    for resource, future in futures.items():
        try:
            entry = future.result().get("max.message.bytes")
        except KafkaException:
            continue
        if entry is not None and entry.value is not None and entry.value.isdigit():
            found[resource.name] = int(entry.value)
    return found


def _source_name(source: object) -> str:
    """Kafka's ConfigSource name; describe results carry the enum's int value, not the enum."""
    if isinstance(source, ConfigSource):
        return str(source.name)
    try:
        return str(ConfigSource(int(source)).name)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return "UNKNOWN_CONFIG"


def alter_topic_configs(
    admin: AdminClient, cluster: str, changes: Mapping[str, Sequence[ConfigChange]], timeout_s: float
) -> None:
    """incrementalAlterConfigs, one resource per topic; only the given keys change."""
    resources = []
    for topic, topic_changes in changes.items():
        if not topic_changes:
            continue
        entries = [
            _KafkaConfigEntry(c.name, c.value, incremental_operation=AlterConfigOpType[c.op]) for c in topic_changes
        ]
        resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries))
    if not resources:
        return
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as err:
            raise KafkaOperationError(cluster, f"altering configs of topic '{resource.name}'", err) from err
