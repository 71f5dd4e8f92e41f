"""Runs of a continuous exactly-once flow take a partition over in the order they STARTED, not in the order they
fence (issue 19): a run that started earlier but reached its fence later (a slow start, a read held on a killed
run's open transaction, a late Spark retry) must never take the partition from a newer run for the rest of its
run. Each run's tasks carry its start (`CopyTask.run_started_ms`), and the claim records it. Interleaved by hand
on real brokers: no timing decides the order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from tests.kafka_helpers import read_partition
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import committed_count, continuous_tasks, runner, start_feeder

import mirrorflow.replication.copy_range as copy_range_module
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_task import CopyResult, CopyTask

pytestmark = pytest.mark.integration
MINUTE_MS = 60_000


def newer_and_older(write_config: WriteConfig, topic: str) -> dict[str, CopyTask]:
    """The same partition's task as planned by two runs, the "older" one started a minute before the other."""
    (task,) = continuous_tasks(write_config, topic, 1)
    assert task.run_started_ms > 0, "a planned task carries its run's start"
    return {"newer": task, "older": replace(task, run_started_ms=task.run_started_ms - MINUTE_MS)}


def wait_for(what: str, done: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def finish(
    kafka_clusters: LocalClusters,
    kafka_consumer: Callable[..., Consumer],
    topic: str,
    feeding: tuple[threading.Event, list[int], threading.Thread],
    stops: list[threading.Event],
    threads: list[threading.Thread],
) -> None:
    """Stop the producer, let the target catch up, stop every run; every record once, in order."""
    producing, sent, feeder = feeding
    producing.clear()
    feeder.join(60)
    deadline = time.monotonic() + 60
    while committed_count(kafka_clusters, f"A.{topic}", 0) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.5)
    for stop in stops:
        stop.set()
    for thread in threads:
        thread.join(90)
    copied = [
        m.value() for m in read_partition(kafka_consumer("B", {"isolation.level": "read_committed"}), f"A.{topic}")
    ]
    assert copied == [f"r{i}".encode() for i in sent], "every record once, in order"


@pytest.mark.timeout(300)
def test_a_run_that_started_earlier_leaves_a_partition_a_newer_run_has_claimed(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
) -> None:
    """The newer run copies; then the older run reaches its start. It reads the newer run's claim before it
    fences and leaves the partition: it fences nobody and copies nothing, and the newer run copies on. Before the
    start was recorded, the later fence won: the older run took the partition for its whole run and the newer
    one ended as handed over."""
    tasks = newer_and_older(write_config, source_topic)
    outcomes: dict[str, Any] = {}
    run = runner(tasks, outcomes)
    feeding = start_feeder(kafka_producer, source_topic, 0.005)
    commits: list[int] = []
    stops = [threading.Event(), threading.Event()]
    newer = threading.Thread(
        target=run, args=("newer",), kwargs={"on_batch": lambda r: commits.append(1), "stop": stops[0].is_set}
    )
    newer.start()
    wait_for("the newer run's commits", lambda: len(commits) >= 3)
    older = threading.Thread(target=run, args=("older",), kwargs={"stop": stops[1].is_set})
    older.start()
    older.join(60)
    still_copying = newer.is_alive()
    finish(kafka_clusters, kafka_consumer, source_topic, feeding, stops, [newer, older])
    left = outcomes["older"]
    assert isinstance(left, CopyResult) and left.handed_over and left.records == 0, (
        f"the older run must leave the partition at once, copying nothing: {left!r}"
    )
    assert still_copying, f"the newer run must copy on: {outcomes.get('newer')!r}"
    kept = outcomes["newer"]
    assert isinstance(kept, CopyResult) and not kept.handed_over, f"the newer run kept the partition: {kept!r}"


@pytest.mark.timeout(300)
def test_a_newer_run_fenced_by_an_older_one_takes_the_partition_back(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race the check before the fence cannot see: the newer run has fenced and read its state but not yet
    claimed when the older run starts, finds no newer claim, fences it and claims. The newer run's claim then
    fails as fenced, and it finds an OLDER run's claim: it takes the partition back (fences again, reads again,
    claims), and the older run, fenced in turn, sees the newer claim and hands over. Before, the newer run took
    the older run's claim for a successor's and ended as handed over."""
    tasks = newer_and_older(write_config, source_topic)
    real_copy = copy_range_module._copy
    paused, older_claimed = threading.Event(), threading.Event()

    def copy_after_the_older_claims(task: CopyTask, *args: Any, **kwargs: Any) -> CopyResult:
        if task.run_started_ms == tasks["newer"].run_started_ms and not paused.is_set():
            paused.set()  # fenced and state read; the claim comes next
            assert older_claimed.wait(90), "the older run never claimed"
        return real_copy(task, *args, **kwargs)

    monkeypatch.setattr(copy_range_module, "_copy", copy_after_the_older_claims)
    outcomes: dict[str, Any] = {}
    run = runner(tasks, outcomes)
    feeding = start_feeder(kafka_producer, source_topic, 0.005)
    stops = [threading.Event(), threading.Event()]
    newer = threading.Thread(target=run, args=("newer",), kwargs={"stop": stops[0].is_set})
    newer.start()
    wait_for("the newer run to read its state", paused.is_set)
    older = threading.Thread(
        target=run, args=("older",), kwargs={"on_batch": lambda r: older_claimed.set(), "stop": stops[1].is_set}
    )
    older.start()
    older.join(90)
    older_ended = not older.is_alive()
    finish(kafka_clusters, kafka_consumer, source_topic, feeding, stops, [newer, older])
    assert older_ended, "the older run must hand over once the newer run takes the partition back"
    ended = outcomes["older"]
    assert isinstance(ended, CopyResult) and ended.handed_over, f"the older run hands over: {ended!r}"
    kept = outcomes["newer"]
    assert isinstance(kept, CopyResult) and not kept.handed_over, f"the newer run keeps the partition: {kept!r}"
