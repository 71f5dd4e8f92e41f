"""Sample records and whole-topic reads, for the demo and for checks that a copy is identical."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import NewTopic

from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.clients import producer as make_producer

Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def produce_orders(bootstrap: str, topic: str, *, count: int, partitions: int) -> int:
    """`count` order events over `partitions` partitions: keys, JSON values, headers, some tombstones."""
    admin = admin_client({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result()
        except Exception as err:  # an existing topic is fine for a re-run
            if "TOPIC_ALREADY_EXISTS" not in str(err):
                raise
    producer = make_producer({"bootstrap.servers": bootstrap}, **{"enable.idempotence": True})
    now = int(time.time() * 1000)
    for i in range(count):
        key = f"customer-{i % 97}".encode()
        value = None if i % 50 == 49 else f'{{"order": {i}, "amount": {i % 1000 / 10}}}'.encode()
        headers = [("source", b"demo"), ("trace", f"{i:08x}".encode())]
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=now - (count - i) * 10)
        if i % 500 == 0:
            producer.poll(0)
    producer.flush(30)
    return count


def consume_group(bootstrap: str, topic: str, group: str, *, count: int) -> int:
    """Consume `count` records in group `group` and commit, leaving a position to translate later."""
    consumer = make_consumer({"bootstrap.servers": bootstrap}, **{"group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < count and time.monotonic() < deadline:
            for m in consumer.consume(min(100, count - seen), timeout=1.0):
                if m.error() is None:
                    seen += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> dict[int, list[Record]]:
    """Every committed record of `topic` by partition, in order (empty if the topic does not exist)."""
    consumer: Any = make_consumer(
        {"bootstrap.servers": bootstrap}, **{"group.id": "mirrorflow-check", "enable.partition.eof": True}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return {}
        out: dict[int, list[Record]] = {p: [] for p in metadata.partitions}
        ends: dict[int, int] = {}
        assignment = []
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = high
                assignment.append(TopicPartition(topic, p, low))
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.5):
                if m.error() is None:
                    out[m.partition()].append((m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    _at_end(consumer, topic, m.partition(), m.offset(), ends)
        return out
    finally:
        consumer.close()


def _at_end(consumer: Any, topic: str, partition: int, offset: int, ends: dict[int, int]) -> None:
    """A partition is read once the end reached is its high watermark seen at the start. A transaction's commit
    returns before its markers reach the partitions, so a read_committed reader can stop at the last stable
    offset just below: it reads from there again (a moment later) until the marker lands."""
    if partition not in ends:
        return
    if offset >= ends[partition]:
        del ends[partition]
        return
    time.sleep(0.05)
    consumer.seek(TopicPartition(topic, partition, offset))
