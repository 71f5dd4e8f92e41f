"""Which copy ranges share a Spark task: ranges whose state shares a slot, where that costs nothing else.

The ranges of one Spark task read their state through one cache (`copy_group`, `kafka.log_cache`), so a task
fetches each state slot it touches once, whatever number of its ranges have their head slot there. Round-robin
placement gave a task of 8 ranges 8 different slots: 8 × (partitions per slot) partitions' state fetched at every
start (issue 17, docs/scaling.md item 1). Packing the ranges of one slot into one task makes that the task's own
partitions plus a few neighbours.

What it must not cost, in order:
1. The group sizes: exactly those of round-robin (each n // groups or one more), so the number of Spark tasks,
   `most_per_task` and a continuous copy's cores are kept, and no task is emptier or fuller than before.
2. The spread of a topic's partitions over the tasks: no task holds more of one topic than round-robin would give
   it (⌈its partitions / groups⌉), where the packing can manage it. A task's ranges share one core, and a topic is
   the unit of load operators see: eight partitions of a hot topic in one task would copy at a core's pace where
   round-robin gave them eight cores. That costs throughput for the whole run, while sharing a slot saves a
   start-up read paid once per run (about 100 KB/s at the heavy rate of docs/scaling.md item 1, against tens of
   MB/s that a busy range copies); so the topic spread wins where the two conflict. They rarely do: the slot of a
   partition is a hash of topic and partition, so a slot's partitions are mostly of different topics.
3. Then the slots: the largest slot groups first, each into the task it fills best (whole when some task has the
   room), split over the tasks with the most room otherwise.
Quiet partitions need none of this: they share one task anyway (`copy_plan.spread_quiet`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import islice

from mirrorflow.core.state_slots import head_slot
from mirrorflow.replication.copy_task import CopyTask

SCAN = 16
"""How many tasks of one room size a slot group tries before it looks at other sizes (bounds the planning time
at 100,000 ranges; the driver plans every run)."""


def slot_key(task: CopyTask) -> tuple[str, int]:
    """The state slot a range reads at its start: its head slot of the progress topic (the map's and metrics'
    are the same slot number of the same count, `core.state_slots`)."""
    return task.progress_topic, head_slot(task.topic, task.partition, max(task.state_partitions, 1))


def pack(tasks: Sequence[CopyTask], groups: int) -> list[list[CopyTask]]:
    """`tasks` in `groups` groups by the rules of the module; round-robin when the slots make no difference (one
    slot for all, or one range per group)."""
    groups = max(1, min(groups, len(tasks)))
    by_slot: dict[tuple[str, int], list[CopyTask]] = {}
    for task in tasks:
        by_slot.setdefault(slot_key(task), []).append(task)
    if len(by_slot) <= 1 or groups >= len(tasks) or groups == 1:
        return [list(tasks[i::groups]) for i in range(groups)]
    n = len(tasks)
    bins = _Bins([n // groups + (1 if i < n % groups else 0) for i in range(groups)])
    caps = {topic: -(-count // groups) for topic, count in Counter(t.topic for t in tasks).items()}
    for members in sorted(by_slot.values(), key=len, reverse=True):
        rest = members
        while rest:
            b = bins.choose(rest, caps)
            take = bins.fitting(b, rest, caps) or rest[: bins.room[b]]
            bins.add(b, take)
            taken = {id(t) for t in take}
            rest = [t for t in rest if id(t) not in taken]
    bins.even_out(caps)
    return bins.members


class _Bins:
    """The groups being filled: their members, room left, topics held, and the groups by room left."""

    def __init__(self, sizes: list[int]) -> None:
        self.room = list(sizes)
        self.members: list[list[CopyTask]] = [[] for _ in sizes]
        self.topics: list[Counter[str]] = [Counter() for _ in sizes]
        self.by_room: dict[int, dict[int, None]] = {}
        for b, room in enumerate(sizes):
            self.by_room.setdefault(room, {})[b] = None
        self.most = max(sizes)

    def fitting(self, b: int, rest: Sequence[CopyTask], caps: dict[str, int]) -> list[CopyTask]:
        """The members of `rest` that group `b` takes without holding more of a topic than its cap."""
        added: Counter[str] = Counter()
        take: list[CopyTask] = []
        for task in rest:
            if len(take) == self.room[b]:
                break
            if self.topics[b][task.topic] + added[task.topic] < caps[task.topic]:
                take.append(task)
                added[task.topic] += 1
        return take

    def choose(self, rest: Sequence[CopyTask], caps: dict[str, int]) -> int:
        """The group with the least room that takes all of `rest` within the topic caps; else the one with the most
        room that takes some of it; else (the caps cannot all hold) the one with the most room."""
        for room in range(len(rest), self.most + 1):
            for b in islice(self.by_room.get(room, {}), SCAN):
                if len(self.fitting(b, rest, caps)) == len(rest):
                    return b
        for room in range(self.most, 0, -1):
            for b in islice(self.by_room.get(room, {}), SCAN):
                if self.fitting(b, rest, caps):
                    return b
        return next(b for room in range(self.most, 0, -1) for b in self.by_room.get(room, {}))

    def even_out(self, caps: dict[str, int]) -> None:
        """Where the greedy filling had to put more of a topic into a group than its cap (the last ranges of a
        topic found room only beside their siblings), swap the surplus with a range of another group that breaks
        no cap either way: the topic spread outranks the slots (see the module)."""
        for b, members in enumerate(self.members):
            for i, task in enumerate(members):
                if self.topics[b][task.topic] <= caps[task.topic]:
                    continue
                swap = self._partner(b, task, caps)
                if swap is not None:
                    c, j = swap
                    other = self.members[c][j]
                    members[i], self.members[c][j] = other, task
                    self.topics[b].update({task.topic: -1, other.topic: 1})
                    self.topics[c].update({other.topic: -1, task.topic: 1})

    def _partner(self, b: int, task: CopyTask, caps: dict[str, int]) -> tuple[int, int] | None:
        """A (group, index) whose range can trade places with `task` of group `b` within the caps."""
        for c, members in enumerate(self.members):
            if c == b or self.topics[c][task.topic] >= caps[task.topic]:
                continue
            for j, other in enumerate(members):
                if other.topic != task.topic and self.topics[b][other.topic] < caps[other.topic]:
                    return c, j
        return None

    def add(self, b: int, take: Sequence[CopyTask]) -> None:
        del self.by_room[self.room[b]][b]
        self.room[b] -= len(take)
        self.by_room.setdefault(self.room[b], {})[b] = None
        self.members[b].extend(take)
        self.topics[b].update(t.topic for t in take)
