"""Rounds of a continuous exactly-once copy inside one Spark application (issue 19,
`mirrorflow.copy.round.seconds`).

Without rounds a continuous run plans its copy once and holds that plan for `mirrorflow.copy.run.seconds`: new
topics and partitions wait for the next run, and every run boundary starts a new Spark application (spark-submit,
a JVM, a session, Python workers) beside the running copy, which on a busy host is what a boundary costs most
(docs/benchmarks.md, session 18). With rounds the application plans again every `round.seconds` and each group of
ranges (one Spark task) runs as a Spark job of its own, so the driver knows which groups still run. A round starts
a job for every planned group no running task copies (`same_ranges`): a partition that appeared, a regrouping, a
topic re-created or whose `max.message.bytes` changed, and a group whose task ended early (its ranges handed over
to a run that looked newer, or left: restarted, it copies again or leaves again at its first state read). A
round that changes nothing starts nothing, so a steady flow runs its ranges for the whole application with no
boundary at all. A new task fences the running ranges of its partitions, as the next DAG run's do (same
transactional ids; claims ordered by run start, `copy_claims`); the superseded tasks end as handed over, and
those still running `SUPERSEDED_GRACE_S` later (a fenced range that copies nothing never learns it was fenced)
are cancelled, so they do not hold the slots the next change needs. A superseded task whose partitions are not
all in the new tasks (a topic no longer replicated) is left to end with the run.

The claims' order needs no clock but the scheduler's: round k of Airflow try t starts its claims at the DAG
run's start + t * `TRY_SPAN_MS` + k milliseconds, capped at `run.seconds - handover.seconds - ROUND_MARGIN_S`
after it. The next DAG run (started `run.seconds - handover.seconds` after this one, `airflow.schedule.
overlapping_runs`) is newer than every round of this run; a retry of this run is newer than the rounds of the
try it replaces, even if that try's driver died after many rounds; two rounds of one try are ordered. No round
starts after that time either, by the driver's clock and by the wall clock against the DAG run's start.

Two rounds' tasks run at once for a moment, so the application holds twice the slots one plan needs
(`spark.copy_rounds_job`: `local[2N]` for `local[N]`; the Airflow task doubles `spark.cores.max`). Before each
round after the first the flow's pause marker is read: a paused flow (a failover drained, fenced and then
paused it) gets no new round and its tasks are cancelled; a check that cannot be made skips the round (nothing
is planned or started until a check answers). This module only decides; planning, running and cancelling
Spark jobs are the caller's, so the decisions are tested without Spark (tests/replication/test_copy_rounds.py).
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
"""How long a superseded Spark task may run on after the round that replaced it started: its fenced ranges end
as handed over when they next write; one that copies nothing is cancelled then."""
TRY_SPAN_MS = 1000
"""Claim-start milliseconds per Airflow try: round k of try t claims at the run's start + t * span + k."""

Group = list[CopyTask]
Plan = Callable[[float, int], tuple[list[Group], int]]
"""(seconds left in the run, the round's claim start in epoch ms) -> (the groups of ranges, partitions quiet)."""
Run = Callable[[Group, str], list[CopyResult]]
"""Runs one group as the Spark job group named by the second argument until its ranges end; raises on failure."""
Cancel = Callable[[list[str]], None]
"""Cancels the Spark job groups named."""
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


@dataclass
class _Job:
    group: Group
    name: str
    results: list[CopyResult] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    cancelled: bool = False
    superseded_at: float | None = None


@dataclass
class RoundsOutcome:
    """What the rounds did: every finished range's result, every group started (for `idle_counts`), counts."""

    results: list[CopyResult]
    groups: list[Group]
    rounds: int = 0
    """Rounds due (planned, or skipped because the pause check could not be made)."""
    handovers: int = 0
    """Rounds after the first that started Spark tasks."""
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
        self._clock, self._wall_ms = clock, wall_ms
        self._grace_s = SUPERSEDED_GRACE_S if grace_s is None else grace_s
        self._wake = threading.Event()
        self._stopping = False
        self._jobs: list[_Job] = []
        self._threads: list[threading.Thread] = []

    def round_started_ms(self, index: int) -> int:
        """Round `index`'s claim start (0-based): ordered by try, then round, never as late as the next run."""
        offset = self._try * TRY_SPAN_MS + min(index, TRY_SPAN_MS - 1)
        return self._base_ms + min(offset, int(self._last_round_s * 1000))

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
        alive = [job for job in self._jobs if not job.done and not job.cancelled]
        kept: set[int] = set()
        changed = []
        for group in filter(None, groups):
            match = next((j for j in alive if id(j) not in kept and same_ranges(group, j.group)), None)
            if match is None:
                changed.append(group)
            else:
                kept.add(id(match))
        if not changed:
            return
        if self._jobs:
            out.handovers += 1
            log.info("copy round %d: %d of %d Spark tasks start", out.rounds, len(changed), len(kept) + len(changed))
        covered = frozenset().union(*(partitions_of(g) for g in changed))
        now = self._clock()
        for job in alive:
            if id(job) not in kept and job.superseded_at is None and partitions_of(job.group) <= covered:
                job.superseded_at = now
        for group in changed:
            self._start(group)
            out.groups.append(group)

    def _cancel_superseded(self, out: RoundsOutcome) -> None:
        """Cancels superseded tasks still running `grace_s` after their successors started."""
        now = self._clock()
        late = [
            job
            for job in self._jobs
            if not job.done and not job.cancelled and job.superseded_at is not None
            if now - job.superseded_at >= self._grace_s
        ]
        for job in late:
            job.cancelled = True
        if late:
            out.cancelled += len(late)
            log.info("%d superseded Spark tasks still running are cancelled", len(late))
            self._cancel([job.name for job in late])

    def _start(self, group: Group) -> None:
        job = _Job(group, f"mirrorflow-copy-{uuid.uuid4().hex[:12]}")
        self._jobs.append(job)
        thread = threading.Thread(target=self._job, args=(job,), name=job.name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _job(self, job: _Job) -> None:
        """One group's Spark job, in its own thread; a failure is raised again by the planning thread unless the
        job was cancelled on purpose."""
        try:
            if not self._stopping:
                job.results = self._run(job.group, job.name)
        except BaseException as err:
            if not (job.cancelled or self._stopping):
                job.error = err
        finally:
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
