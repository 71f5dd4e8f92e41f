"""Group offset sync decisions without Kafka: only idle target groups, only forward, per partition."""

from __future__ import annotations

import pytest

from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.kafka.group_coordinator import CommittedOffset
from mirrorflow.replication.group_sync import (
    SyncedPartition,
    group_sync_interval_seconds,
    plan_group_sync,
    sync_group_offsets,
)

CHECKPOINTS = {
    ("A.t", 0): Checkpoint("g", "A.t", 0, 120, 101),
    ("A.t", 1): Checkpoint("g", "A.t", 1, 60, 51),
    ("A.t", 2): Checkpoint("g", "A.t", 2, 9, 9),
}


@pytest.mark.parametrize(
    "state", ["STABLE", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "ASSIGNING", "RECONCILING", "UNKNOWN"]
)
def test_groups_in_use_or_of_unknown_state_are_never_written(state: str) -> None:
    plan = plan_group_sync("g", state, CHECKPOINTS, {})
    assert (plan.action, plan.writes) == ("skip-active", ())


def test_an_absent_group_gets_every_checkpoint() -> None:
    plan = plan_group_sync("g", "DEAD", CHECKPOINTS, {})
    assert plan.action == "write"
    assert plan.writes == (
        SyncedPartition("A.t", 0, 101, None),
        SyncedPartition("A.t", 1, 51, None),
        SyncedPartition("A.t", 2, 9, None),
    )


def test_an_empty_group_only_moves_forward() -> None:
    """MirrorCheckpointTaskTest.testSyncOffset: lower target offsets are raised; higher and equal ones stay."""
    target = {
        ("A.t", 0): CommittedOffset(100, ""),
        ("A.t", 1): CommittedOffset(70, ""),
        ("A.t", 2): CommittedOffset(9, ""),
    }
    plan = plan_group_sync("g", "EMPTY", CHECKPOINTS, target)
    assert plan.action == "write"
    assert plan.writes == (SyncedPartition("A.t", 0, 101, 100),)


def test_nothing_to_do_when_the_target_is_ahead_everywhere() -> None:
    target = {tp: CommittedOffset(c.downstream_offset + 1, "") for tp, c in CHECKPOINTS.items()}
    assert plan_group_sync("g", "EMPTY", CHECKPOINTS, target).action == "up-to-date"


def test_cadence_comes_from_the_flow_and_disabled_sync_touches_no_cluster() -> None:
    flow = Flow(source="A", target="B", name="A->B", sync_group_offsets_interval_seconds=7)
    assert group_sync_interval_seconds(flow) is None, "sync.group.offsets.enabled is false by default"
    on = flow.model_copy(update={"sync_group_offsets_enabled": True})
    assert group_sync_interval_seconds(on) == 7.0
    report = sync_group_offsets(flow)  # no bootstrap servers: any Kafka call would fail
    assert (report.enabled, report.written, report.skipped_active) == (False, (), ())
