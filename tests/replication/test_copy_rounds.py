"""The decisions of continuous copy rounds (`copy_rounds.CopyRounds`) without Spark: which groups a round starts,
the claims' start it gives them, and what a pause, a failed job or a failed plan does. Jobs are stand-ins that
run until their tasks' run length ends or the application cancels them; the copy itself is tested on real
brokers and Spark in tests/spark/test_copy_rounds_live.py."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.copy_rounds import CopyRounds, Groups, group_key, rounds_apply
from mirrorflow.replication.copy_task import CopyResult, CopyTask

BASE_MS = 1_000_000


def task(partition: int, topic: str = "orders", **changes: object) -> CopyTask:
    made = CopyTask(
        flow="A->B",
        source="A",
        target="B",
        topic=topic,
        partition=partition,
        remote_topic=f"A.{topic}",
        end=None,
        run_seconds=None,
        exactly_once=True,
        start_at_latest=False,
        transactional_id=f"t-{partition}",
        progress_topic="p",
        offset_map_topic="m",
        offset_syncs_topic=None,
        offset_syncs_on_target=False,
        offset_lag_max=100,
        provenance=False,
        timeout_s=1.0,
    )
    return dataclasses.replace(made, **changes)  # type: ignore[arg-type]


class StandIn:
    """Plans from a list (one entry per round, the last repeated) and runs jobs until their run ends or cancel."""

    def __init__(self, plans: list[Groups | Exception], run_s: float = 1.2, round_s: float = 0.2) -> None:
        self.plans, self.run_s, self.round_s = plans, run_s, round_s
        self.cancelled = threading.Event()
        self.jobs: list[Groups] = []
        self.starts: list[int] = []
        self.fail_job: int | None = None
        self.wall_ms = BASE_MS + 5_000

    def plan(self, left_s: float, started_ms: int) -> tuple[Groups, int]:
        self.starts.append(started_ms)
        made = self.plans[min(len(self.starts) - 1, len(self.plans) - 1)]
        if isinstance(made, Exception):
            raise made
        return [[dataclasses.replace(t, run_seconds=left_s, run_started_ms=started_ms) for t in g] for g in made], 0

    def run(self, groups: Groups) -> list[CopyResult]:
        self.jobs.append(groups)
        if self.fail_job == len(self.jobs):
            raise MirrorflowError("the Spark copy job failed: a range failed for good")
        left = min(t.run_seconds or 0.0 for g in groups for t in g)
        if self.cancelled.wait(left):
            raise MirrorflowError("the Spark copy job failed: cancelled")
        return [CopyResult(t.topic, t.partition, t.remote_topic, 0, 0, 0) for g in groups for t in g]

    def rounds(self, paused: list[str | None] | None = None, handover_s: float = 0.0) -> CopyRounds:
        answers = iter(paused or [])
        return CopyRounds(
            run_seconds=self.run_s,
            round_seconds=self.round_s,
            handover_seconds=handover_s,
            run_started_ms=BASE_MS,
            plan=self.plan,
            run=self.run,
            cancel=self.cancelled.set,
            paused=(lambda: next(answers, None)) if paused is not None else None,
            wall_ms=lambda: self.wall_ms,
            margin_s=0.2,
        )


def test_rounds_apply_to_exactly_once_copies_with_a_round_shorter_than_the_run() -> None:
    assert rounds_apply("exactly-once", 60, 300)
    assert not rounds_apply("at-least-once", 60, 300)  # no fence: two copies of a partition could skip records
    assert not rounds_apply("exactly-once", 0, 300)
    assert not rounds_apply("exactly-once", 300, 300)


def test_a_round_that_changes_nothing_starts_nothing() -> None:
    stand_in = StandIn([[[task(0), task(1)], [task(2)]]])
    out = stand_in.rounds().copy()
    assert out.rounds >= 3, "rounds were planned all along the run"
    assert len(stand_in.jobs) == 1 and out.handovers == 0
    assert sorted(r.partition for r in out.results) == [0, 1, 2]


def test_a_changed_plan_starts_only_the_changed_groups() -> None:
    first = [[task(0), task(1)], [task(2)]]
    grown = [[task(0), task(1)], [task(2), task(3)]]  # a partition appeared beside partition 2
    stand_in = StandIn([first, first, grown])
    out = stand_in.rounds().copy()
    assert [group_key(g) for g in stand_in.jobs[1]] == [group_key([task(2), task(3)])]
    assert len(stand_in.jobs) == 2 and out.handovers == 1
    assert len(out.groups) == 3


def test_a_changed_identity_is_a_changed_group() -> None:
    assert group_key([task(0)]) != group_key([task(0, source_topic_id="re-created")])
    assert group_key([task(0), task(1)]) == group_key([task(1), task(0)])


def test_round_starts_are_now_but_never_as_late_as_the_next_runs_start() -> None:
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    stand_in.wall_ms = BASE_MS + 10_000_000  # a retry long after the DAG run started
    stand_in.rounds(handover_s=0.3).copy()
    cap = BASE_MS + int((1.0 - 0.3 - 0.2) * 1000)
    assert set(stand_in.starts) == {cap}, "capped below the next DAG run's start (run - handover)"
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    stand_in.wall_ms = BASE_MS + 10_000_000
    stand_in.rounds(handover_s=60.0).copy()  # runs that do not overlap: the next starts after this one's end
    assert set(stand_in.starts) == {BASE_MS + 800} and len(stand_in.starts) >= 3
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    stand_in.wall_ms = BASE_MS + 100
    stand_in.rounds().copy()
    assert set(stand_in.starts) == {BASE_MS + 100}, "else the planning host's now, also for the first round"


def test_a_paused_flow_gets_no_new_round_and_its_tasks_are_cancelled() -> None:
    stand_in = StandIn([[[task(0)]]], run_s=30.0)
    began = time.monotonic()
    out = stand_in.rounds(paused=[None, "flow A->B is paused by a failover"]).copy()
    assert out.paused == "flow A->B is paused by a failover"
    assert stand_in.cancelled.is_set() and time.monotonic() - began < 5
    assert len(stand_in.starts) == 2, "the round after the pause was not planned"


def test_a_failed_pause_check_skips_nothing_but_that_check() -> None:
    stand_in = StandIn([[[task(0)]]])

    def broken() -> str | None:
        raise MirrorflowError("the target does not answer")

    rounds = stand_in.rounds()
    rounds._paused = broken
    out = rounds.copy()
    assert out.paused is None and not stand_in.cancelled.is_set()
    assert len(out.results) == 1


def test_a_failed_job_cancels_the_others_and_fails_the_run() -> None:
    first = [[task(0)]]
    stand_in = StandIn([first, [[task(0)], [task(1)]]], run_s=30.0)
    stand_in.fail_job = 2
    began = time.monotonic()
    with pytest.raises(MirrorflowError, match="failed for good"):
        stand_in.rounds().copy()
    assert stand_in.cancelled.is_set() and time.monotonic() - began < 5


def test_only_the_first_rounds_plan_failing_fails_the_run() -> None:
    stand_in = StandIn([[[task(0)]], MirrorflowError("metadata timed out")])
    out = stand_in.rounds().copy()
    assert len(stand_in.jobs) == 1 and out.rounds >= 3 and len(out.results) == 1
    with pytest.raises(MirrorflowError, match="metadata timed out"):
        StandIn([MirrorflowError("metadata timed out")]).rounds().copy()


def test_a_run_with_nothing_to_copy_ends_after_its_last_round() -> None:
    stand_in = StandIn([[]], run_s=30.0, round_s=0.1)
    rounds = stand_in.rounds(handover_s=29.5)  # last round 0.3 s in
    began = time.monotonic()
    out = rounds.copy()
    assert out.results == [] and stand_in.jobs == [] and time.monotonic() - began < 3


def test_every_range_ended_early_ends_the_run() -> None:
    stand_in = StandIn([[[task(0)]]], run_s=30.0)
    stand_in.run = lambda groups: [CopyResult("orders", 0, "A.orders", 0, 0, 0, handed_over=True)]  # type: ignore[method-assign]
    began = time.monotonic()
    out = stand_in.rounds().copy()
    assert [r.handed_over for r in out.results] == [True] and time.monotonic() - began < 3
