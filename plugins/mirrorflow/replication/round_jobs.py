"""The Spark jobs of continuous copy rounds (`copy_rounds`): one thread per job, which runs one group of ranges as
a Spark job group until its ranges end or it is cancelled; superseded jobs cancelled after a grace; every job
cancelled and waited for on a failure, a pause or a lease's end. The decisions of which groups start are
`CopyRounds`'s; this base class only keeps the jobs."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.copy_totals import RoundsOutcome

log = logging.getLogger(__name__)

SUPERSEDED_GRACE_S = 20.0
"""How long a superseded Spark task may run on once the tasks that replaced it are active: its fenced ranges end
as handed over when they next write; one that copies nothing is cancelled then."""

Group = list[CopyTask]  # as `round_groups.Group`
Run = Callable[[Group, str], list[CopyResult]]
"""Runs one group as the Spark job group named by the second argument until its ranges end; raises on failure."""
Cancel = Callable[[list[str]], None]
"""Cancels the Spark job groups named."""
Active = Callable[[str], bool]
"""Whether the Spark job group named has a task running or done (it got a slot)."""


@dataclass
class Job:
    group: Group
    name: str
    results: list[CopyResult] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    cancelled: bool = False
    superseded_by: list[Job] | None = None
    superseded_at: float | None = None
    """When every job in `superseded_by` was first seen active."""
    ended_at: float | None = None
    ends_at: float = 0.0
    """When its ranges end by themselves (the driver's clock)."""


class RoundJobs:
    """The jobs of one run's rounds and the threads running them (see the module docstring)."""

    def __init__(
        self,
        run: Run,
        cancel: Cancel,
        active: Active | None,
        clock: Callable[[], float],
        grace_s: float | None,
    ) -> None:
        self._run, self._cancel = run, cancel
        self._active = active or (lambda name: True)
        self._clock = clock
        self._grace_s = SUPERSEDED_GRACE_S if grace_s is None else grace_s
        self._wake = threading.Event()
        self._stopping = False
        self._jobs: list[Job] = []
        self._threads: list[threading.Thread] = []

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

    def _start(self, group: Group, left_s: float) -> Job:
        """Starts `group` as a Spark job of its own whose ranges end `left_s` from now."""
        job = Job(group, f"mirrorflow-copy-{uuid.uuid4().hex[:12]}", ends_at=self._clock() + left_s)
        self._jobs.append(job)
        thread = threading.Thread(target=self._job, args=(job,), name=job.name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return job

    def _job(self, job: Job) -> None:
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
