"""Readers and writers for the copy: a source reader pinned to one partition, and a target writer that is
transactional (exactly-once) or idempotent (at-least-once).

The copy loop in `mirrorflow.replication.copy_range` works on the Message objects these return; only client
construction and the transactional protocol calls live here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.clients import producer as make_producer
from mirrorflow.kafka.errors import KafkaOperationError

Message = Any  # confluent_kafka.Message; kept opaque above this layer.
PARTITION_EOF = KafkaError._PARTITION_EOF


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
    ) -> None:
        self.cluster, self.topic, self.partition = cluster, topic, partition
        settings: dict[str, str | int | bool] = {
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "auto.offset.reset": "error",
            **(fetch_overrides or {}),
        }
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

    def position(self) -> int:
        tp = self._consumer.position([TopicPartition(self.topic, self.partition)])[0]
        return int(tp.offset)

    def close(self) -> None:
        self._consumer.close()


class TargetWriter:
    """Writes to the target cluster; in transactional mode every batch is one Kafka transaction.

    A new writer with the same transactional id fences any older one (a zombie Spark task or a retried
    attempt): the older producer's next call fails with a fatal fencing error; its open transaction aborts.
    """

    def __init__(
        self,
        cluster: str,
        conf: Mapping[str, str],
        *,
        transactional_id: str | None,
        timeout_s: float,
        overrides: Mapping[str, str | int] | None = None,
    ) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.transactional = transactional_id is not None
        settings: dict[str, str | int | bool] = {
            "enable.idempotence": True,
            "acks": "all",
            **(overrides or {}),
        }
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            settings.setdefault("transaction.timeout.ms", 60000)
        self._producer: Producer = make_producer(conf, **settings)
        self._error: KafkaError | None = None
        if self.transactional:
            self._call("initialising transactions", lambda: self._producer.init_transactions(timeout_s))

    def _call(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except KafkaException as err:
            raise KafkaOperationError(self.cluster, what, err) from err

    def begin(self) -> None:
        if self.transactional:
            self._call("beginning a transaction", self._producer.begin_transaction)

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {"partition": partition, "key": key, "value": value}
        if timestamp is not None and timestamp >= 0:
            kwargs["timestamp"] = timestamp
        if headers:
            kwargs["headers"] = list(headers)
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room again.
                self._producer.poll(0.1)
            except KafkaException as err:
                raise KafkaOperationError(self.cluster, f"producing to {topic}-{partition}", err) from err

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self) -> None:
        """Wait for every record sent so far to be acknowledged (or fail)."""
        remaining = self._producer.flush(self.timeout_s)
        if remaining:
            raise KafkaOperationError(
                self.cluster,
                "flushing records",
                KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{remaining} records unacknowledged")),
            )

    def commit(self) -> None:
        if self.transactional:
            self._call("committing a transaction", lambda: self._producer.commit_transaction(self.timeout_s))
        else:
            self.flush()

    def abort(self) -> None:
        if self.transactional:
            # Fenced or fatal: the broker aborts the transaction on its own when it times out.
            with contextlib.suppress(KafkaException):
                self._producer.abort_transaction(self.timeout_s)

    def close(self) -> None:
        self._producer.flush(min(self.timeout_s, 5.0))
