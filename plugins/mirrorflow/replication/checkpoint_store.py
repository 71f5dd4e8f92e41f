"""MM2's checkpoint store: the latest checkpoint per (group, downstream partition), read once from
`<source>.checkpoints.internal` on the target and kept current by whoever emits checkpoints."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from mirrorflow.config.model import Flow
from mirrorflow.core.checkpoint import Checkpoint
from mirrorflow.core.wire import WireFormatError
from mirrorflow.kafka.compacted_log import read_to_end
from mirrorflow.replication.state_records import RawRecord, TopicPartition

log = logging.getLogger(__name__)


class CheckpointStore:
    """MM2's `CheckpointStore`: the last checkpoint per (group, downstream topic, partition).

    Invariant kept by `emit_checkpoints`: a checkpoint is only added when `is_more_recent` than the stored
    one, so for a fixed upstream offset the stored downstream offset never decreases.
    """

    def __init__(self, checkpoints: Iterable[Checkpoint] = (), *, malformed: int = 0) -> None:
        self._last: dict[str, dict[TopicPartition, Checkpoint]] = {}
        self.malformed = malformed
        """Records of the topic that were not checkpoints (skipped, as MM2 does)."""
        for checkpoint in checkpoints:
            self.update(checkpoint)

    @classmethod
    def from_records(
        cls, records: Iterable[RawRecord], *, group_matches: Callable[[str], bool] | None = None
    ) -> CheckpointStore:
        checkpoints: list[Checkpoint] = []
        malformed = 0
        for key, value in records:
            try:
                checkpoint = Checkpoint.from_record(key, value)
            except WireFormatError:
                malformed += 1
                continue
            if group_matches is None or group_matches(checkpoint.consumer_group_id):
                checkpoints.append(checkpoint)
        if malformed:
            log.info("skipped %d records that are not checkpoints", malformed)
        return cls(checkpoints, malformed=malformed)

    @classmethod
    def load(
        cls,
        cluster: str,
        conf: Mapping[str, str],
        topic: str,
        *,
        timeout_s: float,
        group_matches: Callable[[str], bool] | None = None,
    ) -> CheckpointStore:
        """Read partition 0 of a checkpoints topic from the beginning to its end (an absent topic: empty)."""
        records = (
            (key, value)
            for _p, _o, key, value, _ts in read_to_end(cluster, conf, topic, partitions=[0], timeout_s=timeout_s)
        )
        return cls.from_records(records, group_matches=group_matches)

    @classmethod
    def for_flow(cls, flow: Flow, *, timeout_s: float | None = None) -> CheckpointStore:
        """The checkpoints flow `source->target` has written to `<source>.checkpoints.internal` on the target."""
        topic = flow.policy().checkpoints_topic(flow.source)
        timeout = flow.admin_timeout_ms / 1000 if timeout_s is None else timeout_s
        return cls.load(flow.target, flow.target_consumer.librdkafka(), topic, timeout_s=timeout)

    def last(self, group: str, topic: str, partition: int) -> Checkpoint | None:
        return self._last.get(group, {}).get((topic, partition))

    def update(self, checkpoint: Checkpoint) -> None:
        group = self._last.setdefault(checkpoint.consumer_group_id, {})
        group[(checkpoint.topic, checkpoint.partition)] = checkpoint

    def groups(self) -> list[str]:
        return sorted(self._last)

    def group_checkpoints(self, group: str) -> dict[TopicPartition, Checkpoint]:
        return dict(self._last.get(group, {}))

    def __len__(self) -> int:
        return sum(len(tps) for tps in self._last.values())
