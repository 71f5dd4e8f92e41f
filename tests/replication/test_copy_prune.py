"""The offset map forgets history below the source log start: after `delete_records` on the source, stored
segments wholly below the new log start become tombstones, at the next run or during a running copy, while
translation stays exact for every offset at or above the log start."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirrorflow.config.loader import load_config
from mirrorflow.config.model import Flow
from mirrorflow.core.offset_map import OffsetMap, Segment, decode_segment, decode_segment_key
from mirrorflow.core.progress import decode_progress
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.topics import create_compacted_topic
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import CopyResult, CopyTask, copy_range

pytestmark = pytest.mark.integration

KEEP_FOREVER = {"retention.ms": "-1"}
MAP_TOPIC = "mirrorflow-offset-map.A.internal"


def make_flow(tmp_path: Path, clusters: LocalClusters, delivery: str) -> Flow:
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = A, B\n"
        f"A.bootstrap.servers = {clusters.bootstrap('A')}\n"
        f"B.bootstrap.servers = {clusters.bootstrap('B')}\n"
        "A->B.enabled = true\n"
        f"A->B.mirrorflow.delivery = {delivery}\n"
        "replication.factor = 1\n"
        "checkpoints.topic.replication.factor = 1\n"
        "heartbeats.topic.replication.factor = 1\n"
        "offset-syncs.topic.replication.factor = 1\n"
        "admin.timeout.ms = 30000\n"
    )
    return load_config(path).flow("A->B")


def prepare(flow: Flow, admin: Callable[..., AdminClient], topic: str) -> None:
    admin("A").create_topics([NewTopic(topic, 1, 1, config=KEEP_FOREVER)])[topic].result()
    admin("B").create_topics([NewTopic(f"A.{topic}", 1, 1, config=KEEP_FOREVER)])[f"A.{topic}"].result()
    for name in ("mirrorflow-progress.A.internal", MAP_TOPIC):
        create_compacted_topic(admin("B"), "B", name, 1, 30)
    create_compacted_topic(admin("A"), "A", "mm2-offset-syncs.B.internal", 1, 30)


def produce_in_transactions(producer: Producer, topic: str, first: int, count: int, per_txn: int) -> None:
    """Source transactions: each commit marker is an upstream gap, so the map has one segment per
    transaction in both delivery modes."""
    txn: Producer = producer
    txn.init_transactions(30)
    for start in range(first, first + count, per_txn):
        txn.begin_transaction()
        for i in range(start, min(start + per_txn, first + count)):
            txn.produce(topic, key=f"k{i}".encode(), value=f"r{i}".encode(), partition=0)
        txn.commit_transaction(30)


def task_of(flow: Flow, topic: str, **changes: object) -> CopyTask:
    task = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 1)], interval=True)[0]
    return replace(task, **changes)  # type: ignore[arg-type]


def live_segments(flow: Flow, topic: str) -> list[Segment]:
    """The segments of the partition the offset-map topic still holds (tombstones applied, as compaction will)."""
    live: dict[int, Segment] = {}
    for _p, _o, key, value, _ts in read_to_end("B", flow.target_consumer.librdkafka(), MAP_TOPIC):
        assert key is not None
        t, _partition, upstream_start = decode_segment_key(key)
        if t != topic:
            continue
        if value is None:
            live.pop(upstream_start, None)
        else:
            live[upstream_start] = decode_segment(key, value)[2]
    return sorted(live.values(), key=lambda s: s.upstream_start)


def stored_map(flow: Flow, topic: str) -> OffsetMap:
    progress = None
    for _p, _o, key, value, _ts in read_to_end(
        "B", flow.target_consumer.librdkafka(), "mirrorflow-progress.A.internal"
    ):
        if key is not None and value is not None and decode_progress(key, value).topic == topic:
            progress = decode_progress(key, value)
    assert progress is not None
    return OffsetMap.restore(
        live_segments(flow, topic), next_upstream=progress.next_upstream, downstream_end=progress.downstream_end
    )


def committed(consumer: Consumer, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every committed record of partition 0 from its log start."""
    lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, lo)])
    out: list[tuple[int, bytes]] = []
    while True:
        msgs = consumer.consume(500, timeout=5)
        assert msgs, f"timed out reading {topic}"
        for m in msgs:
            if m.error() is not None:
                if m.offset() >= hi:
                    return out
                continue
            out.append((m.offset(), m.value()))


def delete_below(admin: AdminClient, topic: str, offset: int) -> None:
    for f in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
        f.result(30)


def assert_exact_from(flow: Flow, topic: str, log_start: int, read: Callable[..., Consumer]) -> None:
    """Every upstream offset >= the log start translates to the copy of the first record at or after it."""
    source = committed(read("A", {"isolation.level": "read_committed"}), topic)
    assert source and source[0][0] >= log_start
    target = dict(
        (value, offset) for offset, value in committed(read("B", {"isolation.level": "read_committed"}), f"A.{topic}")
    )
    pairs = [(u, target[value]) for u, value in source]
    offset_map = stored_map(flow, topic)
    end = offset_map.downstream_end
    assert end is not None
    for upstream in range(log_start, pairs[-1][0] + 2):
        expected = next((d for u, d in pairs if u >= upstream), end)
        assert offset_map.translate(upstream) == expected, upstream


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_next_run_tombstones_segments_below_the_source_log_start(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    unique_topic: Callable[..., str],
    delivery: str,
) -> None:
    topic = unique_topic("prune")
    flow = make_flow(tmp_path, kafka_clusters, delivery)
    prepare(flow, kafka_admin, topic)
    produce_in_transactions(kafka_producer("A", {"transactional.id": f"src-{uuid.uuid4()}"}), topic, 0, 1000, 100)
    assert copy_range(task_of(flow, topic)).records == 1000
    before = live_segments(flow, topic)
    assert len(before) >= 10, before

    log_start = before[4].upstream_start + 37  # inside the fifth segment: four lie wholly below
    delete_below(kafka_admin("A"), topic, log_start)
    again = copy_range(task_of(flow, topic))
    assert again.records == 0
    after = live_segments(flow, topic)
    assert all(s.upstream_end > log_start for s in after), after
    assert after == before[4:], "only the segments wholly below the log start are gone"
    assert_exact_from(flow, topic, log_start, kafka_consumer)

    # The pruned map keeps growing and translating exactly.
    produce_in_transactions(kafka_producer("A", {"transactional.id": f"src-{uuid.uuid4()}"}), topic, 1000, 300, 100)
    assert copy_range(task_of(flow, topic)).records == 300
    assert all(s.upstream_end > log_start for s in live_segments(flow, topic))
    assert_exact_from(flow, topic, log_start, kafka_consumer)


def test_running_copy_prunes_when_the_log_start_moves(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    unique_topic: Callable[..., str],
) -> None:
    topic = unique_topic("prunelive")
    flow = make_flow(tmp_path, kafka_clusters, "exactly-once")
    prepare(flow, kafka_admin, topic)
    producer = kafka_producer("A")
    for i in range(3000):
        producer.produce(topic, value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    admin = kafka_admin("A")
    moved: list[int] = []

    def move_log_start(result: CopyResult) -> None:
        # Once a few transactions (one segment each: commit markers split the downstream side) are stored.
        if not moved and result.next_upstream >= 500:
            delete_below(admin, topic, 450)
            moved.append(450)

    # Small fetches, so that the reader fetches (and learns the log start) after the move.
    task = task_of(
        flow,
        topic,
        batch_records=100,
        source_consumer={**flow.source_consumer.librdkafka(), "fetch.message.max.bytes": "2000"},
    )
    result = copy_range(task, on_batch=move_log_start)
    assert result.records == 3000
    assert moved
    assert 0 <= result.max_latency_ms < 120_000, "records produced just now: replication latency is small"
    after = live_segments(flow, topic)
    assert after[0].upstream_start <= 450 < after[0].upstream_end, after[:2]
    assert_exact_from(flow, topic, 450, kafka_consumer)
