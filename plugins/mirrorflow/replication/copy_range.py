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
At-least-once: an idempotent producer; the segments are written after the records are flushed, and the progress
only after the segments are confirmed (`copy_commit`), so a crash or a refused write re-copies at most that batch.

A transaction closes at `batch_records`, `batch_bytes` or `batch_ms`, and in continuous mode also as soon as the
reader has caught up with the source (MM2's exactly-once source tasks commit per poll the same way): a copy that
keeps up commits small transactions every few tens of milliseconds, so records are visible to read_committed
consumers quickly; one that is behind fills long transactions, which cost fewer commits per record.

MM2 offset syncs are written after each commit by a separate, non-transactional producer (as MM2 does), at
every segment start and whenever downstream drift reaches `offset.lag.max`; a run first rewrites syncs an
earlier run lost, and fails clearly if its own are not all written (`offset_sync_writer`).

The map forgets history below the source log start (retention, `delete_records`): at start and whenever the
reader sees the log start move, segments wholly below it become tombstones in the next transaction, after
`offset_syncs` has seen their records.

Set-up reads (source bounds, stored progress, offset map, metrics and, once fencing is done, the offset-syncs
tail) run in parallel threads: they are round trips that release the GIL, and they cost more than copying a
small range.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import Segment
from mirrorflow.core.progress import Progress
from mirrorflow.kafka.metrics_store import MetricsPublisher
from mirrorflow.kafka.offsets import partition_bounds
from mirrorflow.kafka.record_size import RecordTooLarge, limit_now
from mirrorflow.kafka.transfer import Batch, PartitionReader, TargetWriter
from mirrorflow.replication.copy_commit import commit_batch
from mirrorflow.replication.copy_setup import (
    chain_totals,
    check_identity,
    identity_upgrade_pending,
    load_metric_bytes,
    load_progress,
    load_segments,
    log_chain_totals,
    prune,
    resolve_start,
    restore_map,
    start_metrics,
    start_transforms,
)
from mirrorflow.replication.copy_stall import CopyStalled, stalled_message
from mirrorflow.replication.copy_task import CopyResult, CopyTask, buffer_settings
from mirrorflow.replication.metrics import PartitionMetrics
from mirrorflow.replication.offset_sync_writer import OffsetSyncWriter, newest_offset_sync

__all__ = ["CopyStalled", "copy_range"]

log = logging.getLogger(__name__)

# How long one read waits for a full batch of records (librdkafka returns early only when the batch is full).
# Interval copies are behind by design and fill reads quickly; a continuous copy that has caught up would wait
# the whole timeout for records that trickle in, adding it to every record's latency, so it polls often.
READ_TIMEOUT_S = 0.1
CAUGHT_UP_READ_TIMEOUT_S = 0.01

# Metrics snapshots and MM2's "latest position" offset sync go out at most this often (and when the run ends);
# MM2 promotes its delayed syncs every offset.flush.interval.ms. A continuous copy that keeps up commits every
# few tens of milliseconds, and a write to two more topics per commit would be most of the brokers' work.
PUBLISH_INTERVAL_S = 1.0

Stop = Callable[[], bool]
"""Asked between transactions and while idle: True ends the copy early (a sibling range in the same Spark task
failed)."""


def copy_range(
    task: CopyTask,
    *,
    on_batch: Callable[[CopyResult], None] | None = None,
    stop: Stop | None = None,
    idle_limit_s: float | None = None,
) -> CopyResult:
    """Copy records of one partition until `task.end` (interval), `task.run_seconds` (continuous) or `stop`.

    `idle_limit_s`: an interval copy that reads nothing for that long while short of its end fails with
    `CopyStalled` instead of waiting on (the failover drain's bound). A record the writer refuses for its size
    makes the copy read the remote topic's limit again, once: raised since planning (a Spark retry keeps the
    planned task), the copy starts again with a writer that follows it; otherwise the error gives the limits
    read now."""
    try:
        return _copy_range(task, on_batch, stop, idle_limit_s)
    except RecordTooLarge as err:
        remote_limit = limit_now(task.target_producer, task.remote_topic, task.timeout_s)
        grown = remote_limit is not None and remote_limit > (err.writer_limit or 0)
        if err.operator_cap or err.topic != task.remote_topic or not grown:
            raise _explained(task, err, remote_limit) from err
        log.info("flow %s: %s's max.message.bytes is now %s: copying again", task.flow, task.remote_topic, remote_limit)
    try:
        return _copy_range(replace(task, max_message_bytes=remote_limit), on_batch, stop, idle_limit_s)
    except RecordTooLarge as err:
        raise _explained(task, err, remote_limit) from err


def _explained(task: CopyTask, err: RecordTooLarge, remote_limit: int | None) -> RecordTooLarge:
    """The refusal with the limits read now: the remote topic's, and the source topic's (a record above it
    arrived compressed)."""
    source_limit = limit_now(task.source_consumer, task.topic, task.timeout_s)
    return err.explained(remote_limit or err.writer_limit, source_limit)


def _copy_range(
    task: CopyTask,
    on_batch: Callable[[CopyResult], None] | None,
    stop: Stop | None,
    idle_limit_s: float | None,
) -> CopyResult:
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="copy-setup") as pool:
        bounds = pool.submit(
            partition_bounds,
            task.source,
            task.source_consumer,
            task.topic,
            task.partition,
            timeout_s=task.timeout_s,
            stable=task.start_at_latest and task.read_committed,
        )
        metric_bytes = pool.submit(load_metric_bytes, task)
        # Fencing first: the progress, map and offset-syncs tail read below are final only once no older writer
        # can commit (a zombie's syncs landing after the tail was read would be rewritten behind newer ones).
        writer = TargetWriter(
            task.target,
            task.target_producer,
            transactional_id=task.transactional_id if task.exactly_once else None,
            timeout_s=task.timeout_s,
            tuning=buffer_settings(task).writer,
            max_message_bytes=task.max_message_bytes,
        )
        try:
            newest_sync = pool.submit(newest_offset_sync, task)
            stored_progress = pool.submit(load_progress, task)
            stored = load_segments(task)
            progress = stored_progress.result()
            found = bounds.result()
            bytes_before = metric_bytes.result()
            synced = newest_sync.result()
        except BaseException:
            writer.close()
            raise
    # A resume compares with the true log end (the high watermark); a first start "at latest" begins where the
    # reader's isolation puts the latest record (a read_committed reader: the last stable offset).
    log_end = found.last_stable if progress is None else found.high_watermark
    bounds_found = (found.log_start, log_end)
    return _copy(task, writer, progress, stored, bounds_found, synced, bytes_before, on_batch, (stop, idle_limit_s))


def _copy(
    task: CopyTask,
    writer: TargetWriter,
    progress: Progress | None,
    stored: list[Segment],
    bounds: tuple[int, int],
    synced: tuple[int, int] | None,
    bytes_before: int | None,
    on_batch: Callable[[CopyResult], None] | None,
    stops: tuple[Stop | None, float | None] = (None, None),
) -> CopyResult:
    syncs: OffsetSyncWriter | None = None
    stop, idle_limit_s = stops
    reader: PartitionReader | None = None
    metrics: tuple[PartitionMetrics, MetricsPublisher] | None = None
    log_start, log_end = bounds
    try:
        source_id, remote_id = identity = check_identity(task, progress)
        start = resolve_start(task, progress, log_start, log_end)
        epoch = progress.epoch + 1 if progress else 0
        copied_before = progress.records_copied if progress else 0
        down_end = progress.downstream_end if progress else 0
        offset_map = restore_map(stored, progress, start)
        lag = task.offset_lag_max
        healed = 0
        if task.offset_syncs_topic is not None:
            syncs = OffsetSyncWriter(task)
            healed = syncs.heal(offset_map, synced, lag)  # before this run's syncs, and before pruning
        held_syncs = prune(offset_map, log_start, lag) or []
        prune_pending = bool(held_syncs) or bool(offset_map.unflushed().deletes)
        prune_pending = prune_pending or identity_upgrade_pending(progress, identity)  # commit once: record IDs
        # A first start "at latest" commits its start at once, even with nothing to copy: the next run resumes
        # there, and records written meanwhile are copied (each run would otherwise start at its own latest).
        # It commits that start before it reads anything, so an attempt that fails before its first commit of
        # records (a refused record, a killed task) is retried from there, not from a newer latest.
        commit_start_first = progress is None and task.start_at_latest
        prune_pending = prune_pending or commit_start_first
        seen_log_start = log_start
        result = CopyResult(task.topic, task.partition, task.remote_topic, start, start, down_end)
        result.offset_syncs = healed
        if task.end is not None and start >= task.end and not prune_pending:
            if syncs is not None:
                syncs.flush(start)
            return result
        metrics = start_metrics(task, copied_before, bytes_before)
        reader = PartitionReader(
            task.source,
            task.source_consumer,
            task.topic,
            task.partition,
            start,
            read_committed=task.read_committed,
            tuning=buffer_settings(task).reader,
        )
        provenance = (task.source, task.target) if task.provenance else None
        chain, dead_letter = start_transforms(task)
        buffers = buffer_settings(task)
        end, batch_records, batch_bytes = task.end, buffers.batch_records, buffers.batch_bytes
        deadline = None if task.run_seconds is None else time.monotonic() + task.run_seconds
        continuous = end is None
        read_timeout = CAUGHT_UP_READ_TIMEOUT_S if continuous else READ_TIMEOUT_S
        consumed_to = committed_to = start
        next_publish = 0.0  # the first commit publishes at once
        unpublished = False
        moved_at, moved_to = time.monotonic(), start

        def stalled() -> bool:
            """An interval copy short of its end that has not moved for `idle_limit_s`."""
            if idle_limit_s is None or end is None or consumed_to >= end:
                return False
            return time.monotonic() - moved_at >= idle_limit_s

        def ending() -> bool:
            """The run's time is up, a sibling range failed, or an interval copy has read nothing for
            `idle_limit_s`: checked between transactions and while idle."""
            return stalled() or (deadline is not None and time.monotonic() >= deadline) or (stop is not None and stop())

        while True:
            at_end = end is not None and consumed_to >= end
            if at_end and not prune_pending:
                break
            if consumed_to > moved_to:
                moved_at, moved_to = time.monotonic(), consumed_to
            if stalled():
                raise CopyStalled(stalled_message(task, consumed_to, idle_limit_s or 0))
            if ending():
                break
            batch_deadline = time.monotonic() + task.batch_ms / 1000
            batch = Batch(consumed_to)
            upstreams = batch.upstreams
            began = False
            while (
                not at_end
                and not commit_start_first
                and len(upstreams) < batch_records
                and batch.bytes < batch_bytes
                and time.monotonic() < batch_deadline
            ):
                wanted = min(batch_records - len(upstreams), 10000)
                messages = reader.read(wanted, read_timeout)
                if not messages:
                    if began and continuous:
                        break  # nothing more to read: commit what is open instead of holding it
                    if not began and ending():
                        break  # idle: nothing to commit, so stop now rather than at the transaction limit
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
                if continuous and (len(messages) < wanted or messages[-1].error() is not None):
                    # Caught up: the read drained what the consumer had fetched (or hit the source's end), so
                    # waiting longer would only hold these records back from read_committed consumers.
                    break
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
            result.records += len(upstreams)
            progress_now = Progress(
                task.topic,
                task.partition,
                consumed_to,
                down_end,
                copied_before + result.records,
                epoch,
                now_ms,
                source_id,
                remote_id,
            )
            commit_batch(writer, task, offset_map, progress_now)
            committed_to = consumed_to
            prune_pending = commit_start_first = False
            result.transactions += 1 if upstreams else 0
            if chain is not None:
                chain_totals(result, chain)
            result.next_upstream, result.downstream_end = consumed_to, down_end
            if batch.oldest_ts is not None:
                # MM2's replication-latency-ms: now minus the record timestamp, at acknowledgement.
                result.max_latency_ms = max(result.max_latency_ms, now_ms - batch.oldest_ts)
                result.latency_sum_ms += now_ms * len(upstreams) - batch.ts_sum
            due = time.monotonic() >= next_publish
            if due:
                next_publish = time.monotonic() + PUBLISH_INTERVAL_S
            pending_syncs = held_syncs + offset_map.offset_syncs(lag, flush_latest=due)
            if syncs is not None:
                result.offset_syncs += syncs.send(pending_syncs)
            held_syncs = []
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
                unpublished = not due
                if due:
                    _publish(metrics)
            if on_batch is not None:
                on_batch(result)
        # The run ends: the newest position gets its offset sync and the metrics their last snapshot.
        pending_syncs = held_syncs + offset_map.offset_syncs(lag, flush_latest=True)
        if syncs is not None:
            result.offset_syncs += syncs.send(pending_syncs)
            syncs.flush(committed_to)
        if metrics is not None and unpublished:
            _publish(metrics)
        if chain is not None:
            log_chain_totals(task, result)
        return result
    except BaseException:
        writer.abort()
        raise
    finally:
        if reader is not None:
            reader.close()
        writer.close()
        if syncs is not None:
            syncs.close()
        if metrics is not None:
            metrics[1].close()


def _publish(metrics: tuple[PartitionMetrics, MetricsPublisher]) -> None:
    snapshot = metrics[0].snapshot()
    metrics[1].publish(snapshot.key(), snapshot.encode())
