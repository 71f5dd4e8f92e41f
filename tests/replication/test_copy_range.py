"""The copy engine on real brokers, without Spark: records arrive identical, resume is exact, transactions at
the source are honoured, and the stored offset map translates every upstream offset exactly."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.offset_map import OffsetMap, decode_segment
from mirrorflow.core.progress import decode_progress
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration

# Records carry old timestamps; without this the brokers' time-based retention would delete them mid-test.
KEEP_FOREVER = {"retention.ms": "-1"}
OLD = int(time.time() * 1000) - 30 * 24 * 3600 * 1000

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def make_flow(tmp_path: Path, clusters: LocalClusters, **flow_keys: str) -> Flow:
    extra = "".join(f"A->B.{k} = {v}\n" for k, v in flow_keys.items())
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = A, B\n"
        f"A.bootstrap.servers = {clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {clusters.bootstrap('B')}\n"
        "A->B.enabled = true\n"
        "replication.factor = 1\n"
        "checkpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\n"
        "offset-syncs.topic.replication.factor = 1\n"
        "admin.timeout.ms = 30000\n" + extra
    )
    return load_config(path).flow("A->B")


def prepare_target(flow: Flow, topic: str, partitions: int) -> None:
    """The topic-sync step's job, done by hand here so this test exercises the copy alone."""
    source_admin = admin_client(flow.source_admin.librdkafka())
    target_admin = admin_client(flow.target_admin.librdkafka())
    remote = NewTopic(f"A.{topic}", partitions, 1, config=KEEP_FOREVER)
    target_admin.create_topics([remote])["A." + topic].result()
    for name in ("mirrorflow-progress.A.internal", "mirrorflow-offset-map.A.internal"):
        create_compacted_topic(target_admin, "B", name, 1, 30)
    create_compacted_topic(source_admin, "A", "mm2-offset-syncs.B.internal", 1, 30)


def read_partition(consumer: Consumer, topic: str, partition: int) -> list[tuple[int, Record]]:
    lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    consumer.assign([TopicPartition(topic, partition, lo)])
    out: list[tuple[int, Record]] = []
    while True:
        msgs = consumer.consume(500, timeout=5)
        assert msgs, f"timed out reading {topic}-{partition}"
        done = False
        for m in msgs:
            if m.error() is not None:
                done = m.offset() >= hi
                continue
            out.append((m.offset(), (m.key(), m.value(), list(m.headers() or []), m.timestamp()[1])))
            done = m.offset() + 1 >= hi
        if done:
            return out


def produce_mixed(producer: Producer, topic: str, partitions: int, count: int, base: int = 0) -> None:
    for i in range(base, base + count):
        value = None if i % 17 == 0 else f"value-{i}".encode() * (1 + i % 5)
        headers = [("h", f"{i}".encode()), ("empty", None)] if i % 3 == 0 else None
        producer.produce(
            topic,
            key=f"k{i % 50}".encode() if i % 7 else None,
            value=value,
            partition=i % partitions,
            timestamp=OLD + i * 1000,  # a month old: timestamps are kept as they are
            headers=headers,
        )
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def run_interval(flow: Flow, topic: str, partitions: int) -> int:
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", partitions)], interval=True)
    return sum(copy_range(t).records for t in tasks)


def stored_map(flow: Flow, topic: str, partition: int) -> OffsetMap:
    conf = flow.target_consumer.librdkafka()
    segments = []
    for _p, _o, key, value, _ts in read_to_end("B", conf, "mirrorflow-offset-map.A.internal"):
        if key is None or value is None:
            continue
        t, p, seg = decode_segment(key, value)
        if (t, p) == (topic, partition):
            segments.append(seg)
    progress = None
    for _p, _o, key, value, _ts in read_to_end("B", conf, "mirrorflow-progress.A.internal"):
        if key is not None and value is not None:
            pr = decode_progress(key, value)
            if (pr.topic, pr.partition) == (topic, partition):
                progress = pr
    assert progress is not None
    return OffsetMap.restore(segments, next_upstream=progress.next_upstream, downstream_end=progress.downstream_end)


def brute_force_translate(pairs: list[tuple[int, int]], upstream: int, replicated_end: int) -> int:
    return next((d for u, d in pairs if u >= upstream), replicated_end)


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_copy_preserves_records_resumes_and_translates_exactly(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    unique_topic: Callable[..., str],
    delivery: str,
) -> None:
    topic, partitions = unique_topic("copy"), 3
    kafka_admin("A").create_topics([NewTopic(topic, partitions, 1, config=KEEP_FOREVER)])[topic].result()
    flow = make_flow(tmp_path, kafka_clusters, **{"mirrorflow.delivery": delivery})
    prepare_target(flow, topic, partitions)

    produce_mixed(kafka_producer("A"), topic, partitions, 3000)
    assert run_interval(flow, topic, partitions) == 3000
    produce_mixed(kafka_producer("A"), topic, partitions, 1000, base=3000)
    assert run_interval(flow, topic, partitions) == 1000, "a second run copies only what is new"
    assert run_interval(flow, topic, partitions) == 0

    for p in range(partitions):
        source = read_partition(kafka_consumer("A"), topic, p)
        target = read_partition(kafka_consumer("B"), f"A.{topic}", p)
        assert [r for _, r in target] == [r for _, r in source], f"partition {p} differs"
        pairs = [(u, d) for (u, _), (d, _) in zip(source, target, strict=True)]
        offset_map = stored_map(flow, topic, p)
        replicated_end = offset_map.downstream_end
        assert replicated_end is not None and replicated_end >= pairs[-1][1] + 1
        for upstream in range(0, pairs[-1][0] + 2):
            assert offset_map.translate(upstream) == brute_force_translate(pairs, upstream, replicated_end)


def test_exactly_once_copies_only_committed_transactions(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("txn")
    kafka_admin("A").create_topics([NewTopic(topic, 1, 1)])[topic].result()
    flow = make_flow(tmp_path, kafka_clusters)
    prepare_target(flow, topic, 1)
    txn: Any = kafka_producer("A", {"transactional.id": f"src-{uuid.uuid4()}"})
    txn.init_transactions(30)
    expected = []
    for batch in range(6):
        txn.begin_transaction()
        for i in range(50):
            txn.produce(topic, value=f"b{batch}-{i}".encode(), partition=0)
        if batch % 2:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
            expected += [f"b{batch}-{i}".encode() for i in range(50)]
    assert run_interval(flow, topic, 1) == len(expected)
    target = read_partition(kafka_consumer("B", {"isolation.level": "read_committed"}), f"A.{topic}", 0)
    assert [r[1] for _, r in target] == expected
    offset_map = stored_map(flow, topic, 0)
    source_committed = read_partition(kafka_consumer("A", {"isolation.level": "read_committed"}), topic, 0)
    pairs = [(u, d) for (u, _), (d, _) in zip(source_committed, target, strict=True)]
    end = offset_map.downstream_end
    assert end is not None
    for upstream in range(0, source_committed[-1][0] + 2):
        assert offset_map.translate(upstream) == brute_force_translate(pairs, upstream, end)
