"""Rounds of a continuous exactly-once copy inside one Spark application (issue 19,
`mirrorflow.copy.round.seconds`).

Without rounds a continuous run plans its copy once and holds that plan for `mirrorflow.copy.run.seconds`: new
topics and partitions wait for the next run, and every run boundary starts a new Spark application (spark-submit,
a JVM, a session, Python workers) beside the running copy, which on a busy host is what a boundary costs most
(docs/benchmarks.md, sessions 18 and 20). With rounds the application plans again every `round.seconds` and each
group of ranges (one Spark task) runs as a Spark job of its own, so the driver can start and cancel single tasks.
A round starts a job for every planned group that no job of this run has copied (`same_ranges`): a partition
that appeared, a regrouping, a topic re-created or whose `max.message.bytes` changed. A round that changes
nothing starts nothing, so a steady flow runs its ranges for the whole application with no boundary at all. A
group whose task ended early (another copy took its partitions: a failover's drain, an interval copy, the next
DAG run) is started again only once it has been ended for a whole round: a drain is left a round to finish (a
restart fences it, and it has a few attempts), a copy that stopped leaves its partitions to this run again, and
a newer run keeps what it owns (the restarted ranges find its claim and leave at their first state read). A
drain still running when a round restarts its partitions' group is fenced once per round; it retakes, within
its own limits (`copy_claims.MAX_RETAKES` per attempt, five attempts).

A new task fences the running ranges of its partitions, as the next DAG run's do (same transactional ids; claims
ordered by run start, `copy_claims`); the superseded task's ranges end as handed over when they next write. One
still running `SUPERSEDED_GRACE_S` after every task that replaced it became active in Spark (its ranges fenced
within seconds of that) copies nothing and never learns it was fenced: it is cancelled, so it does not hold the
slot the next change needs. A superseded task whose partitions are not all in the new tasks (a topic no longer
replicated) is left to end with the run, and the failure of a superseded task is logged, not the run's.

The claims' order rests on the scheduler's clock: round k of Airflow try t starts its claims at the DAG run's
start + (t - 1) * `TRY_SPAN_MS` + k milliseconds (k < `TRY_SPAN_MS`), capped at `run.seconds - handover.seconds -
ROUND_MARGIN_S` after it and at the driver's now (never before the run's start). A run without rounds claims at
the run's start, every try alike, as before rounds. The next
DAG run (started `run.seconds - handover.seconds` after this one, `airflow.schedule.overlapping_runs`) is newer
than every round of this run while the run's start was on time; a retry of this run is newer than the rounds of
the try it replaces, even if that try's driver died after many rounds. No round starts after that time either,
by the driver's clock and by the wall clock against the DAG run's start. Jobs still running
`END_GRACE_S` after the run's end (a task that waited for a slot) are cancelled, so the run ends.

Two rounds' tasks run at once for a moment, so the application holds twice the slots one plan needs
(`spark.copy_rounds_job`: `local[2N]` for `local[N]`; the Airflow task doubles a derived `spark.cores.max`).
Before each round after the first the flow's pause marker is read: a paused flow (a failover drained, fenced and
then paused it) gets no new round and its tasks are cancelled; a check that cannot be made skips the round
(nothing is planned or started until a check answers). This module only decides; planning, running and
cancelling Spark jobs are the caller's, so the decisions are tested without Spark
(tests/replication/test_copy_rounds.py).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from mirrorflow.replication.copy_task import CopyResult, CopyTask

log = logging.getLogger(__name__)

ROUND_MARGIN_S = 15.0
"""How long before the next DAG run's start the last round may start."""
SUPERSEDED_GRACE_S = 20.0
"""How long a superseded Spark task may run on once the tasks that replaced it are active: its fenced ranges end
as handed over when they next write; one that copies nothing is cancelled then."""
END_GRACE_S = 120.0
"""How long after the run's end jobs may still run (their ranges end by themselves) before they are cancelled."""
TRY_SPAN_MS = 10_000
"""Claim-start milliseconds per Airflow try: round k of try t claims at the run's start + (t - 1) * span + k."""


def try_started_ms(run_started_ms: int, try_number: int) -> int:
    """Where the claims of an Airflow try of a run with rounds begin (Airflow counts from 1; 0: not run by
    Airflow): later tries are newer than the rounds of earlier ones (`CopyRounds.round_started_ms` also keeps
    them from dating after now)."""
    return run_started_ms + max(try_number - 1, 0) * TRY_SPAN_MS


Group = list[CopyTask]
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


def rounds_apply(delivery: str, round_seconds: float, run_seconds: float) -> bool:
    """Whether a continuous run copies in rounds: exactly-once only (an at-least-once copy has no fence, and two
    of its copies of a partition at once could skip records), and a round shorter than the run."""
    return delivery == "exactly-once" and 0 < round_seconds < run_seconds


def partitions_of(group: Group) -> frozenset[tuple[str, int]]:
    return frozenset((t.topic, t.partition) for t in group)


def same_ranges(planned: Group, running: Group) -> bool:
    """Whether a planned group can be left to the Spark task running `running`: the same partitions, and nothing
    known about them changed. A topic ID or a `max.message.bytes` this round's lookup could not give ("" or
    None), or state topics seen with one partition (unknown), count as unchanged: one failed lookup must not
    hand every task over."""
    if partitions_of(planned) != partitions_of(running):
        return False
    ran = {(t.topic, t.partition): t for t in running}
    return all(_unchanged(t, ran[(t.topic, t.partition)]) for t in planned)


def _unchanged(new: CopyTask, old: CopyTask) -> bool:
    if new.remote_topic != old.remote_topic:
        return False
    known = ((new.source_topic_id, old.source_topic_id), (new.remote_topic_id, old.remote_topic_id))
    if any(a and b and a != b for a, b in known):
        return False
    sizes = (new.max_message_bytes, old.max_message_bytes)
    if None not in sizes and sizes[0] != sizes[1]:
        return False
    return new.state_partitions <= 1 or new.state_partitions == old.state_partitions


def _why_changed(group: Group, owners: list[_Job], ended: list[_Job]) -> str:
    """What differs between a changed group and the tasks of this run that copy its partitions: for the log."""
    mine = partitions_of(group)
    if any(same_ranges(group, j.group) for j in ended):
        return "its task ended a round ago (another copy took its partitions, then stopped or left)"
    before = [j.group for j in owners if partitions_of(j.group) & mine]
    if not before:
        return "new partitions"
    ran = {(t.topic, t.partition): t for g in before for t in g}
    for t in group:
        old = ran.get((t.topic, t.partition))
        if old is not None and not _unchanged(t, old):
            fields = ("remote_topic", "source_topic_id", "remote_topic_id", "max_message_bytes", "state_partitions")
            diff = [f"{f} {getattr(old, f)!r}->{getattr(t, f)!r}" for f in fields if getattr(old, f) != getattr(t, f)]
            return f"{t.topic}-{t.partition}: " + ", ".join(diff)
    return "regrouped"


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


@dataclass
class RoundsOutcome:
    """What the rounds did: every finished range's result, every group started (for `idle_counts`), counts."""

    results: list[CopyResult]
    groups: list[Group]
    rounds: int = 0
    """Rounds due (planned, or skipped because the pause check could not be made)."""
    handovers: int = 0
    """Rounds after the first that started Spark tasks for changed groups."""
    restarts: int = 0
    """Groups started again a round after their task ended."""
    cancelled: int = 0
    """Superseded Spark tasks cancelled (their ranges' results are not in `results`)."""
    quiet: int = 0
    """Partitions found quiet by the last round planned."""
    paused: str | None = None


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
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        margin_s: float | None = None,
        grace_s: float | None = None,
    ) -> None:
        self._run_s, self._round_s = run_seconds, round_seconds
        margin = ROUND_MARGIN_S if margin_s is None else margin_s
        overlap = handover_seconds if 0 < handover_seconds < run_seconds else 0.0  # as `overlapping_runs` decides
        self._last_round_s = max(0.0, run_seconds - overlap - margin)
        self._base_ms, self._try = run_started_ms, max(try_number, 0)
        self._plan, self._run, self._cancel, self._paused = plan, run, cancel, paused
        self._active = active or (lambda name: True)
        self._clock, self._wall_ms = clock, wall_ms
        self._grace_s = SUPERSEDED_GRACE_S if grace_s is None else grace_s
        self._wake = threading.Event()
        self._stopping = False
        self._jobs: list[_Job] = []
        self._threads: list[threading.Thread] = []

    def round_started_ms(self, index: int) -> int:
        """Round `index`'s claim start (0-based): ordered by try, then round; never as late as the next run, nor
        after now (a claim dated after a reader's now is ordered by epoch alone, `copy_claims`: a cleared run's
        start is reset to its clearing while its try number keeps counting), nor before the run's start."""
        offset = try_started_ms(0, self._try) + min(index, TRY_SPAN_MS - 1)
        latest = min(self._base_ms + int(self._last_round_s * 1000), self._wall_ms())
        return max(self._base_ms, min(self._base_ms + offset, latest))

    def copy(self) -> RoundsOutcome:
        """Runs the rounds; raises the first failure of a job (the others cancelled) or of the first plan."""
        t0 = self._clock()
        out = RoundsOutcome([], [])
        next_round = 0.0
        try:
            while True:
                elapsed = self._clock() - t0
                self._raise_failed()
                more = out.rounds == 0 or self._in_time(elapsed)
                if not more and all(job.done for job in self._jobs):
                    break
                if elapsed > self._run_s + END_GRACE_S:
                    log.warning("Spark copy jobs still running %.0f s after the run's end are cancelled", END_GRACE_S)
                    self._stop_all()
                    break
                if more and elapsed >= next_round:
                    out.rounds += 1
                    next_round = out.rounds * self._round_s
                    if out.rounds == 1 or self._may_plan(out):
                        self._round(out, self._run_s - elapsed)
                    if out.paused is not None:
                        self._stop_all()
                        break
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
        the DAG run's start (the driver began after it)."""
        last_ms = self._base_ms + int(self._last_round_s * 1000)
        return elapsed <= self._last_round_s and self._wall_ms() < last_ms

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
            if out.rounds == 1:
                raise
            log.warning("copy round %d not planned (the running Spark tasks copy on): %s", out.rounds, err)
            return
        owners = [job for job in self._jobs if job.superseded_by is None and not job.cancelled]
        ended = [job for job in owners if job.ended_at is not None and self._clock() - job.ended_at >= self._round_s]
        gone = {id(job) for job in ended}
        owners = [job for job in owners if id(job) not in gone]
        kept: set[int] = set()
        changed = []
        for group in filter(None, groups):  # a group a job of this run copies, or copied until lately, stays
            match = next((j for j in owners if id(j) not in kept and same_ranges(group, j.group)), None)
            if match is None:
                changed.append(group)
            else:
                kept.add(id(match))
        for job in ended:  # started again below when planned again; forgotten either way
            job.superseded_by = []
        if not changed:
            return
        restarts = sum(1 for g in changed if any(same_ranges(g, j.group) for j in ended))
        out.restarts += restarts
        if self._jobs and len(changed) > restarts:
            out.handovers += 1
        if self._jobs:
            why = "; ".join(sorted({_why_changed(g, owners, ended) for g in changed}))
            log.warning(
                "copy round %d: %d of %d Spark tasks start (%s)",
                out.rounds,
                len(changed),
                len(kept) + len(changed),
                why,
            )
        started = [self._start(group) for group in changed]
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

    def _start(self, group: Group) -> _Job:
        job = _Job(group, f"mirrorflow-copy-{uuid.uuid4().hex[:12]}")
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
