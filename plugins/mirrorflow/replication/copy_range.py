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

The map forgets history below the source log start (retention, `delete_records`): at start and whenever the
reader sees the log start move, segments wholly below it become tombstones in the next transaction, after
`offset_syncs` has seen their records.

Set-up reads (source bounds, stored progress, offset map and metrics) run in parallel threads: they are round
trips that release the GIL, and they cost more than copying a small range.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
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
from mirrorflow.core.transforms import ChainSpec, TransformChain
from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.kafka.metrics_store import MetricsPublisher, ensure_metrics_topic, read_snapshots
from mirrorflow.kafka.offsets import partition_bounds
from mirrorflow.kafka.topics import NewTopicSpec, create_topics
from mirrorflow.kafka.transfer import Batch, PartitionReader, TargetWriter
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
    batch_records: int = 50000
    batch_ms: int = 500
    batch_bytes: int = 64 * 1024 * 1024  # value bytes a transaction may hold, bounding a task's memory
    metrics_topic: str | None = None  # MM2's per-partition metrics go here (best-effort); None: not recorded
    metrics_replication_factor: int = 1
    transforms: ChainSpec | None = None  # None (or no transforms): records are copied as read
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
    filtered: int = 0  # records transforms dropped (also counted in `dropped`)
    dead_lettered: int = 0  # records a transform failed on, sent to the dead-letter topic (also in `dropped`)


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


def restore_map(stored: list[Segment], progress: Progress | None, start: int) -> OffsetMap:
    """Continue the stored map, so that segments an at-least-once crash left beyond the committed progress are
    rewound (and tombstoned at the next commit) instead of contradicting the re-copy."""
    if not stored:
        return OffsetMap(start=start)
    return OffsetMap.restore(stored, next_upstream=start, downstream_end=progress.downstream_end if progress else None)


def resolve_start(task: CopyTask, progress: Progress | None, log_start: int, log_end: int) -> int:
    """Where to resume; a gap opened by source retention is an error, never a silent skip."""
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


def prune(offset_map: OffsetMap, log_start: int | None, offset_lag_max: int) -> list[tuple[int, int]] | None:
    """Forget the map below the source log start; None if that changes nothing, else the offset syncs of the
    records not synced yet (`offset_syncs` must see records before they are pruned, or they get no sync)."""
    start = offset_map.start
    if log_start is None or start is None or log_start <= start:
        return None
    syncs = offset_map.offset_syncs(offset_lag_max)
    offset_map.prune_below(log_start)
    return syncs


def load_metric_bytes(task: CopyTask) -> int | None:
    """The partition's stored byte count (metrics continue it); None (logged) when metrics are unavailable."""
    if task.metrics_topic is None:
        return None
    try:
        if not ensure_metrics_topic(
            task.target, task.target_producer, task.metrics_topic, task.metrics_replication_factor, task.timeout_s
        ):
            return None
        stored = read_snapshots(task.target, task.target_consumer, task.metrics_topic, task.timeout_s)
        raw = stored.get(snapshot_key(task.remote_topic, task.partition))
        return int(Snapshot.decode(raw).values.get("byte-count", 0)) if raw else 0
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


def start_metrics(
    task: CopyTask, records_before: int, bytes_before: int | None
) -> tuple[PartitionMetrics, MetricsPublisher] | None:
    """The partition's metrics recorder, continuing the stored counts; None when metrics are unavailable."""
    if task.metrics_topic is None or bytes_before is None:
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
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="copy-setup") as pool:
        bounds = pool.submit(
            partition_bounds, task.source, task.source_consumer, task.topic, task.partition, timeout_s=task.timeout_s
        )
        metric_bytes = pool.submit(load_metric_bytes, task)
        # Fencing first: the progress and map read below are final only once no older writer can commit.
        writer = TargetWriter(
            task.target,
            task.target_producer,
            transactional_id=task.transactional_id if task.exactly_once else None,
            timeout_s=task.timeout_s,
        )
        try:
            stored_progress = pool.submit(load_progress, task)
            stored = load_segments(task)
            progress = stored_progress.result()
            log_start, log_end = bounds.result()
            bytes_before = metric_bytes.result()
        except BaseException:
            writer.close()
            raise
    return _copy(task, writer, progress, stored, log_start, log_end, bytes_before, on_batch)


def _copy(
    task: CopyTask,
    writer: TargetWriter,
    progress: Progress | None,
    stored: list[Segment],
    log_start: int,
    log_end: int,
    bytes_before: int | None,
    on_batch: Callable[[CopyResult], None] | None,
) -> CopyResult:
    syncs_writer: TargetWriter | None = None
    reader: PartitionReader | None = None
    metrics: tuple[PartitionMetrics, MetricsPublisher] | None = None
    try:
        start = resolve_start(task, progress, log_start, log_end)
        epoch = progress.epoch + 1 if progress else 0
        copied_before = progress.records_copied if progress else 0
        down_end = progress.downstream_end if progress else 0
        offset_map = restore_map(stored, progress, start)
        lag = task.offset_lag_max
        held_syncs = prune(offset_map, log_start, lag) or []
        prune_pending = bool(held_syncs) or bool(offset_map.unflushed().deletes)
        seen_log_start = log_start
        result = CopyResult(task.topic, task.partition, task.remote_topic, start, start, down_end)
        if task.end is not None and start >= task.end and not prune_pending:
            return result
        metrics = start_metrics(task, copied_before, bytes_before)
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
        provenance = (task.source, task.target) if task.provenance else None
        chain, dead_letter = start_transforms(task)
        end, batch_records, batch_bytes = task.end, task.batch_records, task.batch_bytes
        deadline = None if task.run_seconds is None else time.monotonic() + task.run_seconds
        consumed_to = start
        committed_to = start
        while True:
            at_end = end is not None and consumed_to >= end
            if at_end and not prune_pending:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            batch_deadline = time.monotonic() + task.batch_ms / 1000
            batch = Batch(consumed_to)
            upstreams = batch.upstreams
            began = False
            while (
                not at_end
                and len(upstreams) < batch_records
                and batch.bytes < batch_bytes
                and time.monotonic() < batch_deadline
            ):
                messages = reader.read(min(batch_records - len(upstreams), 10000), 0.1)
                if not messages:
                    continue
                if not began:
                    writer.begin()
                    began = True
                if chain is None:
                    at_end = writer.forward(
                        messages, task.remote_topic, task.partition, batch, end=end, provenance=provenance
                    )
                else:
                    at_end = writer.forward_transformed(
                        messages,
                        task.remote_topic,
                        task.partition,
                        batch,
                        chain,
                        source_topic=task.topic,
                        end=end,
                        provenance=provenance,
                        dead_letter=dead_letter,
                    )
            consumed_to = batch.consumed_to
            result.dropped += batch.dropped
            if not began and consumed_to == committed_to and not prune_pending:
                continue
            result.bytes += batch.bytes
            polled_ms = int(time.time() * 1000)
            if not began:
                writer.begin()
            writer.flush()
            downstreams = batch.downstreams
            if batch.errors or len(downstreams) != len(upstreams):
                writer.abort()
                raise MirrorflowError(
                    f"flow {task.flow}: writing {task.remote_topic}-{task.partition} on '{task.target}' "
                    f"failed: {batch.errors[0] if batch.errors else 'delivery reports missing'}"
                )
            now_ms = int(time.time() * 1000)
            if upstreams:
                offset_map.record_batch(upstreams, downstreams)
                down_end = downstreams[-1] + 1
            offset_map.mark_consumed(consumed_to, downstream_end=down_end)
            moved = reader.log_start()
            if moved is not None and moved > seen_log_start:
                seen_log_start = moved
                held_syncs += prune(offset_map, moved, lag) or []
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
            prune_pending = False
            result.transactions += 1 if upstreams else 0
            if chain is not None:
                result.filtered, result.dead_lettered = chain.dropped, chain.dead_lettered
            result.next_upstream, result.downstream_end = consumed_to, down_end
            if batch.oldest_ts is not None:
                # MM2's replication-latency-ms: now minus the record timestamp, at acknowledgement.
                result.max_latency_ms = max(result.max_latency_ms, now_ms - batch.oldest_ts)
                result.latency_sum_ms += now_ms * len(upstreams) - batch.ts_sum
            syncs = held_syncs + offset_map.offset_syncs(lag, flush_latest=True)
            held_syncs = []
            if syncs_writer is not None and task.offset_syncs_topic is not None:
                for up, down in syncs:
                    sync = OffsetSync(task.topic, task.partition, up, down)
                    syncs_writer.produce(task.offset_syncs_topic, 0, sync.record_key(), sync.record_value())
                    result.offset_syncs += 1
                syncs_writer.poll()
            if metrics is not None:
                metrics[0].record_batch(
                    records=len(upstreams),
                    nbytes=batch.bytes,
                    oldest_ts=batch.oldest_ts,
                    newest_ts=batch.newest_ts,
                    ts_sum=batch.ts_sum,
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
        if chain is not None and (result.filtered or result.dead_lettered):
            log.info(
                "flow %s: %s-%s: transforms dropped %d record(s), dead-lettered %d",
                task.flow,
                task.topic,
                task.partition,
                result.filtered,
                result.dead_lettered,
            )
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
