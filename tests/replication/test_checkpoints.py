"""Checkpoint emission logic without Kafka: which groups, which offsets, and MM2's "more recent" rule."""

from __future__ import annotations

from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.group_filter import DefaultGroupFilter
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.core.topic_filter import DefaultTopicFilter
from mirrorflow.kafka.group_coordinator import CommittedOffset
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.checkpoints import (
    UntranslatedOffset,
    checkpoint_interval_seconds,
    emit_checkpoints,
    plan_checkpoints,
    select_groups,
)
from mirrorflow.replication.offset_translation import FlowOffsetMaps


def committed(**offsets: int) -> dict[tuple[str, int], CommittedOffset]:
    """committed(t_0=5) -> {("t", 0): CommittedOffset(5, "")}"""
    out = {}
    for name, offset in offsets.items():
        topic, partition = name.rsplit("_", 1)
        out[(topic, int(partition))] = CommittedOffset(offset, "")
    return out


def rename(topic: str) -> str:
    return f"A.{topic}"


def test_groups_need_the_group_filter_and_an_offset_on_an_accepted_topic() -> None:
    """MirrorCheckpointConnectorTest.testFindConsumerGroupsInCommonScenarios, plus which offsets are kept."""
    offsets = {
        "g1": committed(t1_0=1),
        "g2": committed(t1_0=2, skipped_0=3),
        "g3": committed(skipped_0=4),
        "g4": committed(t1_0=5),
        "connect-x": committed(t1_0=6),
    }
    groups = DefaultGroupFilter("g1, g2, g3, connect-.*", "connect-.*")
    topics = DefaultTopicFilter("t1")
    selected = select_groups(offsets, groups, topics.should_replicate_topic)
    assert selected == {"g1": committed(t1_0=1), "g2": committed(t1_0=2)}
    assert select_groups(offsets, groups, lambda _t: False) == {}


def maps() -> FlowOffsetMaps:
    """t-0: upstream 0..9 -> 0..9, a gap at 10, 11..14 -> 12..15; copy consumed to 16, replicated end 17."""
    m = OffsetMap(start=0)
    m.record_run(0, 0, 10)
    m.record_run(11, 12, 4)
    m.mark_consumed(16, downstream_end=17)
    late = OffsetMap(start=5)
    late.record_run(5, 100, 5)
    return FlowOffsetMaps({("t", 0): m, ("late", 0): late})


def test_exact_translation_and_nothing_for_partitions_never_copied() -> None:
    offsets = {
        "g": committed(t_0=10, t_1=3, late_0=2),
        "h": committed(t_0=40),
        "z": committed(t_0=0),
    }
    plan = plan_checkpoints(offsets, maps(), CheckpointStore(), rename)
    assert plan.emit == (
        Checkpoint("g", "A.t", 0, 10, 12),
        Checkpoint("h", "A.t", 0, 40, 17),
        Checkpoint("z", "A.t", 0, 0, 0),
    )
    assert plan.untranslated == (
        UntranslatedOffset("g", "late", 0, 2, "before-history"),
        UntranslatedOffset("g", "t", 1, 3, "not-copied"),
    )
    assert plan.ahead_of_copy == (("h", "t", 0),), "past the copy: the replicated end, flagged"


def test_only_more_recent_checkpoints_are_emitted() -> None:
    """MirrorCheckpointTaskTest.testCheckpointRecordsMonotonicIfStoreRewinds, on the exact translation."""
    store = CheckpointStore(
        [
            Checkpoint("same", "A.t", 0, 10, 12),  # nothing changed: not re-emitted
            Checkpoint("ahead", "A.t", 0, 4, 4),  # the group moved on: emitted
            Checkpoint("rewound", "A.t", 0, 14, 15),  # the group went back upstream: emitted although lower
            Checkpoint("lower", "A.t", 0, 12, 16),  # a lower downstream for the same upstream: never emitted
        ]
    )
    offsets = {
        "same": committed(t_0=10),
        "ahead": committed(t_0=7),
        "rewound": committed(t_0=2),
        "lower": committed(t_0=12),
    }
    plan = plan_checkpoints(offsets, maps(), store, rename)
    assert plan.emit == (Checkpoint("ahead", "A.t", 0, 7, 7), Checkpoint("rewound", "A.t", 0, 2, 2))
    assert plan.not_more_recent == 2


def test_metadata_travels_with_the_checkpoint() -> None:
    offsets = {"g": {("t", 0): CommittedOffset(3, "app-state-7")}}
    [checkpoint] = plan_checkpoints(offsets, maps(), CheckpointStore(), rename).emit
    assert checkpoint.metadata == "app-state-7"


def test_cadence_comes_from_the_flow_and_disabled_emission_touches_no_cluster() -> None:
    flow = Flow(source="A", target="B", name="A->B", emit_checkpoints_interval_seconds=5)
    assert checkpoint_interval_seconds(flow) == 5.0
    off = flow.model_copy(update={"emit_checkpoints_enabled": False})
    assert checkpoint_interval_seconds(off) is None
    report = emit_checkpoints(off)  # no bootstrap servers: any Kafka call would fail
    assert (report.enabled, report.emitted, report.topic) == (False, (), "A.checkpoints.internal")
