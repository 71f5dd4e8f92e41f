"""`reset_topic` edge cases on real brokers (review of the reset): the old topic's checkpoints must not outlive
a reset that deletes the remote topic, a reset of a topic that was not re-created (or a second run) changes
nothing without --force, the target's own topic of the same name (IdentityReplicationPolicy) is never deleted,
and an at-least-once copy, which the reset cannot fence, is reset only while paused or with --force."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.kafka_helpers import KafkaKit, create_topic, read_partition, recreate_topic
from tests.replication.helpers import (
    KEEP_FOREVER,
    a_to_b,
    commit_offsets,
    copy_all,
    copy_tasks,
)
from tests.replication.test_topic_identity import audit_counts, copied_then_recreated, produce, two_partitions_copied

from mirrorflow.config.model import Flow, MirrorConfig
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.group_coordinator import committed_offsets
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication import topic_reset
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.copy_plan import transactional_id
from mirrorflow.replication.copy_range import copy_range
from mirrorflow.replication.flow_cycle import STATE_DIR_ENV, TOPICS, run_control_plane
from mirrorflow.replication.group_sync import sync_group_offsets
from mirrorflow.replication.pause_markers import write_pause_marker
from mirrorflow.replication.topic_reset import reset_topic

pytestmark = pytest.mark.integration


def _cycle(flow: Flow, topic: str, within_s: float = 60.0) -> int:
    """Topic sync then the copy, retried while a deleted remote topic is still being removed."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            run_control_plane(flow, steps={TOPICS})
            return copy_all(flow, topic)
        except MirrorflowError as err:
            assert time.monotonic() < deadline, err
            time.sleep(1)


def test_checkpoints_of_the_deleted_remote_topic_do_not_outlive_the_reset(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("rsck")
    group = f"rsck-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.admin("A"), topic, 1, KEEP_FOREVER)
    flow = a_to_b(write_config, topics=topic, groups=group, **{"sync.group.offsets.enabled": "true"})
    run_control_plane(flow, steps={TOPICS})
    producer = kafka.producer("A")
    for batch in range(10):  # ten copies, one commit marker each: the old remote offsets run ahead of upstream
        produce(producer, topic, 10, f"old{batch}")
        assert copy_all(flow, topic) == 10
    commit_offsets(kafka.admin("A"), group, {(topic, 0): 100})
    [old] = emit_checkpoints(flow).emitted
    assert old.downstream_offset > 105
    sync_group_offsets(flow)

    recreate_topic(kafka.admin("A"), topic, 1, KEEP_FOREVER)
    produce(producer, topic, 300, "new")
    assert reset_topic(flow, topic, delete_remote_topic=True).checkpoints_restarted == 1
    # Kafka drops the target group's offsets of the deleted topic; the restarted checkpoint says downstream 0.
    assert (f"A.{topic}", 0) not in committed_offsets(kafka.admin("B"), "B", group, 30)
    assert _cycle(flow, topic) == 300
    sync_group_offsets(flow)  # before the next checkpoint round: the new copy's start, not the old 109
    assert (
        committed_offsets(kafka.admin("B"), "B", group, 30)[(f"A.{topic}", 0)].offset == 0
    )  # one transaction: upstream u is downstream u on the new remote topic
    commit_offsets(kafka.admin("A"), group, {(topic, 0): 105})  # the group read 105 records of the new topic
    emit_checkpoints(flow)
    sync_group_offsets(flow)

    on_b = committed_offsets(kafka.admin("B"), "B", group, 30)
    assert on_b[(f"A.{topic}", 0)].offset == 105, on_b


def test_a_second_reset_changes_nothing_unless_forced(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    flow, topic = copied_then_recreated(write_config, kafka, "rstwice")
    assert reset_topic(flow, topic).unchanged == []
    assert copy_all(flow, topic) == 300

    again = reset_topic(flow, topic)  # the same IDs as the progress records: nothing to reset
    assert (again.unchanged, again.progress_records, again.fresh_starts) == ([0], 0, {})
    assert copy_all(flow, topic) == 0
    assert (audit_counts(flow, topic)["duplicated"], audit_counts(flow, topic)["lost"]) == (0, 0)

    forced = reset_topic(flow, topic, force=True)  # copies the topic again after the remote topic's end
    assert (forced.unchanged, forced.progress_records) == ([0], 1)
    assert copy_all(flow, topic) == 300


def test_identity_policy_never_deletes_the_targets_own_topic(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("rsid")
    for alias in ("A", "B"):
        create_topic(kafka.admin(alias), topic, 1, KEEP_FOREVER)
    produce(kafka.producer("B"), topic, 5, "own")  # B's own records, written by B's applications
    flow = a_to_b(
        write_config,
        topics=topic,
        **{"replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"},
    )
    with pytest.raises(MirrorflowError, match="does not name it a copy of 'A'"):
        reset_topic(flow, topic, delete_remote_topic=True)
    assert len(read_partition(kafka.consumer("B"), topic)) == 5


def test_an_at_least_once_copy_is_reset_only_when_paused_or_forced(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow, topic = copied_then_recreated(write_config, kafka, "rsalo", **{"mirrorflow.delivery": "at-least-once"})
    with pytest.raises(MirrorflowError, match="cannot fence an at-least-once copy"):
        reset_topic(flow, topic)
    assert reset_topic(flow, topic, force=True).progress_records == 1
    assert copy_all(flow, topic) == 300

    # Paused (the air-gapped override's marker file, which `mirrorflow run` honours too): no --force needed.
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    write_pause_marker(tmp_path / "a-failover", flow.name, "test")
    assert reset_topic(flow, topic, force=False).unchanged == [0]  # nothing to reset, and no refusal


def test_running_a_fenced_reset_again_resets_only_what_is_left(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow, topic, producer = two_partitions_copied(write_config, kafka, "rsagain")
    recreate_topic(kafka.admin("A"), topic, 2, KEEP_FOREVER)
    for i in range(60):
        producer.produce(topic, value=f"new-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    reset_partition = topic_reset._reset_partition

    def a_copy_restarts_before_partition_1(flow: Flow, writer: TargetWriter, state: Any, p: int, *rest: Any) -> None:
        if p == 1:  # the restarted copy initialises the partition's transactional id: the reset is fenced
            conf = flow.target_producer.librdkafka()
            TargetWriter("B", conf, transactional_id=transactional_id(flow, topic, 1), timeout_s=30).close()
        reset_partition(flow, writer, state, p, *rest)

    monkeypatch.setattr(topic_reset, "_reset_partition", a_copy_restarts_before_partition_1)
    with pytest.raises(MirrorflowError, match=r"partitions reset: \[0\]"):
        reset_topic(flow, topic)
    monkeypatch.undo()
    [copy_0, _copy_1] = copy_tasks(flow, topic, 2)
    assert copy_range(copy_0).records == 30  # the restarted copy goes on with the partition already reset

    again = reset_topic(flow, topic)  # as the error advises: partition 0 is kept, partition 1 is reset
    assert (again.unchanged, again.progress_records, sorted(again.fresh_starts)) == ([0], 1, [1])
    assert copy_all(flow, topic, 2) == 30
    counts = audit_counts(flow, topic)
    assert (counts["lost"], counts["duplicated"]) == (0, 0), counts
