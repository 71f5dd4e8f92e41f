"""At-least-once, on real brokers: a key of the offset-map topic that the copy's fold drops as stale (an attempt
that died mid-commit lost its tombstone) is tombstoned at the copy's next commit, so the topic the log cleaner
leaves says what the full log says. Before, the key stayed live for good: once the records around it were
cleaned, a restore of the compacted topic refused the partition's map (the stale run contradicts the copy
history), and readers folded it back in (tests/replication/test_state_compaction.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.kafka_helpers import KafkaKit
from tests.replication.helpers import (
    KEEP_FOREVER,
    MAP_TOPIC,
    a_to_b,
    copy_all,
    create_copy_topics,
    live_segments,
    stored_map,
)

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.offset_map import Segment, encode_segment
from mirrorflow.core.state_slots import head_slot

pytestmark = pytest.mark.integration


def test_the_copy_tombstones_a_key_its_fold_dropped_as_stale(
    write_config: Callable[..., MirrorConfig], kafka: KafkaKit
) -> None:
    topic = kafka.topic("stalekey")
    flow = a_to_b(write_config, **{"mirrorflow.delivery": "at-least-once"})
    create_copy_topics(kafka.admin, topic, 1, KEEP_FOREVER)
    source = kafka.producer("A")
    for i in range(10):
        source.produce(topic, value=f"r{i}".encode(), partition=0)
    assert source.flush(30) == 0
    assert copy_all(flow, topic) == 10

    # Beyond the progress (10), what two attempts that died mid-commit leave: their copies on the target (d10-41),
    # a run at 20 (d30, d31), then a run at 12 lying below it downstream (d40), whose commit lost the tombstone of
    # key 20. The fold drops key 20; the topic keeps it.
    state = kafka.producer("B")
    for d in range(10, 42):
        state.produce(f"A.{topic}", value=f"dead attempt's copy {d}".encode(), partition=0)
    slots = len(kafka.admin("B").list_topics(MAP_TOPIC, timeout=30).topics[MAP_TOPIC].partitions)
    for run in (Segment(20, 30, 2), Segment(12, 40, 1)):  # in the partition's slot, where its copy wrote
        key, value = encode_segment(topic, 0, run)
        state.produce(MAP_TOPIC, key=key, value=value, partition=head_slot(topic, 0, slots))
    assert state.flush(30) == 0

    for i in range(10, 40):
        source.produce(topic, value=f"r{i}".encode(), partition=0)
    assert source.flush(30) == 0
    assert copy_all(flow, topic) == 30
    assert live_segments(flow, topic) == [Segment(0, 0, 10), Segment(10, 42, 30)], "no stale run stays live"
    restored = stored_map(flow, topic)  # the compacted view: refused ("disagrees with the copy history") before
    assert [restored.translate(u) for u in (0, 10, 21, 39, 40)] == [0, 42, 53, 71, 72]
