"""Tail internal topics: read each partition to its true end again and again, each time only what was added.

The rules of a read are `compacted_log`'s (the end is the high watermark when a read starts; open transactions
are waited out); what this adds is the memory of where each partition was read to, and of each topic's ID.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.compacted_log import OPEN_TRANSACTION_WAIT_S, MissingTopicError, consume_to
from mirrorflow.kafka.log_cache import MAX_GAP_S, boot_clock
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.topics import topic_ids


class CompactedTail:
    """Reads partitions of internal topics to their true end again and again, each time only what was added
    since the last read (MM2's OffsetSyncStore and Kafka Connect's offset store load once, then tail).

    Same rules as `read_to_end`: the end is the high watermark when a read starts, open transactions are waited
    out for `wait_s`. A topic never seen is empty while it does not exist. A topic that was read before and is
    gone now (deleted, or a metadata answer that lost it) fails the read with `MissingTopicError`: returning
    nothing would leave the caller with a view it cannot tell is incomplete. A topic that was deleted and
    re-created (a new topic ID, or an end below the position already read) is read again from its start, and
    `read_new` says so: the caller must drop everything it built from the old topic and read again from the
    start (`forget`), since its other topics may have been re-created too. The same holds after more than
    `max_gap_s` without reading a topic (see `MAX_GAP_S`): tombstones it would have needed may be gone. Between
    reads nothing is assigned, so the client neither prefetches nor queues errors for partitions no one reads.
    """

    def __init__(
        self,
        cluster: str,
        conf: Mapping[str, str],
        *,
        timeout_s: float,
        wait_s: float = OPEN_TRANSACTION_WAIT_S,
        max_gap_s: float = MAX_GAP_S,
        clock: Callable[[], float] = boot_clock,
    ) -> None:
        self.cluster, self._timeout_s, self._wait_s = cluster, timeout_s, wait_s
        self._max_gap_s, self._clock = max_gap_s, clock
        self._read_at: dict[tuple[str, int], float] = {}
        """When the read that set each position began (before its end was asked)."""
        self._lapsed_keys: set[tuple[str, int]] = set()
        """Positions reset by a gap whose read from the start has not completed yet: reported as restarted."""
        settings: dict[str, str | int | bool] = {
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
        self._reader = make_consumer(conf, **settings)
        self._asker = make_consumer(conf, **{"isolation.level": "read_uncommitted"})
        self._admin = admin_client(conf)
        self._positions: dict[tuple[str, int], int] = {}
        self._topic_ids: dict[str, str] = {}
        self.records_read = 0
        """Records delivered so far, all reads together (what tailing saves shows here)."""

    def forget(self, topic: str) -> None:
        """Read `topic` from its start next time, as if it had never been read."""
        self._topic_ids.pop(topic, None)
        for key in [k for k in self._positions if k[0] == topic]:
            del self._positions[key]
            self._read_at.pop(key, None)
            self._lapsed_keys.discard(key)

    def read_new(self, topic: str, partition: int) -> tuple[bool, list[tuple[bytes | None, bytes | None]]]:
        """(restarted, the (key, value) records added since the last call, in log order); when restarted, the
        records are the re-created topic's from its start."""
        lapsed = self._lapsed([(topic, partition)])
        restarted = self._recreated(topic, self.has_read(topic, partition)) or lapsed
        again, found = self._read_stamped(topic, partition)
        return restarted or again, found

    def read_new_all(self, topic: str) -> tuple[bool, list[tuple[int, bytes | None, bytes | None]]]:
        """`read_new` for every partition of `topic` (one topic-ID check): (restarted, (partition, key, value)
        records, each partition's in log order). A topic read before that is gone fails as in `read_new`."""
        seen = any(key[0] == topic for key in self._positions)
        lapsed = self._lapsed([key for key in self._positions if key[0] == topic])
        recreated = self._recreated(topic, seen)
        restarted = recreated or lapsed
        try:
            metadata = self._admin.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
        except KafkaException as err:
            raise KafkaOperationError(self.cluster, f"reading the partitions of {topic}", err) from err
        count = 0 if metadata is None or metadata.error is not None else len(metadata.partitions)
        if count == 0 and seen and not recreated:
            raise MissingTopicError(self.cluster, topic, "it was read before")
        found: list[tuple[int, bytes | None, bytes | None]] = []
        for partition in range(count):
            again, records = self._read_stamped(topic, partition)
            restarted = restarted or again
            found.extend((partition, key, value) for key, value in records)
        return restarted, found

    def _read_partition(self, topic: str, partition: int) -> tuple[bool, list[tuple[bytes | None, bytes | None]]]:
        seen = self.has_read(topic, partition)
        restarted = False
        at = self._positions.get((topic, partition), 0)
        try:
            low, high = self._asker.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._timeout_s, cached=False
            )
        except KafkaException as err:
            if err.args[0].code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                raise KafkaOperationError(self.cluster, f"reading the end of {topic}-{partition}", err) from err
            if seen:
                raise MissingTopicError(self.cluster, topic, f"partition {partition} was read before") from err
            return restarted, []
        if high < at:  # re-created without a topic ID to tell (an older broker): the end went backwards
            restarted, at = True, 0
            self.forget(topic)
        if high <= max(at, low):
            self._positions[(topic, partition)] = max(at, high)
            return restarted, []
        self._reader.assign([TopicPartition(topic, partition, at)])
        try:
            found = [
                (key, value)
                for _p, _o, key, value, _ts in consume_to(
                    self._reader, self.cluster, topic, {partition: high}, self._wait_s, {partition: at}
                )
            ]
        except KafkaException as err:
            raise KafkaOperationError(self.cluster, f"reading {topic}-{partition}", err) from err
        finally:
            self._reader.unassign()
        self._positions[(topic, partition)] = high
        self.records_read += len(found)
        return restarted, found

    def has_read(self, topic: str, partition: int) -> bool:
        """Whether `topic`-`partition` existed at a read since it was last forgotten."""
        return (topic, partition) in self._positions

    def _lapsed(self, keys: list[tuple[str, int]]) -> bool:
        """Whether any of these partitions was last read more than `max_gap_s` ago (by the start of the read that
        set its position); those are read from their start, and say so until that read completes. They still
        count as read before: one that is gone now fails the read."""
        now, lapsed = self._clock(), False
        for key in keys:
            at = self._read_at.get(key)
            if key in self._positions and at is not None and now - at > self._max_gap_s:
                self._positions[key] = 0
                self._lapsed_keys.add(key)
            lapsed = lapsed or key in self._lapsed_keys
        return lapsed

    def _read_stamped(self, topic: str, partition: int) -> tuple[bool, list[tuple[bytes | None, bytes | None]]]:
        """`_read_partition`, stamping the partition's position with the time the read began once it succeeded
        (a failed read leaves the old stamp: its position did not move)."""
        began = self._clock()
        result = self._read_partition(topic, partition)
        self._read_at[(topic, partition)] = began
        self._lapsed_keys.discard((topic, partition))
        return result

    def _recreated(self, topic: str, seen: bool) -> bool:
        """Whether `topic` has a topic ID other than the one it had when read before (KIP-516); if so it is
        forgotten. Remembers the ID; an unknown one (an older broker, no describe permission) never differs."""
        now = topic_ids(self._admin, self.cluster, [topic], self._timeout_s).get(topic)
        before = self._topic_ids.get(topic)
        changed = seen and bool(before) and bool(now) and before != now
        if changed:
            self.forget(topic)
        if now:
            self._topic_ids[topic] = now
        return changed

    def close(self) -> None:
        self._reader.close()
        self._asker.close()
