"""Rounds of a continuous exactly-once copy inside one Spark application (issue 19, `mirrorflow.copy.round.seconds`;
docs/airflow.md "Rounds inside one Spark application" and "The leased application" tell the whole story).

Every `round.seconds` the application plans again and starts a Spark job (one task) for each planned group no
job of this run copies (`round_groups.same_ranges`); a round that changes nothing starts nothing. A group whose
task ended early (a drain, the next DAG run) starts again only after a whole round. A new task fences the running
ranges of its partitions; a superseded task still running `SUPERSEDED_GRACE_S` after its successors became
active is cancelled. Claims: round k of Airflow try t claims at the DAG run's start + (t - 1) * `TRY_SPAN_MS` + k
ms, capped before the next DAG run and at now. A leased application (`copy_app`) instead reads its lease before
every round, plans only while it holds it, dates each round's claims at that read, runs to the lease's end,
renews its ranges a round ahead when the lease grows, forgets finished jobs (`copy_totals`), beats after every
round, and fails when it cannot plan for as long as a supervisor believes a heartbeat. The pause marker is read
before each round after the first (paused: every task cancelled; unknown: the round skipped). This module only
decides; the caller plans, runs and cancels (tests/replication/test_copy_rounds.py tests it without Spark).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.copy_totals import RoundsOutcome, fold_results
from mirrorflow.replication.round_claims import TRY_SPAN_MS, try_started_ms
from mirrorflow.replication.round_groups import partitions_of, same_ranges, why_changed

log = logging.getLogger(__name__)

ROUND_MARGIN_S = 15.0
"""How long before the next DAG run's start the last round may start."""
SUPERSEDED_GRACE_S = 20.0
"""How long a superseded Spark task may run on once the tasks that replaced it are active: its fenced ranges end
as handed over when they next write; one that copies nothing is cancelled then."""
END_GRACE_S = 120.0
"""How long after the run's end jobs may still run (their ranges end by themselves) before they are cancelled."""
LEASE_WAIT_S = 30.0
"""How long a leased application waits at its start for the lease naming it."""
RENEW_AHEAD_S = 30.0
"""Leased applications: a round renews a group whose ranges end within a round and this long, so that its
successor is copying before they stop."""


Group = list[CopyTask]  # as `round_groups.Group`
Plan = Callable[[float, int], tuple[list[Group], int]]
"""(seconds left in the run, the round's claim start in epoch ms) -> (the groups of ranges, partitions quiet)."""
Run = Callable[[Group, str], list[CopyResult]]
"""Runs one group as the Spark job group named by the second argument until its ranges end; raises on failure."""
Cancel = Callable[[list[str]], None]
"""Cancels the Spark job groups named."""
Active = Callable[[str], bool]
"""Whether the Spark job group named has a task running or done (it got a slot)."""
Paused = Callable[[], str | None]
"""Why the flow is paused now, or None; raises when that cannot be told."""
Lease = Callable[[], int | None]
"""A leased application's end by its lease now (epoch ms); None when there is no lease, -1 when another
application holds it (this one starts no new round and ends with its ranges)."""
Beat = Callable[["RoundsOutcome"], object]
"""Called after every round of a leased application: its heartbeat (`copy_app`)."""


@dataclass
class _Job:
    group: Group
    name: str
    results: list[CopyResult] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    cancelled: bool = False
    superseded_by: list[_Job] | None = None
    superseded_at: float | None = None
    """When every job in `superseded_by` was first seen active."""
    ended_at: float | None = None
    ends_at: float = 0.0
    """When its ranges end by themselves (the driver's clock)."""


class CopyRounds:
    """Plans a round every `round_seconds` until the last round's time and runs each changed group as a Spark job
    of its own; ends when no round is due any more and every job has ended (see the module docstring)."""

    def __init__(
        self,
        *,
        run_seconds: float,
        round_seconds: float,
        handover_seconds: float,
        run_started_ms: int,
        plan: Plan,
        run: Run,
        cancel: Cancel,
        paused: Paused | None = None,
        active: Active | None = None,
        try_number: int = 0,
        lease: Lease | None = None,
        beat: Beat | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        margin_s: float | None = None,
        grace_s: float | None = None,
        lease_wait_s: float = LEASE_WAIT_S,
    ) -> None:
        self._run_s, self._round_s = run_seconds, round_seconds
        self._margin_s = ROUND_MARGIN_S if margin_s is None else margin_s
        # As `overlapping_runs` decides; a leased application has no successor run to leave time to.
        overlap = handover_seconds if 0 < handover_seconds < run_seconds and lease is None else 0.0
        self._last_round_s = max(0.0, run_seconds - overlap - self._margin_s)
        self._lease, self._beat = lease, beat
        self._t0, self._leased_ms, self._held, self._failing_since = 0.0, 0, False, 0.0
        self._base_ms, self._try = run_started_ms, max(try_number, 0)
        self._plan, self._run, self._cancel, self._paused = plan, run, cancel, paused
        self._active = active or (lambda name: True)
        self._clock, self._wall_ms = clock, wall_ms
        self._grace_s = SUPERSEDED_GRACE_S if grace_s is None else grace_s
        self._plan_wait_s = 3 * round_seconds + 60.0  # as long as a supervisor believes a heartbeat
        self._lease_wait_s = lease_wait_s
        self._wake = threading.Event()
        self._stopping = False
        self._jobs: list[_Job] = []
        self._threads: list[threading.Thread] = []

    def round_started_ms(self, index: int) -> int:
        """Round `index`'s claim start (0-based): ordered by try, then round; never as late as the next run, nor
        after now (a claim dated after a reader's now is ordered by epoch alone, `copy_claims`: a cleared run's
        start is reset to its clearing while its try number keeps counting), nor before the run's start."""
        if self._lease is not None:  # only the lease's holder plans, so its newest round owns the partitions
            return max(self._base_ms, self._leased_ms)
        offset = try_started_ms(0, self._try) + min(index, TRY_SPAN_MS - 1)
        latest = min(self._base_ms + int(self._last_round_s * 1000), self._wall_ms())
        return max(self._base_ms, min(self._base_ms + offset, latest))

    def copy(self) -> RoundsOutcome:
        """Runs the rounds; raises the first failure of a job (the others cancelled) or of the first plan."""
        t0 = self._t0 = self._clock()
        self._await_lease()
        out = RoundsOutcome([], [])
        next_round = 0.0
        try:
            while True:
                elapsed = self._clock() - t0
                self._raise_failed()
                more = out.rounds == 0 or self._in_time(elapsed)
                if not more and self._lease is not None and elapsed >= next_round:  # a lease may grow until the end
                    next_round = elapsed + self._round_s
                    more = self._extend() and self._in_time(elapsed)
                    next_round = elapsed if more else next_round  # a lease that grew late: the round now
                if not more and all(job.done for job in self._jobs):
                    break
                if elapsed > self._run_s + END_GRACE_S:
                    log.warning("Spark copy jobs still running %.0f s after the run's end are cancelled", END_GRACE_S)
                    self._stop_all()
                    break
                if more and elapsed >= next_round:
                    out.rounds += 1
                    next_round = max(out.rounds * self._round_s, elapsed + self._round_s / 2)  # not back to back
                    if not self._extend():
                        continue  # another application holds the lease: no round, no heartbeat of ours
                    if out.rounds == 1 or self._may_plan(out):
                        self._round(out, self._run_s - elapsed)
                    if out.paused is not None:
                        self._stop_all()
                        break
                    self._after_round(out)
                self._cancel_superseded(out)
                wait = min(1.0, next_round - (self._clock() - t0)) if more else 1.0
                self._wake.wait(max(0.05, wait))
                self._wake.clear()
        except BaseException:
            self._stop_all()
            raise
        self._join()
        for job in self._jobs:
            out.results.extend(job.results)
        return out

    def _in_time(self, elapsed: float) -> bool:
        """Whether a round may still start: by this driver's clock since it began, and by the wall clock since
        the DAG run's start (the driver began after it; a leased application outlives its DAG run)."""
        last_ms = self._base_ms + int(self._last_round_s * 1000)
        return elapsed <= self._last_round_s and (self._lease is not None or self._wall_ms() < last_ms)

    def _await_lease(self) -> None:
        """A leased application's supervisor writes the lease just after submitting it: wait for it (up to
        `LEASE_WAIT_S`) rather than take the previous holder's lease for another's and end at once."""
        if self._lease is None:
            return
        waited = self._clock()
        while not self._extend(waiting=True) and self._clock() - waited < self._lease_wait_s:
            self._wake.wait(1.0)
        self._last_round_s = max(0.0, self._run_s - self._margin_s) if self._held else self._last_round_s

    def _extend(self, waiting: bool = False) -> bool:
        """A leased application runs on to its lease's end when the lease (for this application) ends later.
        False once another application holds the lease: this one starts no new round and ends with its ranges.
        Read before every round: the round's claims are dated at this read (`round_started_ms`)."""
        if self._lease is None:
            return True
        self._leased_ms = max(self._wall_ms(), self._leased_ms + 1)  # never back: a renewal is newer than its job
        try:
            until_ms = self._lease()
        except Exception as err:
            log.warning("the copy application's lease could not be read (it plans only as its holder): %s", err)
            return self._held
        if until_ms is None and not waiting:  # no record seen (a metadata blip): as a failed read
            return self._held
        self._held = until_ms is not None and until_ms >= 0
        if not self._held:  # another application holds it (or none does): no round, no heartbeat of ours
            self._last_round_s = min(self._last_round_s, self._clock() - self._t0)
            return False
        elapsed = self._clock() - self._t0  # the lease's end from now: a wall-clock step moves nothing
        run_s = elapsed + (until_ms - self._leased_ms) / 1000 if until_ms is not None else 0.0
        self._run_s = max(self._run_s, run_s)
        self._last_round_s = max(0.0, self._run_s - self._margin_s)  # also after a read that did not name it
        return True

    def _after_round(self, out: RoundsOutcome) -> None:
        """A leased application forgets the jobs it will not look at again (a year of rounds must not pile up
        results, groups and threads) and beats its heart."""
        if self._lease is None:
            return
        forgotten = [j for j in self._jobs if j.done and (j.superseded_by is not None or j.cancelled)]
        for job in forgotten:
            fold_results(out.folded, job.results)
        gone = {id(j) for j in forgotten}
        self._jobs = [j for j in self._jobs if id(j) not in gone]
        out.groups = [g for g in out.groups if any(j.group is g for j in self._jobs)]
        self._threads = [t for t in self._threads if t.is_alive()]
        out.live = sum(1 for j in self._jobs if not j.done)
        if self._beat is not None:
            try:
                self._beat(out)
            except Exception as err:
                log.warning("the copy application's heartbeat was not written: %s", err)

    def _may_plan(self, out: RoundsOutcome) -> bool:
        """The pause check before a round: False when paused (`out.paused` set) or when it cannot be told now."""
        if self._paused is None:
            return True
        try:
            out.paused = self._paused()
        except Exception as err:
            log.warning("copy round %d skipped: the pause check failed, so nothing new starts: %s", out.rounds, err)
            return False
        if out.paused is not None:
            log.warning("%s: the copy's Spark tasks are cancelled and no new round starts", out.paused)
        return out.paused is None

    def _round(self, out: RoundsOutcome, left_s: float) -> None:
        """Plans a round and starts the groups no running task copies; marks the tasks they supersede. A later
        round that cannot plan (a broker not answering) starts nothing: only the first round's failure is the run's."""
        try:
            groups, out.quiet = self._plan(left_s, self.round_started_ms(out.rounds - 1))
        except Exception as err:
            # A leased application can run for months: one that cannot plan for a while must fail (and so be
            # replaced), not beat on while its ranges run out.
            self._failing_since = self._failing_since or self._clock()
            if out.rounds == 1 or (self._lease is not None and self._clock() - self._failing_since > self._plan_wait_s):
                raise
            log.warning("copy round %d not planned (the running Spark tasks copy on): %s", out.rounds, err)
            return
        self._failing_since = 0.0
        owners = [job for job in self._jobs if job.superseded_by is None and not job.cancelled]
        now = self._clock()
        ended = [
            j for j in owners if j.ended_at is not None and (now - j.ended_at >= self._round_s or self._expired(j))
        ]
        gone = {id(job) for job in ended}
        owners = [job for job in owners if id(job) not in gone]
        renewed = {id(job) for job in owners if self._renews(job)}
        kept: set[int] = set()
        changed = []
        for group in filter(None, groups):  # a group a job of this run copies, or copied until lately, stays
            match = next(
                (j for j in owners if id(j) not in kept | renewed and same_ranges(group, j.group)),
                None,
            )
            if match is None:
                changed.append(group)
            else:
                kept.add(id(match))
        for job in ended:  # started again below when planned again; forgotten either way
            job.superseded_by = []
        if not changed:
            return
        restarts = sum(1 for g in changed if any(same_ranges(g, j.group) for j in ended))
        renewals = sum(1 for g in changed if any(id(j) in renewed and same_ranges(g, j.group) for j in owners))
        out.restarts += restarts
        out.renewals += renewals
        if self._jobs and len(changed) > restarts + renewals:
            out.handovers += 1
        if self._jobs and len(changed) > renewals:
            why = "; ".join(sorted({why_changed(g, owners, ended) for g in changed}))
            log.warning(
                "copy round %d: %d of %d Spark tasks start (%s)",
                out.rounds,
                len(changed),
                len(kept) + len(changed),
                why,
            )
        started = [self._start(group, left_s) for group in changed]
        out.groups.extend(changed)
        covered = frozenset().union(*(partitions_of(g) for g in changed))
        for job in owners:
            if not job.done and id(job) not in kept and partitions_of(job.group) <= covered:
                job.superseded_by = [s for s in started if partitions_of(s.group) & partitions_of(job.group)]

    def _cancel_superseded(self, out: RoundsOutcome) -> None:
        """Cancels superseded tasks still running `grace_s` after every task replacing them became active (a
        task waiting for a slot has fenced nothing yet); a cancel that came before Spark had the job is sent
        again while the job runs."""
        now = self._clock()
        late = []
        for job in self._jobs:
            if job.done or job.superseded_by is None:
                continue
            if job.cancelled:
                self._cancel([job.name])
                continue
            successors = job.superseded_by
            if job.superseded_at is None and all(s.done or s.cancelled or self._active(s.name) for s in successors):
                job.superseded_at = now
            if job.superseded_at is not None and now - job.superseded_at >= self._grace_s:
                late.append(job)
        for job in late:
            job.cancelled = True
        if late:
            out.cancelled += len(late)
            log.info("%d superseded Spark tasks still running are cancelled", len(late))
            self._cancel([job.name for job in late])

    def _expired(self, job: _Job) -> bool:
        """A leased application's job whose ranges ran to their planned end (not taken by another copy) while the
        lease now runs on: started again at once, not a round later."""
        ended = job.ended_at or 0.0
        return self._lease is not None and ended >= job.ends_at - 1.0 and self._t0 + self._run_s > ended + 1.0

    def _renews(self, job: _Job) -> bool:
        """Whether a leased application starts `job`'s group again: its ranges end within a round (and
        `RENEW_AHEAD_S`) while the lease now runs at least a round past them."""
        if self._lease is None or job.done:
            return False
        now = self._clock()
        lease_end = self._t0 + self._run_s
        return job.ends_at - now < self._round_s + RENEW_AHEAD_S and lease_end > job.ends_at + self._round_s

    def _start(self, group: Group, left_s: float) -> _Job:
        job = _Job(group, f"mirrorflow-copy-{uuid.uuid4().hex[:12]}", ends_at=self._clock() + left_s)
        self._jobs.append(job)
        thread = threading.Thread(target=self._job, args=(job,), name=job.name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return job

    def _job(self, job: _Job) -> None:
        """One group's Spark job, in its own thread; a failure is raised again by the planning thread unless the
        job was cancelled on purpose."""
        try:
            if not self._stopping:
                job.results = self._run(job.group, job.name)
        except BaseException as err:
            if job.superseded_by is not None and not (job.cancelled or self._stopping):
                log.warning("a superseded Spark copy task failed (its partitions have new tasks): %s", err)
            elif not (job.cancelled or self._stopping):
                job.error = err
        finally:
            job.ended_at = self._clock()
            job.done = True
            self._wake.set()

    def _raise_failed(self) -> None:
        for job in self._jobs:
            if job.error is not None:
                raise job.error

    def _stop_all(self) -> None:
        """Cancels every job (a failure, a pause) and waits for them: a job submitted while the cancel ran is
        cancelled again until its thread ends."""
        self._stopping = True
        for job in self._jobs:
            job.cancelled = True
        self._join()

    def _join(self) -> None:
        while True:
            alive = [job for job in self._jobs if not job.done]
            if not alive:
                break
            if self._stopping:
                self._cancel([job.name for job in alive])
            self._wake.wait(1.0)
            self._wake.clear()
        for thread in self._threads:
            thread.join()
