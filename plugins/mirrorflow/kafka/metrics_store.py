"""Kafka plumbing of the replication metrics: a best-effort publisher of snapshots to a compacted topic on the
target, and the reads `mirrorflow metrics` needs (the snapshots, and the timestamp of the oldest uncopied record).

Metrics must never fail or slow a copy: the publisher is a plain producer outside the data transaction, and every
error is logged and dropped. Encoding the snapshots is the replication layer's business; this module moves bytes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.clients import consumer as make_consumer
from mirrorflow.kafka.clients import producer as make_producer
from mirrorflow.kafka.compacted_log import latest_values, read_to_end
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.topics import create_compacted_topic

log = logging.getLogger(__name__)

# Topics this process already made sure of: one admin round trip per executor process, not per task.
_ENSURED: set[tuple[str, str]] = set()
_ENSURED_LOCK = threading.Lock()
_PUBLISHER: dict[str, str | int | bool] = {"enable.idempotence": False, "acks": "1", "linger.ms": 50}


def ensure_metrics_topic(
    cluster: str, conf: Mapping[str, str], topic: str, replication_factor: int, timeout_s: float
) -> bool:
    """Create the compacted metrics topic if missing; False (logged) when that failed."""
    marker = (conf.get("bootstrap.servers", ""), topic)
    with _ENSURED_LOCK:
        if marker in _ENSURED:
            return True
    try:
        create_compacted_topic(admin_client(conf), cluster, topic, replication_factor, timeout_s)
    except (KafkaOperationError, KafkaException) as err:
        log.warning("metrics: cannot create topic '%s' on '%s': %s", topic, cluster, err)
        return False
    with _ENSURED_LOCK:
        _ENSURED.add(marker)
    return True


class MetricsPublisher:
    """Writes one snapshot per key after each committed batch, to one partition of the topic (a copy's: its
    slot); never raises. `retire` ({partition: keys}), the partition's snapshots left in the slots it had before
    the topic grew, is tombstoned at the first publish after a snapshot was acknowledged: tombstoned any earlier,
    a lost first snapshot would reset the partition's counts."""

    def __init__(
        self,
        cluster: str,
        conf: Mapping[str, str],
        topic: str,
        partition: int = 0,
        retire: Mapping[int, Sequence[bytes]] | None = None,
    ) -> None:
        self.cluster, self.topic, self.partition = cluster, topic, partition
        self._retire = dict(retire or {})
        self._acknowledged = False
        self.failures = 0
        # Not idempotent and acks=1: a lost or duplicated snapshot is harmless, the next one supersedes it.
        self._producer = make_producer(conf, **_PUBLISHER)

    def _report(self, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            self._acknowledged = True
        else:
            self.failures += 1
            if self.failures == 1 or self.failures % 100 == 0:
                log.warning(
                    "metrics: writing to '%s' on '%s' failed (%d so far): %s",
                    self.topic,
                    self.cluster,
                    self.failures,
                    err,
                )

    def publish(self, key: bytes, value: bytes | None) -> None:
        """Queue one record (None: a tombstone, which removes the key once compacted)."""
        try:
            self._producer.produce(self.topic, key=key, value=value, partition=self.partition, on_delivery=self._report)
            if self._acknowledged:
                self._tombstone_retired()
            self._producer.poll(0)
        except (BufferError, KafkaException) as err:
            self._report(KafkaError(KafkaError._FAIL, str(err)), None)

    def _tombstone_retired(self) -> None:
        for partition, keys in self._retire.items():
            for old in keys:
                self._producer.produce(self.topic, key=old, partition=partition, on_delivery=self._report)
        self._retire.clear()

    def close(self, timeout_s: float = 5.0) -> None:
        left = self._producer.flush(timeout_s)
        if self._retire and self._acknowledged and not left:
            try:
                self._tombstone_retired()
            except (BufferError, KafkaException) as err:
                self._report(KafkaError(KafkaError._FAIL, str(err)), None)
            left = self._producer.flush(timeout_s)
        if left:
            log.warning("metrics: %d snapshots to '%s' on '%s' were not acknowledged", left, self.topic, self.cluster)


def read_snapshots(cluster: str, conf: Mapping[str, str], topic: str, timeout_s: float) -> dict[bytes, bytes]:
    """The latest value per key of the metrics topic (tombstones remove the key); empty when it is absent. A key
    live in several partitions (a copy's slots, before and after the topic grew) takes the highest one's."""
    per_partition: dict[int, list[tuple[int, int, bytes | None, bytes | None, int]]] = {}
    for record in read_to_end(cluster, conf, topic, read_committed=False, timeout_s=timeout_s, wait_s=timeout_s):
        per_partition.setdefault(record[0], []).append(record)
    merged: dict[bytes, bytes] = {}
    for partition in sorted(per_partition):
        merged.update(latest_values(per_partition[partition]))
    return merged


def record_timestamps(
    cluster: str,
    conf: Mapping[str, str],
    positions: Mapping[tuple[str, int], int],
    *,
    read_committed: bool,
    timeout_s: float,
) -> dict[tuple[str, int], int]:
    """The timestamp of the first record at or after each (topic, partition) offset; missing when none came."""
    if not positions:
        return {}
    reader = make_consumer(
        conf,
        **{
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        },
    )
    found: dict[tuple[str, int], int] = {}
    try:
        reader.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        pending = set(positions)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in reader.consume(num_messages=500, timeout=0.1):
                tp = (m.topic(), m.partition())
                if tp not in pending:
                    continue
                if m.error() is None:
                    found[tp] = m.timestamp()[1]
                    pending.discard(tp)
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(tp)
                if tp not in pending:
                    reader.incremental_unassign([TopicPartition(*tp)])
    except KafkaException as err:
        raise KafkaOperationError(cluster, "reading the oldest uncopied records", err) from err
    finally:
        reader.close()
    return found
