"""Read a (usually compacted) internal topic from the beginning to its current end, once.

Used for Mirrorflow's progress and offset-map topics and for MM2's checkpoints and offset-syncs topics.
Reading read_committed to the high watermark seen at the start waits for open transactions of other writers
to finish, so a record committed before the call is never missed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.errors import KafkaOperationError


def read_to_end(
    cluster: str,
    conf: Mapping[str, str],
    topic: str,
    *,
    partitions: Sequence[int] | None = None,
    read_committed: bool = True,
    timeout_s: float = 60.0,
) -> Iterator[tuple[int, int, bytes | None, bytes | None, int]]:
    """Yield (partition, offset, key, value, timestamp_ms) of every record; nothing if the topic is absent."""
    reader = make_consumer(
        conf,
        **{
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "auto.offset.reset": "earliest",
            # consume() waits its whole timeout unless the batch fills; short waits keep small reads fast.
            "fetch.wait.max.ms": 50,
        },
    )
    try:
        metadata = reader.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            if metadata is not None and metadata.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaOperationError(cluster, f"reading topic '{topic}'", metadata.error)
            return
        wanted = sorted(metadata.partitions) if partitions is None else list(partitions)
        ends: dict[int, int] = {}
        for p in wanted:
            low, high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
            if high > low:
                ends[p] = high
        if not ends:
            return
        reader.assign([TopicPartition(topic, p, 0) for p in ends])
        deadline = time.monotonic() + timeout_s
        pending = dict(ends)
        while pending:
            if time.monotonic() > deadline:
                late = ", ".join(f"{topic}-{p}" for p in sorted(pending))
                raise KafkaOperationError(
                    cluster,
                    f"reading {late} to its end",
                    KafkaException(KafkaError(KafkaError._TIMED_OUT, "an open transaction kept it from completing")),
                )
            for m in reader.consume(num_messages=1000, timeout=0.05):
                err = m.error()
                p = m.partition()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaOperationError(cluster, f"reading {topic}-{p}", err)
                    if p in pending and m.offset() >= pending[p]:
                        del pending[p]
                    continue
                if p in pending:
                    yield p, m.offset(), m.key(), m.value(), m.timestamp()[1]
                    if m.offset() + 1 >= pending[p]:
                        del pending[p]
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"reading topic '{topic}'", err) from err
    finally:
        reader.close()
