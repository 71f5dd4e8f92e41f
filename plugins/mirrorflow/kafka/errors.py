"""Kafka failures as operator errors: which cluster, which operation, what Kafka said, what to try."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from mirrorflow.core.errors import MirrorflowError

_HINTS = {
    KafkaError._TRANSPORT: "check that the cluster is up and `<alias>.bootstrap.servers` is right",
    KafkaError._TIMED_OUT: "the cluster did not answer in time; check it is up, or raise admin.timeout.ms",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "grant the Mirrorflow principal access to the topic",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "grant the Mirrorflow principal the needed cluster permission",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "grant the Mirrorflow principal access to the consumer group",
    KafkaError.SASL_AUTHENTICATION_FAILED: "check the cluster's sasl.* settings",
    KafkaError.INVALID_REPLICATION_FACTOR: (
        "the cluster has fewer brokers than the replication factor asked for: lower replication.factor or "
        "the *.topic.replication.factor keys, or use -1 for the broker default"
    ),
}


class KafkaOperationError(MirrorflowError):
    """A Kafka call failed; carries the Kafka error code so callers can tolerate specific ones."""

    def __init__(self, cluster: str, operation: str, error: KafkaError | BaseException) -> None:
        kafka_error = _kafka_error(error)
        self.code: int | None = kafka_error.code() if kafka_error is not None else None
        detail = kafka_error.str() if kafka_error is not None else f"{type(error).__name__}: {error}"
        hint = _HINTS.get(self.code) if self.code is not None else None
        message = f"{operation} on cluster '{cluster}' failed: {detail}"
        super().__init__(f"{message}; {hint}" if hint else message)
        self.cluster = cluster
        self.operation = operation


def _kafka_error(error: KafkaError | BaseException) -> KafkaError | None:
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return None


def error_code(error: BaseException) -> int | None:
    """The Kafka error code inside an exception raised by a confluent-kafka future, if any."""
    kafka_error = _kafka_error(error)
    return kafka_error.code() if kafka_error is not None else None
