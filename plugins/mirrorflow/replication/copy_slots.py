"""What one copy range reads of its state, and where it writes it: its slots (`core.state_slots`).

A range reads only the head slot of its partition in each state topic, a single partition of it: O(the
partitions sharing that slot), not O(the flow). Only when the head holds nothing of the partition does it read
the rest of the partition's chain: after the topic grew (or on the first start after the upgrade from the
one-partition topics, whose only slot is 0), the state is still where a smaller topic put it. It is then moved:
the first commit writes the map runs and the progress to the head and tombstones the partition's keys where they
were, in the same transaction (exactly-once), or once the head's records are confirmed (at-least-once:
`copy_commit`). A crash in between leaves both copies, and the head's wins for every reader.

Each read takes the topic's partition count from the same metadata answer as the read itself, after the fence:
a copy never trusts the count planned on the driver, so a topic grown since planning is read and written at its
real head, and a copy planned before the growth can only write below the head, where the slot rule ignores it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from mirrorflow.core.offset_map import Segment, encode_segment_key
from mirrorflow.core.progress import Progress, encode_progress_key
from mirrorflow.core.state_slots import check_count, head_slot, newest, slot_chain
from mirrorflow.kafka.compacted_log import OPEN_TRANSACTION_WAIT_S, read_to_end
from mirrorflow.replication.copy_task import CopyTask
from mirrorflow.replication.state_records import SlotRecord, SlottedState, StoredSegments, stored_segments


@dataclass
class Placement:
    """Where a range writes its state in one state topic, and what it must move there."""

    count: int
    """The topic's partitions when read (1 when it did not exist: a producer then creates it with one)."""
    head: int
    """The slot the range writes to."""
    old: dict[int, list[bytes]] = field(default_factory=dict)
    """Keys of the partition still live in slots below the head, by slot: tombstoned once the head holds it."""
    runs: list[Segment] = field(default_factory=list)
    """Map runs found below the head, to write to the head before the range's own changes (the move)."""

    @property
    def moving(self) -> bool:
        return bool(self.old or self.runs)

    def moved(self) -> None:
        """The move is durable: nothing more to write for it."""
        self.old, self.runs = {}, []


def load_progress(task: CopyTask) -> tuple[Progress | None, Placement]:
    """The committed progress of the task's partition, read after fencing so it is final, and its placement.

    `read_to_end` reads to the true end, waiting for other tasks' open transactions on the shared slot: a
    progress record of ours committed after one of them is never missed (that would copy again what was
    committed). This and `load_segments` may run in parallel and still form one cut: after fencing, no writer
    can change this partition's progress or segments between the two reads. A tombstone (`mirrorflow reset`)
    means no progress."""
    tp = (task.topic, task.partition)
    state = SlottedState()
    placement = _read_own(task, task.progress_topic, lambda records: state.apply_progress(records, topics=[tp[0]]))
    if not state.slots_of(tp)[0]:
        _read_chain(task, task.progress_topic, placement, lambda r: state.apply_progress(r, topics=[tp[0]]))
    found = state.slots_of(tp)[0]
    placement.old = {slot: [encode_progress_key(*tp)] for slot in found if slot != placement.head}
    return state.progress().get(tp), placement


def load_segments(task: CopyTask) -> tuple[StoredSegments, Placement]:
    """This partition's stored offset-map runs, applied as every reader applies them (`state_records`), and
    their placement. A segment cuts the older ones it overlaps: keeping the latest record per key instead would,
    after an at-least-once crash that delivered only part of one commit's map records, keep an older segment
    that overlaps a newer one, and `OffsetMap.restore` would refuse the pair at every restart."""
    tp = (task.topic, task.partition)
    state = SlottedState()
    placement = _read_own(task, task.offset_map_topic, lambda records: state.apply_segments(records, topics=[tp[0]]))
    if placement.head not in state.slots_of(tp)[1]:
        _read_chain(task, task.offset_map_topic, placement, lambda r: state.apply_segments(r, topics=[tp[0]]))
    keys = state.slots_of(tp)[1]
    stored = stored_segments(state.segments(), tp)
    placement.old = {
        slot: [encode_segment_key(tp[0], tp[1], k) for k in live]
        for slot, live in keys.items()
        if slot != placement.head
    }
    if keys and max(keys) != placement.head:
        placement.runs = list(stored.runs)
    return stored, placement


def load_snapshot(task: CopyTask, topic: str, key: bytes) -> tuple[bytes | None, Placement]:
    """The partition's latest metrics snapshot (`key`) in metrics topic `topic`, from the highest slot of its
    chain that holds one, and its placement (the snapshots below the head are tombstoned by the publisher)."""
    found: dict[int, bytes | None] = {}

    def apply(records: Iterator[SlotRecord]) -> None:
        for slot, k, value in records:
            if k == key:
                found[slot] = value

    placement = _read_own(task, topic, apply, read_committed=False)
    if found.get(placement.head) is None:
        _read_chain(task, topic, placement, apply, read_committed=False)
    live = {slot: value for slot, value in found.items() if value is not None}
    placement.old = {slot: [key] for slot in live if slot != placement.head}
    return newest(live), placement


def _read_own(
    task: CopyTask, topic: str, apply: Callable[[Iterator[SlotRecord]], object], *, read_committed: bool = True
) -> Placement:
    """Read the partition's head slot of `topic`; its placement (the count comes with the read)."""
    counts: list[int] = []

    def head(count: int) -> list[int]:
        return [head_slot(task.topic, task.partition, check_count(count, topic))]

    apply(_slot_records(task, topic, head, counts.append, read_committed))
    count = max(counts[0] if counts else 0, 1)
    return Placement(count, head_slot(task.topic, task.partition, count))


def _read_chain(
    task: CopyTask,
    topic: str,
    placement: Placement,
    apply: Callable[[Iterator[SlotRecord]], object],
    *,
    read_committed: bool = True,
) -> None:
    """Read the slots below the head where the partition's state lived while the topic was smaller."""
    below = slot_chain(task.topic, task.partition, placement.count)[1:]
    if below:
        apply(_slot_records(task, topic, lambda _count: below, None, read_committed))


def _slot_records(
    task: CopyTask,
    topic: str,
    slots: Callable[[int], list[int]],
    on_count: Callable[[int], None] | None,
    read_committed: bool,
) -> Iterator[SlotRecord]:
    # Metrics snapshots are written outside transactions: waiting for a stalled read is bounded by the timeout.
    wait = OPEN_TRANSACTION_WAIT_S if read_committed else task.timeout_s
    for p, _o, key, value, _ts in read_to_end(
        task.target,
        task.target_consumer,
        topic,
        partitions=slots,
        read_committed=read_committed,
        timeout_s=task.timeout_s,
        on_count=on_count,
        wait_s=wait,
    ):
        yield p, key, value
