"""Topic identity on real brokers: a source topic deleted and re-created (a new topic ID) is never resumed
mid-topic, a re-created remote topic is never written at the old one's offsets; the copy stops with the recovery
command, `reset_topic` makes the next copy start afresh, and the audit then finds every record of the new topic
copied exactly once. Progress records of the previous format (no IDs) keep working and are upgraded."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from tests.kafka_helpers import KafkaKit, read_partition, recreate_topic
from tests.replication.helpers import (
    KEEP_FOREVER,
    PROGRESS_TOPIC,
    a_to_b,
    copy_all,
    create_copy_topics,
    state_slot,
    stored_map,
    stored_progress,
    translate_by_hand,
)

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.kafka.metrics_store import read_snapshots
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.topics import topic_ids
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.audit import audit_flow
from mirrorflow.replication.copy_plan import SourcePartitions, plan_copy, refresh_identities, transactional_id
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.copy_setup import load_progress
from mirrorflow.replication.metrics import Snapshot, snapshot_key
from mirrorflow.replication.topic_reset import reset_topic
from mirrorflow.spark import copy_tasks

pytestmark = pytest.mark.integration


def produce(producer: Producer, topic: str, count: int, tag: str) -> None:
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"{tag}-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def copied_then_recreated(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, name: str, **keys: str
) -> tuple[Flow, str]:
    """100 records copied, then the source topic deleted and re-created with 300 other records (`keys`: more
    `A->B.<key>` settings of the flow)."""
    topic = kafka.topic(name)
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, topics=topic, **keys)
    produce(kafka.producer("A"), topic, 100, "old")
    assert copy_all(flow, topic) == 100
    recreate_topic(kafka.admin("A"), topic, 1, KEEP_FOREVER)
    produce(kafka.producer("A"), topic, 300, "new")
    return flow, topic


def two_partitions_copied(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, name: str
) -> tuple[Flow, str, Producer]:
    """A two-partition topic whose 40 records (`old-<i>`, alternating partitions) were copied."""
    topic = kafka.topic(name)
    create_copy_topics(kafka.admin, topic, 2, KEEP_FOREVER)
    flow = a_to_b(write_config, topics=topic)
    producer = kafka.producer("A")
    for i in range(40):
        producer.produce(topic, value=f"old-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    assert copy_all(flow, topic, 2) == 40
    return flow, topic, producer


def stored_snapshot(flow: Flow, topic: str) -> Snapshot:
    snapshots = read_snapshots("B", flow.target_consumer.librdkafka(), "mirrorflow-metrics.A.internal", 30)
    return Snapshot.decode(snapshots[snapshot_key(f"A.{topic}", 0)])


def audit_counts(flow: Flow, topic: str) -> dict[str, int]:
    report = audit_flow(flow, topics=topic, timeout_s=30)
    return {k: v for k, v in report["topics"][0].items() if isinstance(v, int)}


def test_a_source_topic_recreated_with_more_records_stops_then_reset_copies_it_afresh(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    flow, topic = copied_then_recreated(write_config, kafka, "recreated")
    new_id = topic_ids(kafka.admin("A"), "A", [topic], 30)[topic]
    old_id = stored_progress(flow, topic).source_topic_id

    with pytest.raises(MirrorflowError) as stopped:
        copy_all(flow, topic)
    message = str(stopped.value)
    assert f"source topic '{topic}'" in message and "re-created" in message
    assert old_id in message and new_id in message and old_id != new_id
    assert f"mirrorflow reset CONFIG --flow 'A->B' --topic {topic}" in message
    assert stored_progress(flow, topic).next_upstream == 100, "nothing was copied"

    report = reset_topic(flow, topic)
    assert (report.progress_records, report.segments, report.fresh_starts) == (1, 1, {0: (0, 101)})
    assert report.metrics_snapshots == 1

    assert copy_all(flow, topic) == 300
    assert stored_snapshot(flow, topic).values["byte-count"] == sum(len(f"new-{i}") for i in range(300)), (
        "metrics count the new topic's records only"
    )
    target = [m.value() for m in read_partition(kafka.consumer("B"), f"A.{topic}", 0)]
    assert target == [f"old-{i}".encode() for i in range(100)] + [f"new-{i}".encode() for i in range(300)]
    counts = audit_counts(flow, topic)
    assert (counts["lost"], counts["duplicated"], counts["not_yet_copied"]) == (0, 0, 0)
    assert counts["unexpected"] == 100, "the old topic's records, kept on the remote topic as the reset said"
    source = [m.offset() for m in read_partition(kafka.consumer("A"), topic, 0)]
    remote = [m.offset() for m in read_partition(kafka.consumer("B"), f"A.{topic}", 0)][100:]
    pairs = list(zip(source, remote, strict=True))
    offset_map = stored_map(flow, topic)
    assert offset_map.downstream_end is not None
    for upstream in range(0, source[-1] + 2):
        assert offset_map.translate(upstream) == translate_by_hand(pairs, upstream, offset_map.downstream_end)


def test_a_remote_topic_recreated_stops_the_copy_instead_of_crash_looping(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """The recovery the copy used to recommend (delete the remote topic and the progress) crash-looped on the
    surviving offset-map segments. Now a re-created remote topic is named, and the reset recovers it."""
    topic = kafka.topic("remote-recreated")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, topics=topic)
    produce(kafka.producer("A"), topic, 100, "v")
    assert copy_all(flow, topic) == 100
    recreate_topic(kafka.admin("B"), f"A.{topic}", 1, KEEP_FOREVER)

    with pytest.raises(MirrorflowError, match=f"remote topic 'A.{topic}' on 'B' was deleted and re-created"):
        copy_all(flow, topic)
    assert reset_topic(flow, topic).fresh_starts == {0: (0, 0)}
    assert copy_all(flow, topic) == 100
    counts = audit_counts(flow, topic)
    assert (counts["lost"], counts["duplicated"], counts["unexpected"], counts["checked"]) == (0, 0, 0, 100)


def test_progress_of_the_previous_format_continues_and_is_upgraded(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """A flow copied by the previous release (version-0 progress, no IDs) continues with nothing lost or copied
    twice; its progress gains the topic IDs on the next commit, even with nothing new to copy, so a later
    re-creation is caught."""
    topic = kafka.topic("v0")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, topics=topic)
    produce(kafka.producer("A"), topic, 100, "a")
    assert copy_all(flow, topic) == 100
    current = stored_progress(flow, topic)
    key, value = encode_progress(current)
    v0 = b"\x00\x00" + value[2:38]  # what the previous release wrote: same fields, no IDs
    producer = kafka.producer("B")
    producer.produce(PROGRESS_TOPIC, key=key, value=v0, partition=state_slot(kafka.admin("B"), PROGRESS_TOPIC, topic))
    assert producer.flush(30) == 0
    assert stored_progress(flow, topic).source_topic_id == ""

    assert copy_all(flow, topic) == 0
    upgraded = stored_progress(flow, topic)
    assert (upgraded.source_topic_id, upgraded.remote_topic_id) == (current.source_topic_id, current.remote_topic_id)
    assert (upgraded.next_upstream, upgraded.downstream_end) == (100, current.downstream_end)
    produce(kafka.producer("A"), topic, 50, "b")
    assert copy_all(flow, topic) == 50
    counts = audit_counts(flow, topic)
    assert (counts["lost"], counts["duplicated"], counts["unexpected"], counts["checked"]) == (0, 0, 0, 150)
    recreate_topic(kafka.admin("A"), topic, 1, KEEP_FOREVER)
    produce(kafka.producer("A"), topic, 300, "c")
    with pytest.raises(MirrorflowError, match="re-created"):
        copy_all(flow, topic)


def test_the_reset_fences_a_copy_holding_a_transaction(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """A copy still running when the reset starts (here: its transaction held open by hand, with the progress it
    would commit) can never commit afterwards: the reset takes over its transactional id before reading."""
    flow, topic = copied_then_recreated(write_config, kafka, "fenced")
    zombie = TargetWriter(
        "B", flow.target_producer.librdkafka(), transactional_id=transactional_id(flow, topic, 0), timeout_s=30
    )
    try:
        zombie.begin()
        key, value = encode_progress(Progress(topic, 0, 400, 400, 400, 9, 0))
        zombie.produce(PROGRESS_TOPIC, 0, key, value)
        zombie.flush()
        reset_topic(flow, topic)
        with pytest.raises(KafkaOperationError, match="committing a transaction"):
            zombie.commit()
    finally:
        zombie.close()
    assert (stored_progress(flow, topic).next_upstream, stored_progress(flow, topic).epoch) == (0, 1)
    assert copy_all(flow, topic) == 300


def test_a_source_topic_recreated_with_fewer_partitions_is_reset_whole(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    """The partition the new topic lacks keeps no state: its progress and segments are tombstoned (no fresh
    record), and the copy's own read of its progress honours the tombstone."""
    flow, topic, producer = two_partitions_copied(write_config, kafka, "fewer")
    recreate_topic(kafka.admin("A"), topic, 1, KEEP_FOREVER)
    produce(producer, topic, 30, "new")
    with pytest.raises(MirrorflowError, match="re-created"):
        copy_all(flow, topic, 1)

    report = reset_topic(flow, topic)
    assert (report.progress_records, report.segments, report.fresh_starts) == (2, 2, {0: (0, 21)})
    tasks = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 2)], interval=False)  # p1 is gone: no ends
    assert [load_progress(t)[0] is None for t in tasks] == [False, True]
    assert copy_all(flow, topic, 1) == 30


def test_a_retried_task_checks_the_ids_its_clusters_report_now(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks planned before the re-creation carry the old IDs (what a Spark retry minutes into a run holds); the
    IDs the clusters report at the retry stop it."""
    topic = kafka.topic("retried")
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, topics=topic)
    produce(kafka.producer("A"), topic, 100, "old")
    assert copy_all(flow, topic) == 100
    planned = plan_copy(flow, [SourcePartitions(topic, f"A.{topic}", 1)], interval=False, run_seconds=5)
    recreate_topic(kafka.admin("A"), topic, 1, KEEP_FOREVER)
    produce(kafka.producer("A"), topic, 300, "new")

    [retried] = refresh_identities(planned)
    assert retried.source_topic_id not in ("", planned[0].source_topic_id)
    assert retried.remote_topic_id == planned[0].remote_topic_id
    with pytest.raises(MirrorflowError, match="re-created"):
        copy_range(retried)
    # The Spark task body does the same on a retried attempt (Spark's task context stands in for a retry).
    monkeypatch.setattr(copy_tasks, "TaskContext", RetriedAttempt)
    with pytest.raises(MirrorflowError, match="re-created"):
        list(copy_tasks._copy_partition([planned]))


class RetriedAttempt:
    """`pyspark.TaskContext` of a second attempt."""

    @staticmethod
    def get() -> RetriedAttempt:
        return RetriedAttempt()

    def attemptNumber(self) -> int:
        return 1
