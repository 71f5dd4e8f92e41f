"""A run boundary's read ahead on real brokers: the next run reads its partition's map BEFORE it fences the
running copy, so the old run copies on while the new one reads, and after the fence only the tail is left.

Session 18 measured the deployed path at 46k records/s: the map read ahead of a loaded partition took up to 1.5 s
while the fence had already stopped the old run, so the boundary waited for the read with nothing copied
(docs/benchmarks.md "Session 18")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from tests.replication.conftest import WriteConfig
from tests.replication.helpers import continuous_tasks, hand_over_mid_copy, runner

import mirrorflow.replication.copy_range as copy_range_module
from mirrorflow.kafka import fence
from mirrorflow.kafka.compacted_log import LogReader
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_slots import PRE_READ_WAIT_S, ReadAhead
from mirrorflow.replication.copy_task import CopyResult, CopyTask

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
@pytest.mark.parametrize("hold_s", [1.0, 5.0])
def test_the_next_run_fences_only_after_its_map_read_ahead_and_the_old_run_copies_meanwhile(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
    hold_s: float,
) -> None:
    """The new run's map read ahead is held until the old run has committed three more times (`hold_s` at most):
    it can only while it is not fenced. Held 1 s (within the fence's `PRE_READ_WAIT_S` for it), the fence begins
    only after the read returned; fencing while the map was read (the order before session 18) stopped the old
    run at once, and the read ahead waited the 1 s out with no commit. Held 5 s (a read stuck on an open
    transaction), the fence does not wait it out. Either way the handover completes as usual: the old run ends
    handed over, and every record is on the target once, in order."""
    (task,) = continuous_tasks(write_config, source_topic, 1)
    old_commits: list[int] = []
    commits_during_read: list[int] = []
    read_done: list[float] = []  # when the new run's map read ahead returned
    fenced_at: list[float] = []  # when the new run's fence began (its abort-ahead fires just before init)
    real_read_map_ahead, real_fire = copy_range_module.read_map_ahead, fence.AbortAhead.fire

    def read_map_ahead(task: CopyTask, ahead: ReadAhead) -> LogReader:
        reader = real_read_map_ahead(task, ahead)
        if old_commits:  # the new run's start (the old run's own start comes before its first commit)
            before, deadline = len(old_commits), time.monotonic() + hold_s
            while (len(old_commits) < before + 3 or hold_s > PRE_READ_WAIT_S) and time.monotonic() < deadline:
                time.sleep(0.02)
            commits_during_read.append(len(old_commits) - before)
            read_done.append(time.monotonic())
        return reader

    def fire(self: fence.AbortAhead, wait_s: float | None = None) -> None:
        if old_commits:
            fenced_at.append(time.monotonic())
        real_fire(self, wait_s)

    monkeypatch.setattr(copy_range_module, "read_map_ahead", read_map_ahead)
    monkeypatch.setattr(fence.AbortAhead, "fire", fire)
    outcomes: dict[str, CopyResult | BaseException] = {}
    run = runner(task, outcomes)

    def counted(name: str, **kwargs: Any) -> None:
        if name == "old":
            on_batch = kwargs["on_batch"]
            kwargs["on_batch"] = lambda result: (old_commits.append(1), on_batch(result))
        run(name, **kwargs)

    hand_over_mid_copy(counted, kafka_producer, kafka_clusters, kafka_consumer, source_topic)
    assert fenced_at and read_done, (fenced_at, read_done)
    if hold_s < PRE_READ_WAIT_S:
        assert commits_during_read[0] >= 3, (
            f"the old run committed {commits_during_read} times while the new run read its map ahead: fenced already"
        )
        assert fenced_at[0] >= read_done[0], "the new run fenced before its map read ahead"
    else:
        assert fenced_at[0] < read_done[0], "the fence waited out a read ahead held past PRE_READ_WAIT_S"
    old, new = outcomes["old"], outcomes["new"]
    assert isinstance(old, CopyResult) and old.handed_over, old
    assert isinstance(new, CopyResult) and not new.handed_over, new
