"""A large copy: 100k records over 8 partitions (keys, headers, tombstones, month-old timestamps) and a compacted
topic with overwritten keys arrive identical and in order, partition by partition, through `copy_range`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration

MONTH_AGO = int(time.time() * 1000) - 31 * 24 * 3600 * 1000
KEEP_FOREVER = {"retention.ms": "-1"}
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None, int]


def flow_for(tmp_path: Path, clusters: LocalClusters, topics: str) -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = A, B\n"
        f"A.bootstrap.servers = {clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {clusters.bootstrap('B')}\n"
        f"A->B.enabled = true\nA->B.topics = {topics}\n"
        "replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
        "admin.timeout.ms = 30000\n"
    )
    return load_config(path).flow("A->B")


def read_all(consumer: Consumer, topic: str, partitions: int) -> dict[int, list[Record]]:
    """Every record of every partition up to the high watermarks seen now, per partition in offset order."""
    ends = {}
    for p in range(partitions):
        _lo, ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    pending = {p for p, end in ends.items() if end > 0}
    deadline = time.monotonic() + 120
    while pending:
        assert time.monotonic() < deadline, f"timed out reading {topic}: {sorted(pending)} unfinished"
        for m in consumer.consume(10000, timeout=1):
            p = m.partition()
            if m.error() is not None:
                if m.offset() >= ends[p]:
                    pending.discard(p)
                continue
            out[p].append((m.key(), m.value(), m.headers(), m.timestamp()[1]))
            if m.offset() + 1 >= ends[p]:
                pending.discard(p)
    return out


def test_large_copy_is_identical_and_ordered(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    unique_topic: Callable[..., str],
) -> None:
    big, compacted = unique_topic("large"), unique_topic("compacted")
    compact = {**KEEP_FOREVER, "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
    for name, parts, conf in ((big, 8, KEEP_FOREVER), (compacted, 2, compact)):
        kafka_admin("A").create_topics([NewTopic(name, parts, 1, config=conf)])[name].result()
        remote = f"A.{name}"
        kafka_admin("B").create_topics([NewTopic(remote, parts, 1, config=KEEP_FOREVER)])[remote].result()
    for name in ("mirrorflow-progress.A.internal", "mirrorflow-offset-map.A.internal"):
        create_compacted_topic(kafka_admin("B"), "B", name, 1, 30)
    create_compacted_topic(kafka_admin("A"), "A", "mm2-offset-syncs.B.internal", 1, 30)

    producer = kafka_producer("A", {"linger.ms": 20, "batch.size": 500_000})
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

    flow = flow_for(tmp_path, kafka_clusters, f"{big},{compacted}")
    tasks = plan_copy(
        flow,
        [SourcePartitions(big, f"A.{big}", 8), SourcePartitions(compacted, f"A.{compacted}", 2)],
        interval=True,
    )
    results = [copy_range(t) for t in tasks]
    assert sum(r.records for r in results if r.topic == big) == 100_000

    for name, parts in ((big, 8), (compacted, 2)):
        source = read_all(kafka_consumer("A"), name, parts)
        target = read_all(kafka_consumer("B"), f"A.{name}", parts)
        for p in range(parts):
            assert len(target[p]) == len(source[p]), f"{name}-{p}: {len(target[p])} != {len(source[p])}"
            assert target[p] == source[p], f"{name}-{p} differs"
    assert len(source[0]) > 0 and any(r[1] is None for r in source[0]), "tombstones were copied"
