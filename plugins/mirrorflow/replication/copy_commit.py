"""The end of one copy batch: its offset-map changes and its progress record, written after its records.

Exactly-once, all three go into the batch's transaction and become visible together. At-least-once there is no
transaction, and the map segments and the progress go to two different topic-partitions: if the progress were
stored while its map segments were lost (a broker refusing them, a crash between the two sends), the batch's
records would be copied but untranslatable for good, since the next run resumes after them. So the progress is
produced only once every map record is confirmed delivered (delivery reports checked, not just counted); a
failure before that leaves the progress where it was, and the next run copies the batch again.

Both go to the partition's head slot of their topics (`copy_slots`). A commit that moves the partition's state
there from a lower slot writes the map runs found there first, then tombstones the keys left below: in the
transaction (exactly-once), or once the head's progress is confirmed (at-least-once; a refused tombstone only
leaves a copy that the head's records outrank, and is logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
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

    @property
    def moving(self) -> bool:
        """Whether state of the partition still lies below its heads: the next commit moves it."""
        return self.progress.moving or self.offset_map.moving


def commit_batch(
    writer: TargetWriter, task: CopyTask, offset_map: OffsetMap, progress: Progress, slots: StateSlots
) -> None:
    """Write the map's unflushed changes, then `progress`, and commit; the map is marked flushed only then."""
    changes = offset_map.unflushed()
    refused: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:  # confluent_kafka's (KafkaError | None, Message)
        if err is not None:
            refused.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    head = slots.offset_map.head
    for segment in [*slots.offset_map.runs, *changes.upserts]:
        key, value = encode_segment(task.topic, task.partition, segment)
        writer.produce(task.offset_map_topic, head, key, value, on_delivery=on_delivery)
    for upstream_start in changes.deletes:
        key = encode_segment_key(task.topic, task.partition, upstream_start)
        writer.produce(task.offset_map_topic, head, key, None, on_delivery=on_delivery)
    if not writer.transactional and (changes.upserts or changes.deletes or slots.offset_map.runs):
        writer.flush()
        _check(task, refused, "its offset map", task.offset_map_topic)
    key, value = encode_progress(progress)
    writer.produce(task.progress_topic, slots.progress.head, key, value, on_delivery=on_delivery)
    if writer.transactional:
        _tombstone_below(writer, task, slots, on_delivery)
    writer.commit()
    _check(task, refused, "its offset map or progress", task.progress_topic)
    offset_map.mark_flushed(changes)
    if slots.moving and not writer.transactional:
        _tombstone_below(writer, task, slots, on_delivery)
        writer.flush()
        if refused:
            log.warning(
                "flow %s: %s-%s: its state now lives in its head slots, but tombstoning the old copy below failed "
                "(%s); the head's records outrank it for every reader",
                task.flow,
                task.topic,
                task.partition,
                refused[0],
            )
    slots.progress.moved()
    slots.offset_map.moved()


def _tombstone_below(writer: TargetWriter, task: CopyTask, slots: StateSlots, on_delivery: Any) -> None:
    """Tombstone the partition's keys left in slots below its heads (the move's second half)."""
    for topic, placement in ((task.offset_map_topic, slots.offset_map), (task.progress_topic, slots.progress)):
        for slot, keys in placement.old.items():
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
