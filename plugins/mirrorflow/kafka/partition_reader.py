"""The copy's source reader: one partition from a given offset, at the copy's isolation.

Client settings come in three strengths: the copy's correctness settings (isolation, where to start) always
apply; the throughput tuning below applies unless the operator's flow config sets the same key
(`<source>.consumer.*`); everything else is the operator's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.operation_error import KafkaOperationError

Message = Any  # confluent_kafka.Message; kept opaque above this layer.
PARTITION_EOF = KafkaError._PARTITION_EOF

# One partition per reader: librdkafka's 1 MiB per-partition fetch caps a fetch round trip at ~1000 records of
# 1 KiB; 8 MiB keeps the prefetch queue full. Short fetch waits bound the latency of a caught-up copy.
READER_DEFAULTS: Mapping[str, str | int] = {
    "fetch.message.max.bytes": 8 * 1024 * 1024,
    "fetch.wait.max.ms": 100,
}


def tuned(conf: Mapping[str, str], defaults: Mapping[str, str | int]) -> dict[str, str | int]:
    """`defaults` the operator's `conf` does not set (librdkafka reads `conf` first, so theirs win)."""
    return {k: v for k, v in defaults.items() if k not in conf}


class PartitionReader:
    """Reads one partition from a given offset; `read_committed` hides aborted records and markers."""

    def __init__(
        self,
        cluster: str,
        conf: Mapping[str, str],
        topic: str,
        partition: int,
        start: int,
        *,
        read_committed: bool,
        fetch_overrides: Mapping[str, str | int] | None = None,
        tuning: Mapping[str, str | int] | None = None,
    ) -> None:
        self.cluster, self.topic, self.partition = cluster, topic, partition
        settings: dict[str, str | int | bool] = {
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "auto.offset.reset": "error",
            **(fetch_overrides or {}),
        }
        settings = {**tuned(conf, {**READER_DEFAULTS, **(tuning or {})}), **settings}
        self._consumer: Consumer = make_consumer(conf, **settings)
        self._consumer.assign([TopicPartition(topic, partition, start)])

    def read(self, max_records: int, timeout_s: float) -> list[Message]:
        """Up to `max_records` messages; an end-of-partition event comes back as a message whose
        `error().code()` is PARTITION_EOF and whose `offset()` is the end offset."""
        messages: list[Message] = self._consumer.consume(num_messages=max_records, timeout=timeout_s)
        for m in messages:
            err = m.error()
            if err is not None and err.code() != PARTITION_EOF:
                raise KafkaOperationError(self.cluster, f"reading {self.topic}-{self.partition}", err)
        return messages

    def log_start(self) -> int | None:
        """The source log start as of the latest fetch response (no request); None until one is known."""
        low, _high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, self.partition), cached=True)
        return int(low) if low >= 0 else None

    def position(self) -> int:
        tp = self._consumer.position([TopicPartition(self.topic, self.partition)])[0]
        return int(tp.offset)

    def close(self) -> None:
        self._consumer.close()
