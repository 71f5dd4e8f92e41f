"""Partition start/end offsets (the log start and the high watermark or last stable offset)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.operation_error import MOVING_LEADER, KafkaOperationError


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


@dataclass(frozen=True)
class PartitionBounds:
    """A source partition's log start, its high watermark (the true log end: nothing was ever written at or
    beyond it), and where a read_committed reader's "latest" is (the last stable offset; the high watermark
    when it was not asked for)."""

    log_start: int
    high_watermark: int
    last_stable: int


def partition_bounds(
    cluster: str, conf: Mapping[str, str], topic: str, partition: int, *, timeout_s: float, stable: bool = False
) -> PartitionBounds:
    """The bounds of one partition, through consumers so executors need no admin client.

    The high watermark is read with read_uncommitted whatever `conf` says: librdkafka's consumers default to
    read_committed, whose "high" is the last stable offset, and a copy that read past an open transaction
    would take that for a truncated log. `stable` also reads the last stable offset (one more round trip)."""
    low, high = _watermarks(cluster, conf, topic, partition, timeout_s, "read_uncommitted")
    last_stable = _watermarks(cluster, conf, topic, partition, timeout_s, "read_committed")[1] if stable else high
    return PartitionBounds(low, high, last_stable)


def _watermarks(
    cluster: str, conf: Mapping[str, str], topic: str, partition: int, timeout_s: float, isolation: str
) -> tuple[int, int]:
    reader = make_consumer(conf, **{"isolation.level": isolation})
    try:
        low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s, cached=False)
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"reading the bounds of {topic}-{partition}", err) from err
    finally:
        reader.close()
    return int(low), int(high)


def newest_timestamps(
    admin: AdminClient, cluster: str, partitions: Iterable[tuple[str, int]], *, timeout_s: float = 30.0
) -> dict[tuple[str, int], int]:
    """The largest record timestamp (ms) of each partition, -1 for an empty one (ListOffsets' max timestamp,
    KIP-734: brokers from Kafka 3.0). One request per leader, whatever the partition count; partitions whose
    leader is moving (a topic the cycle's topic step has just created) are asked again until `timeout_s`."""
    wanted = [TopicPartition(t, p) for t, p in partitions]
    found: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + timeout_s
    while wanted:
        futures = admin.list_offsets({tp: OffsetSpec.max_timestamp() for tp in wanted}, request_timeout=timeout_s)
        wanted = []
        for tp, future in futures.items():
            try:
                info = future.result()
            except KafkaException as err:
                if err.args[0].code() in MOVING_LEADER and time.monotonic() < deadline:
                    wanted.append(tp)
                    continue
                raise KafkaOperationError(
                    cluster, f"listing the newest timestamp of {tp.topic}-{tp.partition}", err
                ) from err
            found[(tp.topic, tp.partition)] = info.timestamp if info.offset >= 0 else -1
        if wanted:
            time.sleep(0.2)
    return found
