"""The copy engine on real brokers, without Spark: records arrive identical, resume is exact, transactions at
the source are honoured, and the stored offset map translates every upstream offset exactly."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer
from tests.kafka_helpers import KafkaKit, read_partition
from tests.replication.helpers import KEEP_FOREVER, a_to_b, copy_all, create_copy_topics, stored_map, translate_by_hand

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication import copy_loop as copy_loop_module
from mirrorflow.replication import copy_range as copy_range_module
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy
from mirrorflow.replication.copy_range import copy_range

pytestmark = pytest.mark.integration

OLD = int(time.time() * 1000) - 30 * 24 * 3600 * 1000

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def record(msg: Message) -> Record:
    return msg.key(), msg.value(), list(msg.headers() or []), msg.timestamp()[1]


def offsets_and_records(consumer: Consumer, topic: str, partition: int) -> list[tuple[int, Record]]:
    return [(m.offset(), record(m)) for m in read_partition(consumer, topic, partition)]


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


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_copy_preserves_records_resumes_and_translates_exactly(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, delivery: str
) -> None:
    topic, partitions = kafka.topic("copy"), 3
    create_copy_topics(kafka.admin, topic, partitions, KEEP_FOREVER)
    flow = a_to_b(write_config, **{"mirrorflow.delivery": delivery})

    produce_mixed(kafka.producer("A"), topic, partitions, 3000)
    assert copy_all(flow, topic, partitions) == 3000
    produce_mixed(kafka.producer("A"), topic, partitions, 1000, base=3000)
    assert copy_all(flow, topic, partitions) == 1000, "a second run copies only what is new"
    assert copy_all(flow, topic, partitions) == 0

    for p in range(partitions):
        source = offsets_and_records(kafka.consumer("A"), topic, p)
        target = offsets_and_records(kafka.consumer("B"), f"A.{topic}", p)
        assert [r for _, r in target] == [r for _, r in source], f"partition {p} differs"
        pairs = [(u, d) for (u, _), (d, _) in zip(source, target, strict=True)]
        offset_map = stored_map(flow, topic, p)
        replicated_end = offset_map.downstream_end
        assert replicated_end is not None and replicated_end >= pairs[-1][1] + 1
        for upstream in range(0, pairs[-1][0] + 2):
            assert offset_map.translate(upstream) == translate_by_hand(pairs, upstream, replicated_end)


def test_exactly_once_copies_only_committed_transactions(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("txn")
    create_copy_topics(kafka.admin, topic, 1)
    flow = a_to_b(write_config)
    txn: Any = kafka.producer("A", {"transactional.id": f"src-{uuid.uuid4()}"})
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
    assert copy_all(flow, topic, 1) == len(expected)
    target = offsets_and_records(kafka.consumer("B", {"isolation.level": "read_committed"}), f"A.{topic}", 0)
    assert [r[1] for _, r in target] == expected
    offset_map = stored_map(flow, topic, 0)
    source_committed = offsets_and_records(kafka.consumer("A", {"isolation.level": "read_committed"}), topic, 0)
    pairs = [(u, d) for (u, _), (d, _) in zip(source_committed, target, strict=True)]
    end = offset_map.downstream_end
    assert end is not None
    for upstream in range(0, source_committed[-1][0] + 2):
        assert offset_map.translate(upstream) == translate_by_hand(pairs, upstream, end)


def copy_for(flow: Any, topic: str, run_seconds: float | None) -> int:
    """One interval run (`run_seconds` None) or one continuous run of that length; the records it copied."""
    if run_seconds is None:
        return copy_all(flow, topic)
    [task] = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 1)], interval=False, run_seconds=run_seconds)
    return copy_range(task).records


@pytest.mark.parametrize(
    ("delivery", "run_seconds"), [("exactly-once", None), ("at-least-once", None), ("exactly-once", 0.5)]
)
def test_a_first_start_at_latest_stores_its_position_so_later_records_are_copied(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, delivery: str, run_seconds: float | None
) -> None:
    """`auto.offset.reset = latest` skips what was there before the first run, and nothing written after it."""
    topic = kafka.topic("latest")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, "A.consumer.auto.offset.reset = latest\n", **{"mirrorflow.delivery": delivery})
    producer = kafka.producer("A")
    producer.produce(topic, value=b"before", partition=0)
    assert producer.flush(30) == 0
    assert copy_for(flow, topic, run_seconds) == 0
    for i in range(3):
        producer.produce(topic, value=f"after-{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    assert copy_for(flow, topic, run_seconds) == 3
    assert copy_for(flow, topic, run_seconds) == 0
    copied = [m.value() for m in read_partition(kafka.consumer("B"), f"A.{topic}", 0)]
    assert copied == [f"after-{i}".encode() for i in range(3)]


def test_a_first_start_at_latest_that_fails_before_its_first_commit_loses_nothing(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records written after a first "at latest" start are copied even when the attempt that read them fails
    before committing them (a refused record, a killed task): the retry resumes at the stored start instead of
    choosing a newer latest."""
    topic = kafka.topic("latestfail")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, "A.consumer.auto.offset.reset = latest\n")
    producer = kafka.producer("A")
    real_reader, real_commit = copy_range_module.PartitionReader, copy_loop_module.commit_batch

    class WritesFirst(real_reader):  # type: ignore[misc,valid-type]
        """The source gets 3 records right after the copy chose its start, before its first read."""

        produced = False

        def read(self, max_records: int, timeout_s: float) -> list[Message]:
            if not WritesFirst.produced:
                WritesFirst.produced = True
                for i in range(3):
                    producer.produce(topic, value=f"after-{i}".encode(), partition=0)
                assert producer.flush(30) == 0
            return list(real_reader.read(self, max_records, timeout_s))

    def failing_commit(writer: Any, task: Any, offset_map: Any, progress: Any, slots: Any) -> None:
        if progress.records_copied > 0:
            raise MirrorflowError("injected: the first commit of records fails")
        real_commit(writer, task, offset_map, progress, slots)

    monkeypatch.setattr(copy_range_module, "PartitionReader", WritesFirst)
    monkeypatch.setattr(copy_loop_module, "commit_batch", failing_commit)
    with pytest.raises(MirrorflowError, match="injected"):
        copy_for(flow, topic, 3.0)
    monkeypatch.undo()

    assert copy_for(flow, topic, 1.0) == 3
    copied = [
        m.value() for m in read_partition(kafka.consumer("B", {"isolation.level": "read_committed"}), f"A.{topic}", 0)
    ]
    assert copied == [f"after-{i}".encode() for i in range(3)]
