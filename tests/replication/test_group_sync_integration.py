"""Group offset sync on real brokers: absent and EMPTY target groups are positioned (forward only), a group
with a live consumer on the target is left alone and logged."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.replication.helpers import commit_offsets as commit
from tests.replication.helpers import copy_all as copy

from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka.group_coordinator import committed_offsets
from mirrorflow.replication.checkpoints import emit_checkpoints
from mirrorflow.replication.flow_cycle import TOPICS, run_control_plane
from mirrorflow.replication.group_sync import sync_group_offsets

pytestmark = pytest.mark.integration


def values_from(consumer: Consumer, topic: str, partition: int, offset: int) -> list[bytes | None]:
    consumer.assign([TopicPartition(topic, partition, offset)])
    out: list[bytes | None] = []
    while (m := consumer.poll(10)) is not None and m.error() is None:
        out.append(m.value())
    assert m is not None, f"timed out reading {topic}-{partition}"
    return out


def test_sync_writes_idle_groups_forward_only_and_never_touches_an_active_one(
    write_config: Callable[..., MirrorConfig],
    kafka_admin: Callable[..., AdminClient],
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    unique_topic: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic("sync")
    remote = f"A.{topic}"
    prefix = f"sync-{uuid.uuid4().hex[:8]}-"
    kafka_admin("A").create_topics([NewTopic(topic, 2, 1)])[topic].result()
    producer = kafka_producer("A")
    for i in range(20):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    flow = write_config(
        f"A->B.enabled = true\nA->B.topics = {topic}\nA->B.groups = {prefix}.*\n"
        "A->B.sync.group.offsets.enabled = true\n"
    ).flow("A->B")
    run_control_plane(flow, steps={TOPICS})
    assert copy(flow, topic, 2) == 20

    absent, empty, active = prefix + "absent", prefix + "empty", prefix + "active"
    source_admin, target_admin = kafka_admin("A"), kafka_admin("B")
    commit(source_admin, absent, {(topic, 0): 4, (topic, 1): 10})
    commit(source_admin, empty, {(topic, 0): 6, (topic, 1): 3})
    commit(source_admin, active, {(topic, 0): 2, (topic, 1): 2})
    report = emit_checkpoints(flow)
    translated = {(e.group, e.partition): e.downstream_offset for e in report.emitted}
    assert len(translated) == 6

    # On the target: `empty` already went further on partition 1, `active` has a live consumer.
    commit(target_admin, empty, {(remote, 0): 1, (remote, 1): translated[(empty, 1)] + 2})
    live = kafka_consumer("B", {"group.id": active, "enable.partition.eof": False})
    live.subscribe([remote])
    deadline = time.monotonic() + 30
    while not live.assignment():
        assert time.monotonic() < deadline, "the live consumer never joined its group"
        live.poll(0.2)

    with caplog.at_level(logging.WARNING, logger="mirrorflow.replication.group_sync"):
        sync = sync_group_offsets(flow)
    live.poll(0.1)

    def on_target(group: str) -> dict[int, int]:
        offsets = committed_offsets(target_admin, "B", group, 30)
        return {p: o.offset for (t, p), o in offsets.items() if t == remote}

    assert on_target(absent) == {0: translated[(absent, 0)], 1: translated[(absent, 1)]}
    assert on_target(empty) == {0: translated[(empty, 0)], 1: translated[(empty, 1)] + 2}, "never backwards"
    assert on_target(active) == {}, "an active group is never written"
    assert [g.group for g in sync.written] == [absent, empty]
    assert [s.group for s in sync.skipped_active] == [active]
    assert sync.skipped_active[0].state == "STABLE" and sync.skipped_active[0].members == 1
    lines = [r.getMessage() for r in caplog.records if active in r.getMessage()]
    assert len(lines) == 1 and "active on cluster 'B'" in lines[0] and "STABLE" in lines[0]

    # A consumer of the synced group resumes on the target exactly where the source group stopped.
    resumed = kafka_consumer("B", {"group.id": absent})
    resumed.assign([TopicPartition(remote, 0)])
    positions = resumed.committed([TopicPartition(remote, 0)], timeout=10)
    assert positions[0].offset == translated[(absent, 0)]
    source_reader = kafka_consumer("A")
    assert values_from(kafka_consumer("B"), remote, 0, positions[0].offset) == values_from(source_reader, topic, 0, 4)

    # Once the live consumer leaves, the next round positions that group too.
    live.close()
    deadline = time.monotonic() + 30
    while True:
        state = target_admin.describe_consumer_groups([active])[active].result().state.name
        if state == "EMPTY":
            break
        assert time.monotonic() < deadline, f"group still {state}"
        time.sleep(0.2)
    later = sync_group_offsets(flow)
    assert [g.group for g in later.written] == [active]
    assert sorted(later.up_to_date) == [absent, empty]
    assert on_target(active) == {0: translated[(active, 0)], 1: translated[(active, 1)]}
