"""Rounds of a continuous exactly-once copy inside one Spark application (issue 19,
`mirrorflow.copy.round.seconds`).

Without rounds a continuous run plans its copy once and holds that plan for `mirrorflow.copy.run.seconds`: new
topics and partitions wait for the next run, and every run boundary starts a new Spark application (spark-submit,
a JVM, a session, Python workers) beside the running copy, which on a busy host is what a boundary costs most
(docs/benchmarks.md, session 18). With rounds the application plans again every `round.seconds` and starts
Spark tasks only for the groups of ranges that changed (`spread_quiet`'s grouping of the new plan against the
running one): a partition that appeared, a quiet partition that woke up or went quiet, a topic whose identity
or `max.message.bytes` changed. A round that changes nothing starts nothing, so a steady flow runs its ranges
for the whole application with no boundary at all. A changed group's new task fences the old task's ranges
exactly as the next run fences the current one (same transactional ids, claims ordered by run start:
`copy_claims`): the old ranges end as handed over, the rest of the old Spark tasks keep copying.

The claims' order holds across applications. A round's start is the planning host's clock, never later than
`run.seconds - handover.seconds - ROUND_MARGIN_S` after the DAG run's start: the next DAG run (started at
`run.seconds - handover.seconds`, `airflow.schedule.overlapping_runs`) is always newer, so a late round never
takes a partition back from it; an Airflow retry of this run is newer than the rounds of the try it replaces.
No round starts after that time either.

Two rounds' tasks run at once for a moment, so the application holds twice the slots one plan needs
(`copy_job`: `local[2N]` for `local[N]`; the Airflow task doubles `spark.cores.max`). Before each round after the
first the flow's pause marker is read: a paused flow (a failover moved its clients) gets no new round and its
running tasks are cancelled. This module only decides; planning, running and cancelling Spark jobs are the
caller's (`spark.copy_job`), so the decisions are tested without Spark (tests/replication/test_copy_rounds.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mirrorflow.replication.copy_task import CopyResult, CopyTask

log = logging.getLogger(__name__)

ROUND_MARGIN_S = 15.0
"""How long before the next DAG run's start the last round may start (a host clock a little ahead stays older)."""

Groups = list[list[CopyTask]]
Plan = Callable[[float, int], tuple[Groups, int]]
"""(seconds left in the run, the round's start in epoch ms) -> (the groups of ranges, how many partitions quiet)."""
Run = Callable[[Groups], list[CopyResult]]
"""Runs groups as one Spark job until their ranges end; raises when one fails for good."""
Paused = Callable[[], str | None]
"""Why the flow is paused now, or None."""

GroupKey = frozenset[tuple[object, ...]]


def rounds_apply(delivery: str, round_seconds: float, run_seconds: float) -> bool:
    """Whether a continuous run copies in rounds: exactly-once only (an at-least-once copy has no fence, and two
    of its copies of a partition at once could skip records), and a round shorter than the run."""
    return delivery == "exactly-once" and 0 < round_seconds < run_seconds


def group_key(group: list[CopyTask]) -> GroupKey:
    """What makes two planned groups the same Spark task: their ranges and what a range cannot change while it
    runs (topic identities, the remote's record size limit, the state topics' partitions)."""
    return frozenset(
        (
            t.topic,
            t.partition,
            t.remote_topic,
            t.source_topic_id,
            t.remote_topic_id,
            t.max_message_bytes,
            t.state_partitions,
        )
        for t in group
    )


@dataclass
class _Job:
    groups: Groups
    results: list[CopyResult] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False


@dataclass
class RoundsOutcome:
    """What the rounds did: every range's result, every group started (for `idle_counts`), the counts."""

    results: list[CopyResult]
    groups: Groups
    rounds: int = 0
    """Rounds planned."""
    handovers: int = 0
    """Rounds after the first that started Spark tasks (changed groups)."""
    quiet: int = 0
    """Partitions found quiet by the last round."""
    paused: str | None = None


class CopyRounds:
    """Plans a round every `round_seconds` until the last round's time, runs the changed groups, ends when every
    started job has ended (see the module docstring). `cancel` stops every running job of the application."""

    def __init__(
        self,
        *,
        run_seconds: float,
        round_seconds: float,
        handover_seconds: float,
        run_started_ms: int,
        plan: Plan,
        run: Run,
        cancel: Callable[[], None],
        paused: Paused | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        margin_s: float | None = None,
    ) -> None:
        self._run_s, self._round_s = run_seconds, round_seconds
        margin = ROUND_MARGIN_S if margin_s is None else margin_s
        overlap = handover_seconds if 0 < handover_seconds < run_seconds else 0.0  # as `overlapping_runs` decides
        self._last_round_s = max(0.0, run_seconds - overlap - margin)
        self._base_ms = run_started_ms
        self._plan, self._run, self._cancel, self._paused = plan, run, cancel, paused
        self._clock, self._wall_ms = clock, wall_ms
        self._wake = threading.Event()
        self._jobs: list[_Job] = []
        self._threads: list[threading.Thread] = []

    def round_started_ms(self) -> int:
        """This round's claim start: now, capped so that the next DAG run is always newer."""
        return min(self._wall_ms(), self._base_ms + int(self._last_round_s * 1000))

    def copy(self) -> RoundsOutcome:
        t0 = self._clock()
        out = RoundsOutcome([], [])
        running: set[GroupKey] = set()
        next_round = 0.0
        try:
            while True:
                elapsed = self._clock() - t0
                self._raise_failed()
                if self._jobs and all(job.done for job in self._jobs):
                    break  # every range ended: the run's end, or handed over to a newer run
                more = out.rounds == 0 or elapsed <= self._last_round_s
                if more and elapsed >= next_round:
                    if out.rounds and self._stop_if_paused(out):
                        break
                    running = self._round(out, running, self._run_s - elapsed)
                    next_round = out.rounds * self._round_s
                elif not more and not self._jobs:
                    break  # nothing was ever copyable in this run
                wait = min(1.0, next_round - (self._clock() - t0)) if more else 1.0
                self._wake.wait(max(0.05, wait))
                self._wake.clear()
        except BaseException:
            self._cancel()
            self._join()
            raise
        self._join()
        for job in self._jobs:
            out.results.extend(job.results)
        return out

    def _round(self, out: RoundsOutcome, running: set[GroupKey], left_s: float) -> set[GroupKey]:
        """Plans a round and starts the groups not running; a later round that cannot plan (a broker not
        answering) starts nothing, and the running tasks copy on: only the first round's failure is the run's."""
        out.rounds += 1
        try:
            groups, out.quiet = self._plan(left_s, self.round_started_ms())
        except Exception as err:
            if out.rounds == 1:
                raise
            log.warning("copy round %d not planned (the running Spark tasks copy on): %s", out.rounds, err)
            return running
        planned = {group_key(g): g for g in groups if g}
        changed = [g for key, g in planned.items() if key not in running]
        if changed:
            if self._jobs:
                out.handovers += 1
                log.info(
                    "copy round %d: %d of %d Spark tasks changed, handed over", out.rounds, len(changed), len(planned)
                )
            self._start(changed)
            out.groups.extend(changed)
        return set(planned) if planned else running

    def _stop_if_paused(self, out: RoundsOutcome) -> bool:
        if self._paused is None:
            return False
        try:
            reason = self._paused()
        except Exception as err:  # the check could not be made: no new round now, the next one asks again
            log.warning("copy round skipped: the pause check failed: %s", err)
            return False
        if reason is None:
            return False
        log.warning("%s: the copy's Spark tasks are cancelled and no new round starts", reason)
        out.paused = reason
        self._cancel()
        return True

    def _start(self, groups: Groups) -> None:
        job = _Job(groups)
        self._jobs.append(job)
        thread = threading.Thread(target=self._job, args=(job,), name="mirrorflow-copy-round", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _job(self, job: _Job) -> None:
        try:
            job.results = self._run(job.groups)
        except BaseException as err:  # raised again by the planning thread
            job.error = err
        finally:
            job.done = True
            self._wake.set()

    def _raise_failed(self) -> None:
        for job in self._jobs:
            if job.error is not None:
                raise job.error

    def _join(self) -> None:
        for thread in self._threads:
            thread.join()
