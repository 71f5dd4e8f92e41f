"""Partition start/end offsets (the log start and the high watermark or last stable offset)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.errors import KafkaOperationError


def list_offsets(
    admin: AdminClient,
    cluster: str,
    partitions: Iterable[tuple[str, int]],
    *,
    latest: bool,
    read_committed: bool = False,
    timeout_s: float = 30.0,
) -> dict[tuple[str, int], int]:
    """Earliest (log start) or latest offsets; with read_committed the latest is the last stable offset."""
    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()
    request = {TopicPartition(t, p): spec for t, p in partitions}
    if not request:
        return {}
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout_s)
    found: dict[tuple[str, int], int] = {}
    for tp, future in futures.items():
        try:
            found[(tp.topic, tp.partition)] = future.result().offset
        except KafkaException as err:
            raise KafkaOperationError(cluster, f"listing offsets of {tp.topic}-{tp.partition}", err) from err
    return found


def partition_bounds(
    cluster: str, conf: Mapping[str, str], topic: str, partition: int, *, timeout_s: float
) -> tuple[int, int]:
    """(log start, high watermark) of one partition, through a consumer so executors need no admin client."""
    reader = make_consumer(conf)
    try:
        low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s, cached=False)
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"reading the bounds of {topic}-{partition}", err) from err
    finally:
        reader.close()
    return int(low), int(high)
