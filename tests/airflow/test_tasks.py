"""The task callables: the cadence loop and XCom summaries (pure), heartbeat tasks on real clusters."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from mirrorflow.airflow import tasks
from mirrorflow.airflow.reports import compact, repeated_summary
from mirrorflow.airflow.tasks import repeat, repeat_each
from mirrorflow.kafka.client_logs import with_logger
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_repeat_keeps_the_cadence_and_stops_within_the_run_time() -> None:
    clock = FakeClock()
    calls: list[float] = []

    def step() -> int:
        calls.append(clock.now)
        clock.now += 0.25  # each round takes a quarter second
        return len(calls)

    reports = repeat(step, every=1.0, for_seconds=5.0, clock=clock, sleep=clock.sleep)
    assert reports == [1, 2, 3, 4, 5]
    assert calls == [100.0, 101.0, 102.0, 103.0, 104.0]
    assert clock.now < 105.0


def test_repeat_runs_late_rounds_at_once_instead_of_sleeping() -> None:
    clock = FakeClock()

    def slow() -> None:
        clock.now += 2.5

    assert len(repeat(slow, every=1.0, for_seconds=4.0, clock=clock, sleep=clock.sleep)) == 4
    assert clock.sleeps == []


def test_repeat_stops_early_when_asked_between_rounds() -> None:
    """A failover paused the flow during a continuous run: the next round does not start."""
    clock = FakeClock()
    answers = iter([None, "flow A->B is paused by a failover A->B"])
    reports = repeat(
        lambda: clock.now, every=1.0, for_seconds=10.0, clock=clock, sleep=clock.sleep, stop=lambda: next(answers)
    )
    assert reports == [100.0, 101.0]


def test_repeat_each_keeps_every_steps_own_cadence_in_one_thread() -> None:
    clock = FakeClock()
    calls: list[tuple[str, float]] = []

    def step(name: str) -> Callable[[], str]:
        def run() -> str:
            calls.append((name, clock.now))
            clock.now += 0.1
            return name

        return run

    steps = {"beat": (1.0, step("beat")), "sync": (2.0, step("sync"))}
    reports = repeat_each(steps, for_seconds=5.0, clock=clock, sleep=clock.sleep)
    assert {name: len(r) for name, r in reports.items()} == {"beat": 5, "sync": 3}
    assert [round(t - 100, 1) for name, t in calls if name == "beat"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [round(t - 100, 1) for name, t in calls if name == "sync"] == [0.1, 2.1, 4.1]
    answers = iter([None, None, "flow A->B is paused by a failover A->B"])
    stopped = repeat_each(steps, for_seconds=10.0, clock=clock, sleep=clock.sleep, stop=lambda: next(answers))
    assert {name: len(r) for name, r in stopped.items()} == {"beat": 3, "sync": 1}
    assert repeat_each({}, for_seconds=5.0, clock=clock, sleep=clock.sleep) == {}


@dataclass(frozen=True)
class Row:
    topic: str
    offsets: tuple[int, ...]


def test_compact_cuts_long_lists_and_keeps_json_types() -> None:
    report = {"rows": [Row(f"t{i}", (1, 2)) for i in range(25)], "names": frozenset({"b", "a"}), "x": object}
    out = compact(report, limit=3)
    assert out["rows"][:1] == [{"topic": "t0", "offsets": [1, 2]}]
    assert out["rows"][3] == "... 22 more"
    assert out["names"] == ["a", "b"]
    assert out["x"] == str(object)
    assert repeated_summary([1, 2, 3], 2.04) == {"runs": 3, "seconds": 2.0, "last": 3}


def _pair_config(path: Path, clusters: LocalClusters, extra: str) -> str:
    body = "A->B.enabled = true\nA->B.topics = nothing-matches-this\n" + extra
    path.write_text(mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}, body))
    return str(path)


def _heartbeats_on(admin: AdminClient, consumer: Consumer) -> int:
    admin.list_topics("heartbeats", timeout=10)
    return int(consumer.get_watermark_offsets(TopicPartition("heartbeats", 0), timeout=10)[1])


@pytest.mark.integration
def test_heartbeats_keep_their_cadence_while_a_continuous_copy_runs(
    tmp_path: Path, kafka_clusters: LocalClusters, kafka_admin: Callable[..., AdminClient]
) -> None:
    config = _pair_config(
        tmp_path / "mm2.properties",
        kafka_clusters,
        "mirrorflow.copy.run.seconds = 3\nemit.heartbeats.interval.seconds = 1\n",
    )
    tasks.sync_topics(config, "A->B")
    checker = Consumer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("B"), "group.id": "hb-check"}))
    try:
        before = _heartbeats_on(kafka_admin("B"), checker)
        started = time.monotonic()
        report = tasks.heartbeats(config, "A->B")
        elapsed = time.monotonic() - started
        assert report["runs"] == 3
        assert report["last"]["emitted"] is True
        assert 2.0 <= elapsed < 10.0
        assert _heartbeats_on(kafka_admin("B"), checker) - before == 3
    finally:
        checker.close()


@pytest.mark.integration
def test_the_loops_task_runs_heartbeats_checkpoints_and_group_sync_at_their_cadences(
    tmp_path: Path, kafka_clusters: LocalClusters, kafka_admin: Callable[..., AdminClient]
) -> None:
    """Continuous mode's one loop task (one worker slot instead of three) for the copy's run time."""
    config = _pair_config(
        tmp_path / "mm2.properties",
        kafka_clusters,
        "mirrorflow.copy.run.seconds = 3\nemit.heartbeats.interval.seconds = 1\n"
        "emit.checkpoints.interval.seconds = 1\nsync.group.offsets.interval.seconds = 2\n"
        "sync.group.offsets.enabled = true\n",
    )
    tasks.sync_topics(config, "A->B")
    checker = Consumer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("B"), "group.id": "hb-check"}))
    try:
        before = _heartbeats_on(kafka_admin("B"), checker)
        started = time.monotonic()
        report = tasks.loops(config, "A->B")
        assert 2.0 <= time.monotonic() - started < 15.0
        runs = {name: report[name]["runs"] for name in ("heartbeats", "emit_checkpoints", "sync_group_offsets")}
        assert runs == {"heartbeats": 3, "emit_checkpoints": 3, "sync_group_offsets": 2}, report
        assert report["heartbeats"]["last"]["emitted"] is True
        assert _heartbeats_on(kafka_admin("B"), checker) - before == 3
    finally:
        checker.close()


@pytest.mark.integration
def test_a_heartbeat_only_pair_creates_its_topic_and_beats_once_per_interval_run(
    tmp_path: Path, kafka_clusters: LocalClusters, kafka_admin: Callable[..., AdminClient]
) -> None:
    config = _pair_config(tmp_path / "mm2.properties", kafka_clusters, "B->A.mirrorflow.copy.mode = interval\n")
    checker = Consumer(with_logger({"bootstrap.servers": kafka_clusters.bootstrap("A"), "group.id": "hb-check"}))
    try:
        report = tasks.heartbeat_pair(config, "B->A")
        assert report["runs"] == 1
        assert (report["last"]["source"], report["last"]["target"]) == ("B", "A")
        assert _heartbeats_on(kafka_admin("A"), checker) >= 1
    finally:
        checker.close()


@pytest.mark.integration
def test_a_pause_check_that_cannot_tell_mid_run_fails_the_loops_task_instead_of_ending_it_green(
    tmp_path: Path,
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review (issue 22): the loops task asks before each round whether a failover paused the flow; an answer it
    cannot get (here: a runbook writer's transaction left open on the runbook topic) ended every loop for the
    rest of the run and the task succeeded, so heartbeats, checkpoints and group sync stopped unseen. At the
    start of a task the same answer fails it, to be retried (`skip_if_paused`); mid-run now too."""
    from mirrorflow.core.errors import MirrorflowError
    from mirrorflow.core.runbook_record import RUNBOOK_TOPIC
    from mirrorflow.kafka.runbook_store import ensure_runbook_topic
    from mirrorflow.replication import flow_cycle
    from mirrorflow.replication.flow_clients import FlowClients
    from mirrorflow.replication.pause_markers import forget_checked

    config = _pair_config(
        tmp_path / "mm2.properties",
        kafka_clusters,
        "mirrorflow.copy.run.seconds = 30\nemit.heartbeats.interval.seconds = 1\nemit.checkpoints.enabled = false\n",
    )
    tasks.sync_topics(config, "A->B")
    with FlowClients(tasks.load_flow(config, "A->B")) as clients:
        ensure_runbook_topic(clients.target_admin, "B", RUNBOOK_TOPIC, 1, 30)
    held = kafka_producer("B", {"transactional.id": f"held-{time.time_ns()}", "transaction.timeout.ms": 120000})
    real, opened = flow_cycle.run_control_plane, []

    def beat_then_hold(*args: object, **kwargs: object) -> object:
        """The first heartbeat round, then a transaction held open on the runbook topic (deterministic: before
        the loop's next pause check, whose cached answer is dropped)."""
        report = real(*args, **kwargs)  # type: ignore[arg-type]
        if not opened:
            held.init_transactions(30)
            held.begin_transaction()
            held.produce(RUNBOOK_TOPIC, key=b'["held"]', value=b"{}", partition=0)
            assert held.flush(10) == 0
            forget_checked()
            opened.append(True)
        return report

    monkeypatch.setattr(flow_cycle, "run_control_plane", beat_then_hold)
    started = time.monotonic()
    try:
        with pytest.raises(MirrorflowError, match="open transaction"):
            tasks.loops(config, "A->B")
        assert time.monotonic() - started < 20  # failed at the check, not after its 30 s of quiet
    finally:
        held.abort_transaction(30)
        monkeypatch.undo()  # drops the wrapper, and with it the held producer, before the brokers stop
        gc.collect()  # the failed task's frames (its clients) sit in reference cycles of the caught error
