"""Consumer-group offset sync (MM2's `sync.group.offsets`, KIP-545, docs/mm2-reference.md §5.5), made safe.

For every group with checkpoints (and accepted by the group filter), the latest checkpoint per downstream
partition is written into the group of the same name on the target, with its upstream commit metadata.
Differences from MM2, on purpose:
* only groups that are EMPTY or absent (DEAD) on the target are written; a group with any other state (live
  consumers, a rebalance) is never touched, and each such group is logged once per round and reported. MM2
  tries anyway and relies on the coordinator refusing;
* offsets only move forward, for every group (MM2: only for EMPTY ones): a partition is written when the
  target has no offset for it or a lower one, so consumers that already moved on at the target keep their
  position;
* a consumer that joins between the state check and the write makes the coordinator refuse the write; that
  is reported like an active group, not as a failure.
Cadence is the caller's: run this every `group_sync_interval_seconds(flow)`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.kafka.consumer_groups import (
    GroupState,
    describe_group_states,
    is_active_group_error,
    list_committed_offsets,
    write_group_offsets,
)
from mirrorflow.kafka.group_coordinator import CommittedOffset
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.checkpoints import group_filter
from mirrorflow.replication.flow_clients import FlowClients

log = logging.getLogger(__name__)

IDLE_STATES = frozenset({"EMPTY", "DEAD"})
"""Target group states that are safe to write: no member can be reading (DEAD: the group does not exist)."""

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class SyncedPartition:
    topic: str
    partition: int
    offset: int
    previous: int | None
    """The target group's offset before the write (None: it had none)."""


@dataclass(frozen=True)
class GroupSyncPlan:
    group: str
    state: str
    action: Literal["write", "up-to-date", "skip-active"]
    writes: tuple[SyncedPartition, ...] = ()


@dataclass(frozen=True)
class SyncedGroup:
    group: str
    state: str
    partitions: tuple[SyncedPartition, ...]


@dataclass(frozen=True)
class SkippedGroup:
    group: str
    state: str
    members: int
    reason: str


@dataclass(frozen=True)
class GroupSyncReport:
    flow: str
    source: str
    target: str
    enabled: bool
    dry_run: bool = False
    duration_ms: int = 0
    written: tuple[SyncedGroup, ...] = ()
    """Groups whose offsets were written (or, in a dry run, would be)."""
    up_to_date: tuple[str, ...] = ()
    skipped_active: tuple[SkippedGroup, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def group_sync_interval_seconds(flow: Flow) -> float | None:
    """How often callers should sync (`sync.group.offsets.interval.seconds`); None when sync is off."""
    return float(flow.sync_group_offsets_interval_seconds) if flow.sync_group_offsets_enabled else None


def plan_group_sync(
    group: str,
    state: str,
    checkpoints: Mapping[TopicPartition, Checkpoint],
    target_offsets: Mapping[TopicPartition, CommittedOffset],
) -> GroupSyncPlan:
    """What to write into one target group, given its state, its checkpoints and its current target offsets."""
    if state not in IDLE_STATES:
        return GroupSyncPlan(group, state, "skip-active")
    writes = []
    for tp, checkpoint in sorted(checkpoints.items()):
        current = target_offsets.get(tp)
        if current is None or current.offset < checkpoint.downstream_offset:
            writes.append(
                SyncedPartition(tp[0], tp[1], checkpoint.downstream_offset, None if current is None else current.offset)
            )
    return GroupSyncPlan(group, state, "write" if writes else "up-to-date", tuple(writes))


def sync_group_offsets(
    flow: Flow,
    clients: FlowClients | None = None,
    *,
    store: CheckpointStore | None = None,
    dry_run: bool = False,
) -> GroupSyncReport:
    """One sync round from the checkpoints in `store` (read from the target's checkpoints topic if None)."""
    if not flow.sync_group_offsets_enabled:
        return GroupSyncReport(flow.name, flow.source, flow.target, enabled=False, dry_run=dry_run)
    started = time.monotonic()
    own = clients is None
    clients = clients or FlowClients(flow)
    written: list[SyncedGroup] = []
    up_to_date: list[str] = []
    skipped: list[SkippedGroup] = []
    try:
        if store is None:
            store = CheckpointStore.for_flow(flow, timeout_s=clients.timeout_s)
        wanted = group_filter(flow)
        groups = [g for g in store.groups() if wanted.should_replicate_group(g)]
        admin = clients.target_admin
        states = describe_group_states(admin, flow.target, groups, clients.timeout_s)
        idle = [g for g in groups if states.get(g, GroupState("UNKNOWN", 0)).state in IDLE_STATES]
        synced = {t for g in idle for t, _p in store.group_checkpoints(g)}
        current = list_committed_offsets(admin, flow.target, idle, clients.timeout_s, synced.__contains__)
        for group in groups:
            state = states.get(group, GroupState("UNKNOWN", 0))
            plan = plan_group_sync(group, state.state, store.group_checkpoints(group), current.get(group, {}))
            if plan.action == "skip-active":
                skipped.append(_skip(flow, group, state, "active"))
            elif plan.action == "up-to-date":
                up_to_date.append(group)
            elif dry_run:
                written.append(SyncedGroup(group, state.state, plan.writes))
            else:
                checkpoints = store.group_checkpoints(group)
                offsets = {
                    (w.topic, w.partition): CommittedOffset(w.offset, checkpoints[(w.topic, w.partition)].metadata)
                    for w in plan.writes
                }
                try:
                    write_group_offsets(admin, flow.target, group, offsets, clients.timeout_s)
                except KafkaOperationError as err:
                    if not is_active_group_error(err):
                        raise
                    skipped.append(_skip(flow, group, state, "a consumer joined it during the sync"))
                    continue
                written.append(SyncedGroup(group, state.state, plan.writes))
    finally:
        if own:
            clients.close()
    for group_written in written:
        log.info(
            "group offset sync %s: %s group '%s' on %s: %s",
            flow.name,
            "would write" if dry_run else "wrote",
            group_written.group,
            flow.target,
            ", ".join(f"{p.topic}-{p.partition}={p.offset}" for p in group_written.partitions),
        )
    return GroupSyncReport(
        flow=flow.name,
        source=flow.source,
        target=flow.target,
        enabled=True,
        dry_run=dry_run,
        duration_ms=int((time.monotonic() - started) * 1000),
        written=tuple(written),
        up_to_date=tuple(up_to_date),
        skipped_active=tuple(skipped),
    )


def _skip(flow: Flow, group: str, state: GroupState, reason: str) -> SkippedGroup:
    log.warning(
        "group offset sync %s: skipped group '%s': %s on cluster '%s' (state %s, %d members); Mirrorflow never "
        "writes offsets into a group in use: stop its consumers there to let the sync position it",
        flow.name,
        group,
        reason,
        flow.target,
        state.state,
        state.members,
    )
    return SkippedGroup(group, state.state, state.members, reason)
