"""One keyed record written at the end of a partition, found again without reading the partition whole.

The copy job's summary goes to the flow's metrics topic on the target (`replication/job_summary.py`): a driver
running inside the cluster (Spark's cluster deploy mode) has no file the Airflow task can read, but both reach
the target cluster. The summary is the job's last write, so the task looks for it in a window at the end of the
partition, doubling the window until it finds the key or reaches records older than the job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.clients import producer as make_producer
from mirrorflow.kafka.operation_error import KafkaOperationError

FIRST_WINDOW = 256


def write_record(
    cluster: str, conf: Mapping[str, str], topic: str, key: bytes, value: bytes | None, timeout_s: float
) -> None:
    """Produce one record to partition 0 of `topic` and wait for it; a failure names the topic and cluster."""
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _message: object) -> None:
        if err is not None:
            errors.append(err)

    producer = make_producer(conf, **{"enable.idempotence": False, "acks": "all"})
    producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
    left = producer.flush(timeout_s)
    if left or errors:
        why = errors[0] if errors else f"not acknowledged within {timeout_s:.0f}s"
        raise MirrorflowError(f"writing {key!r} to '{topic}' on '{cluster}' failed: {why}")


def find_near_end(
    cluster: str, conf: Mapping[str, str], topic: str, key: bytes, since_ms: int, timeout_s: float
) -> bytes | None:
    """The newest value of `key` in partition 0 of `topic` among records written at or after `since_ms`."""
    reader = make_consumer(conf, **{"enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        low, high = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        window, end = FIRST_WINDOW, high
        deadline = time.monotonic() + timeout_s
        while end > low:
            start = max(low, end - window)
            found, oldest_ms = _scan(reader, topic, key, (start, end), deadline)
            if found is not None or oldest_ms < since_ms or start == low:
                return found
            end, window = start, window * 2
        return None
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"reading the end of '{topic}'", err) from err
    finally:
        reader.close()


def _scan(
    consumer: Consumer, topic: str, key: bytes, span: tuple[int, int], deadline: float
) -> tuple[bytes | None, int]:
    """(newest value of `key` in [start, end), oldest record timestamp seen there)."""
    start, end = span
    consumer.assign([TopicPartition(topic, 0, start)])
    found: bytes | None = None
    oldest_ms = 2**63
    position = start
    while position < end and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=500, timeout=0.2):
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    position = end
                continue
            position = m.offset() + 1
            if m.offset() >= end:
                continue
            oldest_ms = min(oldest_ms, m.timestamp()[1])
            if m.key() == key:
                found = m.value()
    return found, oldest_ms
