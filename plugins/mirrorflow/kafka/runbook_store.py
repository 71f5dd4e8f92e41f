"""Kafka plumbing of the runbook topic (`mirrorflow.core.runbook_record`): cluster identities, reading the latest
record per key, and writing through a transactional producer that fences older writers of the same runbook.

Concurrency: every process driving one runbook uses the same `transactional.id`. `init_transactions` aborts
whatever a killed predecessor left open and fences any process still running with that id, so its next write
fails (`RunbookFenced`) instead of overwriting newer state. Readers read committed records to the end of the
topic after that, so a writer always starts from the last committed state (read-your-writes).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.kafka.clients import producer as make_producer
from mirrorflow.kafka.compacted_log import OPEN_TRANSACTION_WAIT_S, latest_values, read_to_end
from mirrorflow.kafka.operation_error import FENCED_CODES, KafkaOperationError
from mirrorflow.kafka.topics import NewTopicSpec, create_topics

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_MS = 30_000
"""A write is one short transaction; a reader waits at most this long behind a writer killed inside one."""


RUNBOOK_SEGMENT_MS = 3_600_000
"""The runbook topic rolls a segment every hour: only closed segments are compacted, and a quiet topic's
active segment would otherwise hold every overwritten state for the broker's default week."""
RUNBOOK_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.ms": str(RUNBOOK_SEGMENT_MS),
    "min.cleanable.dirty.ratio": "0.1",
}
CLIENT_MAX_BYTES = 64 * 1024 * 1024
_TOO_LARGE = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)


class RunbookFenced(MirrorflowError):
    """Another process took over this runbook (same transactional id, newer epoch): this one must stop."""


def cluster_id(admin: AdminClient, cluster: str, timeout_s: float) -> str:
    """The cluster's `cluster.id` (what `kafka-storage format -t` set): the identity an alias does not give."""
    try:
        description = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    except KafkaException as err:
        raise KafkaOperationError(cluster, "describing the cluster (its cluster.id)", err) from err
    except TimeoutError as err:
        failed = KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer"))
        raise KafkaOperationError(cluster, "describing the cluster (its cluster.id)", failed) from err
    found = description.cluster_id
    if not found:
        raise MirrorflowError(f"cluster '{cluster}' did not report a cluster.id; it is needed to key runbook state")
    return str(found)


def probe_cluster_id(admin: AdminClient, cluster: str, timeout_s: float) -> str | None:
    """`cluster_id`, or None when the cluster does not answer within `timeout_s` (an unplanned run's source)."""
    try:
        return cluster_id(admin, cluster, timeout_s)
    except MirrorflowError as err:
        log.info("cluster.id of '%s' unknown: %s", cluster, err)
        return None


def ensure_runbook_topic(admin: AdminClient, cluster: str, topic: str, replication_factor: int, timeout: float) -> None:
    """One compacted partition with `RUNBOOK_TOPIC_CONFIGS`; an existing topic is left as it is (docs/failover.md
    gives the command that sets them on a topic created by an earlier version)."""
    spec = NewTopicSpec(topic, 1, replication_factor, RUNBOOK_TOPIC_CONFIGS)
    try:
        create_topics(admin, cluster, [spec], timeout)
    except KafkaOperationError as err:
        if err.code not in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
            raise  # not allowed to create: it must exist already (the reads and writes say so if not)


def topic_exists(admin: AdminClient, cluster: str, topic: str, timeout_s: float) -> bool:
    """One metadata request: a cluster where no runbook ever ran is answered without starting a consumer."""
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as err:
        raise KafkaOperationError(cluster, f"looking up topic '{topic}'", err) from err
    if metadata is None or metadata.error is None:
        return metadata is not None
    if metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return False
    raise KafkaOperationError(cluster, f"looking up topic '{topic}'", metadata.error)


def read_latest(
    cluster: str, conf: Mapping[str, str], topic: str, timeout_s: float, wait_s: float = OPEN_TRANSACTION_WAIT_S
) -> dict[bytes, bytes]:
    """The latest committed value per key (a tombstone removes the key); empty when the topic is absent.
    `OpenTransactionError` when an open transaction holds the read for `wait_s` (a writer killed inside one)."""
    return latest_values(read_to_end(cluster, conf, topic, read_committed=True, timeout_s=timeout_s, wait_s=wait_s))


class TransactionalLog:
    """Writes to one topic in transactions under one `transactional.id`; see the module docstring."""

    def __init__(
        self, cluster: str, conf: Mapping[str, str], topic: str, transactional_id: str, timeout_s: float
    ) -> None:
        self.cluster, self.topic, self.timeout_s = cluster, topic, timeout_s
        self._transactional_id = transactional_id
        self._conf = dict(conf)
        self._producer = self._start()

    def _start(self) -> Producer:
        """A producer under the runbook's transactional id, initialised: this fences older holders of the id."""
        settings: dict[str, str | int | bool] = {
            "transactional.id": self._transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            # Step results hold an offset per partition: gzip keeps a big flow's state under the broker's 1 MB
            # default; the client limit (on the uncompressed record) is raised so gzip gets the chance.
            "compression.type": "gzip",
            "message.max.bytes": CLIENT_MAX_BYTES,
        }
        producer = make_producer(self._conf, **settings)
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as err:
            raise KafkaOperationError(self.cluster, f"starting a transactional writer on '{self.topic}'", err) from err
        return producer

    def write(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """All `records` or none, acknowledged; `RunbookFenced` when a newer process took the runbook over."""
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failures.append(err)

        try:
            self._producer.begin_transaction()
            for key, value in records:
                self._producer.produce(self.topic, key=key, value=value, partition=0, on_delivery=delivered)
            self._producer.commit_transaction(self.timeout_s)
        except KafkaException as err:
            error = err.args[0] if err.args and isinstance(err.args[0], KafkaError) else None
            if error is not None and error.code() in FENCED_CODES:
                raise RunbookFenced(
                    f"another process took over this runbook on '{self.cluster}' (its writer fenced this one); "
                    "this process stops here and its last step is left for the newer one"
                ) from None
            if error is not None and error.txn_requires_abort():
                self._producer.abort_transaction(self.timeout_s)
            if any(e.code() in _TOO_LARGE for e in [*failures, *([error] if error else [])]):
                raise self._too_large(records) from None
            raise KafkaOperationError(self.cluster, f"writing runbook state to '{self.topic}'", err) from err
        except BufferError as err:
            raise MirrorflowError(f"writing runbook state to '{self.topic}' on '{self.cluster}': {err}") from err
        if failures:
            raise KafkaOperationError(self.cluster, f"writing runbook state to '{self.topic}'", failures[0])

    def _too_large(self, records: Sequence[tuple[bytes, bytes | None]]) -> MirrorflowError:
        size = sum(len(v or b"") for _, v in records)
        return MirrorflowError(
            f"the runbook state ({size} bytes before compression) is larger than '{self.topic}' on '{self.cluster}' "
            f"accepts: raise the topic's max.message.bytes (kafka-configs --alter --entity-type topics "
            f"--entity-name {self.topic} --add-config max.message.bytes=...), or run with --state-dir"
        )

    def close(self) -> None:
        # Clean-up only: write() reports every failure. A fenced producer is in librdkafka's fatal state and its
        # flush raises, which would replace `RunbookFenced` (the clear reason) with a raw librdkafka error.
        with contextlib.suppress(KafkaException):
            self._producer.flush(min(self.timeout_s, 5.0))
