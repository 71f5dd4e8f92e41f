"""Checkpoint emission (MM2's MirrorCheckpointConnector + MirrorCheckpointTask, docs/mm2-reference.md §5.1,
§5.4), exact.

Which groups: the source's groups accepted by the group filter that have a committed offset on at least one
topic the topic filter accepts. For each such offset (topic accepted), the upstream offset is translated with
the flow's offset maps (`offset_translation`, exact instead of MM2's `sync.down + 1`), the partition renamed
(`rename_topic_partition`), and a `Checkpoint` written to `<source>.checkpoints.internal` on the target,
partition 0, with the record timestamp of the moment the group offsets were listed.

A checkpoint is written only when `is_more_recent` than the stored one for its (group, downstream partition)
(MM2's rule: none yet, the group rewound upstream, or the downstream offset moves forward), so checkpoints
never move a consumer backwards unless the group itself went back. Nothing is written for partitions the
copy never reached. Cadence is the caller's: run this every `checkpoint_interval_seconds(flow)`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint, is_more_recent
from mirrorflow.core.group_filter import GroupFilter
from mirrorflow.core.topic_selection import rename_topic_partition
from mirrorflow.kafka.consumer_groups import list_committed_offsets
from mirrorflow.kafka.group_coordinator import CommittedOffset, list_group_ids
from mirrorflow.kafka.produce import OutgoingRecord
from mirrorflow.replication.checkpoint_store import CheckpointStore
from mirrorflow.replication.flow_clients import FlowClients
from mirrorflow.replication.flow_rules import FlowRules
from mirrorflow.replication.internal_topics import ensure_internal_topics, flow_internal_topics
from mirrorflow.replication.offset_translation import (
    FlowOffsetMaps,
    learn_leading_gaps,
    load_offset_maps,
)
from mirrorflow.replication.state_tail import OffsetMapTail

log = logging.getLogger(__name__)

CHECKPOINTS_PARTITION = 0
GroupOffsets = Mapping[str, Mapping[tuple[str, int], CommittedOffset]]


@dataclass(frozen=True)
class EmittedCheckpoint:
    group: str
    topic: str
    """Downstream (renamed) topic."""
    partition: int
    upstream_offset: int
    downstream_offset: int
    latency_ms: int | None = None
    """MM2's checkpoint-latency-ms: acknowledgement time minus the record timestamp (None in a dry run)."""


@dataclass(frozen=True)
class UntranslatedOffset:
    group: str
    topic: str
    """Upstream (source) topic."""
    partition: int
    upstream_offset: int
    reason: str
    """"not-copied" (no copy history for the partition), "before-history" (older than what was copied) or
    "map-missing" (the progress counts copied records the offset map no longer holds)."""


@dataclass(frozen=True)
class CheckpointPlan:
    """What one emission round decided; the pure result of `plan_checkpoints`."""

    emit: tuple[Checkpoint, ...] = ()
    not_more_recent: int = 0
    untranslated: tuple[UntranslatedOffset, ...] = ()
    ahead_of_copy: tuple[tuple[str, str, int], ...] = ()
    """(group, upstream topic, partition) positioned past what the copy has read: checkpointed at the
    replicated end (no skip; records copied later are re-read)."""


@dataclass(frozen=True)
class CheckpointReport:
    flow: str
    source: str
    target: str
    topic: str
    enabled: bool
    dry_run: bool = False
    listed_ms: int = 0
    duration_ms: int = 0
    groups: tuple[str, ...] = ()
    emitted: tuple[EmittedCheckpoint, ...] = ()
    not_more_recent: int = 0
    untranslated: tuple[UntranslatedOffset, ...] = ()
    ahead_of_copy: int = 0
    checkpoint_latency_ms: dict[str, float] = field(default_factory=dict)
    """MM2's checkpoint-latency-ms -max / -min / -avg over this round's checkpoints (empty if none)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def checkpoint_interval_seconds(flow: Flow) -> float | None:
    """How often callers should emit (`emit.checkpoints.interval.seconds`); None when checkpoints are off."""
    return float(flow.emit_checkpoints_interval_seconds) if flow.emit_checkpoints_enabled else None


def group_filter(flow: Flow) -> GroupFilter:
    return flow.group_filter()


def select_groups(
    offsets: GroupOffsets, groups: GroupFilter, accept_topic: Callable[[str], bool]
) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
    """MM2's `findConsumerGroups`: groups the filter accepts with an offset on at least one accepted topic.

    Only offsets on accepted topics are kept: they are the ones a checkpoint is made of.
    """
    selected: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
    for group in sorted(offsets):
        if not groups.should_replicate_group(group):
            continue
        kept = {tp: o for tp, o in offsets[group].items() if accept_topic(tp[0])}
        if kept:
            selected[group] = kept
    return selected


def find_groups(
    flow: Flow, clients: FlowClients, rules: FlowRules | None = None
) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
    """List the source's groups, filter by name, fetch their offsets (batched), keep those on replicated topics."""
    rules = rules or FlowRules.of(flow)
    wanted = group_filter(flow)
    ids = [
        g
        for g in list_group_ids(clients.source_admin, flow.source, clients.timeout_s)
        if wanted.should_replicate_group(g)
    ]
    replicated = rules.topic_filter.should_replicate_topic
    offsets = list_committed_offsets(clients.source_admin, flow.source, ids, clients.timeout_s, replicated)
    return select_groups(offsets, wanted, rules.topic_filter.should_replicate_topic)


def plan_checkpoints(
    offsets: GroupOffsets,
    maps: FlowOffsetMaps,
    store: CheckpointStore,
    rename: Callable[[str], str],
) -> CheckpointPlan:
    """The checkpoints to write for already selected group offsets, given the stored ones."""
    emit: list[Checkpoint] = []
    untranslated: list[UntranslatedOffset] = []
    ahead: list[tuple[str, str, int]] = []
    skipped = 0
    for group in sorted(offsets):
        for (topic, partition), committed in sorted(offsets[group].items()):
            translation = maps.translate(topic, partition, committed.offset)
            if translation.offset is None:
                untranslated.append(UntranslatedOffset(group, topic, partition, committed.offset, translation.status))
                continue
            if translation.status == "ahead-of-copy":
                ahead.append((group, topic, partition))
            checkpoint = Checkpoint(
                group, rename(topic), partition, committed.offset, translation.offset, committed.metadata
            )
            if is_more_recent(checkpoint, store.last(group, checkpoint.topic, partition)):
                emit.append(checkpoint)
            else:
                skipped += 1
    return CheckpointPlan(tuple(emit), skipped, tuple(untranslated), tuple(ahead))


def emit_checkpoints(
    flow: Flow,
    clients: FlowClients | None = None,
    *,
    store: CheckpointStore | None = None,
    state: OffsetMapTail | None = None,
    dry_run: bool = False,
) -> CheckpointReport:
    """One emission round. Pass the same `store` to every round of a long run (MM2 loads it once at start);
    without one the checkpoints topic is read first. The store is updated with what is written. Likewise pass
    the same `state` to every round: the offset maps are then tailed instead of read from the beginning."""
    policy = flow.policy()
    topic = policy.checkpoints_topic(flow.source)
    if not flow.emit_checkpoints_enabled:
        return CheckpointReport(flow.name, flow.source, flow.target, topic, enabled=False, dry_run=dry_run)
    started = time.monotonic()
    own = clients is None
    clients = clients or FlowClients(flow)
    try:
        rules = FlowRules.of(flow)
        listed_ms = time.time_ns() // 1_000_000
        offsets = find_groups(flow, clients, rules)
        topics = {t for o in offsets.values() for t, _ in o}
        if state is None:
            maps = load_offset_maps(flow, topics=topics, timeout_s=clients.timeout_s)
        else:
            maps = state.load(topics=topics)
        positions = [(t, p, o.offset) for group in offsets.values() for (t, p), o in group.items()]
        learn_leading_gaps(flow, maps, positions, clients.source_admin, clients.timeout_s)
        if store is None:
            store = CheckpointStore.for_flow(flow, timeout_s=clients.timeout_s)

        def rename(upstream: str) -> str:
            return rename_topic_partition(upstream, policy=policy, source_alias=flow.source, target_alias=flow.target)

        plan = plan_checkpoints(offsets, maps, store, rename)
        emitted = _write(flow, clients, topic, plan.emit, listed_ms, store) if not dry_run else _unwritten(plan)
    finally:
        if own:
            clients.close()
    latencies = [e.latency_ms for e in emitted if e.latency_ms is not None]
    if plan.untranslated:
        log.info(
            "checkpoints %s: %d group offsets have no translation (partition not copied yet or older than its "
            "copy history)",
            flow.name,
            len(plan.untranslated),
        )
    return CheckpointReport(
        flow=flow.name,
        source=flow.source,
        target=flow.target,
        topic=topic,
        enabled=True,
        dry_run=dry_run,
        listed_ms=listed_ms,
        duration_ms=int((time.monotonic() - started) * 1000),
        groups=tuple(offsets),
        emitted=tuple(emitted),
        not_more_recent=plan.not_more_recent,
        untranslated=plan.untranslated,
        ahead_of_copy=len(plan.ahead_of_copy),
        checkpoint_latency_ms=_stats(latencies),
    )


def _write(
    flow: Flow,
    clients: FlowClients,
    topic: str,
    checkpoints: tuple[Checkpoint, ...],
    listed_ms: int,
    store: CheckpointStore,
) -> list[EmittedCheckpoint]:
    if not checkpoints:
        return []
    # MM2's connector creates the topic at start; doing it here keeps emission usable on its own.
    wanted = tuple(t for t in flow_internal_topics(flow) if t.purpose == "checkpoints")
    ensure_internal_topics(flow, clients, wanted)
    records = [
        OutgoingRecord(topic, CHECKPOINTS_PARTITION, c.record_key(), c.record_value(), timestamp_ms=listed_ms)
        for c in checkpoints
    ]
    clients.target_writer.write(records)
    latency = time.time_ns() // 1_000_000 - listed_ms
    for checkpoint in checkpoints:
        store.update(checkpoint)
    return [
        EmittedCheckpoint(c.consumer_group_id, c.topic, c.partition, c.upstream_offset, c.downstream_offset, latency)
        for c in checkpoints
    ]


def _unwritten(plan: CheckpointPlan) -> list[EmittedCheckpoint]:
    return [
        EmittedCheckpoint(c.consumer_group_id, c.topic, c.partition, c.upstream_offset, c.downstream_offset)
        for c in plan.emit
    ]


def _stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    return {"max": float(max(values)), "min": float(min(values)), "avg": round(sum(values) / len(values), 1)}
