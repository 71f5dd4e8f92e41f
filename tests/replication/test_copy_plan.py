"""How copy ranges are grouped into Spark tasks (pure logic)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mirrorflow.replication.copy_plan import spread
from mirrorflow.replication.copy_task import CopyTask

BASE = CopyTask(
    flow="A->B",
    source="A",
    target="B",
    topic="t",
    partition=0,
    remote_topic="A.t",
    end=None,
    run_seconds=1.0,
    exactly_once=True,
    start_at_latest=False,
    transactional_id="x",
    progress_topic="p",
    offset_map_topic="m",
    offset_syncs_topic=None,
    offset_syncs_on_target=False,
    offset_lag_max=100,
    provenance=False,
    timeout_s=1.0,
)


def ranges(n: int) -> list[CopyTask]:
    return [replace(BASE, partition=p) for p in range(n)]


def partitions(groups: list[list[CopyTask]]) -> list[list[int]]:
    return [[t.partition for t in g] for g in groups]


def test_one_range_per_task_while_slots_suffice() -> None:
    assert partitions(spread(ranges(3), slots=8, most_per_task=8)) == [[0], [1], [2]]


def test_more_partitions_than_slots_fill_every_slot_round_robin() -> None:
    assert partitions(spread(ranges(5), slots=2, most_per_task=8)) == [[0, 2, 4], [1, 3]]


def test_a_group_never_exceeds_the_limit() -> None:
    groups = spread(ranges(100), slots=4, most_per_task=8)
    assert len(groups) == 13
    assert max(len(g) for g in groups) <= 8
    assert sorted(t.partition for g in groups for t in g) == list(range(100))


@pytest.mark.parametrize("n", [0, 1, 7])
def test_every_range_lands_in_exactly_one_group(n: int) -> None:
    groups = spread(ranges(n), slots=3, most_per_task=2)
    assert sorted(t.partition for g in groups for t in g) == list(range(n))
    assert all(groups)
