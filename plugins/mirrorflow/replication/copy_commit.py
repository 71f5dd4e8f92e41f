"""The end of one copy batch: its offset-map changes and its progress record, written after its records.

Exactly-once, all three go into the batch's transaction and become visible together. At-least-once there is no
transaction, and the map segments and the progress go to two different topic-partitions: if the progress were
stored while its map segments were lost (a broker refusing them, a crash between the two sends), the batch's
records would be copied but untranslatable for good, since the next run resumes after them. So the progress is
produced only once every map record is confirmed delivered (delivery reports checked, not just counted); a
failure before that leaves the progress where it was, and the next run copies the batch again.

Both go to the partition's head slot of their topics (`copy_slots`). A commit that moves the partition's state
there from lower slots writes the map runs live only below first; the keys below are tombstoned only once their
copies at the head are durable (`copy_slots.Placement`): in a later transaction (exactly-once), or after the
head's records are confirmed (at-least-once; a refused tombstone only leaves a copy that the head outranks, and
is logged). Deletes go to the head at once and to the other slots the key lives in with the tombstones below.
A progress whose commit leaves nothing of the partition below its heads says so (`Progress.settled_slots`), and
later starts read the head slot alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap, encode_segment, encode_segment_key
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.copy_slots import Placement
from mirrorflow.replication.copy_task import CopyTask

log = logging.getLogger(__name__)


@dataclass
class StateSlots:
    """Where a range writes its progress and its map (`copy_slots.Placement`)."""

    progress: Placement
    offset_map: Placement
    claimed: int = 0
    """The `settled_slots` of the partition's progress as last committed (or read at start)."""

    @property
    def moving(self) -> bool:
        """Whether state of the partition still lies below its heads: the next commit moves it."""
        return self.progress.moving or self.offset_map.moving

    def settled(self, transactional: bool) -> int:
        """The slot count to record in the progress of the commit being written (`Progress.settled_slots`): the
        count when, once this commit is durable, nothing of the partition is live below its heads, else 0.
        Exactly-once, the commit's own transaction carries the copies up and the `ready` tombstones, so only
        what waits for it (`after`) is left; at-least-once its tombstones are sent after it, so nothing may be
        left at all."""
        placements = (self.progress, self.offset_map)
        if self.progress.count != self.offset_map.count or any(p.after or p.unsure for p in placements):
            return 0
        if not transactional and self.moving:
            return 0
        return self.progress.count

    def owes_claim(self, transactional: bool) -> bool:
        """Whether a commit would now record the partition as settled where its last progress did not (the
        at-least-once move's tombstones are confirmed; a progress of an older version): one commit more, so
        that later starts, even of an idle partition, read the head alone."""
        settled = self.settled(transactional)
        return settled > 0 and settled != self.claimed


def commit_batch(
    writer: TargetWriter, task: CopyTask, offset_map: OffsetMap, progress: Progress, slots: StateSlots
) -> None:
    """Write the map's unflushed changes, then `progress`, and commit; the map is marked flushed only then."""
    changes = offset_map.unflushed()
    refused: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:  # confluent_kafka's (KafkaError | None, Message)
        if err is not None:
            refused.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    head, below = slots.offset_map.head, slots.offset_map.key_slots
    for segment in [*slots.offset_map.copy_up, *changes.upserts]:
        key, value = encode_segment(task.topic, task.partition, segment)
        writer.produce(task.offset_map_topic, head, key, value, on_delivery=on_delivery)
    for upstream_start in changes.deletes:
        # At the head now; below only once this commit is durable, like every tombstone below: a delete there
        # (a run thinning merged into the one before it, rewritten at the head) seen without the head's record
        # would leave readers a hole.
        key = encode_segment_key(task.topic, task.partition, upstream_start)
        writer.produce(task.offset_map_topic, head, key, None, on_delivery=on_delivery)
        for slot in below.pop(upstream_start, []):
            slots.offset_map.after.setdefault(slot, []).append(key)
    if not writer.transactional and (changes.upserts or changes.deletes or slots.offset_map.copy_up):
        writer.flush()
        _check(task, refused, "its offset map", task.offset_map_topic)
    settled = slots.settled(writer.transactional)
    key, value = encode_progress(replace(progress, settled_slots=settled))
    writer.produce(task.progress_topic, slots.progress.head, key, value, on_delivery=on_delivery)
    if writer.transactional:
        _tombstone_below(writer, task, slots, on_delivery, ready_only=True)
    writer.commit()
    _check(task, refused, "its offset map or progress", task.progress_topic)
    offset_map.mark_flushed(changes)
    slots.claimed = settled
    if slots.moving and not writer.transactional:
        _tombstone_below(writer, task, slots, on_delivery, ready_only=False)
        try:
            writer.flush()
        except MirrorflowError as err:
            refused.append(str(err))
        if refused:
            slots.progress.unsure = slots.offset_map.unsure = True
            log.warning(
                "flow %s: %s-%s: its state now lives in its head slots, but tombstoning the copy below failed "
                "(%s); the head outranks it for every reader, and the next start tombstones it again",
                task.flow,
                task.topic,
                task.partition,
                refused[0],
            )
        slots.progress.committed()
        slots.offset_map.committed()
    slots.progress.committed()
    slots.offset_map.committed()


def _tombstone_below(
    writer: TargetWriter, task: CopyTask, slots: StateSlots, on_delivery: Any, *, ready_only: bool
) -> None:
    """Tombstone the partition's keys below its heads whose copies there are durable (`ready`); at-least-once,
    after the commit's records are confirmed, also those this commit copied up (`after`)."""
    for topic, placement in ((task.offset_map_topic, slots.offset_map), (task.progress_topic, slots.progress)):
        for tombstones in (placement.ready,) if ready_only else (placement.ready, placement.after):
            for slot, keys in tombstones.items():
                for key in keys:
                    writer.produce(topic, slot, key, None, on_delivery=on_delivery)


def _check(task: CopyTask, refused: list[str], what: str, topic: str) -> None:
    if not refused:
        return
    raise MirrorflowError(
        f"flow {task.flow}: {task.topic}-{task.partition}: writing {what} on '{task.target}' failed "
        f"({refused[0]}{f', and {len(refused) - 1} more' if len(refused) > 1 else ''}). The batch's progress "
        f"was not stored past it, so the next run copies the batch again. Check '{topic}' on '{task.target}' "
        f"(its max.message.bytes, ACLs and replicas)."
    )
