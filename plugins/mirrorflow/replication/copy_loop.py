"""The record loop of one copy range: read a batch, write it, commit records, map and progress together, then
publish offset syncs and metrics (MM2's MirrorSourceTask poll/commit cycle). `copy_range` sets it up.

One pass of `CopyLoop.run`:
  1. `_fill`: read into one open transaction until `batch_records`, `batch_bytes`, `batch_ms` (a continuous run's
     first: `copy_task.transaction_ms`), the interval's end, or (continuous) the reader has caught up and the
     transaction is `batch_min_ms` old or holds `linger_records` (`copy_task.lingered`);
  2. `_commit`: flush, check every delivery, extend the offset map, store the progress and commit
     (`copy_commit.commit_batch`): records, map and progress become visible together;
  3. `_after_commit`: the offset syncs due (`offset_sync_writer`), the newest position at most every
     `PUBLISH_INTERVAL_S`, and the metrics snapshot at most every `SNAPSHOT_INTERVAL_S`.
The run ends at the interval's end, the continuous run's time, a `stop()`, or with `CopyStalled` when an
interval copy has read nothing for `idle_limit_s`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.core.progress import Progress
from mirrorflow.kafka.compacted_log import LogReader
from mirrorflow.kafka.operation_error import KafkaOperationError, may_hide_fence
from mirrorflow.kafka.partition_reader import PartitionReader
from mirrorflow.kafka.transfer import Batch, TargetWriter
from mirrorflow.replication.copy_claims import RetakeClaim, run_order
from mirrorflow.replication.copy_commit import StateSlots, commit_batch
from mirrorflow.replication.copy_setup import CopyMetrics, chain_totals, log_chain_totals, prune, start_transforms
from mirrorflow.replication.copy_slots import RECENT_COUNT_S, load_progress
from mirrorflow.replication.copy_stall import CopyStalled, stalled_message
from mirrorflow.replication.copy_task import CopyResult, CopyTask, buffer_settings, lingered, transaction_ms
from mirrorflow.replication.offset_sync_writer import OffsetSyncWriter

log = logging.getLogger(__name__)

HANDOVER_CLAIM_WAIT_S = 30.0
"""How long a fenced continuous copy waits for its successor's claim before it fails instead (`CopyLoop.run`)."""

# How long one read waits for a full batch (librdkafka returns early only then). Interval copies are behind by design
# and fill reads quickly; a caught-up continuous copy would add the whole wait to every record's latency.
READ_TIMEOUT_S = 0.1
CAUGHT_UP_READ_TIMEOUT_S = 0.01

# MM2's "latest position" offset sync goes out at most this often (and when the run ends), as MM2 promotes its
# delayed syncs every offset.flush.interval.ms: a caught-up copy commits often (`copy_task.lingered`).
PUBLISH_INTERVAL_S = 1.0

# Metrics snapshots go out at the first commit, then at most this often, and when the run ends. Every copy start reads
# its state slots' uncleaned tail, snapshots included (a second apart, they were 40% of those bytes, docs/scaling.md);
# readers zero a rate only after a minute without one (`metrics.WINDOW_S`).
SNAPSHOT_INTERVAL_S = 10.0

Stop = Callable[[], bool]
"""Asked between transactions and while idle: True ends the copy early (a sibling range in the same Spark task
failed)."""


class CopyLoop:
    """The loop's state between transactions. `pending` says a commit is owed even with no record (map pruning,
    a topic-identity upgrade, a first start "at latest" that commits its start before reading)."""

    def __init__(
        self,
        task: CopyTask,
        writer: TargetWriter,
        reader: PartitionReader,
        offset_map: OffsetMap,
        result: CopyResult,
        *,
        progress: Progress | None,
        identity: tuple[str, str],
        syncs: OffsetSyncWriter | None,
        metrics: CopyMetrics | None,
        slots: StateSlots,
    ) -> None:
        self.task, self.writer, self.reader, self.offset_map, self.result = task, writer, reader, offset_map, result
        self.syncs, self.metrics, self.slots = syncs, metrics, slots
        self.source_id, self.remote_id = identity
        self.epoch = progress.epoch + 1 if progress else 0
        self.copied_before = progress.records_copied if progress else 0
        self.down_end = result.downstream_end
        self.consumed_to = self.committed_to = result.start
        self.chain, self.dead_letter = start_transforms(task)
        self.provenance = (task.source, task.target) if task.provenance else None
        buffers = buffer_settings(task)
        self.batch_records, self.batch_bytes = buffers.batch_records, buffers.batch_bytes
        self.continuous = task.end is None
        self.read_timeout = CAUGHT_UP_READ_TIMEOUT_S if self.continuous else READ_TIMEOUT_S
        self.deadline = None if task.run_seconds is None else time.monotonic() + task.run_seconds
        self.pending = False
        self.commit_start_first = False
        self.held_syncs: list[tuple[int, int]] = []
        self.seen_log_start = 0
        self.next_publish = self.next_snapshot = 0.0  # the first commit publishes at once
        self.unpublished = False
        self.moved_at, self.moved_to = time.monotonic(), result.start
        self.stop: Stop | None = None
        self.idle_limit_s: float | None = None
        self.commits = 0
        self.attempted: Progress | None = None  # the progress of the last commit tried (`_claimant`)
        self.committed = result  # continuous: a copy of the result as of the last commit (`run`)

    def _stalled(self) -> bool:
        """An interval copy short of its end that has not moved for `idle_limit_s`."""
        end = self.task.end
        if self.idle_limit_s is None or end is None or self.consumed_to >= end:
            return False
        return time.monotonic() - self.moved_at >= self.idle_limit_s

    def _ending(self) -> bool:
        """The run's time is up, a sibling range failed, or an interval copy has read nothing for
        `idle_limit_s`: checked between transactions and while idle."""
        if self._stalled() or (self.deadline is not None and time.monotonic() >= self.deadline):
            return True
        return self.stop is not None and self.stop()

    def run(self, on_batch: Callable[[CopyResult], None] | None) -> CopyResult:
        """The loop, then `_finish`. A continuous copy fenced by the next run's copy of its partition (the
        handover) ends cleanly with what it committed: raising would make Spark retry the task, and the retry
        would fence the new owner in turn. A fence is a handover only once the successor's claim (its first
        commit, made before it reads) is seen: the coordinator also fences a transaction open longer than
        transaction.timeout.ms, and then nobody else copies the partition, so the error stands for Spark to retry.
        A commit that failed with an unknown broker error may hide a fence (`may_hide_fence`): the successor's
        claim decides it too, and without one the error stands.

        Any error ends the run as handed over when a successor's claim is already there, and that is looked at
        before the writer is probed for a fence: a copy stopped (SIGSTOP, a paused VM) past
        transaction.timeout.ms wakes to expired records and a commit that times out, not to a fence; raising would
        have Spark retry it, fencing the newer run, and the probe's abort bumps the producer epoch, which the
        coordinator has been seen to accept from such a zombie, fencing the newer run too (issue 17's zombie
        across regrouping, tests/spark/test_faults_zombie.py).

        A claim of a run that started before this one is no successor's: the older run fenced this one late, and
        this run takes the partition back (`RetakeClaim`, `copy_claims`).
        """
        self.committed = replace(self.result)
        try:
            return self._run(on_batch)
        except MirrorflowError as err:
            if not (self.continuous and self.writer.transactional):
                raise
            claim = self._claimant(0.0)
            if claim is None:
                fenced = self.writer.fenced(err)
                if not (fenced or may_hide_fence(err)):
                    raise
                claim = self._claimant(HANDOVER_CLAIM_WAIT_S)
                if claim is None:
                    if not fenced:
                        raise
                    raise MirrorflowError(
                        f"flow {self.task.flow}: the exactly-once copy of {self.task.topic}-{self.task.partition} "
                        f"was fenced, and no newer copy of the partition committed within "
                        f"{HANDOVER_CLAIM_WAIT_S:.0f} s: its transaction was probably open longer than "
                        "transaction.timeout.ms (the target's coordinator aborts it). The open transaction is "
                        f"aborted; the task fails so that it is retried from the committed progress ({err})"
                    ) from err
            if claim == "older":
                if self.syncs is not None:  # the retake rewrites them after its fence; late ones would land behind
                    self.syncs.discard()
                raise RetakeClaim(
                    f"flow {self.task.flow}: a copy of {self.task.topic}-{self.task.partition} planned by a run that "
                    f"started before this one claimed the partition ({err}): this run takes it back",
                    replace(self.committed),
                ) from err
            return self._handed_over(err)

    def _handed_over(self, err: MirrorflowError) -> CopyResult:
        """What a run that a newer copy of its partition took over returns: what it had committed."""
        if self.syncs is not None:
            self.syncs.discard()
        log.info(
            "flow %s: %s-%d handed over at upstream %d: a newer copy of the partition fenced this one; its open "
            "transaction is aborted and the new copy resumes from the committed progress (%s)",
            self.task.flow,
            self.task.topic,
            self.task.partition,
            self.committed_to,
            err,
        )
        return replace(self.committed, handed_over=True)

    def _claimant(self, wait_s: float) -> Literal["newer", "older"] | None:
        """Whose claim is on record: "newer" when a successor committed one (a progress with a newer epoch than
        this run's, or with this run's epoch when this run never committed: both started from the same progress)
        and its run did not start before this one; "older" for such a claim of a run that started before this
        one (`copy_claims`); None when there is none. Waits up to `wait_s` for one (after a fence: the successor
        fences before it reads its state and commits). The polls read through one remembering reader: each after
        the first reads what was committed since (`LogReader`), with a count up to `RECENT_COUNT_S` old."""
        deadline = time.monotonic() + wait_s
        task = self.task
        with LogReader(task.target, task.target_consumer, timeout_s=task.timeout_s, remember=True) as via:
            while True:
                via.counts_after = time.monotonic() - RECENT_COUNT_S
                try:
                    stored, _ = load_progress(task, via)
                except MirrorflowError as err:  # a failed read (an open transaction held too long): not seen yet
                    log.debug("reading the successor's claim: %s", err)
                    stored = None
                if stored is not None and (
                    stored.epoch > self.epoch
                    or (stored.epoch == self.epoch and not self.commits and not self._own(stored))
                ):
                    return "older" if run_order(stored, task.run_started_ms) < 0 else "newer"
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.5)

    def _own(self, stored: Progress) -> bool:
        """Whether `stored` is this run's own commit: one whose client reported an error (a commit_transaction
        that timed out while EndTxn went on) lands all the same, with this run's epoch before it counted a commit;
        taken for a successor's claim, the run would end as handed over with nobody copying the partition."""
        tried = self.attempted
        return tried is not None and (stored.next_upstream, stored.timestamp_ms) == (
            tried.next_upstream,
            tried.timestamp_ms,
        )

    def _run(self, on_batch: Callable[[CopyResult], None] | None) -> CopyResult:
        end = self.task.end
        while True:
            at_end = end is not None and self.consumed_to >= end
            if at_end and not self.pending:
                break
            if self.consumed_to > self.moved_to:
                self.moved_at, self.moved_to = time.monotonic(), self.consumed_to
            if self._stalled():
                raise CopyStalled(stalled_message(self.task, self.consumed_to, self.idle_limit_s or 0))
            if self._ending():
                break
            batch = Batch(self.consumed_to)
            began = self._fill(batch, at_end)
            self.consumed_to = batch.consumed_to
            self.result.dropped += batch.dropped
            if not began and self.consumed_to == self.committed_to and not self.pending:
                continue
            polled_ms, now_ms = self._commit(batch, began)
            self._after_commit(batch, polled_ms, now_ms)
            if on_batch is not None:
                on_batch(self.result)
        self._finish()
        return self.result

    def _fill(self, batch: Batch, at_end: bool) -> bool:
        """Read into `batch` (one transaction, begun on the first record); True when a transaction began."""
        task, writer, upstreams = self.task, self.writer, batch.upstreams
        batch_deadline = time.monotonic() + transaction_ms(task, self.consumed_to == self.result.start) / 1000
        began, linger_until = False, batch_deadline
        while (
            not at_end
            and not self.commit_start_first
            and len(upstreams) < self.batch_records
            and batch.bytes < self.batch_bytes
            and time.monotonic() < batch_deadline
        ):
            wanted = min(self.batch_records - len(upstreams), 10000)
            messages = self.reader.read(wanted, self.read_timeout)
            if not messages:
                if began and self.continuous and lingered(linger_until, len(upstreams), task.linger_records):
                    break  # nothing more to read: commit what is open instead of holding it
                if not began and self._ending():
                    break  # idle: nothing to commit, so stop now rather than at the transaction limit
                continue
            if not began:
                writer.begin()
                began, linger_until = True, time.monotonic() + task.batch_min_ms / 1000
            if self.chain is None:
                at_end = writer.forward(
                    messages, task.remote_topic, task.partition, batch, end=task.end, provenance=self.provenance
                )
            else:
                at_end = writer.forward_transformed(
                    messages,
                    task.remote_topic,
                    task.partition,
                    batch,
                    self.chain,
                    source_topic=task.topic,
                    end=task.end,
                    provenance=self.provenance,
                    dead_letter=self.dead_letter,
                )
            caught_up = len(messages) < wanted or messages[-1].error() is not None
            if self.continuous and caught_up and lingered(linger_until, len(upstreams), task.linger_records):
                # Caught up (the read drained what the consumer had fetched, or hit the source's end) and open
                # for `batch_min_ms` or holding `linger_records`: waiting longer would only hold these records
                # back; a light partition committing sooner would write the state slots at every fetch.
                break
        return began

    def _commit(self, batch: Batch, began: bool) -> tuple[int, int]:
        """Flush, check the deliveries, extend the map, commit records + map + progress; returns (polled, acked)
        wall-clock milliseconds for the metrics."""
        task, writer, result, offset_map = self.task, self.writer, self.result, self.offset_map
        upstreams, consumed_to = batch.upstreams, self.consumed_to
        result.bytes += batch.bytes
        polled_ms = int(time.time() * 1000)
        if not began:
            writer.begin()
        writer.flush()
        downstreams = batch.downstreams
        if batch.fenced is not None:
            raise KafkaOperationError(task.target, f"writing {task.remote_topic}-{task.partition}", batch.fenced)
        if batch.errors or len(downstreams) != len(upstreams):
            writer.abort()
            raise MirrorflowError(
                f"flow {task.flow}: writing {task.remote_topic}-{task.partition} on '{task.target}' "
                f"failed: {batch.errors[0] if batch.errors else 'delivery reports missing'}"
            )
        now_ms = int(time.time() * 1000)
        if upstreams:
            offset_map.record_batch(upstreams, downstreams)
            self.down_end = downstreams[-1] + 1
        offset_map.mark_consumed(consumed_to, downstream_end=self.down_end)
        moved = self.reader.log_start()
        if moved is not None and moved > self.seen_log_start:
            self.seen_log_start = moved
            self.held_syncs += prune(offset_map, moved, task.offset_lag_max) or []
        result.records += len(upstreams)
        progress = Progress(
            task.topic,
            task.partition,
            consumed_to,
            self.down_end,
            self.copied_before + result.records,
            self.epoch,
            now_ms,
            self.source_id,
            self.remote_id,
            # Claims order continuous runs only: an interval copy (the failover drain) records no start, so a
            # continuous run it fences hands over rather than fence it back (`copy_claims`).
            run_started_ms=task.run_started_ms if self.continuous else 0,
        )
        self.attempted = progress
        commit_batch(writer, task, offset_map, progress, self.slots)
        self.committed_to = consumed_to
        self.commits += 1
        # A move of the partition's state up its slots ends with a second commit (`copy_slots`), and the commit
        # after it records the partition as settled: owed at once.
        self.pending = self.slots.moving or self.slots.owes_claim(writer.transactional)
        self.commit_start_first = False
        result.transactions += 1 if upstreams else 0
        if self.chain is not None:
            chain_totals(result, self.chain)
        result.next_upstream, result.downstream_end = consumed_to, self.down_end
        if self.continuous:
            self.committed = replace(result)
        if batch.oldest_ts is not None:
            # MM2's replication-latency-ms: now minus the record timestamp, at acknowledgement.
            result.max_latency_ms = max(result.max_latency_ms, now_ms - batch.oldest_ts)
            result.latency_sum_ms += now_ms * len(upstreams) - batch.ts_sum
        return polled_ms, now_ms

    def _after_commit(self, batch: Batch, polled_ms: int, now_ms: int) -> None:
        """The offset syncs now due, and the metrics snapshot when one is due."""
        due = time.monotonic() >= self.next_publish
        if due:
            self.next_publish = time.monotonic() + PUBLISH_INTERVAL_S
        pending_syncs = self.held_syncs + self.offset_map.offset_syncs(self.task.offset_lag_max, flush_latest=due)
        if self.syncs is not None:
            self.result.offset_syncs += self.syncs.send(pending_syncs)
        self.held_syncs = []
        if self.metrics is not None:
            self.metrics.recorder.record_batch(
                records=len(batch.upstreams),
                nbytes=batch.bytes,
                oldest_ts=batch.oldest_ts,
                newest_ts=batch.newest_ts,
                ts_sum=batch.ts_sum,
                polled_ms=polled_ms,
                acked_ms=now_ms,
                next_upstream=self.consumed_to,
            )
            snapshot = time.monotonic() >= self.next_snapshot
            self.unpublished = not snapshot
            if snapshot:
                self.next_snapshot = time.monotonic() + SNAPSHOT_INTERVAL_S
                self.metrics.publish()

    def _finish(self) -> None:
        """The run ends: the newest position gets its offset sync and the metrics their last snapshot."""
        pending_syncs = self.held_syncs + self.offset_map.offset_syncs(self.task.offset_lag_max, flush_latest=True)
        if self.syncs is not None:
            self.result.offset_syncs += self.syncs.send(pending_syncs)
            self.syncs.flush(self.committed_to)
        if self.metrics is not None and self.unpublished:
            self.metrics.publish()
        if self.chain is not None:
            log_chain_totals(self.task, self.result)
