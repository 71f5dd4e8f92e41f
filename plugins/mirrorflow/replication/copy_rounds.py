"""Rounds of a continuous exactly-once copy inside one Spark application (issue 19, `mirrorflow.copy.round.seconds`;
docs/airflow.md "Rounds inside one Spark application" and "The leased application" tell the whole story).

Every `round.seconds` the application plans again and starts a Spark job (one task) for each planned group no
job of this run copies (`round_groups.same_ranges`); a round that changes nothing starts nothing. A group whose
task ended early (a drain, the next DAG run) starts again only after a whole round. A new task fences the running
ranges of its partitions; a superseded task still running `SUPERSEDED_GRACE_S` after its successors became
active is cancelled (`round_jobs`). Claims: round k of Airflow try t claims at the DAG run's start + (t - 1) *
`TRY_SPAN_MS` + k ms, capped before the next DAG run and at now. A leased application (`copy_app`) instead
reads its lease before every round, plans only while it holds it, dates each round's claims at that read, plans
its ranges `RANGE_SPAN_RUNS` DAG runs past the lease and cancels them itself at the lease's end,
renews them a round ahead once the lease outgrows that, forgets finished jobs (`copy_totals`), beats after every
round, and fails when it cannot plan for as long as a supervisor believes a heartbeat. The pause marker is read
before each round after the first (paused: every task cancelled; unknown: the round skipped). This module only
decides; the caller plans, runs and cancels (tests/replication/test_copy_rounds.py tests it without Spark).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mirrorflow.replication.copy_totals import RoundsOutcome, fold_results
from mirrorflow.replication.round_claims import TRY_SPAN_MS, try_started_ms
from mirrorflow.replication.round_groups import partitions_of, same_ranges, why_changed
from mirrorflow.replication.round_jobs import Active, Cancel, Group, Job, RoundJobs, Run

log = logging.getLogger(__name__)

ROUND_MARGIN_S = 15.0
"""How long before the next DAG run's start the last round may start."""
END_GRACE_S = 120.0
"""How long after the run's end jobs may still run (their ranges end by themselves) before they are cancelled."""
LEASE_WAIT_S = 30.0
"""How long a leased application waits at its start for the lease naming it."""
RANGE_SPAN_RUNS = 3
"""Leased applications: how many `run.seconds` past the lease's end its ranges plan (`span_s`). A DAG run's lease
extension then renews none of them (each renewal is an in-application handover: a fence, a state read, a new
transaction: a 2.5 s window at 46k records/s when all renewed at once, docs/benchmarks.md "Session 22"); a range
is renewed once the lease outgrows its span, every three DAG runs or so. At the lease's end the application
cancels the ranges itself (`_lease_ended`). Bounded, not an hour: a range whose partition another copy took
stays in its running job (`same_ranges`) until the job ends, and a hung driver's executors copy on for a span."""
RENEW_AHEAD_S = 30.0
"""Leased applications: a round renews a group whose ranges end within a round and this long, so that its
successor is copying before they stop."""


Plan = Callable[[float, int], tuple[list[Group], int]]
"""(seconds left in the run, the round's claim start in epoch ms) -> (the groups of ranges, partitions quiet)."""
Paused = Callable[[], str | None]
"""Why the flow is paused now, or None; raises when that cannot be told."""
Lease = Callable[[], int | None]
"""A leased application's end by its lease now (epoch ms); None when there is no lease, -1 when another
application holds it (this one starts no new round and ends with its ranges)."""
Beat = Callable[["RoundsOutcome"], object]
"""Called after every round of a leased application: its heartbeat (`copy_app`)."""


class CopyRounds(RoundJobs):
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
        span_s: float = 0.0,
    ) -> None:
        self._run_s, self._round_s = run_seconds, round_seconds
        self._margin_s = ROUND_MARGIN_S if margin_s is None else margin_s
        # As `overlapping_runs` decides; a leased application has no successor run to leave time to.
        overlap = handover_seconds if 0 < handover_seconds < run_seconds and lease is None else 0.0
        self._last_round_s = max(0.0, run_seconds - overlap - self._margin_s)
        self._lease, self._beat = lease, beat
        self._t0, self._leased_ms, self._held, self._failing_since = 0.0, 0, False, 0.0
        self._base_ms, self._try = run_started_ms, max(try_number, 0)
        super().__init__(run, cancel, active, clock, grace_s)
        self._plan, self._paused = plan, paused
        self._clock, self._wall_ms = clock, wall_ms
        self._plan_wait_s = 3 * round_seconds + 60.0  # as long as a supervisor believes a heartbeat
        self._lease_wait_s = lease_wait_s
        self._span_s = span_s if lease is not None else 0.0
        self._read_ok, self._end_doubt_since = False, 0.0

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
                if not more and all(job.done for job in self._jobs) and (self._lease is None or not self._held):
                    break  # a holder ends only at its lease's end, read once more (`_lease_ended`)
                if not more and self._lease is not None and elapsed >= self._run_s:
                    if self._lease_ended():
                        break
                    if self._clock() - t0 < self._run_s:
                        next_round = elapsed  # it grew: a round now (a failing read waits a second below)
                        continue
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
                end_in = self._run_s - (self._clock() - t0) if self._lease is not None else wait
                wait = min(wait, end_in) if end_in > 0 else wait  # wake at the lease's end
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
        self._read_ok = False
        try:
            until_ms = self._lease()
        except Exception as err:
            log.warning("the copy application's lease could not be read (it plans only as its holder): %s", err)
            return self._held
        if until_ms is None and not waiting:  # no record seen (a metadata blip): as a failed read
            return self._held
        self._read_ok = until_ms is not None
        self._held = until_ms is not None and until_ms >= 0
        self._end_doubt_since = 0.0  # a read answered: the next failing one at an end gets its whole grace
        if not self._held:  # another application holds it (or none does): no round, no heartbeat of ours
            self._last_round_s = min(self._last_round_s, self._clock() - self._t0)
            return False
        elapsed = self._clock() - self._t0  # the lease's end from now: a wall-clock step moves nothing
        run_s = elapsed + (until_ms - self._leased_ms) / 1000 if until_ms is not None else 0.0
        self._run_s = max(self._run_s, run_s)
        self._last_round_s = max(0.0, self._run_s - self._margin_s)  # also after a read that did not name it
        return True

    def _lease_ended(self) -> bool:
        """At the lease's end (read once more: it may have grown since the last round) a leased application cancels
        its ranges, which plan a span past it, as a pause does. Not fenced: a fence could hit the partitions' next
        owner (a late DAG run's new application, an interval copy) in the moment since the read (review of
        session 22). A cancelled range's open transaction holds at most `transaction.max.ms` of records; the
        coordinator aborts it about 70 s later (`transaction.timeout.ms` and its check's interval), or the next
        copy's fence at once. False when the lease grew, and for up to `RENEW_AHEAD_S` while the read fails (a
        supervisor may have extended it in its last 30 s: read once a second meanwhile; the ranges run on)."""
        self._extend()
        now = self._clock()
        if now - self._t0 < self._run_s - 0.1:  # grew (a read just at the end can move it by a rounding's ms)
            self._end_doubt_since = 0.0
            return False
        if not self._read_ok and self._held:
            self._end_doubt_since = self._end_doubt_since or now
            if now - self._end_doubt_since < RENEW_AHEAD_S:
                return False
        live = sum(1 for job in self._jobs if not job.done)
        if live:
            log.info("the copy application's lease ended: its %d Spark tasks are cancelled", live)
        self._stop_all()
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
            left_s += self._span_s
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

    def _expired(self, job: Job) -> bool:
        """A leased application's job whose ranges ran to their planned end (not taken by another copy) while the
        lease now runs on: started again at once, not a round later."""
        ended = job.ended_at or 0.0
        return self._lease is not None and ended >= job.ends_at - 1.0 and self._t0 + self._run_s > ended + 1.0

    def _renews(self, job: Job) -> bool:
        """Whether a leased application starts `job`'s group again: its ranges end within a round (and
        `RENEW_AHEAD_S`) while the lease now runs at least a round past them."""
        if self._lease is None or job.done:
            return False
        now = self._clock()
        lease_end = self._t0 + self._run_s
        return job.ends_at - now < self._round_s + RENEW_AHEAD_S and lease_end > job.ends_at + self._round_s
