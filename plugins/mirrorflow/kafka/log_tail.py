"""Read the last records of one partition (the newest, not the whole log): a bounded look at a busy shared
topic, such as MM2's offset-syncs topic, whose head a caller only needs to check."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.operation_error import KafkaOperationError


def read_tail(
    cluster: str, conf: Mapping[str, str], topic: str, partition: int, count: int, *, timeout_s: float
) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of the last `count` records below the high watermark, oldest first (read_uncommitted: for
    non-transactional topics); empty when the topic is absent or empty."""
    settings: dict[str, str | int | bool] = {
        "enable.partition.eof": True,
        "isolation.level": "read_uncommitted",
        "fetch.wait.max.ms": 50,
    }
    reader = make_consumer(conf, **settings)
    tp = TopicPartition(topic, partition)
    try:
        metadata = reader.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None or partition not in metadata.partitions:
            return []
        low, high = reader.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        if high <= low:
            return []
        reader.assign([TopicPartition(topic, partition, max(low, high - count))])
        found: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in reader.consume(num_messages=1000, timeout=0.05):
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaOperationError(cluster, f"reading {topic}-{partition}", err)
                if err is None:
                    found.append((m.key(), m.value()))
                if m.offset() + (0 if err is not None else 1) >= high:
                    return found
        raise KafkaOperationError(
            cluster, f"reading the end of {topic}-{partition}", KafkaException(KafkaError(KafkaError._TIMED_OUT))
        )
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"reading {topic}-{partition}", err) from err
    finally:
        reader.close()
