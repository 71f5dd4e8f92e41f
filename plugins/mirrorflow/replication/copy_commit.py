"""The end of one copy batch: its offset-map changes and its progress record, written after its records.

Exactly-once, all three go into the batch's transaction and become visible together. At-least-once there is no
transaction, and the map segments and the progress go to two different topic-partitions: if the progress were
stored while its map segments were lost (a broker refusing them, a crash between the two sends), the batch's
records would be copied but untranslatable for good, since the next run resumes after them. So the progress is
produced only once every map record is confirmed delivered (delivery reports checked, not just counted); a
failure before that leaves the progress where it was, and the next run copies the batch again.
"""

from __future__ import annotations

from typing import Any

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap, encode_segment, encode_segment_key
from mirrorflow.core.progress import Progress, encode_progress
from mirrorflow.kafka.transfer import TargetWriter
from mirrorflow.replication.copy_task import CopyTask


def commit_batch(writer: TargetWriter, task: CopyTask, offset_map: OffsetMap, progress: Progress) -> None:
    """Write the map's unflushed changes, then `progress`, and commit; the map is marked flushed only then."""
    changes = offset_map.unflushed()
    refused: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:  # confluent_kafka's (KafkaError | None, Message)
        if err is not None:
            refused.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    for segment in changes.upserts:
        key, value = encode_segment(task.topic, task.partition, segment)
        writer.produce(task.offset_map_topic, 0, key, value, on_delivery=on_delivery)
    for upstream_start in changes.deletes:
        key = encode_segment_key(task.topic, task.partition, upstream_start)
        writer.produce(task.offset_map_topic, 0, key, None, on_delivery=on_delivery)
    if not writer.transactional and (changes.upserts or changes.deletes):
        writer.flush()
        _check(task, refused, "its offset map", task.offset_map_topic)
    key, value = encode_progress(progress)
    writer.produce(task.progress_topic, 0, key, value, on_delivery=on_delivery)
    writer.commit()
    _check(task, refused, "its offset map or progress", task.progress_topic)
    offset_map.mark_flushed(changes)


def _check(task: CopyTask, refused: list[str], what: str, topic: str) -> None:
    if not refused:
        return
    raise MirrorflowError(
        f"flow {task.flow}: {task.topic}-{task.partition}: writing {what} on '{task.target}' failed "
        f"({refused[0]}{f', and {len(refused) - 1} more' if len(refused) > 1 else ''}). The batch's progress "
        f"was not stored past it, so the next run copies the batch again. Check '{topic}' on '{task.target}' "
        f"(its max.message.bytes, ACLs and replicas)."
    )
