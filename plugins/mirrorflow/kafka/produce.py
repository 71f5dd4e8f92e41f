"""Synchronous, acknowledged writes of a few control records (heartbeats): each call returns only once the
target has the records, or raises with what went wrong. Bulk copying lives in `transfer.py`."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from mirrorflow.kafka.clients import producer as make_producer
from mirrorflow.kafka.operation_error import KafkaOperationError


@dataclass(frozen=True)
class OutgoingRecord:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)


class RecordWriter:
    """One idempotent producer kept open across calls, so a heartbeat every second costs one round trip."""

    def __init__(
        self, cluster: str, conf: Mapping[str, str], timeout_s: float, *, logger: logging.Logger | None = None
    ) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        overrides: dict[str, Any] = {"enable.idempotence": True, "acks": "all", "linger.ms": 0}
        if logger is not None:
            overrides["logger"] = logger
        self._producer = make_producer(conf, **overrides)

    def write(self, records: Sequence[OutgoingRecord]) -> list[int]:
        """Produce and wait; returns each record's offset, in order."""
        offsets: list[int | None] = [None] * len(records)
        failures: list[tuple[OutgoingRecord, KafkaError]] = []

        def delivered(index: int, record: OutgoingRecord) -> Any:
            def callback(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    failures.append((record, err))
                else:
                    offsets[index] = msg.offset()

            return callback

        for index, record in enumerate(records):
            kwargs: dict[str, Any] = {"partition": record.partition, "key": record.key, "value": record.value}
            if record.timestamp_ms is not None:
                kwargs["timestamp"] = record.timestamp_ms
            if record.headers:
                kwargs["headers"] = list(record.headers)
            try:
                self._producer.produce(record.topic, on_delivery=delivered(index, record), **kwargs)
            except KafkaException as err:
                raise KafkaOperationError(self.cluster, f"producing to {record.topic}", err) from err
        remaining = self._producer.flush(self.timeout_s)
        if failures:
            failed, error = failures[0]
            raise KafkaOperationError(self.cluster, f"producing to {failed.topic}-{failed.partition}", error)
        if remaining:
            raise KafkaOperationError(
                self.cluster,
                f"producing to {records[0].topic}",
                KafkaError(KafkaError._TIMED_OUT, f"{remaining} records unacknowledged"),
            )
        return [o if o is not None else -1 for o in offsets]

    def close(self) -> None:
        self._producer.flush(min(self.timeout_s, 5.0))
