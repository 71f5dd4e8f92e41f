"""Edges of the retake (`copy_claims`, review s15): when a newer continuous run must NOT take its partition back
from an older copy. Interleaved by hand on real brokers, as tests/replication/test_handover_run_order.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import runner, start_feeder
from tests.replication.test_handover_run_order import finish, newer_and_older, wait_for

import mirrorflow.replication.copy_loop as copy_loop
import mirrorflow.replication.copy_range as copy_range_module
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_claims import RetakeClaim
from mirrorflow.replication.copy_task import CopyResult, CopyTask

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_stopped_range_does_not_take_its_partition_back(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The newer run is fenced by an older one (the race of test_handover_run_order's second test), and by the time
    it learns so, its Spark task is ending: a sibling range failed (`stop`). A retake now fences the older run
    and ends before claiming anything (the loop checks `stop` first): the older run, fenced with no newer claim
    on record, fails after HANDOVER_CLAIM_WAIT_S (Spark would retry it, fencing again) and nobody copies the
    partition meanwhile. A stopping range must leave the older run copying."""
    monkeypatch.setattr(copy_loop, "HANDOVER_CLAIM_WAIT_S", 2.0)
    tasks = newer_and_older(write_config, source_topic)
    real_copy = copy_range_module._copy
    paused, older_claimed, stop_newer = threading.Event(), threading.Event(), threading.Event()
    newer_copies: list[int] = []

    def copy_then_stop(task: CopyTask, *args: Any, **kwargs: Any) -> CopyResult:
        if task.run_started_ms != tasks["newer"].run_started_ms:
            return real_copy(task, *args, **kwargs)
        newer_copies.append(1)
        if len(newer_copies) == 1:
            paused.set()  # fenced and state read; the claim comes next
            assert older_claimed.wait(90), "the older run never claimed"
            try:
                return real_copy(task, *args, **kwargs)
            except RetakeClaim:
                stop_newer.set()  # a sibling range of the newer run's Spark task failed meanwhile
                raise
        return real_copy(task, *args, **kwargs)

    monkeypatch.setattr(copy_range_module, "_copy", copy_then_stop)
    outcomes: dict[str, Any] = {}
    run = runner(tasks, outcomes)
    feeding = start_feeder(kafka_producer, source_topic, 0.005)
    stop_older = threading.Event()
    newer = threading.Thread(target=run, args=("newer",), kwargs={"stop": stop_newer.is_set})
    newer.start()
    wait_for("the newer run to read its state", paused.is_set)
    older = threading.Thread(
        target=run, args=("older",), kwargs={"on_batch": lambda r: older_claimed.set(), "stop": stop_older.is_set}
    )
    older.start()
    newer.join(90)
    assert not newer.is_alive(), "the stopped newer range must end"
    older.join(8)  # longer than HANDOVER_CLAIM_WAIT_S: a fenced older run has failed by now
    older_failed = isinstance(outcomes.get("older"), BaseException)
    finish(kafka_clusters, kafka_consumer, source_topic, feeding, [stop_older], [older])
    assert len(newer_copies) == 1, "a stopped range must not start again to take its partition back"
    assert not older_failed, f"the older run must copy on: {outcomes.get('older')!r}"
    kept = outcomes["older"]
    assert isinstance(kept, CopyResult) and not kept.handed_over, f"the older run kept the partition: {kept!r}"


@pytest.mark.timeout(300)
def test_a_continuous_run_never_takes_a_partition_back_from_an_interval_copy(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planned failover's drain is an interval copy planned once (`failover/drain.py`) while the flow's
    continuous copy may still run, and a continuous run may start after the drain was planned (the flow is paused
    only after the drain). The drain fences it and commits: the continuous run must hand over, as it did before
    claims recorded their runs' starts. Taking the partition back (the drain "started earlier") fences the drain,
    whose interval attempt fails; the drain's attempts and the continuous run's retakes then fence each other."""
    tasks = newer_and_older(write_config, source_topic)
    continuous = tasks["newer"]
    real_copy = copy_range_module._copy
    retook = threading.Event()
    continuous_copies: list[int] = []

    def copy_noting_retakes(task: CopyTask, *args: Any, **kwargs: Any) -> CopyResult:
        if task.end is None and task.run_started_ms == continuous.run_started_ms:
            continuous_copies.append(1)
            if len(continuous_copies) > 1:
                retook.set()  # the continuous run fenced the drain again and read its state
        return real_copy(task, *args, **kwargs)

    monkeypatch.setattr(copy_range_module, "_copy", copy_noting_retakes)
    outcomes: dict[str, Any] = {}
    feeding = start_feeder(kafka_producer, source_topic, 0.005)
    commits: list[int] = []
    stops = [threading.Event(), threading.Event()]
    run_continuous = runner(continuous, outcomes)
    copying = threading.Thread(
        target=run_continuous,
        args=("continuous",),
        kwargs={"on_batch": lambda r: commits.append(1), "stop": stops[0].is_set},
    )
    copying.start()
    wait_for("the continuous run's commits", lambda: len(commits) >= 3)
    end = len(feeding[1]) + 200
    drain = replace(
        continuous, end=end, run_seconds=None, batch_records=20, run_started_ms=tasks["older"].run_started_ms
    )
    drain_commits: list[int] = []

    def after_drain_commit(_result: CopyResult) -> None:
        drain_commits.append(1)
        if len(drain_commits) == 1:  # let the continuous run answer the drain's first commit, however it does
            wait_for("the continuous run to hand over or take back", lambda: retook.is_set() or not copying.is_alive())

    draining = threading.Thread(
        target=runner(drain, outcomes), args=("drain",), kwargs={"on_batch": after_drain_commit}
    )
    draining.start()
    draining.join(120)
    # The copy after the drain: a run planned later still, which copies what follows the drain's end.
    after = threading.Thread(
        target=runner(replace(continuous, run_started_ms=continuous.run_started_ms + 1), outcomes),
        args=("after",),
        kwargs={"stop": stops[1].is_set},
    )
    after.start()
    finish(kafka_clusters, kafka_consumer, source_topic, feeding, stops, [copying, after])
    drained = outcomes["drain"]
    assert isinstance(drained, CopyResult) and drained.next_upstream == end, (
        f"the drain must reach its end: {drained!r}"
    )
    assert not retook.is_set(), "the continuous run must not take the partition back from the drain"
    handed = outcomes["continuous"]
    assert isinstance(handed, CopyResult) and handed.handed_over, f"the continuous run hands over: {handed!r}"
