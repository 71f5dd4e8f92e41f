"""Consumer-group admin calls: listing, committed offsets, state, and writing offsets into idle groups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from mirrorflow.kafka.errors import KafkaOperationError


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str


def list_group_ids(admin: AdminClient, cluster: str, timeout_s: float) -> list[str]:
    try:
        result = admin.list_consumer_groups(request_timeout=timeout_s).result()
    except KafkaException as err:
        raise KafkaOperationError(cluster, "listing consumer groups", err) from err
    return sorted(g.group_id for g in result.valid)


def group_states(admin: AdminClient, cluster: str, groups: Sequence[str], timeout_s: float) -> dict[str, str]:
    """Kafka's group state name per group (EMPTY, STABLE, DEAD, ...); DEAD also means "does not exist"."""
    if not groups:
        return {}
    states: dict[str, str] = {}
    for group, future in admin.describe_consumer_groups(list(groups), request_timeout=timeout_s).items():
        try:
            states[group] = future.result().state.name
        except KafkaException as err:
            raise KafkaOperationError(cluster, f"describing consumer group '{group}'", err) from err
    return states


def committed_offsets(
    admin: AdminClient, cluster: str, group: str, timeout_s: float
) -> dict[tuple[str, int], CommittedOffset]:
    """A group's committed offsets; partitions without a commit (offset < 0) are left out."""
    request = [ConsumerGroupTopicPartitions(group)]
    try:
        result = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)[group].result()
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"listing offsets of consumer group '{group}'", err) from err
    found: dict[tuple[str, int], CommittedOffset] = {}
    for tp in result.topic_partitions or []:
        if tp.error is None and tp.offset >= 0:
            found[(tp.topic, tp.partition)] = CommittedOffset(tp.offset, tp.metadata or "")
    return found


def alter_group_offsets(
    admin: AdminClient,
    cluster: str,
    group: str,
    offsets: Mapping[tuple[str, int], CommittedOffset],
    timeout_s: float,
) -> None:
    """Write offsets into a group; Kafka refuses (and this raises) while the group has active members."""
    if not offsets:
        return
    partitions = [TopicPartition(t, p, o.offset, metadata=o.metadata) for (t, p), o in sorted(offsets.items())]
    request = [ConsumerGroupTopicPartitions(group, partitions)]
    try:
        result = admin.alter_consumer_group_offsets(request, request_timeout=timeout_s)[group].result()
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"writing offsets of consumer group '{group}'", err) from err
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        tp = failed[0]
        raise KafkaOperationError(cluster, f"writing offset of {tp.topic}-{tp.partition} for group '{group}'", tp.error)
