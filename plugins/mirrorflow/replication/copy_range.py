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

A transaction closes at `batch_records`, `batch_bytes` or `batch_ms`, and in continuous mode also once the reader
has caught up with the source and the transaction has been open `batch_min_ms` (100 ms, Kafka Streams' exactly-once
commit interval) or holds `linger_records` (32): a light partition that keeps up commits at most about 10 times a
second, so records are visible to read_committed consumers quickly without every fetch writing the state slots; a
loaded one commits once caught up; one that is behind fills long transactions, fewer commits per record.

MM2 offset syncs are written after each commit by a separate, non-transactional producer (as MM2 does), at
every segment start and whenever downstream drift reaches `offset.lag.max`; a run first rewrites syncs an
earlier run lost, and fails clearly if its own are not all written (`offset_sync_writer`).

The map forgets history below the source log start (retention, `delete_records`): at start and whenever the
reader sees the log start move, segments wholly below it become tombstones in the next transaction, after
`offset_syncs` has seen their records.

Set-up reads (stored progress, offset map, metrics, the offset-syncs tail, and the source bounds: beside them
exactly-once, once the progress is read at-least-once) run in parallel threads after fencing: they are round trips
that release the GIL, and they cost more than copying a small range; the state reader connects before the fence.
In continuous mode the next run's copy of a partition fences the running one (the
handover): the fenced run ends cleanly with what it committed (`CopyResult.handed_over`), never as an error a
Spark retry would answer by fencing the new owner back.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any, TypeVar

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.core.progress import Progress
from mirrorflow.kafka.compacted_log import LogReader
from mirrorflow.kafka.log_cache import LogCache
from mirrorflow.kafka.offsets import partition_bounds
from mirrorflow.kafka.partition_reader import PartitionReader
from mirrorflow.kafka.record_size import RecordTooLarge, limit_now
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.copy_claims import (
    MAX_RETAKES,
    RetakeClaim,
    carried,
    claimed_by_newer_run,
    left_to_newer_run,
)
from mirrorflow.replication.copy_commit import StateSlots
from mirrorflow.replication.copy_loop import CopyLoop, Stop
from mirrorflow.replication.copy_setup import (
    CopyMetrics,
    StoredBytes,
    check_identity,
    identity_upgrade_pending,
    load_metric_bytes,
    load_state,
    prune,
    read_map_ahead,
    resolve_start,
    restore_map,
    settled_slots,
    start_metrics,
    state_reader,
)
from mirrorflow.replication.copy_slots import PRE_READ_WAIT_S, after_fence
from mirrorflow.replication.copy_stall import CopyStalled
from mirrorflow.replication.copy_task import CopyResult, CopyTask, buffer_settings
from mirrorflow.replication.offset_sync_writer import OffsetSyncWriter, newest_offset_sync
from mirrorflow.replication.state_records import StoredSegments

__all__ = ["CopyStalled", "copy_range"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def copy_range(
    task: CopyTask,
    *,
    on_batch: Callable[[CopyResult], None] | None = None,
    stop: Stop | None = None,
    idle_limit_s: float | None = None,
    shared: LogCache | None = None,
) -> CopyResult:
    """Copy records of one partition until `task.end` (interval), `task.run_seconds` (continuous) or `stop`.

    `idle_limit_s`: an interval copy that reads nothing for that long while short of its end fails with
    `CopyStalled` instead of waiting on (the failover drain's bound). A record the writer refuses for its size
    makes the copy read the remote topic's limit again, once: raised since planning (a Spark retry keeps the
    planned task), the copy starts again with a writer that follows it; otherwise the error gives the limits
    read now. `shared`: the cache the ranges of one Spark task read their state slots through (`copy_group`)."""
    try:
        return _retaking(task, on_batch, stop, idle_limit_s, shared)
    except RecordTooLarge as err:
        remote_limit = limit_now(task.target_producer, task.remote_topic, task.timeout_s)
        grown = remote_limit is not None and remote_limit > (err.writer_limit or 0)
        if err.operator_cap or err.topic != task.remote_topic or not grown:
            raise _explained(task, err, remote_limit) from err
        log.info("flow %s: %s's max.message.bytes is now %s: copying again", task.flow, task.remote_topic, remote_limit)
    try:
        return _retaking(replace(task, max_message_bytes=remote_limit), on_batch, stop, idle_limit_s, shared)
    except RecordTooLarge as err:
        raise _explained(task, err, remote_limit) from err


def _retaking(
    task: CopyTask,
    on_batch: Callable[[CopyResult], None] | None,
    stop: Stop | None,
    idle_limit_s: float | None,
    shared: LogCache | None = None,
) -> CopyResult:
    """`_copy_range`, started again when a run that started before this one claimed the partition
    (`copy_claims.RetakeClaim`): this run takes it back for the rest of its run, and the result counts both
    attempts. A range that has to take its partition back more than `MAX_RETAKES` times fails."""
    began = time.monotonic()
    earlier: CopyResult | None = None
    attempt = task
    for _ in range(MAX_RETAKES + 1):
        try:
            result = _copy_range(attempt, on_batch, stop, idle_limit_s, shared)
            return result if earlier is None else carried(earlier, result)
        except RetakeClaim as err:
            log.info("%s", err)
            earlier = err.committed if earlier is None else carried(earlier, err.committed)
            if stop is not None and stop():
                # The range is ending (a sibling failed): a retake would fence the older run and end before its
                # claim, and the older run, fenced with no newer claim on record, would fail too.
                return earlier
            if task.run_seconds is not None:
                left_s = task.run_seconds - (time.monotonic() - began)
                if left_s <= 0:
                    return earlier
                attempt = replace(task, run_seconds=left_s)
    raise MirrorflowError(
        f"flow {task.flow}: the copy of {task.topic}-{task.partition} took its partition back from copies of "
        f"earlier runs {MAX_RETAKES} times and was fenced again: something other than a run boundary fences this "
        f"partition's producer (transactional id {task.transactional_id}); the task fails for Spark to retry"
    )


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
    shared: LogCache | None = None,
) -> CopyResult:
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="copy-setup") as pool:
        # Fencing first: the progress, map and offset-syncs tail read below are final only once no older writer
        # can commit (a zombie's syncs landing after the tail was read would be rewritten behind newer ones). A
        # continuous exactly-once copy reads its progress ahead (`state_reader`) BEFORE it fences: a newer run's
        # claim there means the partition is not this run's, and it leaves without fencing anybody
        # (`copy_claims`). Its map is read ahead while its writer connects, and the fence waits for that read
        # (`PRE_READ_WAIT_S` at most): the old run copies on meanwhile (a loaded partition's read took up to 1.5 s,
        # all of it with nothing copied while the fence came first; session 18). The fences' order no longer
        # decides who keeps the partition (the claims' run starts do), so the read ahead may delay the fence.
        ahead = pool.submit(state_reader, task, shared)
        map_ahead: Future[LogReader] | None = None
        if task.exactly_once and task.end is None:
            found_ahead = ahead.result()
            if claimed_by_newer_run(found_ahead.progress, task):
                found_ahead.reader.close()
                assert found_ahead.progress is not None  # claimed_by_newer_run says so
                return _left(task, found_ahead.progress)
            via = map_ahead = pool.submit(read_map_ahead, task, found_ahead)
        else:
            via = pool.submit(lambda: ahead.result().reader)
        try:
            writer = TargetWriter(
                task.target,
                task.target_producer,
                transactional_id=task.transactional_id if task.exactly_once else None,
                timeout_s=task.timeout_s,
                tuning=buffer_settings(task).writer,
                max_message_bytes=task.max_message_bytes,
                connect_topic=task.remote_topic,
                abort_ahead=True,  # a predecessor's open transaction aborted without librdkafka's 500 ms pause
                before_fence=None if map_ahead is None else lambda: wait([map_ahead], timeout=PRE_READ_WAIT_S),
            )
        except BaseException:
            pool.submit(_close_reader, via)
            raise
        try:  # after the fence: its end bounds the age of the state topics' partition counts (`after_fence`)
            fenced_at = time.monotonic()
            metric_bytes = pool.submit(load_metric_bytes, task, shared, fenced_at)  # a predecessor's last snapshot
            newest_sync = pool.submit(newest_offset_sync, task)
            stored_state = pool.submit(
                lambda: load_state(task, after_fence(via.result(), fenced_at), ahead.result().fold)
            )
            # The source bounds after the fence, beside the state read when there is one: the fence settles every
            # transaction of a predecessor (the run this one hands over from, or a zombie), so no progress beyond a
            # log end read from now on can be committed, and a boundary waits for one round trip fewer. Without a
            # fence (at-least-once) only after the progress: a predecessor still running commits a progress
            # beyond a log end read any earlier, which would look like a re-created source topic.
            bounds = pool.submit(
                _after,
                None if writer.transactional else stored_state,
                partition_bounds,
                task.source,
                task.source_consumer,
                task.topic,
                task.partition,
                timeout_s=task.timeout_s,
                stable=task.start_at_latest and task.read_committed,
            )
            progress, progress_slots, stored, map_slots = stored_state.result()
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
    slots = StateSlots(progress_slots, map_slots, claimed=settled_slots(progress))
    return _copy(
        task, writer, (progress, stored, slots), bounds_found, synced, bytes_before, on_batch, (stop, idle_limit_s)
    )


def _left(task: CopyTask, stored: Progress) -> CopyResult:
    log.info(
        "flow %s: %s-%d is copied by a run that started after this one (its claim at upstream %d): this run "
        "leaves it to that run",
        task.flow,
        task.topic,
        task.partition,
        stored.next_upstream,
    )
    return left_to_newer_run(task, stored)


def _close_reader(via: Future[LogReader]) -> None:
    """Close the state reader opened for a copy that failed to start (a failure to open it is the read's)."""
    with contextlib.suppress(Exception):
        via.result().close()


def _owes_commit(
    task: CopyTask,
    offset_map: OffsetMap,
    held_syncs: list[tuple[int, int]],
    progress: Progress | None,
    identity: tuple[str, str],
    slots: StateSlots,
) -> bool:
    """Whether the range commits once even with nothing to copy: pruned runs to tombstone (with their held
    offset syncs), topic IDs to record in the progress, state to move up its slots, or a progress to record as
    settled there (`copy_slots`)."""
    owed = bool(held_syncs) or bool(offset_map.unflushed().deletes) or slots.moving
    upgrade = identity_upgrade_pending(progress, identity) or slots.owes_claim(task.exactly_once)
    return owed or (progress is not None and upgrade)


def _after(first: Future[Any] | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` once `first` (if any) is done (its failure is reported where `first` is awaited)."""
    if first is not None:
        wait([first])
    return fn(*args, **kwargs)


def _copy(
    task: CopyTask,
    writer: TargetWriter,
    state: tuple[Progress | None, StoredSegments, StateSlots],
    bounds: tuple[int, int],
    synced: tuple[int, int] | None,
    bytes_before: StoredBytes | None,
    on_batch: Callable[[CopyResult], None] | None,
    stops: tuple[Stop | None, float | None] = (None, None),
) -> CopyResult:
    """Settle where to start and what the map holds, heal the offset syncs an earlier run lost, then run the
    record loop (`copy_loop.CopyLoop`); every client is closed whatever happens, a failure aborts the open
    transaction."""
    syncs: OffsetSyncWriter | None = None
    reader: PartitionReader | None = None
    metrics: CopyMetrics | None = None
    log_start, log_end = bounds
    progress, stored, slots = state
    try:
        identity = check_identity(task, progress)
        start = resolve_start(task, progress, log_start, log_end)
        down_end = progress.downstream_end if progress else 0
        offset_map = restore_map(stored, progress, start)
        lag = task.offset_lag_max
        healed = 0
        if task.offset_syncs_topic is not None:
            syncs = OffsetSyncWriter(task)
            healed = syncs.heal(offset_map, synced, lag)  # before this run's syncs, and before pruning
        held_syncs = prune(offset_map, log_start, lag) or []
        pending = _owes_commit(task, offset_map, held_syncs, progress, identity, slots)
        # A first start "at latest" commits its start at once, even with nothing to copy: the next run resumes
        # there, and records written meanwhile are copied (each run would otherwise start at its own latest).
        # It commits that start before it reads anything, so an attempt that fails before its first commit of
        # records (a refused record, a killed task) is retried from there, not from a newer latest.
        commit_start_first = progress is None and task.start_at_latest
        result = CopyResult(task.topic, task.partition, task.remote_topic, start, start, down_end)
        result.offset_syncs = healed
        if task.end is not None and start >= task.end and not (pending or commit_start_first):
            if syncs is not None:
                syncs.flush(start)
            return result
        metrics = start_metrics(task, progress.records_copied if progress else 0, bytes_before)
        reader = PartitionReader(
            task.source,
            task.source_consumer,
            task.topic,
            task.partition,
            start,
            read_committed=task.read_committed,
            tuning=buffer_settings(task).reader,
        )
        parts = (task, writer, reader, offset_map, result)
        loop = CopyLoop(*parts, progress=progress, identity=identity, syncs=syncs, metrics=metrics, slots=slots)
        # A continuous exactly-once copy commits its progress (with its epoch) before it reads: the claim that
        # tells the run it fenced that a successor took over (`CopyLoop.run`), and a woken zombie that it must not
        # probe. A transaction of its own, not the first one with records: that one may take as long as a backlog's
        # first batch (up to `batch_ms`, 64 MB to flush), and a fenced run that waited for it longer than
        # HANDOVER_CLAIM_WAIT_S would fail, be retried by Spark and fence the successor back (review s14,
        # tests/replication/test_handover_claims.py). It costs one commit at every run boundary.
        claim = task.exactly_once and task.end is None
        loop.pending, loop.commit_start_first = pending or commit_start_first or claim, commit_start_first or claim
        loop.held_syncs, loop.seen_log_start = held_syncs, log_start
        loop.stop, loop.idle_limit_s = stops
        return loop.run(on_batch)
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
            metrics.publisher.close()
