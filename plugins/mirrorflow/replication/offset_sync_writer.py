"""MM2 offset syncs of one copy range: written after each commit by a separate, non-transactional producer (as
MM2 does), checked when the run ends, and healed when a run starts.

Why healing: the syncs live outside the copy's transaction (in `mm2-offset-syncs.<alias>.internal`, on the
source cluster by default), so an outage can lose them after the records and progress committed. A later run
resumes from the progress and, with nothing new to copy, used to write nothing: MM2 checkpoints of the partition
stayed behind for good (Strimzi issue 5533 reports the same with MM2). Now each run first looks at the newest
sync of its partition among the last `HEAL_WINDOW` records of the syncs topic and, if it is not the newest copied
record, rewrites the syncs that followed it, computed from the offset map exactly as the lost run computed them
(so MM2's OffsetSyncStore ends up with the same history). A partition whose newest sync is further back than the
window (a busy shared topic) gets only its latest-position sync again: harmless, MM2 reads a repeated sync as
the same position.

A run whose syncs cannot all be written fails with a clear error after its records committed: nothing is lost,
and the retry (or the next run) rewrites them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.core.offset_sync import OffsetSync
from mirrorflow.core.wire import WireFormatError
from mirrorflow.kafka.log_tail import read_tail
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.transfer import Message, TargetWriter
from mirrorflow.replication.copy_task import CopyTask

log = logging.getLogger(__name__)

# How many of the newest records of the offset-syncs topic a run looks through for its partition's newest sync:
# a bounded read (about 30 KiB), whatever the topic's size.
HEAL_WINDOW = 1000


def syncs_cluster(task: CopyTask) -> str:
    """The cluster holding the offset-syncs topic (`offset-syncs.topic.location`)."""
    return task.target if task.offset_syncs_on_target else task.source


def newest_offset_sync(task: CopyTask) -> tuple[int, int] | None:
    """(upstream, downstream) of the newest sync of the task's partition among the topic's last records; None
    when there is none there, or when the topic cannot be read (the heal then rewrites the latest sync only)."""
    if task.offset_syncs_topic is None:
        return None
    cluster = syncs_cluster(task)
    try:
        records = read_tail(
            cluster, task.offset_syncs_producer, task.offset_syncs_topic, 0, HEAL_WINDOW, timeout_s=task.timeout_s
        )
    except KafkaOperationError as err:
        log.warning("offset syncs: could not read %s on '%s': %s", task.offset_syncs_topic, cluster, err)
        return None
    newest = None
    for key, value in records:
        try:
            sync = OffsetSync.from_record(key, value)
        except WireFormatError:
            continue  # not ours to judge: MM2 skips malformed syncs too
        if (sync.topic, sync.partition) == (task.topic, task.partition):
            newest = (sync.upstream_offset, sync.downstream_offset)
    return newest


class OffsetSyncWriter:
    """Writes the offset syncs of one partition and remembers every failed delivery, so that `flush` can say
    the syncs were lost instead of reporting the run a success."""

    def __init__(self, task: CopyTask) -> None:
        if task.offset_syncs_topic is None:
            raise ValueError("offset syncs are disabled for this task")
        self._task = task
        self._topic = task.offset_syncs_topic
        self.cluster = syncs_cluster(task)
        self._writer = TargetWriter(
            self.cluster, task.offset_syncs_producer, transactional_id=None, timeout_s=task.timeout_s
        )
        self._failures: list[str] = []

    def _delivered(self, err: object | None, _msg: Message) -> None:
        if err is not None:
            self._failures.append(str(err))

    def send(self, syncs: Sequence[tuple[int, int]]) -> int:
        """Produce (upstream, downstream) syncs of committed records, without waiting; their count."""
        task = self._task
        for up, down in syncs:
            sync = OffsetSync(task.topic, task.partition, up, down)
            self._writer.produce(self._topic, 0, sync.record_key(), sync.record_value(), on_delivery=self._delivered)
        self._writer.poll()
        return len(syncs)

    def heal(self, offset_map: OffsetMap, newest: tuple[int, int] | None, offset_lag_max: int) -> int:
        """Rewrite what an earlier run lost: nothing when `newest` (the newest sync on the topic) is the newest
        copied record; else the syncs that followed `newest`, or only the latest one when `newest` is unknown or
        not behind the map. Call before copying, so these syncs precede the run's own."""
        last = offset_map.last_copied()
        if last is None or newest == last:
            return 0
        if newest is not None and newest[0] < last[0]:
            offset_map.resync_after(*newest)
            syncs = offset_map.offset_syncs(offset_lag_max, flush_latest=True)
        else:
            syncs = [last]
        log.info(
            "offset syncs: rewriting %d sync(s) of %s-%s (newest on the topic: %s, newest copied: %s)",
            len(syncs),
            self._task.topic,
            self._task.partition,
            newest,
            last,
        )
        return self.send(syncs)

    def flush(self, committed_to: int) -> None:
        """Wait for every sync; a sync not written is an error that says the records themselves are safe."""
        try:
            self._writer.flush()
            problem = self._failures[0] if self._failures else None
        except KafkaOperationError as err:
            problem = str(err)
        if problem is None:
            return
        task = self._task
        raise MirrorflowError(
            f"flow {task.flow}: the records of {task.topic}-{task.partition} are committed on '{task.target}' "
            f"(up to source offset {committed_to}), but MM2 offset syncs to '{self._topic}' on '{self.cluster}' "
            f"were not all written ({problem}). No record is lost, and MM2 checkpoints of this partition only lag: "
            f"the next run rewrites the missing syncs once cluster '{self.cluster}' is reachable."
        )

    def discard(self) -> None:
        """Drop the syncs not delivered yet: the run was handed over, and its successor heals them."""
        self._writer.purge()

    def close(self) -> None:
        self._writer.close()
