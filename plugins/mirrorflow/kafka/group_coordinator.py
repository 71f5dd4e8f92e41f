"""Calls to one consumer group's coordinator: listing groups, committed offsets, and writing offsets into idle groups
(`consumer_groups.py` builds the batched calls for many groups on these).

Committed offsets are never read with the admin `list_consumer_group_offsets`: librdkafka (issue 5040, every
release so far) dereferences the admin client's missing group handle when the coordinator answers
NOT_COORDINATOR, and the process dies with SIGSEGV. That answer comes on the first group call to a fresh cluster
and after any coordinator move (a broker restart). A consumer's `committed()` goes through the group machinery
that handles it (it looks the coordinator up again and retries), so offsets are read that way: a consumer with the
group's id that never subscribes and never commits, asked about the partitions its caller needs (every partition
of the cluster when the caller cannot tell).

That consumer reads with isolation.level=read_uncommitted. librdkafka's default, read_committed, makes OffsetFetch
require stable offsets: while an exactly-once application holds a transaction with offsets of the group, the
broker answers UNSTABLE_OFFSET_COMMIT until the transaction ends, and the read would wait for it up to its
deadline. read_uncommitted returns the last committed offsets at once (those of the open transaction are not
visible until it commits), which is what the admin call answers: a position at or before the group's newest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.kafka.operation_error import KafkaOperationError, error_code

_SETTINGS_ATTR = "_mirrorflow_settings"
# What `committed()` raises while the coordinator is being found or loads its partition; retried to the deadline.
_NOT_READY = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError._TRANSPORT,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    }
)
_RETRY_PAUSE_S = 0.2


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


def remember_settings(admin: AdminClient, settings: Mapping[str, Any]) -> AdminClient:
    """Keep the settings `admin` was made with (by `mirrorflow.kafka.clients.admin_client`), so the group
    offset reader can open consumers to the same cluster with the same security."""
    setattr(admin, _SETTINGS_ATTR, dict(settings))
    return admin


def reader_settings(admin: AdminClient, cluster: str) -> dict[str, Any]:
    """The settings `fetch_committed` needs to reach the cluster `admin` talks to."""
    settings = getattr(admin, _SETTINGS_ATTR, None)
    if settings is None:
        raise MirrorflowError(
            f"cannot read consumer group offsets on '{cluster}': the admin client was not made by "
            "mirrorflow.kafka.clients.admin_client, so its connection settings are unknown"
        )
    return dict(settings)


def all_partitions(
    admin: AdminClient, cluster: str, timeout_s: float, topics: Callable[[str], bool] | None = None
) -> list[TopicPartition]:
    """Every partition of every topic of the cluster (of the topics `topics` accepts): where a group may have
    committed."""
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as err:
        raise KafkaOperationError(cluster, "listing topics", err) from err
    return [
        TopicPartition(name, p)
        for name, topic in sorted(metadata.topics.items())
        if topics is None or topics(name)
        for p in sorted(topic.partitions)
    ]


def fetch_committed(
    settings: Mapping[str, Any], cluster: str, group: str, partitions: Sequence[TopicPartition], deadline: float
) -> dict[tuple[str, int], CommittedOffset]:
    """A group's committed offsets on `partitions` through a consumer's `committed()` (never the admin call,
    see the module docstring); partitions without a commit are left out. Retries a coordinator that is not
    ready until `deadline` (time.monotonic)."""
    if not partitions:
        return {}
    conf = {
        **settings,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_uncommitted",  # never wait for stable offsets (module docstring)
    }
    consumer = Consumer(with_logger(conf))
    unstable = False
    try:
        while True:
            try:
                result = consumer.committed(list(partitions), timeout=max(0.5, deadline - time.monotonic()))
                break
            except KafkaException as err:
                unstable = unstable or error_code(err) == KafkaError.UNSTABLE_OFFSET_COMMIT
                if error_code(err) not in _NOT_READY or time.monotonic() >= deadline:
                    what = f"reading offsets of consumer group '{group}'"
                    if unstable:
                        what += " (the broker reported offsets of an open transaction: an exactly-once application"
                        what += " may hold one; let it finish or abort)"
                    raise KafkaOperationError(cluster, what, err) from err
            time.sleep(_RETRY_PAUSE_S)
    finally:
        consumer.close()  # never joined the group: no LeaveGroup is sent
    return {
        (tp.topic, tp.partition): CommittedOffset(tp.offset, tp.metadata or "")
        for tp in result
        if tp.error is None and tp.offset >= 0
    }


def committed_offsets(
    admin: AdminClient, cluster: str, group: str, timeout_s: float, topics: Callable[[str], bool] | None = None
) -> dict[tuple[str, int], CommittedOffset]:
    """A group's committed offsets on the cluster's topics (those `topics` accepts); partitions without a commit
    are left out."""
    settings = reader_settings(admin, cluster)
    partitions = all_partitions(admin, cluster, timeout_s, topics)
    return fetch_committed(settings, cluster, group, partitions, time.monotonic() + timeout_s)


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
