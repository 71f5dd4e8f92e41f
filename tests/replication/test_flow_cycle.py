"""The control-plane schedule: MM2's intervals, all steps due at start, disabled features never run."""

from __future__ import annotations

from mirrorflow.config.model import Flow
from mirrorflow.replication.flow_cycle import ACLS, CHECKPOINTS, CONFIGS, COPY, GROUPS, HEARTBEAT, TOPICS, FlowSchedule


def flow(**fields: object) -> Flow:
    return Flow(source="A", target="B", name="A->B", **fields)  # type: ignore[arg-type]


def test_everything_is_due_at_start_then_at_its_interval() -> None:
    f = flow(
        refresh_topics_interval_seconds=10,
        sync_topic_configs_interval_seconds=20,
        sync_topic_acls_interval_seconds=30,
        emit_heartbeats_interval_seconds=1,
        emit_checkpoints_interval_seconds=15,
        sync_group_offsets_enabled=True,
        sync_group_offsets_interval_seconds=25,
    )
    schedule = FlowSchedule(f, now=100.0)
    assert schedule.due(100.0) == {TOPICS, CONFIGS, ACLS, HEARTBEAT, CHECKPOINTS, GROUPS}
    schedule.done(schedule.due(100.0), 100.0)
    assert schedule.due(100.5) == set()
    assert schedule.next_due() == 101.0
    assert schedule.due(101.0) == {HEARTBEAT}
    schedule.done({HEARTBEAT}, 101.0)
    assert schedule.due(110.0) == {TOPICS, HEARTBEAT}
    assert schedule.due(115.0) == {TOPICS, HEARTBEAT, CHECKPOINTS}  # checkpoints keep their own cadence
    assert schedule.due(130.0) == {TOPICS, CONFIGS, ACLS, HEARTBEAT, CHECKPOINTS, GROUPS}


def test_disabled_features_never_run_and_a_disabled_refresh_runs_once() -> None:
    f = flow(
        refresh_topics_enabled=False,
        sync_topic_configs_enabled=False,
        sync_topic_acls_enabled=False,
        emit_heartbeats_enabled=False,
        emit_checkpoints_enabled=False,
        sync_group_offsets_enabled=False,
    )
    schedule = FlowSchedule(f, now=0.0)
    assert schedule.due(0.0) == {TOPICS}
    schedule.done({TOPICS}, 0.0)
    assert schedule.due(1e9) == set()
    assert schedule.next_due() is None


def test_heartbeat_only_pairs_create_their_topic_once_and_heartbeat() -> None:
    schedule = FlowSchedule(flow(emit_heartbeats_interval_seconds=5), now=0.0, heartbeat_only=True)
    assert schedule.due(0.0) == {TOPICS, HEARTBEAT}
    schedule.done({TOPICS, HEARTBEAT}, 0.0)
    assert schedule.due(5.0) == {HEARTBEAT}


def test_the_copy_hook_is_due_every_round() -> None:
    schedule = FlowSchedule(flow(), now=0.0, copy=True)
    schedule.done(schedule.due(0.0), 0.0)
    assert schedule.due(0.0) == {COPY}
