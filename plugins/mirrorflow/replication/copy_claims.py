"""Who owns a partition at a boundary of continuous exactly-once runs: claims ordered by the runs' starts.

At a run boundary two runs copy the same partition for a moment. Each one fences the other's producer when it
starts (one transactional id per partition), reads the committed progress, and commits a progress of its own
before it reads a record: its claim. A run whose commit fails looks at the claim on record to learn why.

The order of fences is not the order of runs. A run can reach its fence late (a slow start, a read held on a
killed run's open transaction, a Spark task retried late), after a run that started later fenced and claimed.
By epochs alone (each claim's epoch is the one it read plus one), the later fence wins: the older run took the
partition and kept it for its whole run, while the newer run, fenced, took that claim for its successor's and
ended (tests/replication/test_handover_run_order.py). So every claim records when its run started
(`Progress.run_started_ms`, from `CopyTask.run_started_ms`, set when the run plans its tasks), and:
- a run that finds, before it fences, a claim of a run that started after its own leaves the partition at once:
  it fences nobody and copies nothing (`claimed_by_newer_run`, `left_to_newer_run`);
- a run whose commit failed and that finds the claim of a run that started before its own (the race the check
  before the fence cannot see: the older run read before the newer one claimed) takes the partition back: the
  range starts again (`RetakeClaim`), fencing the older run, which then finds the newer claim and hands over;
- equal starts (a retry of the same run's task) and unknown ones (0: a release before this field, `mirrorflow
  reset`, and every interval copy) compare by epoch alone, as before. An interval copy (the failover drain, which
  a continuous run planned after it may meet) records no start: a continuous run it fences hands over to it, where
  a retake would fence the drain back and fail its attempt (review s15).
The runs' starts come from the planning hosts' clocks; two runs of a flow start `run.seconds -
handover.seconds` apart (minutes), so only a clock error of that size could order them wrongly, and a claim
that started after this host's "now" is ordered by epoch alone (a host whose clock is far behind must not leave
every partition it is given).
"""

from __future__ import annotations

import time
from dataclasses import replace

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.progress import Progress
from mirrorflow.replication.copy_task import CopyResult, CopyTask

MAX_RETAKES = 5
"""How many times one range takes its partition back from older runs before it fails: each older run hands over
once it sees the newer claim, so more than a few means something else is fencing the copy."""

SUMMED = (
    "records",
    "bytes",
    "dropped",
    "transactions",
    "offset_syncs",
    "latency_sum_ms",
    "filtered",
    "dead_lettered",
    "schema_ids_not_ours",
)


class RetakeClaim(MirrorflowError):
    """A run that started earlier claimed this run's partition: the range starts again and takes it back."""

    def __init__(self, message: str, committed: CopyResult) -> None:
        super().__init__(message)
        self.committed = committed


def run_order(stored: Progress, run_started_ms: int, now_ms: int | None = None) -> int:
    """1 when `stored` was written by a run that started after `run_started_ms`, -1 before it, 0 when the same
    run or either start is not known. A start later than this host's clock now (`now_ms`) proves the two clocks
    disagree: not known either, so a host whose clock is behind is never made to leave every partition."""
    started = stored.run_started_ms
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if not started or not run_started_ms or started == run_started_ms or started > now_ms:
        return 0
    return 1 if started > run_started_ms else -1


def claimed_by_newer_run(stored: Progress | None, task: CopyTask) -> bool:
    """Whether the partition's committed progress is a claim of a run that started after this task's run."""
    return stored is not None and run_order(stored, task.run_started_ms) > 0


def left_to_newer_run(task: CopyTask, stored: Progress) -> CopyResult:
    """What a range returns when a newer run owns its partition already: handed over, nothing copied."""
    return CopyResult(
        task.topic,
        task.partition,
        task.remote_topic,
        stored.next_upstream,
        stored.next_upstream,
        stored.downstream_end,
        handed_over=True,
    )


def carried(earlier: CopyResult, later: CopyResult) -> CopyResult:
    """One range's result over a retake: the counts of both attempts, from the first attempt's start."""
    summed = {name: getattr(earlier, name) + getattr(later, name) for name in SUMMED}
    latency = max(earlier.max_latency_ms, later.max_latency_ms)
    return replace(later, start=earlier.start, max_latency_ms=latency, **summed)
