"""The decisions of continuous copy rounds (`copy_rounds.CopyRounds`) without Spark: which groups a round starts
or cancels, the claims' start it gives them, and what a pause, a failed check, a failed job or a failed plan does.
Jobs are stand-ins that run until their tasks' run length ends or their job group is cancelled (as Spark's
`cancelJobGroup`: only a job already submitted is cancelled); the copy itself is tested on real brokers and
Spark in tests/spark/test_copy_rounds_live.py."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import pytest
from tests.replication.test_copy_plan import BASE

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication import copy_rounds
from mirrorflow.replication.copy_rounds import CopyRounds, Group
from mirrorflow.replication.copy_task import CopyResult, CopyTask
from mirrorflow.replication.round_claims import rounds_apply, try_started_ms
from mirrorflow.replication.round_groups import same_ranges

BASE_MS = 1_000_000


def task(partition: int, topic: str = "orders", **changes: object) -> CopyTask:
    made = dataclasses.replace(BASE, topic=topic, partition=partition, remote_topic=f"A.{topic}", run_seconds=None)
    return dataclasses.replace(made, transactional_id=f"t-{partition}", **changes)  # type: ignore[arg-type]


def parts(group: Group) -> list[int]:
    return sorted(t.partition for t in group)


class StandIn:
    """Plans from a list (one entry per round, the last repeated) and runs each group until its run ends or its
    job group is cancelled."""

    def __init__(self, plans: list[list[Group] | Exception], run_s: float = 1.2, round_s: float = 0.2) -> None:
        self.plans, self.run_s, self.round_s = plans, run_s, round_s
        self.lock = threading.Lock()
        self.active: dict[str, threading.Event] = {}
        self.jobs: list[Group] = []
        self.cancelled: list[Group] = []
        self.names: dict[str, Group] = {}
        self.starts: list[int] = []
        self.fail_job: int | None = None
        self.ends_at_once: set[int] = set()  # jobs (1-based) whose ranges end at once, handed over
        self.submit_delay_s = 0.0
        self.waiting: set[str] = set()  # jobs Spark has but whose task waits for a slot
        self.wait_for_slot: set[int] = set()  # jobs (1-based) to put in `waiting` for 1 s
        self.fail_superseded: set[int] = set()  # jobs (1-based) that fail once superseded
        self.wall_ms = BASE_MS + 100

    def plan(self, left_s: float, started_ms: int) -> tuple[list[Group], int]:
        self.starts.append(started_ms)
        made = self.plans[min(len(self.starts) - 1, len(self.plans) - 1)]
        if isinstance(made, Exception):
            raise made
        return [[dataclasses.replace(t, run_seconds=left_s, run_started_ms=started_ms) for t in g] for g in made], 0

    def run(self, group: Group, name: str) -> list[CopyResult]:
        with self.lock:
            self.jobs.append(group)
            number = len(self.jobs)
        time.sleep(self.submit_delay_s)
        stop = threading.Event()
        with self.lock:
            self.active[name], self.names[name] = stop, group
            if number in self.wait_for_slot:
                self.waiting.add(name)
                threading.Timer(1.0, lambda: self.waiting.discard(name)).start()
        if number in self.fail_superseded:
            time.sleep(0.5)
            raise MirrorflowError("the Spark copy job failed: waited 30 s for the successor's claim")
        if self.fail_job == number:
            raise MirrorflowError("the Spark copy job failed: a range failed for good")
        if number not in self.ends_at_once and stop.wait(min(t.run_seconds or 0.0 for t in group)):
            raise MirrorflowError("the Spark copy job failed: cancelled")
        return [CopyResult(t.topic, t.partition, t.remote_topic, 0, 0, 0) for t in group]

    def is_active(self, name: str) -> bool:
        with self.lock:
            return name in self.active and name not in self.waiting

    def cancel(self, names: list[str]) -> None:
        with self.lock:
            for name in names:
                if name in self.active and not self.active[name].is_set():
                    self.active[name].set()
                    self.cancelled.append(self.names[name])

    def rounds(
        self,
        paused: list[object] | None = None,
        handover_s: float = 0.0,
        try_number: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> CopyRounds:
        answers = iter(paused or [])

        def pause_check() -> str | None:
            answer = next(answers, None)
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[return-value]

        return CopyRounds(
            run_seconds=self.run_s,
            round_seconds=self.round_s,
            handover_seconds=handover_s,
            run_started_ms=BASE_MS,
            plan=self.plan,
            run=self.run,
            cancel=self.cancel,
            paused=pause_check if paused is not None else None,
            active=self.is_active,
            try_number=try_number,
            clock=clock,
            wall_ms=lambda: self.wall_ms,
            margin_s=0.2,
            grace_s=0.3,
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
    assert sorted(map(parts, stand_in.jobs)) == [[0, 1], [2]] and out.handovers == 0
    assert sorted(r.partition for r in out.results) == [0, 1, 2]


def test_a_changed_plan_starts_the_changed_groups_and_cancels_what_they_supersede() -> None:
    first = [[task(0), task(1)], [task(2)]]
    grown = [[task(0), task(1)], [task(2), task(3)]]  # a partition appeared beside partition 2
    stand_in = StandIn([first, first, grown], run_s=2.0)
    out = stand_in.rounds().copy()
    assert [parts(g) for g in stand_in.jobs] in ([[0, 1], [2], [2, 3]], [[2], [0, 1], [2, 3]])
    assert out.handovers == 1 and len(out.groups) == 3
    assert [parts(g) for g in stand_in.cancelled] == [[2]], "the superseded task, once its grace ended"
    assert out.cancelled == 1


def test_a_task_whose_partitions_are_not_all_replanned_is_left_to_end_with_the_run() -> None:
    first = [[task(0), task(1)]]
    stand_in = StandIn([first, [[task(0)]]], run_s=1.5)  # partition 1's topic is no longer replicated
    out = stand_in.rounds().copy()
    assert stand_in.cancelled == [] and out.cancelled == 0
    assert sorted(map(parts, stand_in.jobs)) == [[0], [0, 1]]


def test_a_group_whose_task_ended_early_starts_again_a_round_later() -> None:
    """Its ranges ended because another copy took the partitions (a failover's drain, an interval copy): it is
    left a whole round (a restart fences a drain still running), then started again, once (review of session
    20: restarted at once, it would fence a drain at every round; never restarted, the partitions wait for the
    next run)."""
    stand_in = StandIn([[[task(0)], [task(1)]]], run_s=1.5)
    stand_in.ends_at_once = {1}
    out = stand_in.rounds().copy()
    assert sorted(map(parts, stand_in.jobs)) == [[0], [0], [1]] or sorted(map(parts, stand_in.jobs)) == [[0], [1], [1]]
    assert (out.restarts, out.handovers) == (1, 0)


def test_a_superseded_task_is_cancelled_only_once_its_successor_got_a_slot() -> None:
    first = [[task(0), task(1)], [task(2)]]
    grown = [[task(0), task(1)], [task(2), task(3)]]
    stand_in = StandIn([first, first, grown], run_s=3.0)
    stand_in.wait_for_slot = {3}  # the successor waits 1 s for a slot: the grace (0.3 s) counts after that
    superseded_cancelled_at: list[float] = []
    cancel = stand_in.cancel

    def timed_cancel(names: list[str]) -> None:
        if any(stand_in.names.get(n) and parts(stand_in.names[n]) == [2] for n in names):
            superseded_cancelled_at.append(time.monotonic())
        cancel(names)

    stand_in.cancel = timed_cancel  # type: ignore[method-assign]
    began = time.monotonic()
    stand_in.rounds().copy()
    assert superseded_cancelled_at and superseded_cancelled_at[0] - began >= 0.4 + 1.0 + 0.3 - 0.1


def test_a_superseded_tasks_failure_is_not_the_runs() -> None:
    first = [[task(0)], [task(1)]]
    stand_in = StandIn([first, first, [[task(0)], [task(1), task(2)]]], run_s=2.0)
    stand_in.fail_superseded = {2}  # partition 1's first task fails after its successor (job 3) started
    stand_in.submit_delay_s = 0.0
    out = stand_in.rounds().copy()
    assert out.handovers == 1 and sorted(r.partition for r in out.results) == [0, 1, 2]


def test_a_lookup_that_failed_this_round_does_not_hand_a_task_over() -> None:
    known = task(0, source_topic_id="src", remote_topic_id="rem", max_message_bytes=1000, state_partitions=8)
    unknown = task(0, source_topic_id="", remote_topic_id="", max_message_bytes=None, state_partitions=1)
    assert same_ranges([unknown], [known])
    assert not same_ranges([task(0, source_topic_id="re-created")], [known])
    assert not same_ranges([task(0, max_message_bytes=2000)], [known])
    assert not same_ranges([task(0, state_partitions=16)], [known])
    assert same_ranges([task(1), task(0)], [task(0), task(1)])
    assert not same_ranges([task(0)], [task(0), task(1)])


def test_claim_starts_are_ordered_by_try_then_round_and_capped_before_the_next_run() -> None:
    stand_in = StandIn([[]], run_s=30.0)  # nothing to copy: only the plans' claim starts are looked at
    stand_in.wall_ms = BASE_MS + 11_000  # the retry runs 11 s after the DAG run started
    began = time.monotonic()
    stand_in.rounds(try_number=2, clock=lambda: (time.monotonic() - began) * 100).copy()  # 100x time
    assert stand_in.starts[:3] == [BASE_MS + 10_000, BASE_MS + 10_001, BASE_MS + 10_002]
    capped = StandIn([[[task(0)]]], run_s=1.0)
    capped.wall_ms = BASE_MS + 100_000
    capped.rounds(handover_s=0.5, try_number=9).copy()  # cap: (1.0 - 0.5 - 0.2) s after the run's start
    assert set(capped.starts) == {BASE_MS + 300}
    assert try_started_ms(BASE_MS, 2) <= stand_in.starts[0] <= stand_in.starts[-1] < try_started_ms(BASE_MS, 3)
    assert try_started_ms(BASE_MS, 1) == try_started_ms(BASE_MS, 0) == BASE_MS, "a first try claims at the start"
    cleared = StandIn([[]], run_s=30.0)
    cleared.wall_ms = BASE_MS + 2_000  # a cleared run: its start reset to now, its try number still counting
    cleared.rounds(try_number=5, clock=lambda: (time.monotonic() - began) * 100).copy()
    assert set(cleared.starts) == {BASE_MS + 2_000}, "never dated after now (epoch order for every reader)"


def test_no_round_starts_once_the_wall_clock_is_past_the_last_rounds_time() -> None:
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    stand_in.wall_ms = BASE_MS + 900  # the driver began late: the DAG run started 0.9 s ago
    stand_in.rounds().copy()
    assert len(stand_in.starts) == 1, "only the first round, which every run has"


def test_a_paused_flow_gets_no_new_round_and_its_tasks_are_cancelled() -> None:
    stand_in = StandIn([[[task(0)], [task(1)]]], run_s=30.0)
    began = time.monotonic()
    out = stand_in.rounds(paused=[None, "flow A->B is paused by a failover"]).copy()
    assert out.paused == "flow A->B is paused by a failover"
    assert sorted(map(parts, stand_in.cancelled)) == [[0], [1]] and time.monotonic() - began < 5
    assert len(stand_in.starts) == 2, "the round that found the pause planned nothing"


def test_a_job_submitted_while_the_pause_cancelled_is_cancelled_too() -> None:
    stand_in = StandIn([[[task(0)]]], run_s=30.0, round_s=0.1)
    stand_in.submit_delay_s = 0.5  # the job reaches Spark after the cancel at the second round
    began = time.monotonic()
    stand_in.rounds(paused=["paused"]).copy()
    assert [parts(g) for g in stand_in.cancelled] == [[0]] and time.monotonic() - began < 5


def test_a_pause_check_that_cannot_be_made_skips_the_round() -> None:
    stand_in = StandIn([[[task(0)]], [[task(0), task(1)]]])
    out = stand_in.rounds(paused=[MirrorflowError("the target does not answer")] * 100).copy()
    assert out.paused is None and stand_in.cancelled == []
    assert len(stand_in.starts) == 1 and out.rounds >= 3, "no round after the first planned or started anything"


def test_a_failed_job_cancels_the_others_and_fails_the_run() -> None:
    stand_in = StandIn([[[task(0)]], [[task(0)], [task(1)]]], run_s=30.0)
    stand_in.fail_job = 2
    began = time.monotonic()
    with pytest.raises(MirrorflowError, match="failed for good"):
        stand_in.rounds().copy()
    assert [parts(g) for g in stand_in.cancelled] == [[0]] and time.monotonic() - began < 5


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


def leased_rounds(
    stand_in: StandIn,
    lease: Callable[[], int | None],
    beats: list[object],
    span_s: float = 0.0,
) -> CopyRounds:
    """`StandIn.rounds()` of a leased application (`copy_app`): its end is `lease()`'s, it beats every round, its
    ranges plan `span_s` past the lease."""
    return CopyRounds(
        run_seconds=stand_in.run_s,
        round_seconds=stand_in.round_s,
        handover_seconds=0.5,
        run_started_ms=BASE_MS,
        plan=stand_in.plan,
        run=stand_in.run,
        cancel=stand_in.cancel,
        active=stand_in.is_active,
        margin_s=0.2,
        grace_s=0.3,
        wall_ms=lambda: BASE_MS + int(time.monotonic() * 1000),  # the lease's end is read against it
        lease=lease,
        beat=lambda out: beats.append(out.rounds),
        lease_wait_s=0.3,
        span_s=span_s,
    )


def test_a_leased_application_runs_on_while_its_lease_grows_and_renews_its_ranges_ahead() -> None:
    """The lease, read before every round, ends 2.5 s after the start once the run began with 1 s: the rounds go
    on to the new end, the group whose ranges end at 1.3 s (a span of 0.3 s past the lease) is started again
    ahead of that (a renewal, not a handover), the old task is cancelled once superseded, and every round beats."""
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    beats: list[object] = []
    began = time.monotonic()
    start = BASE_MS + int(time.monotonic() * 1000)
    reads: list[int] = []

    def lease() -> int:  # the first round's read finds the lease the run began with; later ones the grown one
        reads.append(1)
        return start + (1000 if len(reads) <= 2 else 2500)  # the start-up wait reads it too

    out = leased_rounds(stand_in, lease, beats, span_s=0.3).copy()
    took = time.monotonic() - began
    assert took >= 2.3, f"the application ended after {took:.1f} s, before its lease's end"
    assert (out.renewals, out.handovers) == (1, 0) and [parts(g) for g in stand_in.jobs] == [[0], [0]]
    assert [parts(g) for g in stand_in.cancelled] == [[0], [0]], "the renewed task once superseded, then its renewal"
    assert len(beats) >= out.rounds - 1 >= 8, (beats, out.rounds)
    assert len(out.groups) == 1, "the forgotten job's group is dropped from the outcome"


def test_a_leased_applications_ranges_outlast_a_lease_extension_and_are_cancelled_at_its_end() -> None:
    """Ranges plan a span past the lease, so a lease that grows from 1 s to 2.5 s renews none of them: one Spark
    task for the whole life (every renewal was an in-application handover: a 2.5 s window of the deployed bench,
    session 21). At the lease's end, read once more, the application cancels the running ranges itself."""
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    began = time.monotonic()
    start = BASE_MS + int(time.monotonic() * 1000)
    reads: list[int] = []

    def lease() -> int:
        reads.append(1)
        return start + (1000 if len(reads) <= 2 else 2500)

    out = leased_rounds(stand_in, lease, [], span_s=3.0).copy()
    took = time.monotonic() - began
    assert 2.3 <= took < 3.5, f"the application ended after {took:.1f} s: its lease ended at 2.5 s"
    assert out.renewals == 0 and [parts(g) for g in stand_in.jobs] == [[0]], (out, stand_in.jobs)
    assert [parts(g) for g in stand_in.cancelled] == [[0]], "cancelled at the lease's end, not run to its span"


def test_a_lease_that_grew_since_the_last_round_is_seen_at_its_end() -> None:
    """The read at the lease's end finds it extended (a DAG run adopted the application just before): the ranges
    copy on to the new end (a supervisor may extend a lease up to its last 30 s)."""
    stand_in = StandIn([[[task(0)]]], run_s=1.0, round_s=0.6)
    began = time.monotonic()
    start = BASE_MS + int(time.monotonic() * 1000)
    last = {"until": start + 1000}

    def lease() -> int:
        if time.monotonic() - began > 0.9:  # extended after the last round's read, before the end's
            last["until"] = start + 2000
        return last["until"]

    out = leased_rounds(stand_in, lease, [], span_s=3.0).copy()
    took = time.monotonic() - began
    assert 1.8 <= took < 2.8, f"the application ended after {took:.1f} s: its lease grew to 2 s"
    assert out.renewals == 0 and len(stand_in.jobs) == 1, (out, stand_in.jobs)
    assert len(stand_in.starts) >= 3, "the rounds go on after the extension"


def test_a_failed_read_at_the_leases_end_is_read_again_before_the_ranges_are_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The read at the lease's end fails (the runbook topic's leader moving) while a supervisor had extended it:
    read again for up to `RENEW_AHEAD_S` (0.6 s here), so the extension is seen and the ranges copy on; a read
    that keeps failing ends the application after that (review of session 22)."""
    monkeypatch.setattr(copy_rounds, "RENEW_AHEAD_S", 0.6)
    for recovers, lasts in ((True, (2.8, 4.4)), (False, (1.5, 2.6))):  # reads once a second past an end
        stand_in = StandIn([[[task(0)]]], run_s=1.0, round_s=0.6)
        began = time.monotonic()
        start = BASE_MS + int(time.monotonic() * 1000)

        def lease(recovers: bool = recovers, began: float = began, start: int = start) -> int:
            waited = time.monotonic() - began
            if waited > 0.9 and (waited < 1.3 or not recovers):
                raise MirrorflowError("the runbook topic's leader is not available")
            return start + (3000 if waited > 0.9 else 1000)

        out = leased_rounds(stand_in, lease, [], span_s=5.0).copy()
        took = time.monotonic() - began
        assert lasts[0] <= took < lasts[1], (recovers, took)
        assert len(stand_in.jobs) == 1 and [parts(g) for g in stand_in.cancelled] == [[0]], (recovers, out)


def test_a_holder_with_nothing_to_copy_waits_for_its_leases_end() -> None:
    """No ranges (nothing copyable yet): the holder still ends only at its lease's end, read once more, not 15 s
    before it (an extension written in its last 30 s would be missed: review of session 22)."""
    stand_in = StandIn([[]], run_s=1.0, round_s=0.6)
    start = BASE_MS + int(time.monotonic() * 1000)
    began = time.monotonic()

    def lease() -> int:  # extended at 0.9 s, after the last round's time (0.8 s)
        return start + (2000 if time.monotonic() - began > 0.9 else 1000)

    leased_rounds(stand_in, lease, [], span_s=3.0).copy()
    assert time.monotonic() - began >= 1.8 and stand_in.jobs == []


def test_a_leased_application_whose_lease_another_took_starts_no_new_round_and_beats_no_more() -> None:
    """Another application took the lease after the first round: no round, no renewal and no heartbeat after
    that (its heartbeat would hide the holder's: review of session 21); one that never held it starts nothing."""
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    beats: list[object] = []
    start = BASE_MS + int(time.monotonic() * 1000)
    reads: list[int] = []

    def lease() -> int:
        reads.append(1)
        return start + 1000 if len(reads) <= 2 else -1

    out = leased_rounds(stand_in, lease, beats, span_s=3.0).copy()
    assert len(stand_in.jobs) == 1 and out.renewals == 0 and beats == [1], (out, beats)
    assert [parts(g) for g in stand_in.cancelled] == [[0]], "its ranges end at its last known lease end"
    never = StandIn([[[task(0)]]], run_s=1.0)
    assert leased_rounds(never, lambda: -1, []).copy().rounds <= 1 and never.jobs == []


def test_a_lease_read_that_finds_no_record_does_not_stop_the_holder() -> None:
    """One read in mid-life answers "no lease" (a metadata blip on the runbook topic): as a failed read, the
    holder plans on to its lease's end (review of session 21: the rounds stopped until the next extension)."""
    stand_in = StandIn([[[task(0)]]], run_s=1.0)
    beats: list[object] = []
    start = BASE_MS + int(time.monotonic() * 1000)
    reads: list[int] = []

    def lease() -> int | None:
        reads.append(1)
        return None if len(reads) == 3 else start + 2000

    out = leased_rounds(stand_in, lease, beats).copy()
    assert out.rounds >= 8 and len(beats) >= out.rounds - 1, (out.rounds, beats)
