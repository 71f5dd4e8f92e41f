"""A large copy: 100k records over 8 partitions (keys, headers, tombstones, month-old timestamps) and a compacted
topic with overwritten keys arrive identical and in order, partition by partition, through `copy_range`."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer
from tests.kafka_helpers import KafkaKit, read_partition
from tests.replication.helpers import KEEP_FOREVER, a_to_b, copy_tasks, create_copy_topics

from mirrorflow.config.model import MirrorConfig
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration

MONTH_AGO = int(time.time() * 1000) - 31 * 24 * 3600 * 1000
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None, int]


def read_all(consumer: Consumer, topic: str, partitions: int) -> dict[int, list[Record]]:
    """Every record of every partition, per partition in offset order."""
    return {
        p: [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in read_partition(consumer, topic, p)]
        for p in range(partitions)
    }


def test_large_copy_is_identical_and_ordered(write_config: Callable[..., MirrorConfig], kafka: KafkaKit) -> None:
    big, compacted = kafka.topic("large"), kafka.topic("compacted")
    compact = {**KEEP_FOREVER, "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
    for name, parts, conf in ((big, 8, KEEP_FOREVER), (compacted, 2, compact)):
        create_copy_topics(kafka.admin, name, parts, conf)

    producer = kafka.producer("A", {"linger.ms": 20, "batch.size": 500_000})
    for i in range(100_000):
        tombstone = i % 23 == 0
        headers = [("n", b"%d" % i), ("kind", b"big")] if i % 4 == 0 else None
        while True:
            try:
                producer.produce(
                    big,
                    key=b"key-%d" % (i % 997) if i % 11 else None,
                    value=None if tombstone else b"v%d-" % i + b"x" * (i % 200),
                    partition=i % 8,
                    timestamp=MONTH_AGO + i,
                    headers=headers,
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    # The compacted topic: 20 keys overwritten 100 times each, some deleted, in two rounds so that the log
    # cleaner may run between them (the copy must reproduce whatever the source log holds then).
    for round_ in range(2):
        for i in range(1000):
            key = b"ck-%d" % (i % 20)
            value = None if i % 97 == 0 else b"r%d-%d" % (round_, i)
            producer.produce(compacted, key=key, value=value, partition=i % 2, timestamp=MONTH_AGO + i)
        assert producer.flush(60) == 0
    assert producer.flush(60) == 0

    flow = a_to_b(write_config, topics=f"{big},{compacted}")
    compacted_before = read_all(kafka.consumer("A"), compacted, 2)
    results = [copy_range(t) for t in copy_tasks(flow, big, 8) + copy_tasks(flow, compacted, 2)]
    assert sum(r.records for r in results if r.topic == big) == 100_000

    source = read_all(kafka.consumer("A"), big, 8)
    target = read_all(kafka.consumer("B"), f"A.{big}", 8)
    for p in range(8):
        assert len(target[p]) == len(source[p]), f"{big}-{p}: {len(target[p])} != {len(source[p])}"
        assert target[p] == source[p], f"{big}-{p} differs"
    assert len(source[0]) > 0 and any(r[1] is None for r in source[0]), "tombstones were copied"
    # The log cleaner may compact the source at any moment, also after the copy read it: the copy is the source
    # as it was then, so it lies between the source read before the copy and the source read after it.
    compacted_after = read_all(kafka.consumer("A"), compacted, 2)
    copied = read_all(kafka.consumer("B"), f"A.{compacted}", 2)
    for p in range(2):
        assert is_subsequence(copied[p], compacted_before[p]), f"{compacted}-{p}: a record the source never held"
        assert is_subsequence(compacted_after[p], copied[p]), f"{compacted}-{p}: a record the source holds is missing"


def is_subsequence(part: list[Record], whole: list[Record]) -> bool:
    """Every record of `part`, in `part`'s order, appears in `whole` (compaction only removes records)."""
    remaining = iter(whole)
    return all(record in remaining for record in part)
