"""Copy one source partition's range to the same partition of its remote topic: MM2's MirrorSourceTask, made
exactly-once and exact.

This is the function a Spark task runs. It imports neither pydantic nor pyspark: its input is a `CopyTask`.

Exactly-once (the default), per batch of records:
  1. a transactional producer whose id is fixed per flow and source partition is initialised first, which
     fences any older producer with that id (a zombie task or an earlier attempt), aborting its transaction;
  2. only then is the committed progress of the partition read (read_committed): the true resume point;
  3. records are produced (same partition, key, value, headers, timestamp), flushed to learn their downstream
     offsets, and the offset-map segments and the progress record are produced in the same transaction;
  4. the transaction commits: records, map and progress become visible together or not at all.
At-least-once: an idempotent producer; progress and segments are written after the records are flushed, so a
crash in between re-copies at most that batch.

MM2 offset syncs are written after each commit by a separate, non-transactional producer (as MM2 does), at
every segment start and whenever downstream drift reaches `offset.lag.max`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import (
    OffsetMap,
    Segment,
    decode_segment,
    decode_segment_key,
    encode_segment,
    encode_segment_key,
)
from mirrorflow.core.offset_sync import OffsetSync
from mirrorflow.core.progress import Progress, decode_progress, encode_progress
from mirrorflow.core.provenance import should_drop, with_origin
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.metrics_store import MetricsPublisher, ensure_metrics_topic, read_snapshots
from mirrorflow.kafka.offsets import partition_bounds
from mirrorflow.kafka.transfer import PARTITION_EOF, Message, PartitionReader, TargetWriter
from mirrorflow.replication.metrics import PartitionMetrics, Snapshot, snapshot_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CopyTask:
    """Everything one executor needs for one source partition; plain data so Spark can ship it.

    The client configs hold revealed secrets (executors must connect), so `repr` hides them.
    """

    flow: str
    source: str
    target: str
    topic: str
    partition: int
    remote_topic: str
    end: int | None
    run_seconds: float | None
    exactly_once: bool
    start_at_latest: bool
    transactional_id: str
    progress_topic: str
    offset_map_topic: str
    offset_syncs_topic: str | None
    offset_syncs_on_target: bool
    offset_lag_max: int
    provenance: bool
    timeout_s: float
    batch_records: int = 20000
    batch_ms: int = 500
    metrics_topic: str | None = None  # MM2's per-partition metrics go here (best-effort); None: not recorded
    metrics_replication_factor: int = 1
    source_consumer: Mapping[str, str] = field(default_factory=dict, repr=False)
    target_producer: Mapping[str, str] = field(default_factory=dict, repr=False)
    target_consumer: Mapping[str, str] = field(default_factory=dict, repr=False)
    offset_syncs_producer: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass
class CopyResult:
    """What one range did; summed by the driver into the job summary."""

    topic: str
    partition: int
    remote_topic: str
    start: int
    next_upstream: int
    downstream_end: int
    records: int = 0
    bytes: int = 0
    dropped: int = 0
    transactions: int = 0
    offset_syncs: int = 0
    max_latency_ms: int = 0
    latency_sum_ms: int = 0


class _Deliveries:
    """Collects downstream offsets from delivery reports, in produce order (one partition, idempotent)."""

    __slots__ = ("errors", "offsets")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.errors: list[str] = []

    def __call__(self, err: object, msg: Message) -> None:
        if err is None:
            self.offsets.append(msg.offset())
        else:
            self.errors.append(str(err))


def load_progress(task: CopyTask) -> Progress | None:
    """The committed progress of the task's partition, read after fencing so it is final."""
    latest: Progress | None = None
    for _p, _o, key, value, _ts in read_to_end(
        task.target, task.target_consumer, task.progress_topic, partitions=[0], timeout_s=task.timeout_s
    ):
        if key is None or value is None:
            continue
        progress = decode_progress(key, value)
        if progress.topic == task.topic and progress.partition == task.partition:
            latest = progress
    return latest


def load_segments(task: CopyTask) -> list[Segment]:
    """This partition's stored offset-map segments (a compacted topic: one record per live segment)."""
    segments: dict[int, Segment] = {}
    for _p, _o, key, value, _ts in read_to_end(
        task.target, task.target_consumer, task.offset_map_topic, partitions=[0], timeout_s=task.timeout_s
    ):
        if key is None:
            continue
        topic, partition, upstream_start = decode_segment_key(key)
        if (topic, partition) != (task.topic, task.partition):
            continue
        if value is None:
            segments.pop(upstream_start, None)
        else:
            segments[upstream_start] = decode_segment(key, value)[2]
    return list(segments.values())


def restore_map(task: CopyTask, progress: Progress | None, start: int) -> OffsetMap:
    """Continue the stored map, so that segments an at-least-once crash left beyond the committed progress are
    rewound (and tombstoned at the next commit) instead of contradicting the re-copy."""
    stored = load_segments(task)
    if not stored:
        return OffsetMap(start=start)
    return OffsetMap.restore(stored, next_upstream=start, downstream_end=progress.downstream_end if progress else None)


def resolve_start(task: CopyTask, progress: Progress | None) -> int:
    """Where to resume; a gap opened by source retention is an error, never a silent skip."""
    log_start, log_end = partition_bounds(
        task.source, task.source_consumer, task.topic, task.partition, timeout_s=task.timeout_s
    )
    if progress is None:
        return log_end if task.start_at_latest else log_start
    if progress.next_upstream < log_start:
        raise MirrorflowError(
            f"flow {task.flow}: {task.topic}-{task.partition} lost records {progress.next_upstream}.."
            f"{log_start - 1} to source retention before they were copied. Raise retention on cluster "
            f"'{task.source}' or copy more often; to accept the loss, delete this partition's progress "
            f"record from '{task.progress_topic}' on '{task.target}'."
        )
    if progress.next_upstream > log_end:
        raise MirrorflowError(
            f"flow {task.flow}: {task.topic}-{task.partition} ends at {log_end} on '{task.source}' but "
            f"{progress.next_upstream} was already copied: the source topic was recreated or truncated. "
            f"Delete the remote topic '{task.remote_topic}' and its progress record to copy it afresh."
        )
    return progress.next_upstream


def start_metrics(task: CopyTask, records_before: int) -> tuple[PartitionMetrics, MetricsPublisher] | None:
    """The partition's metrics recorder, continuing the stored byte count; None (logged) when unavailable."""
    if task.metrics_topic is None:
        return None
    try:
        if not ensure_metrics_topic(
            task.target, task.target_producer, task.metrics_topic, task.metrics_replication_factor, task.timeout_s
        ):
            return None
        stored = read_snapshots(task.target, task.target_consumer, task.metrics_topic, task.timeout_s)
        raw = stored.get(snapshot_key(task.remote_topic, task.partition))
        bytes_before = int(Snapshot.decode(raw).values.get("byte-count", 0)) if raw else 0
    except Exception as err:  # metrics are best-effort: never fail the copy for them
        log.warning("metrics: not recorded for %s-%s: %s", task.remote_topic, task.partition, err)
        return None
    recorder = PartitionMetrics(
        source=task.source,
        target=task.target,
        source_topic=task.topic,
        remote_topic=task.remote_topic,
        partition=task.partition,
        record_count=records_before,
        byte_count=bytes_before,
    )
    return recorder, MetricsPublisher(task.target, task.target_producer, task.metrics_topic)


def copy_range(task: CopyTask, *, on_batch: Callable[[CopyResult], None] | None = None) -> CopyResult:
    """Copy records of one partition until `task.end` (interval) or `task.run_seconds` (continuous)."""
    writer = TargetWriter(
        task.target,
        task.target_producer,
        transactional_id=task.transactional_id if task.exactly_once else None,
        timeout_s=task.timeout_s,
    )
    syncs_writer: TargetWriter | None = None
    reader: PartitionReader | None = None
    metrics: tuple[PartitionMetrics, MetricsPublisher] | None = None
    try:
        progress = load_progress(task)
        start = resolve_start(task, progress)
        epoch = progress.epoch + 1 if progress else 0
        copied_before = progress.records_copied if progress else 0
        down_end = progress.downstream_end if progress else 0
        offset_map = restore_map(task, progress, start)
        result = CopyResult(task.topic, task.partition, task.remote_topic, start, start, down_end)
        if task.end is not None and start >= task.end:
            return result
        metrics = start_metrics(task, copied_before)
        if task.offset_syncs_topic is not None:
            syncs_writer = TargetWriter(
                task.target if task.offset_syncs_on_target else task.source,
                task.offset_syncs_producer,
                transactional_id=None,
                timeout_s=task.timeout_s,
            )
        reader = PartitionReader(
            task.source,
            task.source_consumer,
            task.topic,
            task.partition,
            start,
            read_committed=task.exactly_once,
        )
        deadline = None if task.run_seconds is None else time.monotonic() + task.run_seconds
        consumed_to = start
        committed_to = start
        while True:
            if task.end is not None and consumed_to >= task.end:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            batch_deadline = time.monotonic() + task.batch_ms / 1000
            upstreams: list[int] = []
            oldest_ts, newest_ts, ts_sum, batch_bytes = None, None, 0, 0
            deliveries = _Deliveries()
            began = False
            while len(upstreams) < task.batch_records and time.monotonic() < batch_deadline:
                if task.end is not None and consumed_to >= task.end:
                    break
                messages = reader.read(min(task.batch_records - len(upstreams), 10000), 0.1)
                for m in messages:
                    err = m.error()
                    if err is not None:
                        if err.code() == PARTITION_EOF:
                            consumed_to = max(consumed_to, m.offset())
                        continue
                    offset = m.offset()
                    if task.end is not None and offset >= task.end:
                        consumed_to = max(consumed_to, task.end)
                        break
                    consumed_to = offset + 1
                    headers = m.headers()
                    if task.provenance:
                        if should_drop(headers, task.target):
                            result.dropped += 1
                            continue
                        headers = with_origin(headers, task.source)
                    if not began:
                        writer.begin()
                        began = True
                    value = m.value()
                    ts = m.timestamp()[1]
                    writer.produce(task.remote_topic, task.partition, m.key(), value, ts, headers, deliveries)
                    ts_sum += ts
                    if oldest_ts is None or ts < oldest_ts:
                        oldest_ts = ts
                    if newest_ts is None or ts > newest_ts:
                        newest_ts = ts
                    upstreams.append(offset)
                    batch_bytes += len(value) if value is not None else 0
                writer.poll()
            if not upstreams and consumed_to == committed_to:
                continue
            result.bytes += batch_bytes
            polled_ms = int(time.time() * 1000)
            if not began:
                writer.begin()
            writer.flush()
            if deliveries.errors or len(deliveries.offsets) != len(upstreams):
                writer.abort()
                raise MirrorflowError(
                    f"flow {task.flow}: writing {task.remote_topic}-{task.partition} on '{task.target}' "
                    f"failed: {deliveries.errors[0] if deliveries.errors else 'delivery reports missing'}"
                )
            now_ms = int(time.time() * 1000)
            if upstreams:
                offset_map.record_batch(upstreams, deliveries.offsets)
                down_end = deliveries.offsets[-1] + 1
            offset_map.mark_consumed(consumed_to, downstream_end=down_end)
            changes = offset_map.unflushed()
            for segment in changes.upserts:
                key, value = encode_segment(task.topic, task.partition, segment)
                writer.produce(task.offset_map_topic, 0, key, value)
            for upstream_start in changes.deletes:
                writer.produce(
                    task.offset_map_topic,
                    0,
                    encode_segment_key(task.topic, task.partition, upstream_start),
                    None,
                )
            result.records += len(upstreams)
            key, value = encode_progress(
                Progress(
                    task.topic,
                    task.partition,
                    consumed_to,
                    down_end,
                    copied_before + result.records,
                    epoch,
                    now_ms,
                )
            )
            writer.produce(task.progress_topic, 0, key, value)
            writer.commit()
            offset_map.mark_flushed(changes)
            committed_to = consumed_to
            result.transactions += 1 if began else 0
            result.next_upstream, result.downstream_end = consumed_to, down_end
            if oldest_ts is not None:
                # MM2's replication-latency-ms: now minus the record timestamp, at acknowledgement.
                result.max_latency_ms = max(result.max_latency_ms, now_ms - oldest_ts)
                result.latency_sum_ms += now_ms * len(upstreams) - ts_sum
            if syncs_writer is not None and task.offset_syncs_topic is not None:
                for up, down in offset_map.offset_syncs(task.offset_lag_max, flush_latest=True):
                    sync = OffsetSync(task.topic, task.partition, up, down)
                    syncs_writer.produce(task.offset_syncs_topic, 0, sync.record_key(), sync.record_value())
                    result.offset_syncs += 1
                syncs_writer.poll()
            if metrics is not None:
                metrics[0].record_batch(
                    records=len(upstreams),
                    nbytes=batch_bytes,
                    oldest_ts=oldest_ts,
                    newest_ts=newest_ts,
                    ts_sum=ts_sum,
                    polled_ms=polled_ms,
                    acked_ms=now_ms,
                    next_upstream=consumed_to,
                )
                snapshot = metrics[0].snapshot()
                metrics[1].publish(snapshot.key(), snapshot.encode())
            if on_batch is not None:
                on_batch(result)
        if syncs_writer is not None:
            syncs_writer.flush()
        return result
    except BaseException:
        writer.abort()
        raise
    finally:
        if reader is not None:
            reader.close()
        writer.close()
        if syncs_writer is not None:
            syncs_writer.close()
        if metrics is not None:
            metrics[1].close()
