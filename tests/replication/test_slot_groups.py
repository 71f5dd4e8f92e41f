"""Copy ranges whose state shares a slot go to one Spark task (`replication/slot_groups.py`), without changing the
groups' sizes or crowding one topic into a task (pure logic)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from tests.replication.test_copy_plan import BASE

from mirrorflow.core.state_slots import sized_state_partitions
from mirrorflow.replication.copy_plan import spread, spread_quiet
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.slot_groups import slot_key


def flow(topics: int, partitions: int) -> list[CopyTask]:
    """The ranges of a flow of `topics` topics of `partitions` partitions, planned at the sized slot count."""
    count = sized_state_partitions(topics * partitions)
    return [
        replace(BASE, topic=f"t{i}", partition=p, state_partitions=count)
        for i in range(topics)
        for p in range(partitions)
    ]


def slots_per_task(groups: list[list[CopyTask]]) -> float:
    return sum(len({slot_key(t) for t in group}) for group in groups) / len(groups)


def most_of_one_topic(groups: list[list[CopyTask]]) -> int:
    return max(max(Counter(t.topic for t in group).values()) for group in groups)


def round_robin(tasks: list[CopyTask], groups: int) -> list[list[CopyTask]]:
    return [tasks[i::groups] for i in range(groups)]


@pytest.mark.parametrize(
    ("topics", "partitions", "slots", "per_task", "most_groups"),
    [(10, 10, 2, 8, None), (3, 33, 4, 8, None), (1, 2000, 2, 8, None), (200, 10, 2, 8, None), (5, 40, 8, 8, 3)],
)
def test_slot_mates_share_a_task_with_round_robins_sizes_and_topic_spread(
    topics: int, partitions: int, slots: int, per_task: int, most_groups: int | None
) -> None:
    tasks = flow(topics, partitions)
    groups = spread(tasks, slots, per_task, most_groups)
    before = round_robin(tasks, len(groups))
    assert sorted(map(id, (t for g in groups for t in g))) == sorted(map(id, tasks)), "every range exactly once"
    assert sorted(len(g) for g in groups) == sorted(len(g) for g in before), "the same group sizes"
    assert most_of_one_topic(groups) <= most_of_one_topic(before), "a topic no more crowded than round-robin"
    assert slots_per_task(groups) < slots_per_task(before) / 2, "slot mates share tasks"


def test_a_slots_ranges_go_to_one_task_whole_when_the_sizes_allow() -> None:
    """Two slots of four ranges (different topics), two groups of four: each group is one slot."""
    count = 64
    by_slot: dict[int, list[CopyTask]] = {}
    for i in range(200):
        task = replace(BASE, topic=f"t{i}", partition=0, state_partitions=count)
        by_slot.setdefault(slot_key(task)[1], []).append(task)
    two = [members[:4] for members in by_slot.values() if len(members) >= 4][:2]
    tasks = [two[0][0], two[1][0], two[0][1], two[1][1], two[0][2], two[1][2], two[0][3], two[1][3]]
    groups = spread(tasks, slots=2, most_per_task=8)
    assert sorted(len({slot_key(t) for t in g}) for g in groups) == [1, 1]


def test_one_slot_for_all_keeps_round_robin() -> None:
    """A flow whose state topics have one partition (older layout, or slots off): every range reads the same slot,
    so the grouping is round-robin's, as before."""
    tasks = [replace(BASE, partition=p) for p in range(5)]
    assert spread(tasks, 2, 8) == round_robin(tasks, 2)


def test_the_busy_part_of_a_continuous_copy_is_grouped_by_slot_and_the_quiet_ones_share_a_task() -> None:
    tasks = flow(4, 25)
    quiet = {(t.topic, t.partition) for t in tasks if t.partition >= 15}
    groups = spread_quiet(tasks, quiet, slots=4, most_per_task=8)
    assert {(t.topic, t.partition) for t in groups[-1]} == quiet
    busy = [t for t in tasks if (t.topic, t.partition) not in quiet]
    assert slots_per_task(groups[:-1]) < slots_per_task(round_robin(busy, len(groups) - 1)) / 2
    assert most_of_one_topic(groups[:-1]) <= most_of_one_topic(round_robin(busy, len(groups) - 1))
