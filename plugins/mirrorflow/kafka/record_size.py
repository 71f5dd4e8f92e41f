"""What to tell an operator when a record is too large to copy: which limit refused it and which key raises it.

librdkafka refuses a record above its producer's `message.max.bytes` before sending it (1 MB by default, which
is why the copy's writer follows the remote topic's `max.message.bytes`); a broker refuses a record batch above
the topic's `max.message.bytes`. Either way Kafka only says "Message size too large".

librdkafka checks the uncompressed size, a broker the (compressed) batch. A record larger than the source topic's
own limit therefore arrived compressed: raising the remote topic's limit would be reverted by config sync, and
what the copy needs is a writer that compresses too and accepts the uncompressed size.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaException

from mirrorflow.kafka.clients import admin_client
from mirrorflow.kafka.operation_error import KafkaOperationError
from mirrorflow.kafka.topics import max_message_bytes

BROKER_TOO_LARGE_HINT = (
    "a record is larger than the remote topic accepts: raise the topic's max.message.bytes on the target "
    "(config sync copies the source topic's value unless config.properties.exclude skips it)"
)


def size_advice(
    cluster: str, size: int, *, operator_cap: bool, topic_limit: int | None, source_limit: int | None = None
) -> str:
    """Why a `size`-byte record was refused by the writer of target `cluster`, and what to raise."""
    if source_limit is not None and size > source_limit:
        return (
            f"the source topic's max.message.bytes is {source_limit}, so the record arrived compressed: the copy "
            f"must compress too; set `{cluster}.producer.compression.type` (as the source's producer did) and "
            f"`{cluster}.producer.max.request.size` above {size} (librdkafka checks the uncompressed size)"
        )
    if operator_cap:
        return (
            f"the limit is set by `{cluster}.producer.max.request.size` (librdkafka `message.max.bytes`): "
            f"raise it above {size}, or remove it so the copy follows the topic's max.message.bytes"
        )
    if topic_limit is not None:
        return f"the remote topic's max.message.bytes is {topic_limit}: {BROKER_TOO_LARGE_HINT}"
    return (
        "the remote topic's max.message.bytes could not be read, so librdkafka's 1 MB default applies: set "
        f"`{cluster}.producer.max.request.size` above {size}"
    )


class RecordTooLarge(KafkaOperationError):
    """A record the writer's own size check refused before sending it. The copy re-reads the limits once
    (`limit_now`): the remote topic's may have been raised since planning, the source topic's explains a record
    that arrived compressed."""

    def __init__(
        self,
        cluster: str,
        topic: str,
        partition: int,
        size: int,
        error: KafkaException,
        *,
        operator_cap: bool,
        writer_limit: int | None,
        source_limit: int | None = None,
    ) -> None:
        advice = size_advice(
            cluster, size, operator_cap=operator_cap, topic_limit=writer_limit, source_limit=source_limit
        )
        super().__init__(cluster, f"producing a record of {size} bytes to {topic}-{partition} ({advice})", error)
        self.topic, self.partition, self.size, self.error = topic, partition, size, error
        self.operator_cap, self.writer_limit = operator_cap, writer_limit

    def explained(self, writer_limit: int | None, source_limit: int | None) -> RecordTooLarge:
        """The same refusal with the limits read now."""
        return RecordTooLarge(
            self.cluster,
            self.topic,
            self.partition,
            self.size,
            self.error,
            operator_cap=self.operator_cap,
            writer_limit=writer_limit,
            source_limit=source_limit,
        )


def limit_now(conf: Mapping[str, str], topic: str, timeout_s: float) -> int | None:
    """`topic`'s effective max.message.bytes on the cluster of `conf`; None when it cannot be read."""
    try:
        return max_message_bytes(admin_client(conf), [topic], timeout_s).get(topic)
    except KafkaException:
        return None
