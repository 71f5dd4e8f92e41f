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
from mirrorflow.kafka.compacted_log import LogReader
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.replication.copy_slots import ReadAhead
from mirrorflow.replication.copy_task import CopyResult, CopyTask

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_the_next_run_fences_only_after_its_map_read_ahead_and_the_old_run_copies_meanwhile(
    kafka_clusters: LocalClusters,
    kafka_producer: Callable[..., Producer],
    kafka_consumer: Callable[..., Consumer],
    source_topic: str,
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The new run's map read ahead is held until the old run has committed three more times (10 s at most): it
    can only while it is not fenced. Fencing while the map was read (the order before session 18) stopped the old
    run at once, and the read ahead waited the 10 s out with no commit. Then the handover completes as usual:
    the old run ends handed over, and every record is on the target once, in order."""
    (task,) = continuous_tasks(write_config, source_topic, 1)
    old_commits: list[int] = []
    commits_during_read: list[int] = []
    real_read_map_ahead = copy_range_module.read_map_ahead

    def read_map_ahead(task: CopyTask, ahead: ReadAhead) -> LogReader:
        reader = real_read_map_ahead(task, ahead)
        if old_commits:  # the new run's start (the old run's own start comes before its first commit)
            before, deadline = len(old_commits), time.monotonic() + 10
            while len(old_commits) < before + 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            commits_during_read.append(len(old_commits) - before)
        return reader

    monkeypatch.setattr(copy_range_module, "read_map_ahead", read_map_ahead)
    outcomes: dict[str, CopyResult | BaseException] = {}
    run = runner(task, outcomes)

    def counted(name: str, **kwargs: Any) -> None:
        if name == "old":
            on_batch = kwargs["on_batch"]
            kwargs["on_batch"] = lambda result: (old_commits.append(1), on_batch(result))
        run(name, **kwargs)

    hand_over_mid_copy(counted, kafka_producer, kafka_clusters, kafka_consumer, source_topic)
    assert commits_during_read and commits_during_read[0] >= 3, (
        f"the old run committed {commits_during_read} times while the new run read its map ahead: fenced already"
    )
    old, new = outcomes["old"], outcomes["new"]
    assert isinstance(old, CopyResult) and old.handed_over, old
    assert isinstance(new, CopyResult) and not new.handed_over, new
