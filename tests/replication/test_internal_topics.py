"""Names, clusters and replication factors of a flow's internal topics (docs/mm2-reference.md §2.1 + Mirrorflow's
own)."""

from __future__ import annotations

import pytest

import mirrorflow.core.state_slots as state_slots
from mirrorflow.config.model import Flow
from mirrorflow.replication.internal_topics import InternalTopic, flow_internal_topics


def flow(**fields: object) -> Flow:
    base: dict[str, object] = {
        "source": "A",
        "target": "B",
        "name": "A->B",
        "checkpoints_topic_replication_factor": 1,
        "heartbeats_topic_replication_factor": 2,
        "offset_syncs_topic_replication_factor": 3,
    }
    return Flow(**{**base, **fields})  # type: ignore[arg-type]


def test_default_layout() -> None:
    assert flow_internal_topics(flow()) == (
        InternalTopic("heartbeats", "B", "target", "heartbeats", 2),
        InternalTopic("A.checkpoints.internal", "B", "target", "checkpoints", 1),
        InternalTopic("mm2-offset-syncs.B.internal", "A", "source", "offset-syncs", 3),
        InternalTopic("mirrorflow-progress.A.internal", "B", "target", "progress", 1, 4),
        InternalTopic("mirrorflow-offset-map.A.internal", "B", "target", "offset-map", 1, 4),
        InternalTopic("mirrorflow-metrics.A.internal", "B", "target", "metrics", 1, 4),
    )


def test_state_topics_are_sized_in_slots_and_keep_one_partition_when_slots_are_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def sizes() -> dict[int, list[int]]:
        return {n: [t.partitions for t in flow_internal_topics(flow(), source_partitions=n)] for n in (0, 40, 2000)}

    monkeypatch.setattr(state_slots, "SLOTS_ON", False)
    assert sizes() == {0: [1] * 6, 40: [1] * 6, 2000: [1] * 6}
    monkeypatch.setattr(state_slots, "SLOTS_ON", True)
    assert sizes() == {0: [1, 1, 1, 4, 4, 4], 40: [1, 1, 1, 8, 8, 8], 2000: [1, 1, 1, 256, 256, 256]}


def test_offset_syncs_on_the_target_are_named_after_the_source() -> None:
    topics = flow_internal_topics(flow(offset_syncs_topic_location="target"))
    assert InternalTopic("mm2-offset-syncs.A.internal", "B", "target", "offset-syncs", 3) in topics


def test_no_offset_syncs_topic_when_emission_is_off() -> None:
    topics = flow_internal_topics(flow(emit_offset_syncs_enabled=False))
    assert [t.purpose for t in topics] == ["heartbeats", "checkpoints", "progress", "offset-map", "metrics"]


def test_custom_separator_applies_to_internal_names_unless_disabled() -> None:
    names = [t.name for t in flow_internal_topics(flow(replication_policy_separator="__"))]
    assert names == [
        "heartbeats",
        "A__checkpoints__internal",
        "mm2-offset-syncs__B__internal",
        "mirrorflow-progress__A__internal",
        "mirrorflow-offset-map__A__internal",
        "mirrorflow-metrics__A__internal",
    ]
    legacy = flow(replication_policy_separator="__", internal_topic_separator_enabled=False)
    assert [t.name for t in flow_internal_topics(legacy)] == [
        "heartbeats",
        "A.checkpoints.internal",
        "mm2-offset-syncs.B.internal",
        "mirrorflow-progress.A.internal",
        "mirrorflow-offset-map.A.internal",
        "mirrorflow-metrics.A.internal",
    ]
