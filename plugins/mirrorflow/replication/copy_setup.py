"""A copy range's set-up: what it reads before copying (stored progress, offset map, metrics) and where it
resumes. Split from `copy_range` so the hot loop stays readable; every function here runs once per range.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.core.progress import Progress
from mirrorflow.core.transforms import TransformChain
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.log_cache import LogCache
from mirrorflow.kafka.metrics_store import MetricsPublisher, ensure_metrics_topic
from mirrorflow.kafka.topics import NewTopicSpec, create_topics
from mirrorflow.replication.copy_slots import (
    Placement,
    load_progress,
    load_segments,
    load_snapshot,
    load_state,
    read_map_ahead,
    settled_slots,
    state_reader,
)
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.metrics import PartitionMetrics, Snapshot, snapshot_key
from mirrorflow.replication.state_records import StoredSegments

# Read here by the copy; kept where they live (`copy_slots`).
__all__ = ["load_progress", "load_segments", "load_state", "read_map_ahead", "settled_slots", "state_reader"]

log = logging.getLogger(__name__)


def restore_map(stored: StoredSegments, progress: Progress | None, start: int) -> OffsetMap:
    """Continue the stored map, so that segments an at-least-once crash left beyond the committed progress are
    rewound (and tombstoned at the next commit) instead of contradicting the re-copy. Keys the fold dropped as
    stale are tombstoned too: an at-least-once crash can lose a tombstone, and once the log cleaner removes the
    record that made the key stale, readers of the compacted topic would fold the stale run back in."""
    offset_map = (
        OffsetMap(start=start)
        if not stored.runs
        else OffsetMap.restore(
            stored.runs, next_upstream=start, downstream_end=progress.downstream_end if progress else None
        )
    )
    offset_map.forget_stored(stored.stale_keys)
    return offset_map


def check_identity(task: CopyTask, progress: Progress | None) -> tuple[str, str]:
    """The (source, remote) topic IDs the next progress records. A recorded ID that differs from the planned one
    means that topic was deleted and re-created under the same name since the last commit: resuming would copy
    the new topic from the old topic's offset (or into a new remote topic at the old one's offsets), so the copy
    stops before it reads anything. An unknown ID on either side cannot be checked and is not a mismatch; a known
    planned ID replaces an unknown recorded one (how version-0 progress records are upgraded)."""
    if progress is None:
        return task.source_topic_id, task.remote_topic_id
    sides = (
        ("source", task.topic, task.source, progress.source_topic_id, task.source_topic_id),
        ("remote", task.remote_topic, task.target, progress.remote_topic_id, task.remote_topic_id),
    )
    for side, name, cluster, recorded, planned in sides:
        if recorded and planned and recorded != planned:
            raise MirrorflowError(
                f"flow {task.flow}: the {side} topic '{name}' on '{cluster}' was deleted and re-created: its topic "
                f"ID is {planned}, but the progress of partition {task.partition} was recorded for topic ID "
                f"{recorded}. Nothing was copied. To copy source topic '{task.topic}' afresh, pause the flow and "
                f"run: {reset_command(task)} (see docs/copy.md, 'A topic re-created')."
            )
    return (task.source_topic_id or progress.source_topic_id, task.remote_topic_id or progress.remote_topic_id)


def identity_upgrade_pending(progress: Progress | None, identity: tuple[str, str]) -> bool:
    """True when the stored progress lacks an ID now known (a version-0 record, or one written while the ID was
    unknown): the copy commits once even with nothing to copy, so an idle partition is upgraded too."""
    return progress is not None and (progress.source_topic_id, progress.remote_topic_id) != identity


def reset_command(task: CopyTask) -> str:
    """The command that starts the copy of the task's topic afresh (`mirrorflow.replication.topic_reset`)."""
    return f"mirrorflow reset CONFIG --flow '{task.flow}' --topic {task.topic} [--dry-run]"


def resolve_start(task: CopyTask, progress: Progress | None, log_start: int, log_end: int) -> int:
    """Where to resume; a gap opened by source retention is an error, never a silent skip."""
    if progress is None:
        return log_end if task.start_at_latest else log_start
    if progress.next_upstream < log_start:
        raise MirrorflowError(
            f"flow {task.flow}: {task.topic}-{task.partition} lost records {progress.next_upstream}.."
            f"{log_start - 1} to source retention before they were copied. Raise retention on cluster "
            f"'{task.source}' or copy more often. Nothing was copied. To accept the loss and copy the topic "
            f"afresh from its current start, pause the flow and run: {reset_command(task)} (see docs/copy.md)."
        )
    if progress.next_upstream > log_end:
        raise MirrorflowError(
            f"flow {task.flow}: {task.topic}-{task.partition} ends at {log_end} on '{task.source}' but "
            f"{progress.next_upstream} was already copied: the source topic was re-created or truncated. Nothing "
            f"was copied. To copy it afresh, pause the flow and run: {reset_command(task)} "
            "(see docs/copy.md, 'A topic re-created')."
        )
    return progress.next_upstream


def prune(offset_map: OffsetMap, log_start: int | None, offset_lag_max: int) -> list[tuple[int, int]] | None:
    """Forget the map below the source log start; None if that changes nothing, else the offset syncs of the
    records not synced yet (`offset_syncs` must see records before they are pruned, or they get no sync)."""
    start = offset_map.start
    if log_start is None or start is None or log_start <= start:
        return None
    syncs = offset_map.offset_syncs(offset_lag_max)
    offset_map.prune_below(log_start)
    return syncs


class StoredBytes(NamedTuple):
    """The partition's stored byte count (metrics continue it) and where its snapshots go."""

    byte_count: int
    placement: Placement


def load_metric_bytes(
    task: CopyTask, shared: LogCache | None = None, counts_after: float | None = None
) -> StoredBytes | None:
    """The partition's stored byte count and placement; None (logged) when metrics are unavailable. `shared`: the
    Spark task's cache of state reads (`copy_slots.state_reader`), `counts_after`: see `copy_slots.after_fence`."""
    if task.metrics_topic is None:
        return None
    try:
        if not ensure_metrics_topic(
            task.target, task.target_producer, task.metrics_topic, task.metrics_replication_factor, task.timeout_s
        ):
            return None
        key = snapshot_key(task.remote_topic, task.partition)
        raw, placement = load_snapshot(task, task.metrics_topic, key, shared, counts_after)
        return StoredBytes(int(Snapshot.decode(raw).values.get("byte-count", 0)) if raw else 0, placement)
    except Exception as err:  # metrics are best-effort: never fail the copy for them
        log.warning("metrics: not recorded for %s-%s: %s", task.remote_topic, task.partition, err)
        return None


def start_transforms(task: CopyTask) -> tuple[TransformChain | None, tuple[str, str] | None]:
    """The task's transform chain (None when it has no transforms: the plain copy path) and, with
    `errors.tolerance = all`, the dead-letter (topic, flow), created on the target if missing."""
    spec = task.transforms
    if spec is None or spec.empty:
        return None, None
    chain = TransformChain(spec)
    if spec.errors_tolerance != "all":
        return chain, None
    topic = NewTopicSpec(spec.dead_letter_topic, 1, spec.dead_letter_replication_factor, {})
    create_topics(admin_client(task.target_producer), task.target, [topic], task.timeout_s)
    return chain, (spec.dead_letter_topic, task.flow)


def chain_totals(result: CopyResult, chain: TransformChain) -> None:
    """What the chain kept out of the target, or left as it was, into the range's result (after each batch)."""
    result.filtered, result.dead_lettered = chain.dropped, chain.dead_lettered
    result.schema_ids_not_ours = chain.schema_ids_not_ours


def log_chain_totals(task: CopyTask, result: CopyResult) -> None:
    """One line at the end of a range whose transforms dropped, dead-lettered or left records as they were."""
    if result.filtered or result.dead_lettered or result.schema_ids_not_ours:
        log.info(
            "flow %s: %s-%s: transforms dropped %d record(s), dead-lettered %d; %d copied as they were (bytes like "
            "a schema ID that names no schema of the topic's subjects)",
            task.flow,
            task.topic,
            task.partition,
            result.filtered,
            result.dead_lettered,
            result.schema_ids_not_ours,
        )


class CopyMetrics(NamedTuple):
    """The partition's metrics recorder and the publisher of its snapshots."""

    recorder: PartitionMetrics
    publisher: MetricsPublisher

    def publish(self) -> None:
        snapshot = self.recorder.snapshot()
        self.publisher.publish(snapshot.key(), snapshot.encode())


def start_metrics(task: CopyTask, records_before: int, stored: StoredBytes | None) -> CopyMetrics | None:
    """The partition's metrics recorder, continuing the stored counts; None when metrics are unavailable."""
    if task.metrics_topic is None or stored is None:
        return None
    recorder = PartitionMetrics(
        source=task.source,
        target=task.target,
        source_topic=task.topic,
        remote_topic=task.remote_topic,
        partition=task.partition,
        record_count=records_before,
        byte_count=stored.byte_count,
    )
    slots = stored.placement
    publisher = MetricsPublisher(task.target, task.target_producer, task.metrics_topic, slots.head, slots.after)
    return CopyMetrics(recorder, publisher)
