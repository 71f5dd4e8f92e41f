"""Stream one partition's committed records for the replication audit, one at a time.

The audit hashes each record as it arrives and keeps only the hash, so a partition of any size is read in
constant memory here; the caller decides what to keep.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, TopicPartition

from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.operation_error import KafkaOperationError


@dataclass(frozen=True, slots=True)
class AuditRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    log_append_time: bool
    """True when the broker stamped the record (topic `message.timestamp.type=LogAppendTime`)."""


def partition_count(cluster: str, conf: Mapping[str, str], topic: str, timeout_s: float) -> int | None:
    """Partitions of `topic`, or None when it does not exist."""
    reader = make_consumer(conf)
    try:
        metadata = reader.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"describing topic '{topic}'", err) from err
    finally:
        reader.close()
    if metadata is None or metadata.error is not None:
        return None
    return len(metadata.partitions)


def read_partition(
    cluster: str,
    conf: Mapping[str, str],
    topic: str,
    partition: int,
    *,
    timeout_s: float = 60.0,
) -> Iterator[AuditRecord]:
    """Every committed record of `topic-partition` up to the last stable offset seen at the start, in order."""
    settings: dict[str, str | int | bool] = {
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 50,
    }
    reader = make_consumer(conf, **settings)
    try:
        low, high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s, cached=False)
        if high <= low:
            return
        reader.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() > deadline:
                raise KafkaOperationError(
                    cluster,
                    f"reading {topic}-{partition} to offset {high}",
                    KafkaException(KafkaError(KafkaError._TIMED_OUT, "the partition did not reach its end")),
                )
            messages = reader.consume(num_messages=2000, timeout=0.2)
            if messages:
                deadline = time.monotonic() + timeout_s
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaOperationError(cluster, f"reading {topic}-{partition}", err)
                    if m.offset() >= high:
                        return
                    continue
                kind, ts = m.timestamp()
                yield AuditRecord(
                    m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts, kind == TIMESTAMP_LOG_APPEND_TIME
                )
                if m.offset() + 1 >= high:
                    return
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"reading {topic}-{partition}", err) from err
    finally:
        reader.close()
