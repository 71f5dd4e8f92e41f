"""Reset the copy of one source topic (`mirrorflow reset CONFIG --flow A->B --topic T`), so the next copy starts
afresh: the recovery when a source or remote topic was deleted and re-created (a new topic ID, see
`copy_setup.check_identity`).

What a copy of T keeps on the target, and what the reset does with it:
* progress records (one per partition) and every offset-map segment of T: tombstoned. Deleting only the progress
  is not enough: the surviving segments would contradict the new copy's downstream offsets;
* MM2 metrics snapshots of the remote topic's partitions: tombstoned, so counts restart with the new copy;
* the remote topic's records: never deleted unless asked. By default they stay, and the new copy continues the
  remote partition at its current end: the old records stay below it, and translation stays exact for the new
  records. With `delete_remote_topic` the remote topic is deleted (topic sync re-creates it empty on the next
  run) and the new copy starts it at offset 0.
In both cases the reset writes a fresh progress record per source partition that had state, after the tombstones
and in the same transaction: it starts the copy at the new source topic's beginning (or its end when the flow
starts at latest) and the map where said above, with the topics' current IDs. Readers that skip tombstones (they
never met one before) thus see the fresh record, never the old one; the copy's own `load_progress` honours them.

Concurrency: the reset writes each partition's tombstones in a transaction under that partition's copy
transactional id (`copy_plan.transactional_id`), after initialising it, and reads the state only then. That
fences any copy of the partition still running (its next commit fails, so it cannot write state the reset did
not see), and a copy that starts during the reset fences the reset instead, which then fails before changing
that partition. Pause the flow before a reset; if a partition was fenced, run the reset again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from mirrorflow.config.model import Flow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import decode_segment_key, offset_map_topic
from mirrorflow.core.progress import Progress, decode_progress, decode_progress_key, encode_progress, progress_topic
from mirrorflow.core.state_slots import check_count, head_slot
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.offsets import list_offsets
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.topics import delete_topic, list_topic_partitions
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.copy_plan import SourcePartitions, planned_identities, transactional_id
from mirrorflow.replication.copy_task import flow_reads_committed
from mirrorflow.replication.flow_rules import FlowRules, internal_separator
from mirrorflow.replication.metrics import metrics_topic, snapshot_key
from mirrorflow.replication.reset_guards import (
    old_checkpoints,
    refuse_foreign_remote,
    refuse_unfenced_copy,
    restart_checkpoints,
    unchanged_partitions,
)

StateKey = tuple[str, int, bytes]
"""(internal topic, partition, record key) of a live state record."""


@dataclass
class TopicState:
    """What the target holds for one source topic: live state records by source partition."""

    topic: str
    progress: dict[int, list[StateKey]] = field(default_factory=dict)
    segments: dict[int, list[StateKey]] = field(default_factory=dict)
    recorded: dict[int, Progress] = field(default_factory=dict)
    metrics: list[tuple[int, bytes]] = field(default_factory=list)  # (partition of the metrics topic, key)
    progress_slots: int = 1  # the progress topic's partitions: the fresh progress goes to the head slot
    unchanged: list[int] = field(default_factory=list)  # not re-created: kept (`reset_guards`)

    def partitions(self) -> set[int]:
        return set(self.progress) | set(self.segments)


@dataclass
class ResetReport:
    """What `reset_topic` found and did (or, dry run, would do)."""

    flow: str
    topic: str
    remote_topic: str
    dry_run: bool
    delete_remote_topic: bool
    source_topic_id: str  # "" unknown or absent
    remote_topic_id: str
    recorded_ids: dict[int, tuple[str, str]]  # per partition, as the progress recorded them
    progress_records: int
    segments: int
    metrics_snapshots: int
    fresh_starts: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition: (upstream, downstream)
    remote_topic_deleted: bool = False
    unchanged: list[int] = field(default_factory=list)  # partitions not re-created (kept unless forced)
    checkpoints_restarted: int = 0


def reset_topic(
    flow: Flow, topic: str, *, dry_run: bool = False, delete_remote_topic: bool = False, force: bool = False
) -> ResetReport:
    """Remove the copy state of `topic` so its next copy starts afresh (see the module docstring). Refuses
    before any change what `reset_guards` refuses; partitions that were not re-created are kept (reported in
    `unchanged`) unless `force`."""
    timeout_s = flow.admin_timeout_ms / 1000
    remote = FlowRules.of(flow).remote_topic(topic)
    if delete_remote_topic:
        refuse_foreign_remote(flow, remote)
    if not dry_run:
        refuse_unfenced_copy(flow, force=force)
    count = list_topic_partitions(admin_client(flow.source_admin.librdkafka()), flow.source, timeout_s).get(topic, 0)
    remote_count = list_topic_partitions(admin_client(flow.target_admin.librdkafka()), flow.target, timeout_s).get(
        remote, 0
    )
    current = planned_identities(flow, [SourcePartitions(topic, remote, count)]).get(topic, ("", ""))
    # Kept remote partitions are continued at their end; a deleted or missing one is created empty by topic sync,
    # and its ID, unknown until then, is adopted by the copy's first commit.
    kept = 0 if delete_remote_topic else min(count, remote_count)
    ids = (current[0], current[1] if kept else "")
    state = _to_reset(
        flow, read_state(flow, topic, remote, timeout_s), current, remote_count, force, delete_remote_topic
    )
    if dry_run or (state.unchanged and not state.partitions()):  # nothing to do: every partition unchanged
        report = _report(flow, topic, remote, state, ids, dry_run=dry_run, delete_remote_topic=delete_remote_topic)
        report.fresh_starts = _fresh_starts(flow, topic, remote, count, kept, timeout_s, state.partitions())
        return report
    with ExitStack() as stack:
        fenced = state.partitions() | set(range(count)) | set(range(remote_count))
        writers = {p: stack.enter_context(_fencing_writer(flow, topic, p, timeout_s)) for p in sorted(fenced)}
        checkpoints = old_checkpoints(flow, remote, fenced, timeout_s) if delete_remote_topic else []
        if delete_remote_topic and remote_count:
            delete_topic(admin_client(flow.target_admin.librdkafka()), flow.target, remote, timeout_s)
        # final: no copy of the topic can commit any more
        state = _to_reset(flow, read_state(flow, topic, remote, timeout_s), current, 0, force, delete_remote_topic)
        report = _report(flow, topic, remote, state, ids, dry_run=False, delete_remote_topic=delete_remote_topic)
        report.remote_topic_deleted = delete_remote_topic and remote_count > 0
        report.fresh_starts = _fresh_starts(flow, topic, remote, count, kept, timeout_s, state.partitions())
        if state.metrics:  # before the commits: snapshots a new copy publishes after them must survive
            _tombstone_metrics(flow, state.metrics, timeout_s)
        done: list[int] = []
        for p, writer in writers.items():
            if p not in state.partitions() and p in state.unchanged:
                continue
            try:
                _reset_partition(flow, writer, state, p, report.fresh_starts.get(p), ids)
            except KafkaOperationError as err:
                raise MirrorflowError(
                    f"flow {flow.name}: resetting {topic}-{p} failed ({err}); partitions reset: "
                    f"{done or 'none'}. A copy of the topic is probably running (it fenced the reset): pause the "
                    "flow and run the reset again (the partitions already reset are then kept as they are)."
                ) from err
            done.append(p)
        starts = {p: (report.fresh_starts.get(p, (0, 0))[0], 0) for p in fenced}
        report.checkpoints_restarted = restart_checkpoints(flow, checkpoints, starts, timeout_s)
    return report


def _to_reset(
    flow: Flow, state: TopicState, current: tuple[str, str], remote_count: int, force: bool, delete_remote: bool
) -> TopicState:
    """`state` without the partitions that were not re-created (`reset_guards.unchanged_partitions`), unless
    `force`; they are listed in `state.unchanged` either way."""
    unchanged = unchanged_partitions(state.recorded, current, state.partitions())
    state.unchanged = unchanged
    if force or not unchanged:
        return state
    if delete_remote and remote_count:
        raise MirrorflowError(
            f"flow {flow.name}: {state.topic} partitions {unchanged} were not re-created (their progress records "
            "the topic IDs the clusters report now), so deleting the remote topic would lose what they copied. Run "
            "the reset without --delete-remote-topic, or with --force to copy the whole topic again."
        )
    for p in unchanged:
        state.progress.pop(p, None)
        state.segments.pop(p, None)
        state.recorded.pop(p, None)
    return state


def _reset_partition(
    flow: Flow,
    writer: TargetWriter,
    state: TopicState,
    partition: int,
    fresh_start: tuple[int, int] | None,
    ids: tuple[str, str],
) -> None:
    """One transaction: tombstones for the partition's progress and segments, and its fresh progress if any."""
    writer.begin()
    for state_topic, state_partition, key in state.progress.get(partition, []) + state.segments.get(partition, []):
        writer.produce(state_topic, state_partition, key, None)
    if fresh_start is not None:
        upstream, downstream = fresh_start
        epoch = state.recorded[partition].epoch + 1 if partition in state.recorded else 0
        topic = state.topic
        key, value = encode_progress(
            Progress(topic, partition, upstream, downstream, 0, epoch, int(time.time() * 1000), *ids)
        )
        slot = head_slot(topic, partition, state.progress_slots)
        writer.produce(progress_topic(flow.source, internal_separator(flow)), slot, key, value)
    writer.commit()


def read_state(flow: Flow, topic: str, remote: str, timeout_s: float) -> TopicState:
    """The live progress records, offset-map segments and metrics snapshots of `topic` (all state partitions)."""
    sep = internal_separator(flow)
    conf = flow.target_consumer.librdkafka()
    state = TopicState(topic)
    name = progress_topic(flow.source, sep)
    counts: list[int] = []
    for p, key, value in _live(flow, conf, name, timeout_s, counts.append):
        found_topic, source_partition = decode_progress_key(key)
        if found_topic == topic:
            state.progress.setdefault(source_partition, []).append((name, p, key))
            state.recorded[source_partition] = decode_progress(key, value)  # the highest slot's last
    state.progress_slots = check_count(counts[0], name) if counts and counts[0] else 1
    map_topic = offset_map_topic(flow.source, sep)
    for p, key, _value in _live(flow, conf, map_topic, timeout_s):
        found_topic, source_partition, _upstream = decode_segment_key(key)
        if found_topic == topic:
            state.segments.setdefault(source_partition, []).append((map_topic, p, key))
    live_metrics = _live(flow, conf, metrics_topic(flow.source, sep), timeout_s, read_committed=False)
    state.metrics = [(p, key) for p, key, _value in live_metrics if _is_snapshot_of(key, remote)]
    return state


def _live(
    flow: Flow,
    conf: Mapping[str, str],
    name: str,
    timeout_s: float,
    on_count: Callable[[int], None] | None = None,
    *,
    read_committed: bool = True,
) -> Iterator[tuple[int, bytes, bytes]]:
    """(partition, key, value) of the records of a compacted topic that a tombstone has not removed, partition
    by partition upwards (a state topic's slots: the highest one's record comes last)."""
    latest: dict[tuple[int, bytes], bytes | None] = {}
    for p, _offset, key, value, _ts in read_to_end(
        flow.target, conf, name, timeout_s=timeout_s, on_count=on_count, read_committed=read_committed
    ):
        if key is not None:
            latest[(p, key)] = value
    for (p, key), value in sorted(latest.items(), key=lambda item: item[0][0]):
        if value is not None:
            yield p, key, value


def _is_snapshot_of(key: bytes, remote: str) -> bool:
    """True for `snapshot_key(remote, partition)` of any partition."""
    try:
        found = json.loads(key)
    except ValueError:
        return False
    return isinstance(found, list) and len(found) == 2 and found[0] == remote and key == snapshot_key(*found)


def _report(
    flow: Flow,
    topic: str,
    remote: str,
    state: TopicState,
    ids: tuple[str, str],
    *,
    dry_run: bool,
    delete_remote_topic: bool,
) -> ResetReport:
    return ResetReport(
        flow=flow.name,
        topic=topic,
        remote_topic=remote,
        dry_run=dry_run,
        delete_remote_topic=delete_remote_topic,
        source_topic_id=ids[0],
        remote_topic_id=ids[1],
        recorded_ids={p: (r.source_topic_id, r.remote_topic_id) for p, r in sorted(state.recorded.items())},
        progress_records=sum(len(v) for v in state.progress.values()),
        segments=sum(len(v) for v in state.segments.values()),
        metrics_snapshots=len(state.metrics),
        unchanged=list(state.unchanged),
    )


def _fresh_starts(
    flow: Flow, topic: str, remote: str, count: int, kept: int, timeout_s: float, stored: set[int]
) -> dict[int, tuple[int, int]]:
    """Per source partition with stored state (one without starts afresh anyway): (where the new copy starts
    upstream, where its map starts downstream). Upstream as a copy without progress would: the log start, or the
    end when the flow starts at latest. Downstream: the end of the first `kept` remote partitions, 0 for the
    others (created empty)."""
    partitions = [p for p in range(count) if p in stored]
    if not partitions:
        return {}
    latest = flow.source_consumer.librdkafka().get("auto.offset.reset", "earliest") == "latest"
    committed = flow_reads_committed(flow)
    source_admin = admin_client(flow.source_admin.librdkafka())
    wanted = [(topic, p) for p in partitions]
    starts = list_offsets(
        source_admin, flow.source, wanted, latest=latest, read_committed=committed, timeout_s=timeout_s
    )
    target_admin = admin_client(flow.target_admin.librdkafka())
    on_remote = [(remote, p) for p in partitions if p < kept]
    ends = list_offsets(target_admin, flow.target, on_remote, latest=True, timeout_s=timeout_s)
    return {p: (starts[(topic, p)], ends.get((remote, p), 0)) for p in partitions}


@contextmanager
def _fencing_writer(flow: Flow, topic: str, partition: int, timeout_s: float) -> Iterator[TargetWriter]:
    """The partition's copy transactional id, initialised (which fences its running copy)."""
    writer = TargetWriter(
        flow.target,
        flow.target_producer.librdkafka(),
        transactional_id=transactional_id(flow, topic, partition),
        timeout_s=timeout_s,
    )
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()


def _tombstone_metrics(flow: Flow, keys: list[tuple[int, bytes]], timeout_s: float) -> None:
    """Metrics snapshots are written without transactions (best-effort), so are their tombstones."""
    writer = TargetWriter(flow.target, flow.target_producer.librdkafka(), transactional_id=None, timeout_s=timeout_s)
    try:
        name = metrics_topic(flow.source, internal_separator(flow))
        for partition, key in keys:
            writer.produce(name, partition, key, None)
        writer.commit()
    finally:
        writer.close()
